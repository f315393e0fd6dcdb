package benchsuite

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
)

// The regenerate section: eight calibrated llmsim endpoints (the default
// decode timing, prefill at regenPrefillUS), each with a prefix cache of
// regenKV tokens, regenerate the same multi-turn conversations three ways:
// infer --regenerate (affinity), infer --regenerate --no-affinity, and
// specforge_regen.py, a client that does what SpecForge's
// scripts/regenerate_train_data.py does. llmsim's request log says what
// each run's prompts cost.
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
	about: "infer --regenerate with and without affinity, and a SpecForge-style client, on 8 llmsim endpoints with prefix caches",
	needs: []string{"regen"},
	measure: func(ctx context.Context, h *harness) error {
		for _, pattern := range []string{"regen-results.jsonl", "tmp/regen-a.jsonl*", "tmp/regen-b.jsonl*", "tmp/regen-c.jsonl", "tmp/regen-*.errors.jsonl"} {
			matches, _ := filepath.Glob(h.path(pattern))
			for _, m := range matches {
				os.Remove(m)
			}
		}
		h.regenRuns = nil
		// infer's waits are scaled like the fleet's, as in the fleet section.
		waits := []string{"--probe-interval", fmt.Sprintf("%dms", 2000/regenScale), "--backoff", fmt.Sprintf("%dms", 1000/regenScale),
			"--max-backoff", fmt.Sprintf("%dms", 60000/regenScale)}
		maxTok := strconv.Itoa(regenMaxTokens)
		a := append(append([]string{"infer", "--regenerate", "-e", "{URLS}", "--max-tokens", maxTok}, waits...), "--progress", "0", "-o", "tmp/regen-a.jsonl", "data/regen.jsonl")
		b := append(append([]string{"infer", "--regenerate", "--no-affinity", "-e", "{URLS}", "--max-tokens", maxTok}, waits...), "--progress", "0", "-o", "tmp/regen-b.jsonl", "data/regen.jsonl")
		if err := h.regenRun(ctx, "(a) infer --regenerate", a); err != nil {
			return err
		}
		if err := h.regenRun(ctx, "(b) infer --regenerate --no-affinity", b); err != nil {
			return err
		}
		if !have("python3") {
			h.logf("regen: python3 is not installed: no SpecForge-style row")
			return nil
		}
		c := []string{"python3", h.repoFile("pipelines/bench/specforge_regen.py"), "--server-address", "{ADDRS}", "--concurrency", "64",
			"--max-tokens", maxTok, "--input-file-path", "data/regen.jsonl", "--output-file-path", "tmp/regen-c.jsonl"}
		return h.regenRun(ctx, "(c) specforge_regen.py", c)
	},
	render: renderRegenSection,
	runs:   func(*harness) string { return "one run each" },
}

// generatedRe finds llmsim's exit summary's "N tokens generated".
var generatedRe = regexp.MustCompile(`(\d+) tokens generated`)

