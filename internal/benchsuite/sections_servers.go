package benchsuite

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"tokenmill/internal/lifeline"
	"tokenmill/internal/ollamaserver"

	"github.com/segmentio/encoding/json"
)

// concurrency: the requests each client keeps in flight on the zero-latency endpoint.
const concurrency = 64

// writeBodies writes a chat request body for each of the first n prompts
// of src, for curl to send (made beforehand, so not timed). xargs passes
// each as one argument: bodies over 100 kB (the limit is 128 kB) are left out.
func writeBodies(src, dst string, n int, model string, maxTokens int) error {
	var bodies []byte
	m, _ := json.Marshal(model)
	err := eachJSON(src, func(p *struct {
		Messages json.RawMessage `json:"messages"`
	}) error {
		body := fmt.Appendf(nil, `{"model":%s,"messages":%s,"max_tokens":%d}`, m, p.Messages, maxTokens)
		if n--; n >= 0 && len(body) < 100000 {
			bodies = append(append(bodies, body...), '\n')
		}
		return nil
	})
	if err != nil {
		return err
	}
	return writeFile(dst, bodies)
}

// curlClient is xargs running curl, parallel at once, one request body of
// the file bodies each; newline puts a newline after each answer.
func curlClient(s Spec, url string, parallel int, newline bool, bodies string) peerSpec {
	argv := []string{"xargs", "-d", `\n`, "-P", strconv.Itoa(parallel), "-n", "1", "curl", "-sS", "--fail"}
	if newline {
		argv = append(argv, "-w", `\n`)
	}
	s.Argv = append(argv, "-H", "Content-Type: application/json", url+"/v1/chat/completions", "--data-binary")
	s.Stdin, s.Alias = bodies, append(s.Alias, url+"=$URL")
	return peer(s, "curl", "xargs")
}

// nodeClient is pipelines/bench/openai-client.mjs on the OpenAI Node SDK
// of the peers' directory, or a row saying why there is none.
func (h *harness) nodeClient(s Spec, url, model string, concurrency, maxTokens int, prompts string) peerSpec {
	dir, _, why := h.nodePackage("openai")
	s.Argv = []string{"node", h.repoFile("pipelines/bench/openai-client.mjs"), "--modules", dir, "--base-url", url + "/v1"}
	if model != "" {
		s.Argv = append(s.Argv, "--model", model)
	}
	s.Argv = append(s.Argv, "--concurrency", strconv.Itoa(concurrency), "--max-tokens", strconv.Itoa(maxTokens), prompts)
	s.Alias = append(s.Alias, url+"=$URL")
	return peerSpec{Spec: s, why: why}
}

var clientSection = &section{
	name: "client", heading: "## infer: client overhead against a zero-latency llmsim",
	needs: []string{"prompts-big"},
	measure: func(ctx context.Context, h *harness) error {
		const infer, node, curl = "data/client-infer.jsonl", "data/client-node.jsonl", "data/client-curl.jsonl"
		const bodies = "data/client-curl-bodies.jsonl"
		for file, n := range map[string]int{infer: h.sz.ClientInfer, node: h.sz.ClientNode, curl: h.sz.ClientCurl} {
			if err := h.head("data/prompts-big.jsonl", file, n); err != nil {
				return err
			}
		}
		if err := writeBodies(h.path(curl), h.path(bodies), h.sz.ClientCurl, "Qwen3.6-27B", 16); err != nil {
			return err
		}
		n, err := h.lineCounts(infer, node, bodies)
		if err != nil {
			return err
		}
		// A fresh llmsim each run: @URL@ is its URL.
		_, sdk, _ := h.nodePackage("openai")
		url, c, fresh := "@URL@", strconv.Itoa(concurrency), h.freshSim(1, h.path("logs/llmsim.log"), "--instant")
		const out = "tmp/client-gen.jsonl"
		return h.measureAll(ctx, []peerSpec{
			ours(Spec{Group: "client", Name: "infer", Records: n[0], Clean: []string{out, "tmp/client-gen.errors.jsonl"}, Count: []string{out},
				Fresh: fresh, Alias: []string{url + "=$URL"},
				Argv: []string{"infer", "-e", url, "--concurrency", c, "--max-tokens", "16", "--progress-interval", "0", "-o", out, infer}}),
			h.nodeClient(Spec{Group: "client", Name: strings.TrimSpace("OpenAI Node SDK " + sdk), Records: n[1], Fresh: fresh},
				url, "", concurrency, 16, node),
			// llmsim's answers end without a newline: -w puts one after each.
			curlClient(Spec{Group: "client", Name: "xargs -P " + c + " curl", Records: n[2], Fresh: fresh}, url, concurrency, true, bodies),
		})
	},
}

