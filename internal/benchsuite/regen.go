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
	// regenPrefillUS is the prefill cost per prompt token, µs. llmsim's
	// default (40 µs, 25,000 tokens/s) is more than one GPU computes for a
	// 27B model; gemma-3-27b-it on vLLM gave 16 prompts of 1,024 tokens
	// their first tokens after 4.2 s, about 257 µs a token. Prefill is what
	// affinity saves, so this section is measured at 250 µs.
	regenPrefillUS = 250
	// regenKV is the KV cache per endpoint, in tokens: about SGLang's
	// max_total_num_tokens for a 27-32B model in FP8 on one 80 GB GPU.
	regenKV        = 300000
	regenMaxTokens = 1024
	regenEndpoints = 8
)

var regenSection = &section{
	name: "regen", heading: "## infer --regenerate: conversations on a calibrated fleet",
	needs: []string{"regen"},
	measure: func(ctx context.Context, h *harness) error {
		old, _ := filepath.Glob(h.path("tmp/regen-*"))
		for _, m := range old {
			os.Remove(m)
		}
		// infer's waits are scaled like the fleet's, as in the fleet section.
		infer := func(name, out string, flags ...string) Spec {
			return Spec{Name: name, Argv: append(append([]string{"infer", "--regenerate"}, flags...), "-e", "@URLS@", "--max-tokens", strconv.Itoa(regenMaxTokens),
				"--probe-interval", fmt.Sprintf("%dms", 2000/regenScale), "--backoff", fmt.Sprintf("%dms", 1000/regenScale),
				"--max-backoff", fmt.Sprintf("%dms", 60000/regenScale), "--progress", "0", "-o", out, "data/regen.jsonl")}
		}
		clients := []Spec{
			infer("(a) infer --regenerate", "tmp/regen-a.jsonl"),
			infer("(b) infer --regenerate --no-affinity", "tmp/regen-b.jsonl", "--no-affinity"),
			// The Python client takes the servers as separate words.
			{Name: "(c) specforge_regen.py", Shell: true, Argv: []string{shellJoin([]string{"python3", h.repoFile("pipelines/bench/specforge_regen.py")}) +
				" --server-address @ADDRS@ --concurrency 64 --max-tokens " + strconv.Itoa(regenMaxTokens) +
				" --input-file-path data/regen.jsonl --output-file-path tmp/regen-c.jsonl"}},
		}
		for _, s := range clients {
			if s.Shell && !have("python3") {
				h.logf("regen: python3 is not installed: no SpecForge-style row")
				break
			}
			r, err := h.regenRun(ctx, s)
			if err != nil {
				return err
			}
			h.add(r.result())
		}
		if facts, err := h.regenFacts(); err != nil {
			h.logf("regen: the section's figures could not be read: %v", err)
		} else {
			h.add(facts)
		}
		return nil
	},
}

// regenRun measures one client once against a fresh fleet of eight
// endpoints, its @URLS@ (the URLs, comma-separated) and @ADDRS@ (host:port
// each, space-separated) filled in, and says what the request log says.
func (h *harness) regenRun(ctx context.Context, s Spec) (regenRun, error) {
	reqLog, simLog := h.path("tmp/regen-requests.jsonl"), h.path("logs/regen-llmsim.log")
	os.Remove(reqLog)
	s.Group, s.Runs, s.NoCount = "regen", 1, true
	s.Fresh = h.freshSim(regenEndpoints, simLog, "--time-scale", strconv.Itoa(regenScale), "--kv-tokens", strconv.Itoa(regenKV),
		"--prefill-per-token", fmt.Sprintf("%dus", regenPrefillUS), "--cache-report", "--request-log", reqLog, "--seed", "1")
	h.logf("regen: %s on %d endpoints (time scale %d)", s.Name, regenEndpoints, regenScale)
	// measureRow stops the fleet before it returns: llmsim then writes its
	// request log and its summary, this run's the last.
	r, err := h.measureRow(ctx, s)
	if err != nil {
		return regenRun{}, err
	}
	summary, _ := os.ReadFile(simLog)
	var generated float64
	if m := regexp.MustCompile(`(\d+) tokens generated`).FindAllSubmatch(summary, -1); len(m) > 0 {
		generated, _ = strconv.ParseFloat(string(m[len(m)-1][1]), 64)
	}
	return regenStats(reqLog, s.Name, r.medianRun().Wall.Seconds(), regenScale, generated)
}

