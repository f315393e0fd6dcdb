package benchsuite

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/llmsim"
	"tokenmill/lib/cli"
)

const (
	regenScale = 10 // the fleet runs this many times faster than real GPUs
	// regenPrefillUS is the prefill cost per prompt token, µs: llmsim's 40
	// (25,000 tokens/s) is more than a GPU computes for a 27B model (the
	// section's text says why 250), and prefill is what affinity saves.
	regenPrefillUS = 250
	// regenKV is the KV cache per endpoint, in tokens: about SGLang's
	// max_total_num_tokens for a 27-32B model in FP8 on one 80 GB GPU.
	regenKV        = 300000
	regenMaxTokens = 1024
	regenEndpoints = 8
)

// Each client is measured once against a fresh fleet of eight endpoints,
// its @URLS@ (comma-separated) and @ADDRS@ (host:port each, space-separated)
// filled in; its row is what llmsim's request log and summary say.
var regenSection = &section{
	name: "regen", heading: "## infer --regenerate: conversations on a calibrated fleet",
	needs: []string{"regen"},
	measure: func(ctx context.Context, h *harness) error {
		old, _ := filepath.Glob(h.path("tmp/regen-*"))
		for _, m := range old {
			os.Remove(m)
		}
		infer := func(name, out string, flags ...string) Spec {
			flags = append(flags, "-e", "@URLS@", "--max-tokens", strconv.Itoa(regenMaxTokens), "--progress", "0", "-o", out)
			return Spec{Name: name, Argv: slices.Concat([]string{"infer", "--regenerate"}, flags, scaledWaits(regenScale), []string{"data/regen.jsonl"})}
		}
		clients := []Spec{
			infer("(a) infer --regenerate", "tmp/regen-a.jsonl"),
			infer("(b) infer --regenerate --no-affinity", "tmp/regen-b.jsonl", "--no-affinity"),
			// The Python client takes the servers as separate words.
			{Name: "(c) specforge_regen.py", Shell: true, Argv: []string{shellJoin([]string{"python3", h.repoFile("pipelines/bench/specforge_regen.py")}) +
				" --server-address @ADDRS@ --concurrency 64 --max-tokens " + strconv.Itoa(regenMaxTokens) +
				" --input-file-path data/regen.jsonl --output-file-path tmp/regen-c.jsonl"}},
		}
		reqLog, simLog := h.path("tmp/regen-requests.jsonl"), h.path("logs/regen-llmsim.log")
		for _, s := range clients {
			if s.Shell && !have("python3") {
				h.logf("regen: python3 is not installed: no SpecForge-style row")
				break
			}
			os.Remove(reqLog)
			s.Group, s.Runs, s.NoCount = "regen", 1, true
			s.Fresh = h.freshSim(regenEndpoints, simLog, "--time-scale", strconv.Itoa(regenScale), "--kv-tokens", strconv.Itoa(regenKV),
				"--prefill-per-token", fmt.Sprintf("%dus", regenPrefillUS), "--cache-report", "--request-log", reqLog, "--seed", "1")
			// measureRow stops the fleet before it returns: llmsim then writes
			// its request log and its summary, this run's the last.
			r, err := h.measureRow(ctx, s)
			if err != nil {
				return err
			}
			summary, _ := os.ReadFile(simLog)
			var generated float64
			if m := regexp.MustCompile(`(\d+) tokens generated`).FindAllSubmatch(summary, -1); len(m) > 0 {
				generated, _ = strconv.ParseFloat(string(m[len(m)-1][1]), 64)
			}
			row, err := regenStats(reqLog, s.Name, r.medianRun().Wall.Seconds(), regenScale, generated)
			if err != nil {
				return err
			}
			h.add(row)
		}
		if facts, err := h.regenFacts(); err != nil {
			h.logf("regen: the section's figures could not be read: %v", err)
		} else {
			h.add(facts)
		}
		return nil
	},
}

// generation is what the harness reads of infer's generation records.
type generation struct {
	ID     json.RawMessage
	Output struct{ Usage map[string]float64 }
}