// regenRun runs one client against a fresh fleet of eight endpoints, its
// arguments {URLS} (the URLs, comma-separated) and {ADDRS} (host:port each,
// as separate arguments) filled in, and keeps what the request log says.
func (h *harness) regenRun(ctx context.Context, name string, argv []string) error {
	reqLog, simLog := h.path("tmp/regen-requests.jsonl"), h.path("tmp/regen-llmsim.log")
	os.Remove(reqLog)
	os.Remove(simLog)
	sim, err := h.startSim(ctx, regenEndpoints, simLog, "--time-scale", strconv.Itoa(regenScale), "--kv-tokens", strconv.Itoa(regenKV),
		"--prefill-per-token", fmt.Sprintf("%dus", regenPrefillUS), "--cache-report", "--request-log", reqLog, "--seed", "1")
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			sim.stop()
		}
	}()
	var args []string
	for _, a := range argv {
		switch a {
		case "{URLS}":
			args = append(args, strings.Join(sim.urls, ","))
		case "{ADDRS}":
			for _, u := range sim.urls {
				args = append(args, strings.TrimPrefix(u, "http://"))
			}
		default:
			args = append(args, a)
		}
	}
	clientLog, err := os.OpenFile(h.path("logs/regen-client.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer clientLog.Close()
	fmt.Fprintf(clientLog, "== %s: %s\n", name, strings.Join(args, " "))
	h.logf("regen: %s on %d endpoints (time scale %d)", name, regenEndpoints, regenScale)
	bin := args[0]
	if !strings.Contains(bin, "/") && fileExists(h.tool(bin)) {
		bin = h.tool(bin)
	}
	cmd := exec.CommandContext(ctx, bin, args[1:]...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = h.dir, h.environ, clientLog, clientLog
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v (see logs/regen-client.log)", name, err)
	}
	wall := time.Since(start).Seconds()
	sim.stop()
	stopped = true
	summary, _ := os.ReadFile(simLog)
	appendFile(h.path("logs/regen-llmsim.log"), summary)
	var generated int64
	if m := generatedRe.FindAllSubmatch(summary, -1); len(m) > 0 {
		generated, _ = strconv.ParseInt(string(m[len(m)-1][1]), 10, 64)
	}
	r, err := regenStats(reqLog, name, wall, regenScale, generated)
	if err != nil {
		return err
	}
	h.regenRuns = append(h.regenRuns, r)
	line, _ := json.Marshal(r)
	return appendFile(h.path("regen-results.jsonl"), append(line, '\n'))
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func appendFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// regenFacts are the figures the section's text quotes.
type regenFacts struct {
	conversations int
	byTurns       map[int]int     // conversations by their questions
	promptByTurn  map[int]float64 // mean prompt tokens of a request, by its questions
	history       int64           // mean history tokens of a later turn
	imbalancePct  float64         // how much more than the mean the busiest server of a round robin generates
}

func renderRegenSection(w io.Writer, h *harness) {
	f, err := h.regenFacts()
	if err != nil {
		fmt.Fprintf(w, "_The section's figures could not be read: %v._\n\n", err)
	}
	var turns []string
	for _, k := range sortedKeys(f.byTurns) {
		turns = append(turns, fmt.Sprintf("%d with %d", f.byTurns[k], k))
	}
	var prompts []string
	for _, k := range sortedKeys(f.promptByTurn) {
		prompts = append(prompts, fmt.Sprintf("%s %.0f", ordinal(k), f.promptByTurn[k]))
	}
	fmt.Fprintf(w, "`corpus -n %d --conversations --seed 1 | extract --turns all`, the conversations of 3 to 5\n"+
		"questions (%s: %s questions), regenerated with `--max-tokens %d` on eight\n"+
		"`llmsim` endpoints, %d times faster than real time, a fresh fleet for each client. Prompts average\n"+
		"%s tokens by question; a later turn's history averages %s tokens.\n\n",
		h.sz.RegenCorpus, cli.Thousands(f.conversations), strings.Join(turns, ", "), regenMaxTokens, regenScale,
		strings.Join(prompts, ", "), cli.Thousands(f.history))
	fmt.Fprintf(w, "The fleet: llmsim's decode calibration (48 slots; 26.5 tok/s alone and 1,180 tok/s with 48 running: a step\n"+
		"costs 37.7 ms plus 62.6 µs a running request), prefill at %d µs a prompt token\n"+
		"(`--prefill-per-token %dus`), and a prefix cache of %s tokens each (`--kv-tokens %d`:\n"+
		"about what SGLang holds for a 27-32B model in FP8 on one 80 GB GPU; `--cache-report`). llmsim's default\n"+
		"prefill, 40 µs a token, is more than one GPU computes for a 27B model (2 FLOPs a parameter a token at\n"+
		"40 µs is 1.35 PFLOP/s; an H100's dense BF16 peak is 989 TFLOP/s); gemma-3-27b-it on vLLM, decoding at\n"+
		"46 ms a step with 16 running (llmsim: 38.7 ms), gave 16 prompts of 1,024 tokens sent at once their first\n"+
		"tokens after 4.2 s: about 3,900 prompt tokens/s, 257 µs a token (`vllm bench serve`, in vLLM's pull\n"+
		"request 33743). Wall time is simulated (real × %d), from the client's start to its exit. Token figures\n"+
		"come from llmsim's request log (`internal/benchsuite`): a turn's **history** is what its request\n"+
		"holds of earlier turns (its messages up to the last answer), all that a prefix cache can serve.\n\n",
		regenPrefillUS, regenPrefillUS, cli.Thousands(regenKV), regenKV, regenScale)
	fmt.Fprint(w, "- **(a)** `infer --regenerate`: each conversation keeps its slot on the endpoint of its first turn.\n"+
		"- **(b)** `infer --regenerate --no-affinity`: each turn goes to the least loaded endpoint.\n"+
		"- **(c)** `pipelines/bench/specforge_regen.py`: what SpecForge's `scripts/regenerate_train_data.py` does\n"+
		"  (Python standard library): conversations dealt round robin to the servers, 64 in flight per server,\n"+
		"  each conversation's turns one after another in one thread on its server; no tools, no retries.\n\n")
	if !slices.ContainsFunc(h.regenRuns, func(r regenRun) bool { return strings.HasPrefix(r.Name, "(c)") }) {
		fmt.Fprint(w, "(c) was not measured: python3 is not installed on this machine.\n\n")
	}
	renderRegen(w, h.regenRuns, costModel{prefillUS: regenPrefillUS, decodeTPS: 1180, endpoints: regenEndpoints})
	fmt.Fprintf(w, "- (c)'s round robin: by the answers (a) got, the busiest of the eight servers generates %.1f%% more tokens\n"+
		"  than the mean.\n\n", f.imbalancePct)
	fmt.Fprint(w, "Reading the figures: what affinity saves is prefill, so the cost model bounds what it can win: no client is\n"+
		"faster than one whose cache serves every history, and that one is faster than a client with no cache\n"+
		"by at most the factor in the line on prefill's share. (b) sends each turn to whichever endpoint is least\n"+
		"loaded, which holds the conversation's history only by chance, and pays the prefill. (c) cannot lose\n"+
		"on the cache: SpecForge's script runs a conversation's turns in one thread against the server it was dealt,\n"+
		"so its caches serve the histories as (a)'s do, and 64 conversations a server keep the 48 slots full. What\n"+
		"can separate (a) from (c) is the round robin's imbalance and the end of the run, when the last\n"+
		"conversations' turns run one after another on a draining batch: (a) pays the drain too, and the column\n"+
		"\"any client at most\" is (c)'s wall time over the least time the work can take, so where it is below 1.3×\n"+
		"no client can meet that goal. What (a) has that (c) does not is correctness, not speed: retries on another\n"+
		"endpoint, tool calls paired with the records' results, resume by (id, sample) from the turn journal\n"+
		"(SpecForge's `--resume` counts output lines, so conversations that finished out of order are skipped or\n"+
		"repeated), and no per-server concurrency to choose.\n")
}

func sortedKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func ordinal(n int) string {
	switch n {
	case 1:
		return "1st"
	case 2:
		return "2nd"
	case 3:
		return "3rd"
	}
	return fmt.Sprintf("%dth", n)
}

// regenFacts reads the conversations, the last run's request log (every
// run sends the same prompts: llmsim's answers depend on the prompt
// alone) and (a)'s output.
func (h *harness) regenFacts() (regenFacts, error) {
	f := regenFacts{byTurns: map[int]int{}, promptByTurn: map[int]float64{}}
	for _, r := range h.regenRuns {
		if r.LaterTurns > 0 {
			f.history = r.HistoryTokens / r.LaterTurns
			break
		}
	}
	var ids []string
	err := eachLine(h.path("data/regen.jsonl"), func(line []byte) error {
		var c struct {
			ID json.RawMessage `json:"id"`
		}
		if err := json.Unmarshal(line, &c); err != nil {
			return err
		}
		f.conversations++
		f.byTurns[userTurns(line)]++
		ids = append(ids, string(c.ID))
		return nil
	})
	if err != nil {
		return f, err
	}
	sum, count := map[int]float64{}, map[int]float64{}
	err = eachLine(h.path("tmp/regen-requests.jsonl"), func(line []byte) error {
		var l logLine
		if err := json.Unmarshal(line, &l); err != nil {
			return err
		}
		if l.Status != 200 {
			return nil
		}
		users := 0
		for _, m := range l.Body.Messages {
			if m.Role == "user" {
				users++
			}
		}
		sum[users] += float64(l.PromptTokens)
		count[users]++
		return nil
	})
	if err != nil {
		return f, err
	}
	for k := range sum {
		f.promptByTurn[k] = sum[k] / count[k]
	}
	tokens := map[string]float64{}
	err = eachLine(h.path("tmp/regen-a.jsonl"), func(line []byte) error {
		var g struct {
			ID     json.RawMessage `json:"id"`
			Output struct {
				Usage struct {
					Completion float64 `json:"completion_tokens"`
				} `json:"usage"`
			} `json:"output"`
		}
		if err := json.Unmarshal(line, &g); err != nil {
			return err
		}
		tokens[string(g.ID)] = g.Output.Usage.Completion
		return nil
	})
	f.imbalancePct = roundRobinImbalance(ids, tokens, regenEndpoints)
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

// eachLine calls fn with every line of a file.
func eachLine(path string, fn func([]byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for line := 1; sc.Scan(); line++ {
		if err := fn(sc.Bytes()); err != nil {
			return fmt.Errorf("%s:%d: %v", path, line, err)
		}
	}
	return sc.Err()
}