// generation is what the harness reads of infer's generation records.
type generation struct {
	ID     json.RawMessage `json:"id"`
	Output struct {
		Usage struct {
			Completion float64 `json:"completion_tokens"`
		} `json:"usage"`
	} `json:"output"`
}

// regenRun is what one run did, kept as its row's metrics.
type regenRun struct {
	Name            string  `json:"-"`
	Requests        float64 `json:"requests"`
	FailedRequests  float64 `json:"failed_requests"`
	LaterTurns      float64 `json:"later_turns"`
	PromptTokens    float64 `json:"prompt_tokens"`
	CachedTokens    float64 `json:"cached_tokens"`
	PrefillTokens   float64 `json:"prefill_tokens"`
	HistoryTokens   float64 `json:"history_tokens"`
	HistoryCached   float64 `json:"history_cached"`
	GeneratedTokens float64 `json:"generated_tokens"`
	WallS           float64 `json:"wall_s"`
	SimWallS        float64 `json:"sim_wall_s"`
	CacheHitPct     float64 `json:"cache_hit_pct"`
	HistoryHitPct   float64 `json:"history_hit_pct"`
}

func (r regenRun) result() *Result {
	data, _ := json.Marshal(r)
	res := &Result{Group: "regen", Name: r.Name, OutRecords: -1, Load1: loadAverage()}
	json.Unmarshal(data, &res.Metrics)
	return res
}

func regenRunOf(r *Result) (run regenRun) {
	data, _ := json.Marshal(r.Metrics)
	json.Unmarshal(data, &run)
	run.Name = r.Name
	return run
}

// regenStats reads the request log of one run: what its prompts cost, and
// the share of history tokens (llmsim.LoggedRequest.HistoryTokens) served
// from cache.
func regenStats(logPath, name string, wall, scale, generated float64) (regenRun, error) {
	r := regenRun{Name: name, GeneratedTokens: generated, WallS: wall, SimWallS: wall * scale}
	err := eachJSON(logPath, func(l *llmsim.LoggedRequest) error {
		if !l.Answered() {
			r.FailedRequests++
			return nil
		}
		r.Requests, r.PromptTokens, r.CachedTokens = r.Requests+1, r.PromptTokens+float64(l.PromptTokens), r.CachedTokens+float64(l.CachedTokens)
		if history := l.HistoryTokens(); history > 0 {
			r.LaterTurns, r.HistoryTokens, r.HistoryCached = r.LaterTurns+1, r.HistoryTokens+float64(history), r.HistoryCached+float64(min(l.CachedTokens, history))
		}
		return nil
	})
	r.PrefillTokens = r.PromptTokens - r.CachedTokens
	if r.PromptTokens > 0 {
		r.CacheHitPct = 100 * r.CachedTokens / r.PromptTokens
	}
	if r.HistoryTokens > 0 {
		r.HistoryHitPct = 100 * r.HistoryCached / r.HistoryTokens
	}
	return r, err
}

// costModel is llmsim's timing as the table reads it: an endpoint
// generates decodeTPS tokens a second with a full batch, and each prompt
// token it computes costs prefillUS more.
type costModel struct {
	prefillUS, decodeTPS float64
	endpoints            int
}