// regenStats is a run's row: what its prompts cost by its request log,
// and the share of history tokens (llmsim.LoggedRequest.HistoryTokens)
// served from cache.
func regenStats(logPath, name string, wall, scale, generated float64) (*Result, error) {
	var requests, later, prompt, cached, history, historyCached float64
	err := eachJSON(logPath, func(l *llmsim.LoggedRequest) error {
		if n := l.HistoryTokens(); l.Answered() {
			requests, prompt, cached = requests+1, prompt+float64(l.PromptTokens), cached+float64(l.CachedTokens)
			if n > 0 {
				later, history, historyCached = later+1, history+float64(n), historyCached+float64(min(l.CachedTokens, n))
			}
		}
		return nil
	})
	return &Result{Group: "regen", Name: name, OutRecords: -1, Load1: loadAverage(), Metrics: map[string]float64{
		"requests": requests, "later_turns": later, "prompt_tokens": prompt, "cached_tokens": cached, "prefill_tokens": prompt - cached,
		"history_tokens": history, "history_cached": historyCached, "generated_tokens": generated, "wall_s": wall, "sim_wall_s": wall * scale,
		"cache_hit_pct": pct(cached, prompt), "history_hit_pct": pct(historyCached, history)}}, err
}

// renderRegen sets the runs side by side, the first the reference, with the
// targets and what llmsim's cost model (an endpoint generates decodeTPS
// tokens a second with a full batch; a prompt token computed costs
// prefillUS more) makes of them: prefill's share without a cache, and each
// run's floor, which bounds how much faster than another any client can be.
func renderRegen(w io.Writer, runs []*Result, prefillUS, decodeTPS float64, endpoints int) {
	if len(runs) == 0 {
		return
	}
	// Each endpoint's share of the answers and of the prefill, in seconds.
	decodeS := func(r *Result) float64 { return r.Metrics["generated_tokens"] / float64(endpoints) / decodeTPS }
	prefillS := func(tokens float64) float64 { return tokens * prefillUS / 1e6 / float64(endpoints) }
	floor := func(r *Result) float64 { return decodeS(r) + prefillS(r.Metrics["prefill_tokens"]) }
	first, a, best := runs[0].Name, runs[0].Metrics, runs[0]
	t := newTable("client", "wall (simulated)", "vs. the first row", "requests", "prompt tokens", "served from cache", "prefill computed", "history served from cache", "floor")
	for _, r := range runs {
		if floor(r) < floor(best) {
			best = r
		}
		m := r.Metrics
		t.add(r.Name, fmt.Sprintf("%.0f s", m["sim_wall_s"]), fmt.Sprintf("%.2f×", m["sim_wall_s"]/a["sim_wall_s"]), th(m["requests"]),
			th(m["prompt_tokens"]), fmt.Sprintf("%s (%.1f%%)", th(m["cached_tokens"]), m["cache_hit_pct"]), th(m["prefill_tokens"]),
			fmt.Sprintf("%.1f%%", m["history_hit_pct"]), fmt.Sprintf("%.0f s", floor(r)))
	}
	t.write(w)
	fmt.Fprintln(w)
	met := map[bool]string{true: "yes", false: "**no**"}
	t = newTable("target", "measured", "any client at most", "met").
		add(first+": ≥ 90% of history tokens served from cache", fmt.Sprintf("%.1f%%", a["history_hit_pct"]), "100%", met[a["history_hit_pct"] >= 90])
	for _, r := range runs[1:] {
		ratio, bound := r.Metrics["sim_wall_s"]/a["sim_wall_s"], r.Metrics["sim_wall_s"]/floor(best)
		t.add(first+" ≥ 1.3× faster than "+r.Name, fmt.Sprintf("%.2f×", ratio), fmt.Sprintf("%.2f×", bound), met[ratio >= 1.3])
	}
	t.write(w)
	// How much faster a client whose cache served every prompt token could
	// be than one whose cache served none (none without answers).
	d, p := decodeS(runs[0]), prefillS(a["prompt_tokens"])
	gain, share := 0.0, 0.0
	if d > 0 {
		gain, share = (d+p)/d, 100*p/(d+p)
	}
	fmt.Fprintf(w, "\n- Prefill's share: each endpoint's part of the %s tokens generated takes %.0f s at %s tok/s (a full batch); prefilling its part of all %s prompt tokens would take %.0f s more at %g µs a token. Without a prefix cache prefill is %.1f%% of an endpoint's busy time, so a client whose cache served every prompt token could be at most %.2f× faster than one whose cache served none.\n",
		th(a["generated_tokens"]), d, th(decodeTPS), th(a["prompt_tokens"]), p, prefillUS, share, gain)
	fmt.Fprintf(w, "- The floor is the least time a run's work takes: each endpoint's part of the answers at a full batch plus its part of the prefill the cache left. No client can take less than the smallest floor, %.0f s (%s), which bounds the column \"any client at most\": each run's wall time over that floor.\n",
		floor(best), best.Name)
	for _, r := range runs[1:] {
		extra := r.Metrics["prefill_tokens"] - a["prefill_tokens"]
		fmt.Fprintf(w, "- %s computed %s prefill tokens more than %s: at %g µs a token over %d endpoints, %.0f s of each endpoint's time; its wall time differs by %.0f s.\n",
			r.Name, th(extra), first, prefillUS, endpoints, prefillS(extra), r.Metrics["sim_wall_s"]-a["sim_wall_s"])
	}
}