var llmsimSection = &section{
	name: "llmsim", heading: "## llmsim alone",
	measure: func(ctx context.Context, h *harness) error {
		return h.goBench(ctx, 1, "BenchmarkInstantChat", []string{""}, func(_ string, m map[string]float64) *Result {
			return &Result{Group: "llmsim", Name: "llmsim --instant, 1 endpoint", Ours: true, Metrics: map[string]float64{"rps": m["req/s"], "runs": m["runs"]},
				Note: "client and simulator in one process, 32 goroutines on one fasthttp client"}
		}, "-benchtime", h.sz.LLMSimBenchtime, "-count", strconv.Itoa(h.runs), "./internal/llmsim/")
	},
}

// inTurns measures a table's rows in rounds, each row once a round, so
// that a shared machine's load falls on every row alike.
func (h *harness) inTurns(ctx context.Context, rounds int, rows []peerSpec) error {
	var got []*Result
	savedRuns := h.runs
	h.collect, h.runs = &got, 1
	defer func() { h.collect, h.runs = nil, savedRuns }()
	for r := 1; r <= rounds; r++ {
		h.logf("round %d of %d", r, rounds)
		if err := h.measureAll(ctx, rows); err != nil {
			return err
		}
	}
	h.results = append(h.results, mergeRounds(got, rounds)...)
	return nil
}

// mergeRounds folds the rows of rounds measured in the same order into
// the first round's: their runs together, their load the rounds' mean.
func mergeRounds(got []*Result, rounds int) []*Result {
	n := len(got) / rounds
	for i, r := range got[n:] {
		m := got[i%n]
		m.Runs, m.RSSFloorKB = append(m.Runs, r.Runs...), max(m.RSSFloorKB, r.RSSFloorKB)
		m.Load1 += (r.Load1 - m.Load1) / float64(i/n+2) // the mean so far
	}
	return got[:n]
}

// freshSim is a Spec's Fresh that starts llmsim anew each run with endpoints
// endpoints and flags: @URL@ is the first endpoint's URL, @URLS@ every URL
// comma-separated, @ADDRS@ every host:port space-separated.
func (h *harness) freshSim(endpoints int, log string, flags ...string) func(context.Context) (map[string]string, func(), error) {
	return func(ctx context.Context) (map[string]string, func(), error) {
		sim, err := h.startSim(ctx, endpoints, log, flags...)
		if err != nil {
			return nil, nil, err
		}
		urls := strings.Join(sim.urls, " ")
		return map[string]string{"@URL@": sim.urls[0], "@URLS@": strings.ReplaceAll(urls, " ", ","),
			"@ADDRS@": strings.ReplaceAll(urls, "http://", "")}, sim.stop, nil
	}
}

// inflightScale: the in-flight tables' llmsim runs 50 times real time.
const inflightScale = 50

