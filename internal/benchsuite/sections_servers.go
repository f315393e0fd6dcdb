package benchsuite

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/ollamaserver"
	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// The sections where infer talks to servers: llmsim answering at once,
// llmsim calibrated to the real fleet, llmsim imitating servers that do
// not say their capacity, and a real Ollama server.

// concurrency is the requests every client keeps in flight against the
// zero-latency endpoint.
const concurrency = 64

// fleetTimeScale: the fleet section's llmsim runs this many times faster
// than real GPUs.
const fleetTimeScale = 20

// writeBodies writes a chat request body for each of the first n prompt
// records of src ({model, messages, max_tokens}), for curl to send: made
// beforehand, so not timed. xargs passes each as one argument, so bodies
// over 100 kB (the argument limit is 128 kB) are left out.
func writeBodies(src, dst string, n int, model string, maxTokens int) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	br := bufio.NewReaderSize(in, 1<<20)
	return jsonl.WriteFile(dst, jsonl.CreateFileOptions{Replace: true}, func(w io.Writer) error {
		for i := 1; i <= n; i++ {
			line, err := br.ReadBytes('\n')
			if err == io.EOF && len(line) == 0 {
				return nil
			}
			if err != nil && err != io.EOF {
				return err
			}
			var p struct {
				Messages json.RawMessage `json:"messages"`
			}
			if err := json.Unmarshal(line, &p); err != nil {
				return fmt.Errorf("%s:%d: %v", src, i, err)
			}
			body, err := json.Marshal(struct {
				Model     string          `json:"model"`
				Messages  json.RawMessage `json:"messages"`
				MaxTokens int             `json:"max_tokens"`
			}{model, p.Messages, maxTokens})
			if err != nil {
				return err
			}
			if len(body) < 100000 {
				if _, err := w.Write(append(body, '\n')); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// curlClient is xargs running curl, parallel at once, one request body of
// the file bodies each; newline puts a newline after each answer.
func curlClient(s Spec, url string, parallel int, newline bool, bodies string) peerSpec {
	argv := []string{"xargs", "-d", `\n`, "-P", strconv.Itoa(parallel), "-n", "1", "curl", "-sS", "--fail"}
	if newline {
		argv = append(argv, "-w", `\n`)
	}
	s.Argv = append(argv, "-H", "Content-Type: application/json", url+"/v1/chat/completions", "--data-binary")
	s.Stdin, s.Show = bodies, shellJoin(s.Argv)+" < "+bodies
	s.Alias = append(s.Alias, url+"=$URL")
	return peer(s, "curl", "xargs")
}

// nodeClient is pipelines/bench/openai-client.mjs on the OpenAI Node SDK
// installed in the scratch directory, or a row saying why there is none.
func (h *harness) nodeClient(s Spec, url, model string, concurrency, maxTokens int, prompts string) peerSpec {
	s.Argv = []string{"node", h.repoFile("pipelines/bench/openai-client.mjs"), "--modules", h.path("node"), "--base-url", url + "/v1"}
	if model != "" {
		s.Argv = append(s.Argv, "--model", model)
	}
	s.Argv = append(s.Argv, "--concurrency", strconv.Itoa(concurrency), "--max-tokens", strconv.Itoa(maxTokens), prompts)
	s.Alias = append(s.Alias, url+"=$URL")
	p := peerSpec{Spec: s}
	if !h.node.ok {
		p.why = h.node.why
	}
	return p
}

var clientSection = &section{
	name: "client", heading: "## infer: client overhead against a zero-latency llmsim",
	about: "infer against the OpenAI Node SDK and xargs -P curl, on llmsim --instant",
	needs: []string{"prompts-big"}, node: true,
	measure: func(ctx context.Context, h *harness) error {
		const big = "data/prompts-big.jsonl"
		for _, f := range []struct {
			file string
			n    int
		}{{"data/client-infer.jsonl", h.sz.ClientInfer}, {"data/client-node.jsonl", h.sz.ClientNode}} {
			if err := copyLines(h.path(big), h.path(f.file), f.n, 0); err != nil {
				return err
			}
		}
		const bodies = "data/client-curl-bodies.jsonl"
		if err := writeBodies(h.path(big), h.path(bodies), h.sz.ClientCurl, "Qwen3.6-27B", 16); err != nil {
			return err
		}
		n, err := h.lineCounts("data/client-infer.jsonl", "data/client-node.jsonl", bodies)
		if err != nil {
			return err
		}
		ni, nn, nb := n[0], n[1], n[2]
		sim, err := h.startInstant(ctx)
		if err != nil {
			return err
		}
		defer sim.stop()
		url := sim.url
		c := strconv.Itoa(concurrency)
		const out = "tmp/client-gen.jsonl"
		inf := ours(Spec{Group: "client", Name: "infer", Records: ni, Clean: []string{out, "tmp/client-gen.errors.jsonl"}, Count: []string{out},
			Alias: []string{url + "=$URL"}, Argv: []string{"infer", "-e", url, "--concurrency", c, "--max-tokens", "16", "--progress-interval", "0", "-o", out, "data/client-infer.jsonl"}})
		node := h.nodeClient(Spec{Group: "client", Name: "OpenAI Node SDK " + h.node.version, Records: nn}, url, "", concurrency, 16, "data/client-node.jsonl")
		if !h.node.ok {
			node.Name = "OpenAI Node SDK"
		}
		// llmsim's answers end without a newline: -w puts one after each.
		curl := curlClient(Spec{Group: "client", Name: "xargs -P " + c + " curl", Records: nb}, url, concurrency, true, bodies)
		return h.measureAll(ctx, []peerSpec{inf, node, curl})
	},
	render: func(w io.Writer, h *harness) {
		fmt.Fprintf(w, "One `llmsim --instant` endpoint on this machine answers every request at\n"+
			"once, so the rate is what the client (and the simulator, on the same two\n"+
			"cores) can push. Every client keeps %d requests in flight and asks\n"+
			"for 16 tokens. CPU s is the client's own (for xargs, every curl process's),\n"+
			"not the simulator's: on a busy machine, **CPU µs/record** is the steadier\n"+
			"figure.\n\n", concurrency)
		h.table(w, "client", tableOptions{cpuPerRecord: true, rate: "requests/s"})
	},
	targets: func(*harness) []string {
		return []string{"infer ≥ 20,000 req/s against llmsim --instant (simulator included) := client/infer:rps >= 20000"}
	},
}

var llmsimSection = &section{
	name: "llmsim", heading: "## llmsim alone", about: "llmsim's BenchmarkInstantChat (go test -bench)",
	measure: func(ctx context.Context, h *harness) error {
		argv := []string{"go", "test", "-run", "^$", "-bench", "^BenchmarkInstantChat$", "-benchtime", h.sz.LLMSimBenchtime,
			"-count", strconv.Itoa(h.runs), "./internal/llmsim/"}
		r, err := gobench(ctx, h.repo, &Result{Group: "llmsim", Name: "llmsim --instant, 1 endpoint", Ours: true,
			Note: "client and simulator in one process, 32 goroutines on one fasthttp client"}, argv, "req/s", "rps", h.logf)
		if err != nil {
			return err
		}
		return h.add(r)
	},
	render: func(w io.Writer, h *harness) { h.table(w, "llmsim", tableOptions{rate: "requests/s"}) },
	targets: func(*harness) []string {
		return []string{"llmsim ≥ 20,000 req/s alone := llmsim/llmsim --instant, 1 endpoint:rps >= 20000"}
	},
}

// fleetCrashAfter is when endpoint 6 of the fleet crashes: about half of
// its share of the prompts.
func fleetCrashAfter(prompts int) int { return prompts * 3 / 40 }

var fleetSection = &section{
	name: "fleet", heading: "## infer on the calibrated 8-endpoint fleet",
	about: "infer on 8 calibrated llmsim endpoints, one slow and one crashing: least-outstanding and round-robin against the ideal",
	needs: []string{"prompts-big"},
	measure: func(ctx context.Context, h *harness) error {
		const prompts = "data/fleet-prompts.jsonl"
		if err := copyLines(h.path("data/prompts-big.jsonl"), h.path(prompts), h.sz.FleetPrompts, 0); err != nil {
			return err
		}
		n, err := h.lines(prompts)
		if err != nil {
			return err
		}
		// infer's waits are real time; scaled like the fleet's, so that
		// probing and backoff cost what they would on real GPUs.
		scaled := func(ms int) string { return fmt.Sprintf("%dms", ms/fleetTimeScale) }
		for _, policy := range []string{"least-outstanding", "round-robin"} {
			c := &FleetCmd{Group: "fleet", Runs: h.sz.FleetRuns, LLMSim: h.tool("llmsim"), Infer: h.tool("infer"), Endpoints: 8,
				TimeScale: fleetTimeScale, Policy: policy, MaxTokens: 1024, Prompts: h.path(prompts), Records: n,
				Fault:     []string{"7=slow:3", fmt.Sprintf("6=crash-after:%d,restart-after:60s,startup-delay:20s", fleetCrashAfter(h.sz.FleetPrompts))},
				InferArgs: []string{"--probe-interval", scaled(2000), "--backoff", scaled(1000), "--max-backoff", scaled(60000)},
				Poll:      100 * time.Millisecond, Timeout: 20 * time.Minute}
			r, err := c.measure(ctx, h.logf)
			if err != nil {
				return err
			}
			r.Command = strings.NewReplacer(h.bin+"/", "", h.dir+"/", "").Replace(r.Command)
			if err := h.add(r); err != nil {
				return err
			}
		}
		return nil
	},
	render: func(w io.Writer, h *harness) {
		fmt.Fprintf(w, "`llmsim` simulates eight SGLang servers of 48 slots each, calibrated to\n"+
			"the real job (1,180 tok/s per endpoint with a full batch), %d times\n"+
			"faster than real time. Endpoint 7 is 3× slower; endpoint 6 crashes after\n"+
			"%d requests and comes back 60 s later (simulated), answering\n"+
			"health checks only after a further 20 s start-up. infer's own waits (probe\n"+
			"interval, retry backoff) are scaled by the same factor. %d prompts, answers\n"+
			"up to 1,024 tokens. Token rates are in simulated time (real rate ÷ %d).\n\n"+
			"- **delivered tok/s**: completion tokens infer wrote, per second, in the\n"+
			"  steady state (between 10%% and 90%% of the run's tokens; from infer's\n"+
			"  `--metrics-addr`).\n"+
			"- **decoded tok/s**: tokens the endpoints decoded in the same window\n"+
			"  (their `generation_tokens_total`).\n"+
			"- **fleet ideal**: for each endpoint, 48 slots decoding at its calibrated\n"+
			"  rate (1,180 tok/s, a third of that for the slow one), for the time it\n"+
			"  was up (`/health` polled every 100 ms).\n"+
			"- **decoded %% of ideal**: the tokens decoded in the window over that\n"+
			"  ideal, each endpoint over the simulated time its counters were decoded\n"+
			"  by (llmsim's `/llmsim/decoded`): never above 100%%, where delivered\n"+
			"  tokens over the ideal pass it when answers decoded before the window\n"+
			"  are delivered in it (a short run, the drain of the last answers).\n"+
			"  \"With prefill\" takes from the ideal the time the endpoints' steps\n"+
			"  spent prefilling the prompts they were sent (`prompt_tokens_total`).\n"+
			"- **slot utilisation**: running requests over the slots of the endpoints\n"+
			"  that were up, from each endpoint's `/metrics`.\n"+
			"- **whole run**: all tokens over the whole wall time, ramp-up and tail\n"+
			"  included.\n"+
			"- **endpoint downtime**: seconds (simulated) during which some endpoint was\n"+
			"  down, summed over endpoints.\n\n",
			fleetTimeScale, fleetCrashAfter(h.sz.FleetPrompts), h.sz.FleetPrompts, fleetTimeScale)
		h.table(w, "fleet", tableOptions{kind: "fleet"})
	},
	targets: func(*harness) []string {
		return []string{
			"fleet: ≥ 97% of the ideal decoded (least-outstanding, steady state) := fleet/least-outstanding:ideal_pct >= 97",
			"fleet: slot utilisation ≥ 99% (least-outstanding, steady state) := fleet/least-outstanding:util_pct >= 99",
		}
	},
	runs: func(h *harness) string { return fmt.Sprintf("%s each, medians reported", runsText(h.sz.FleetRuns)) },
}

// inTurns measures a table's rows in rounds: round measures every row
// once, and is called rounds times, so that each row's runs are spread
// over the same minutes as the others' and a shared machine's load falls
// on every row alike. The rounds' runs of a row become one result.
func (h *harness) inTurns(ctx context.Context, rounds int, round func(context.Context) error) error {
	var got []*Result
	savedRuns := h.runs
	h.collect, h.runs = &got, 1
	defer func() { h.collect, h.runs = nil, savedRuns }()
	for r := 1; r <= rounds; r++ {
		h.logf("round %d of %d", r, rounds)
		if err := round(ctx); err != nil {
			return err
		}
	}
	h.collect = nil
	for _, m := range mergeRounds(got) {
		if err := h.add(m); err != nil {
			return err
		}
	}
	return nil
}

// mergeRounds joins the results of the same row (group and name), in the
// order first measured: their runs together, their load the mean of the
// rounds'.
func mergeRounds(rounds []*Result) []*Result {
	var out []*Result
	type acc struct {
		r     *Result
		loads []float64
	}
	byRow := map[[2]string]*acc{}
	for _, r := range rounds {
		k := [2]string{r.Group, r.Name}
		a := byRow[k]
		if a == nil {
			c := *r
			c.Runs = slices.Clone(r.Runs)
			a = &acc{r: &c}
			byRow[k] = a
			out = append(out, a.r)
		} else {
			a.r.Runs = append(a.r.Runs, r.Runs...)
			a.r.RSSFloorKB = max(a.r.RSSFloorKB, r.RSSFloorKB)
		}
		a.loads = append(a.loads, r.Load1)
	}
	for _, r := range out {
		a := byRow[[2]string{r.Group, r.Name}]
		var sum float64
		for _, l := range a.loads {
			sum += l
		}
		r.Load1 = sum / float64(len(a.loads))
	}
	return out
}

// inflightScale: the in-flight tables' llmsim runs this many times faster
// than real time.
const inflightScale = 50

// inflightCase is one table of the in-flight section: a kind of server
// and the fixed --concurrency levels set beside infer's adapted count.
type inflightCase struct {
	key, label string
	flags      []string // llmsim's
	prompts    int
	maxTokens  int
	levels     []int
}

// inflightCases last about ServersMinutes of simulated time each.
func inflightCases(sz Sizes) []inflightCase {
	m := sz.ServersMinutes
	return []inflightCase{
		{"4", "4 slots", []string{"--flavor", "ollama", "--max-running", "4"}, m * 55, 128, []int{2, 4, 8, 64}},
		{"48", "48 slots", []string{"--flavor", "ollama", "--max-running", "48"}, m * 300, 256, []int{32, 48, 64}},
		{"schedule", fmt.Sprintf("48 slots, then 16 from %d s on", m*15),
			[]string{"--flavor", "ollama", "--slots-schedule", fmt.Sprintf("0s:48,%ds:16", m*15)}, m * 150, 256, []int{16, 48, 64}},
	}
}

func (c inflightCase) simFlags() []string {
	return append(slices.Clone(c.flags), "--time-scale", strconv.Itoa(inflightScale))
}

var inflightSection = &section{
	name: "inflight", heading: "## infer's in-flight count on servers that do not say their capacity",
	about: "infer's adapted in-flight count against fixed --concurrency levels on llmsim's Ollama flavour",
	needs: []string{"servers-prompts"},
	measure: func(ctx context.Context, h *harness) error {
		cases := inflightCases(h.sz)
		for _, c := range cases {
			if err := copyLines(h.path("data/servers-prompts.jsonl"), h.path("data/servers-"+c.key+".jsonl"), c.prompts, 0); err != nil {
				return err
			}
		}
		return h.inTurns(ctx, h.sz.ServersRuns, func(ctx context.Context) error {
			for _, c := range cases {
				h.logf("in-flight: %s, %d prompts", c.label, c.prompts)
				fresh := func(ctx context.Context) (map[string]string, func(), error) {
					sim, err := h.startSim(ctx, 1, h.path("logs/inflight-llmsim.log"), c.simFlags()...)
					if err != nil {
						return nil, nil, err
					}
					return map[string]string{"@URL@": sim.url}, sim.stop, nil
				}
				const out = "tmp/servers-gen.jsonl"
				row := func(name string, ours bool, extra ...string) error {
					argv := append([]string{"infer", "-e", "@URL@"}, extra...)
					argv = append(argv, "--max-tokens", strconv.Itoa(c.maxTokens), "--progress", "0", "--force", "-o", out, "data/servers-"+c.key+".jsonl")
					return h.measure(ctx, Spec{Group: "servers-" + c.key, Name: name, Ours: ours, Records: int64(c.prompts),
						Clean: []string{out}, Count: []string{out}, Alias: []string{"@URL@=$URL"}, Fresh: fresh, Argv: argv})
				}
				if err := row("infer (adapted)", true); err != nil {
					return err
				}
				for _, l := range c.levels {
					if err := row(fmt.Sprintf("infer --concurrency %d", l), false, "--concurrency", strconv.Itoa(l)); err != nil {
						return err
					}
				}
			}
			return nil
		})
	},
	render: func(w io.Writer, h *harness) {
		fmt.Fprintf(w, "A server that does not report how many requests it runs at once (vLLM, Ollama, gateways) gets an\n"+
			"in-flight count that infer adapts while the run goes (see Balancing in the README). Here it is next to\n"+
			"fixed `--concurrency` levels on llmsim's Ollama flavour, which reports neither its capacity nor a queue\n"+
			"(only latency and output to go on), %d times faster than real time, each run on a fresh\n"+
			"simulator, started before the run's clock starts; prompts from the corpus, answers cut at max_tokens. Each row is\n"+
			"the median of %s, taken in turns (one run of every row, then the next round, so that the\n"+
			"machine's load falls on every row alike); \"tokenmill is\" compares the adapted count with each fixed one\n"+
			"(every run writes the same tokens, so the rate of answers is the rate of tokens). The goal: at least 95%% of\n"+
			"the best fixed level's rate in every case.\n\n", inflightScale, runsText(h.sz.ServersRuns))
		for _, c := range inflightCases(h.sz) {
			fmt.Fprintf(w, "### %s (%s prompts, max_tokens %d)\n\nEach run's simulator: `llmsim --listen 127.0.0.1:0 %s`.\n\n",
				c.label, cli.Thousands(c.prompts), c.maxTokens, strings.Join(c.simFlags(), " "))
			h.table(w, "servers-"+c.key, tableOptions{rate: "answers/s"})
			fmt.Fprintln(w)
		}
	},
	targets: func(h *harness) []string {
		var t []string
		for _, c := range inflightCases(h.sz) {
			g := "servers-" + c.key
			if best := bestFixed(h.group(g)); best != "" {
				t = append(t, fmt.Sprintf("adapted ≥ 95%% of the best fixed (%s: %s) := %s/infer (adapted):rps / %s/%s:rps >= 0.95", c.label, best, g, g, best))
			}
		}
		return t
	},
	runs: func(h *harness) string {
		return fmt.Sprintf("%s each in turns, median reported", runsText(h.sz.ServersRuns))
	},
}

// bestFixed is the row, not tokenmill's own, with the shortest median wall
// time: the best fixed level.
func bestFixed(rows []*Result) string {
	best, bestWall := "", 0.0
	for _, r := range rows {
		if r.Ours || len(r.Runs) == 0 {
			continue
		}
		if w, _ := r.Metric("wall_s"); best == "" || w < bestWall {
			best, bestWall = r.Name, w
		}
	}
	return best
}

// ollamaParallel is OLLAMA_NUM_PARALLEL of the real server.
const ollamaParallel = 4

var ollamaRows = []string{"infer (defaults)", "infer --concurrency 4", "xargs -P 4 curl", "OpenAI Node SDK, 4 at once"}

var ollamaSection = &section{
	name: "ollama", heading: "## infer on a real Ollama server",
	about: "infer on a real Ollama server (internal/ollamaserver) against --concurrency 4, xargs -P curl and the Node SDK",
	needs: []string{"ollama-prompts"}, node: true,
	measure: func(ctx context.Context, h *harness) error {
		const prompts, bodies = "data/ollama-prompts.jsonl", "data/ollama-curl-bodies.jsonl"
		n, err := h.lines(prompts)
		if err != nil {
			return err
		}
		srv, why := startOllama(ollamaParallel, h.logf)
		if srv == nil {
			for _, r := range ollamaRows {
				if err := h.unavailable("ollama", r, "no Ollama server: "+why); err != nil {
					return err
				}
			}
			return h.unavailable(ollamaBenchGroup, ollamaBenchRow, "no Ollama server: "+why)
		}
		defer srv.stop()
		h.ollamaVersion = srv.version
		if err := writeBodies(h.path(prompts), h.path(bodies), int(n), srv.model, 32); err != nil {
			return err
		}
		nb, err := h.lines(bodies)
		if err != nil {
			return err
		}
		url := srv.url
		const out = "tmp/ollama-gen.jsonl"
		alias := []string{url + "=$URL"}
		infer := func(name string, ours bool, extra ...string) peerSpec {
			argv := append(append([]string{"infer", "-e", url}, extra...), "--max-tokens", "32", "--progress", "0", "--force", "-o", out, prompts)
			return peerSpec{Spec: Spec{Group: "ollama", Name: name, Ours: ours, Records: n, Clean: []string{out}, Count: []string{out}, Alias: alias, Argv: argv}}
		}
		// Ollama's answers end in a newline: curl needs no -w.
		curl := curlClient(Spec{Group: "ollama", Name: ollamaRows[2], Records: nb}, url, ollamaParallel, false, bodies)
		node := h.nodeClient(Spec{Group: "ollama", Name: ollamaRows[3], Records: n}, url, srv.model, ollamaParallel, 32, prompts)
		rows := []peerSpec{ours(infer(ollamaRows[0], true).Spec), infer(ollamaRows[1], false, "--concurrency", "4"), curl, node}
		h.logf("a real Ollama server at %s, %d prompts", url, n)
		k, err := h.benchOllama(ctx, url, prompts, alias)
		if err != nil {
			return err
		}
		if k > 0 && k != ollamaParallel {
			rows = append(rows, infer(benchRunRow(k), false, "--concurrency", strconv.Itoa(k)))
		}
		return h.inTurns(ctx, h.sz.OllamaRuns, func(ctx context.Context) error { return h.measureAll(ctx, rows) })
	},
	render: func(w io.Writer, h *harness) {
		version := h.ollamaVersion
		if version == "" {
			version = ollamaserver.Version
		}
		source := "the first of Alpaca's English instructions, `../shared/data/real/alpaca_en_demo.json`, through\nextract and dedup"
		if h.alpaca() == "" {
			source = "prompts from the corpus"
		}
		fmt.Fprintf(w, "Ollama %s on this machine's CPU (`internal/ollamaserver`, started by the harness), serving\n"+
			"its tiny random-weight model with `OLLAMA_NUM_PARALLEL=%d`; the same %s prompts for every\n"+
			"client (%s), 32 tokens each (the tiny model always runs to max_tokens), %d runs in turns as above,\n"+
			"the median reported. infer with its defaults finds Ollama ready on `/v1/models` and adapts its in-flight\n"+
			"count; the others keep 4 requests in flight, Ollama's slots.\n\n",
			version, ollamaParallel, h.shownLines("data/ollama-prompts.jsonl"), source, h.sz.OllamaRuns)
		h.table(w, "ollama", tableOptions{cpuPerRecord: true, rate: "answers/s"})
		renderOllamaBench(w, h)
	},
	targets: func(h *harness) []string {
		return append([]string{
			"on Ollama, infer's defaults ≥ infer --concurrency 4 := ollama/infer (defaults):rps / ollama/infer --concurrency 4:rps >= 1",
			"on Ollama, infer's defaults ≥ xargs -P 4 curl := ollama/infer (defaults):rps / ollama/xargs -P 4 curl:rps >= 1",
			"on Ollama, infer's defaults ≥ the OpenAI Node SDK at 4 := ollama/infer (defaults):rps / ollama/OpenAI Node SDK, 4 at once:rps >= 1",
		}, ollamaBenchTargets(h)...)
	},
	runs: func(h *harness) string {
		return fmt.Sprintf("%s each in turns, median reported", runsText(h.sz.OllamaRuns))
	},
}