// renderRegen sets the runs side by side, the first the reference of the
// "vs. the first row" column, with the targets and what llmsim's cost
// model makes of them: prefill's share of the fleet's time without a
// cache, and each run's floor, the least time its work takes, which
// bounds how much faster than another run any client can be.
func renderRegen(w io.Writer, runs []regenRun, c costModel) {
	if len(runs) == 0 {
		return
	}
	// Each endpoint's share of the run's answers at a full batch, and of
	// the tokens prefilled, in seconds; the floor is the two together:
	// every slot busy from start to end on its answers and on the prefill
	// its cache left.
	decodeS := func(r regenRun) float64 { return r.GeneratedTokens / float64(c.endpoints) / c.decodeTPS }
	prefillS := func(tokens float64) float64 { return tokens * c.prefillUS / 1e6 / float64(c.endpoints) }
	floor := func(r regenRun) float64 { return decodeS(r) + prefillS(r.PrefillTokens) }
	a, best := runs[0], runs[0]
	t := newTable("client", "wall (simulated)", "vs. the first row", "requests", "prompt tokens", "served from cache", "prefill computed", "history served from cache", "floor")
	for _, r := range runs {
		if floor(r) < floor(best) {
			best = r
		}
		t.add(r.Name, fmt.Sprintf("%.0f s", r.SimWallS), fmt.Sprintf("%.2f×", r.SimWallS/a.SimWallS), th(r.Requests), th(r.PromptTokens),
			fmt.Sprintf("%s (%.1f%%)", th(r.CachedTokens), r.CacheHitPct), th(r.PrefillTokens), fmt.Sprintf("%.1f%%", r.HistoryHitPct), fmt.Sprintf("%.0f s", floor(r)))
	}
	t.write(w)
	fmt.Fprintln(w)
	met := map[bool]string{true: "yes", false: "**no**"}
	t = newTable("target", "measured", "any client at most", "met").
		add(a.Name+": ≥ 90% of history tokens served from cache", fmt.Sprintf("%.1f%%", a.HistoryHitPct), "100%", met[a.HistoryHitPct >= 90])
	for _, r := range runs[1:] {
		ratio := r.SimWallS / a.SimWallS
		t.add(a.Name+" ≥ 1.3× faster than "+r.Name, fmt.Sprintf("%.2f×", ratio), fmt.Sprintf("%.2f×", r.SimWallS/floor(best)), met[ratio >= 1.3])
	}
	t.write(w)
	// How much faster a client whose cache served every prompt token could
	// be than one whose cache served none, and prefill's share of the busy
	// time without a cache (none without answers to set it against).
	d, p := decodeS(a), prefillS(a.PromptTokens)
	gain, share := 0.0, 0.0
	if d > 0 {
		gain, share = (d+p)/d, 100*p/(d+p)
	}
	fmt.Fprintf(w, "\n- Prefill's share: each endpoint's part of the %s tokens generated takes %.0f s at %s tok/s (a full batch); prefilling its part of all %s prompt tokens would take %.0f s more at %g µs a token. Without a prefix cache prefill is %.1f%% of an endpoint's busy time, so a client whose cache served every prompt token could be at most %.2f× faster than one whose cache served none.\n",
		th(a.GeneratedTokens), d, th(c.decodeTPS), th(a.PromptTokens), p, c.prefillUS, share, gain)
	fmt.Fprintf(w, "- The floor is the least time a run's work takes: each endpoint's part of the answers at a full batch plus its part of the prefill the cache left. No client can take less than the smallest floor, %.0f s (%s), which bounds the column \"any client at most\": each run's wall time over that floor.\n",
		floor(best), best.Name)
	for _, r := range runs[1:] {
		extra := r.PrefillTokens - a.PrefillTokens
		fmt.Fprintf(w, "- %s computed %s prefill tokens more than %s: at %g µs a token over %d endpoints, %.0f s of each endpoint's time; its wall time differs by %.0f s.\n",
			r.Name, th(extra), a.Name, c.prefillUS, c.endpoints, prefillS(extra), r.SimWallS-a.SimWallS)
	}
}