// inflightCase is an in-flight table: a server, and fixed levels beside infer's.
type inflightCase struct {
	Key, Label string
	Flags      []string // llmsim's
	Prompts    int
	MaxTokens  int
	Levels     []int
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

func (c inflightCase) SimFlags() []string {
	return append(slices.Clone(c.Flags), "--time-scale", strconv.Itoa(inflightScale))
}

var inflightSection = &section{
	name: "inflight", heading: "## infer's in-flight count on servers that do not say their capacity",
	needs: []string{"servers-prompts"},
	measure: func(ctx context.Context, h *harness) error {
		const out = "tmp/servers-gen.jsonl"
		var rows []peerSpec
		for _, c := range inflightCases(h.sz) {
			in := "data/servers-" + c.Key + ".jsonl"
			if err := h.head("data/servers-prompts.jsonl", in, c.Prompts); err != nil {
				return err
			}
			s := Spec{Group: "servers-" + c.Key, Records: int64(c.Prompts), Clean: []string{out}, Count: []string{out}, Alias: []string{"@URL@=$URL"},
				Fresh: h.freshSim(1, h.path("logs/inflight-llmsim.log"), c.SimFlags()...)}
			args := []string{"--max-tokens", strconv.Itoa(c.MaxTokens), "--progress", "0", "--force", "-o", out, in}
			rows = append(rows, ours(with(s, "infer (adapted)", "", append([]string{"infer", "-e", "@URL@"}, args...)...)))
			for _, l := range c.Levels {
				argv := append([]string{"infer", "-e", "@URL@", "--concurrency", strconv.Itoa(l)}, args...)
				rows = append(rows, peer(with(s, fmt.Sprintf("infer --concurrency %d", l), "", argv...)))
			}
		}
		return h.inTurns(ctx, h.sz.ServersRuns, rows)
	},
}

// ollamaParallel is OLLAMA_NUM_PARALLEL of the real server.
const ollamaParallel = 4

var ollamaRows = []string{"infer (defaults)", "infer --concurrency 4", "xargs -P 4 curl", "OpenAI Node SDK, 4 at once"}

var ollamaSection = &section{
	name: "ollama", heading: "## infer on a real Ollama server",
	needs: []string{"ollama-prompts"},
	measure: func(ctx context.Context, h *harness) error {
		const prompts, bodies = "data/ollama-prompts.jsonl", "data/ollama-curl-bodies.jsonl"
		h.info.Facts["ollama prompts"] = "corpus"
		if h.shared("real/alpaca_en_demo.json") != "" {
			h.info.Facts["ollama prompts"] = "alpaca"
		}
		// A real Ollama on the CPU, serving its tiny random-weight model.
		srv, stop, why := lifeline.Hold(func(format string, args ...any) { h.logf("ollama: "+format, args...) },
			func(host lifeline.Host) *ollamaserver.Server {
				return ollamaserver.Start(host, ollamaserver.Options{Parallel: ollamaParallel})
			})
		if srv == nil {
			for _, r := range ollamaRows {
				h.unavailable("ollama", r, "no Ollama server: "+why)
			}
			h.unavailable(ollamaBenchGroup, ollamaBenchRow, "no Ollama server: "+why)
			return nil
		}
		defer stop()
		h.logf("ollama: %s %s at %s (started in %v, loaded in %v)", srv.Binary, srv.Version, srv.URL, srv.Timings.Start, srv.Timings.Load)
		h.info.Facts["ollama"] = srv.Version
		if err := writeBodies(h.path(prompts), h.path(bodies), math.MaxInt, srv.Model, 32); err != nil {
			return err
		}
		n, err := h.lineCounts(prompts, bodies)
		if err != nil {
			return err
		}
		const out = "tmp/ollama-gen.jsonl"
		alias := []string{srv.URL + "=$URL"}
		infer := func(name string, ours bool, extra ...string) peerSpec {
			argv := append(append([]string{"infer", "-e", srv.URL}, extra...), "--max-tokens", "32", "--progress", "0", "--force", "-o", out, prompts)
			return peerSpec{Spec: Spec{Group: "ollama", Name: name, Ours: ours, Records: n[0], Clean: []string{out}, Count: []string{out}, Alias: alias, Argv: argv}}
		}
		rows := []peerSpec{infer(ollamaRows[0], true), infer(ollamaRows[1], false, "--concurrency", "4"),
			// Ollama's answers end in a newline: curl needs no -w.
			curlClient(Spec{Group: "ollama", Name: ollamaRows[2], Records: n[1]}, srv.URL, ollamaParallel, false, bodies),
			h.nodeClient(Spec{Group: "ollama", Name: ollamaRows[3], Records: n[0]}, srv.URL, srv.Model, ollamaParallel, 32, prompts)}
		k, err := h.benchOllama(ctx, srv.URL, prompts, alias)
		if err != nil {
			return err
		}
		if k > 0 && k != ollamaParallel {
			rows = append(rows, infer(benchRunRow(k), false, "--concurrency", strconv.Itoa(k)))
		}
		return h.inTurns(ctx, h.sz.OllamaRuns, rows)
	},
}