// th is a count with thousands separators.
func th(v float64) string { return cli.Thousands(int64(v)) }

// pct is a of b in percent, 0 of nothing.
func pct(a, b float64) float64 {
	if b > 0 {
		return 100 * a / b
	}
	return 0
}

// regenFacts are the figures the section's text quotes: the conversations
// by their questions, the mean prompt by its questions (the last run's log
// will do: llmsim's answers depend on the prompt alone, so every run sends
// the same prompts), a later turn's mean history, and a round robin's
// imbalance by (a)'s answers.
func (h *harness) regenFacts() (*Result, error) {
	f := &Result{Group: "regen-facts", Name: "facts", OutRecords: -1, Metrics: map[string]float64{}}
	for _, r := range h.group("regen") {
		if n := r.Metrics["later_turns"]; n > 0 {
			f.Metrics["history"] = float64(int64(r.Metrics["history_tokens"]) / int64(n))
			break
		}
	}
	var ids []string
	count, tokens := map[string]float64{}, map[string]float64{}
	err := errors.Join(
		eachJSON(h.path("data/regen.jsonl"), func(c *struct {
			ID       json.RawMessage
			Messages []message
		}) error {
			ids = append(ids, string(c.ID))
			f.Metrics["conversations"]++
			f.Metrics[fmt.Sprintf("turns %d", userTurns(c.Messages))]++
			return nil
		}),
		eachJSON(h.path("tmp/regen-requests.jsonl"), func(l *llmsim.LoggedRequest) error {
			if k := fmt.Sprintf("prompt %d", l.UserTurns()); l.Status == 200 {
				f.Metrics[k] += float64(l.PromptTokens)
				count[k]++
			}
			return nil
		}),
		eachJSON(h.path("tmp/regen-a.jsonl"), func(a *generation) error { tokens[string(a.ID)] = a.Output.Usage["completion_tokens"]; return nil }))
	for k, n := range count {
		f.Metrics[k] /= n
	}
	f.Metrics["imbalance_pct"] = roundRobinImbalance(ids, tokens, regenEndpoints)
	return f, err
}

// roundRobinImbalance deals ids in order to servers in turn and says how
// much more than the mean the busiest one gets, in percent.
func roundRobinImbalance(ids []string, tokens map[string]float64, servers int) float64 {
	load := make([]float64, servers)
	var total float64
	for i, id := range ids {
		load[i%servers] += tokens[id]
		total += tokens[id]
	}
	if total == 0 {
		return 0
	}
	return 100 * (slices.Max(load)/(total/float64(servers)) - 1)
}

// regenView is what the section's text says of the facts row: its
// figures "turns K" and "prompt K" by K in order ("turns 9" sorts before
// "turns 10" by length).
func (h *harness) regenView() map[string]any {
	f := h.find("regen-facts", "facts")
	m := cmp.Or(f, &Result{}).Metrics // none without the facts row
	var turns, prompts []string
	for _, name := range slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Or(len(a)-len(b), strings.Compare(a, b)) }) {
		var k int
		if _, err := fmt.Sscanf(name, "turns %d", &k); err == nil {
			turns = append(turns, fmt.Sprintf("%.0f with %d", m[name], k))
		} else if _, err := fmt.Sscanf(name, "prompt %d", &k); err == nil {
			prompts = append(prompts, fmt.Sprintf("%d%s %.0f", k, cmp.Or(map[int]string{1: "st", 2: "nd", 3: "rd"}[k], "th"), m[name]))
		}
	}
	return map[string]any{"Found": f != nil, "Conversations": th(m["conversations"]), "Turns": strings.Join(turns, ", "),
		"Prompts": strings.Join(prompts, ", "), "History": th(m["history"]), "Imbalance": m["imbalance_pct"]}
}

func init() {
	parts["regen"] = func(w io.Writer, h *harness) {
		runs := h.group("regen")
		if !slices.ContainsFunc(runs, func(r *Result) bool { return strings.HasPrefix(r.Name, "(c)") }) {
			fmt.Fprint(w, "(c) was not measured: python3 is not installed on this machine.\n\n")
		}
		renderRegen(w, runs, regenPrefillUS, 1180, regenEndpoints)
	}
}