// th is a count with thousands separators.
func th(v float64) string { return cli.Thousands(int64(v)) }

// regenFacts are the figures the section's text quotes: the conversations
// by their questions, the mean prompt of a request by its questions (from
// the last run's request log: every run sends the same prompts, llmsim's
// answers depending on the prompt alone), the mean history of a later
// turn, and how much more than the mean the busiest server of a round
// robin generates, by (a)'s answers.
func (h *harness) regenFacts() (*Result, error) {
	f := &Result{Group: "regen-facts", Name: "facts", OutRecords: -1, Metrics: map[string]float64{}}
	for _, r := range h.group("regen") {
		if run := regenRunOf(r); run.LaterTurns > 0 {
			f.Metrics["history"] = float64(int64(run.HistoryTokens) / int64(run.LaterTurns))
			break
		}
	}
	var ids []string
	sum, count, tokens := map[int]float64{}, map[int]float64{}, map[string]float64{}
	err := errors.Join(
		eachJSON(h.path("data/regen.jsonl"), func(c *struct {
			ID       json.RawMessage `json:"id"`
			Messages []message       `json:"messages"`
		}) error {
			ids = append(ids, string(c.ID))
			f.Metrics["conversations"]++
			f.Metrics[fmt.Sprintf("turns %d", userTurns(c.Messages))]++
			return nil
		}),
		eachJSON(h.path("tmp/regen-requests.jsonl"), func(l *llmsim.LoggedRequest) error {
			if l.Status == 200 {
				sum[l.UserTurns()] += float64(l.PromptTokens)
				count[l.UserTurns()]++
			}
			return nil
		}),
		eachJSON(h.path("tmp/regen-a.jsonl"), func(a *generation) error { tokens[string(a.ID)] = a.Output.Usage.Completion; return nil }))
	for k := range sum {
		f.Metrics[fmt.Sprintf("prompt %d", k)] = sum[k] / count[k]
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
func (h *harness) regenView() (v struct {
	Found                                  bool
	Conversations, Turns, Prompts, History string
	Imbalance                              float64
}) {
	f := h.find("regen-facts", "facts")
	if v.Found = f != nil; f == nil {
		f = &Result{}
	}
	var turns, prompts []string
	for _, name := range slices.SortedFunc(maps.Keys(f.Metrics), func(a, b string) int { return cmp.Or(len(a)-len(b), strings.Compare(a, b)) }) {
		var k int
		if _, err := fmt.Sscanf(name, "turns %d", &k); err == nil {
			turns = append(turns, fmt.Sprintf("%.0f with %d", f.Metrics[name], k))
		} else if _, err := fmt.Sscanf(name, "prompt %d", &k); err == nil {
			prompts = append(prompts, fmt.Sprintf("%s %.0f", ordinal(k), f.Metrics[name]))
		}
	}
	v.Conversations, v.Turns, v.Prompts, v.History = th(f.Metrics["conversations"]), strings.Join(turns, ", "), strings.Join(prompts, ", "), th(f.Metrics["history"])
	v.Imbalance = f.Metrics["imbalance_pct"]
	return v
}

func init() {
	parts["regen"] = func(w io.Writer, h *harness) {
		var runs []regenRun
		for _, r := range h.group("regen") {
			runs = append(runs, regenRunOf(r))
		}
		if !slices.ContainsFunc(runs, func(r regenRun) bool { return strings.HasPrefix(r.Name, "(c)") }) {
			fmt.Fprint(w, "(c) was not measured: python3 is not installed on this machine.\n\n")
		}
		renderRegen(w, runs, costModel{prefillUS: regenPrefillUS, decodeTPS: 1180, endpoints: regenEndpoints})
	}
}

func ordinal(n int) string {
	if n >= 1 && n <= 3 {
		return strconv.Itoa(n) + []string{"st", "nd", "rd"}[n-1]
	}
	return strconv.Itoa(n) + "th"
}
