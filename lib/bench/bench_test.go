package bench

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
)

// The bench through the real HTTP path, on a simulated fleet. These tests
// check what the bench reports of the fleet and how it behaves; what its
// figures are worth is checked on virtual time (replay_test.go), where a
// loaded machine cannot move them.

// On eight servers the report names every endpoint, the servers'
// max_running_requests and model, and measures every level on all eight.
// (What the figures are worth is for the replayed tests: on a loaded
// machine a short window may see no token at all.)
func TestBenchReportsTheFleet(t *testing.T) {
	_, endpoints := simFleet(t, llmsim.Config{TimeScale: 50}, 8)
	rep, _ := runBench(t, time.Minute, "-e", endpoints, "--concurrency", "1,4",
		"--warmup", "1s", "--duration", "5s", "--prompt-tokens", "100", "--answer-tokens", "64", "--time-scale", "50")
	if len(rep.MaxRunning) != 8 || rep.MaxRunning[0] != llmsim.DefaultMaxRunning || rep.Model != llmsim.DefaultModelName || len(rep.Endpoints) != 8 {
		t.Errorf("server figures: %+v %q %v", rep.MaxRunning, rep.Model, rep.Endpoints)
	}
	for _, n := range []int{1, 4} {
		lv := levelAt(t, rep, n)
		if lv.InFlight != 8*n || lv.Errors != 0 || len(lv.ByEndpoint) != 8 {
			t.Errorf("%d per endpoint: %+v", n, lv)
		}
	}
}

// With sample prompts the bench forecasts the run from their answers and
// the input's size, and writes nothing.
func TestBenchSamplePrompts(t *testing.T) {
	const prompts = 300
	dir := t.TempDir()
	in := writePrompts(t, dir, prompts)
	_, endpoints := simFleet(t, llmsim.Config{TimeScale: 50}, 2)
	rep, res := runBench(t, time.Minute, "-e", endpoints, "--concurrency", "48",
		"--warmup", "5s", "--duration", "120s", "--max-tokens", "2048", "--time-scale", "50", in)
	f := rep.Forecast
	if f == nil {
		t.Fatalf("no forecast: %s\n%s", rep.ForecastNote, res.stderr)
	}
	if f.Answers != prompts || f.MeanSource != "measured" || f.Concurrency != 48 || f.MaxTokens != 2048 || rep.AnswerTokens != 2048 {
		t.Errorf("forecast %+v, answer tokens %d", f, rep.AnswerTokens)
	}
	if rep.PromptNote != "300 sample prompts" {
		t.Errorf("prompts: %q", rep.PromptNote)
	}
	// The bench only reads: the directory holds the input alone.
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("files after the bench: %v", entries)
	}
}

// TestBenchTable: the text report, and what the bench says on stderr.
func TestBenchTable(t *testing.T) {
	_, endpoints := simFleet(t, llmsim.Config{TimeScale: 50}, 2)
	res := runBenchArgs(t, time.Minute, "-e", endpoints, "--concurrency", "1,2",
		"--warmup", "2s", "--duration", "10s", "--time-scale", "50", "--dataset-size", "100000", "--mean-answer-tokens", "800")
	if res.code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	out := res.stdout
	hasAll(t, "the report", out,
		"2 endpoints (max_running_requests 48), chat API, model "+llmsim.DefaultModelName,
		"1,000 generated prompts of 256 tokens, answers up to 256 tokens; each level 2.0s warm-up, then 10.0s measured",
		"per endpoint  in flight  answers/s  out tok/s  per endpoint  latency p50",
		"recommended: --concurrency ",
		"forecast: 100,000 answers x 800±0 tokens (given) at ")
	if rows := strings.Count(out, "\n"); rows < 8 {
		t.Errorf("report too short:\n%s", out)
	}
	if strings.Contains(out, `"output"`) || strings.Contains(out, "{") {
		t.Errorf("the report has records or JSON in it:\n%s", out)
	}
	if !strings.Contains(res.stderr, "level 2/2: 2 per endpoint (4 in flight)") {
		t.Errorf("stderr does not follow the levels:\n%s", res.stderr)
	}
}

func TestBenchFailures(t *testing.T) {
	_, endpoints := simFleet(t, llmsim.Config{TimeScale: 50, Faults: llmsim.Faults{FailRate: 1}}, 1)
	res := runBenchArgs(t, time.Minute, "--json", "-e", endpoints, "--concurrency", "2",
		"--warmup", "1s", "--duration", "5s", "--time-scale", "50")
	if res.code != cli.ExitFailure || !strings.Contains(res.stderr, "no answer finished at any level") || !strings.Contains(res.stderr, "HTTP 500") {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	var rep Report
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || len(rep.Levels) != 1 || rep.Levels[0].Errors == 0 {
		t.Errorf("report %+v %v", rep, err)
	}
}

func TestBenchUsage(t *testing.T) {
	fleet := []string{"-e", "127.0.0.1:1"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no endpoints", nil, "no endpoints given"},
		{"zero level", append([]string{"--concurrency", "0,8"}, fleet...), "--concurrency"},
		{"not a level", append([]string{"--concurrency", "8,x"}, fleet...), "--concurrency"},
		{"no duration", append([]string{"--duration", "0s"}, fleet...), "--duration"},
		{"unlimited generated answers", append([]string{"--answer-tokens", "0"}, fleet...), "needs sample prompts"},
		{"bad extra body", append([]string{"--extra-body", "[1]"}, fleet...), "--extra-body"},
		{"generate flag", append([]string{"--resume"}, fleet...), "unknown flag --resume"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runBenchArgs(t, 10*time.Second, tt.args...)
			if res.code != cli.ExitUsage || !strings.Contains(res.stderr, tt.want) {
				t.Fatalf("exit %d, want %d with %q:\n%s", res.code, cli.ExitUsage, tt.want, res.stderr)
			}
		})
	}
}

// --requests ends a level once that many answers finished in its window:
// with an hour to measure, the bench returns within the test's minute.
func TestBenchRequests(t *testing.T) {
	_, endpoints := simFleet(t, llmsim.Config{TimeScale: 50}, 2)
	rep, _ := runBench(t, time.Minute, "-e", endpoints, "--concurrency", "8",
		"--warmup", "1s", "--duration", "100h", "--requests", "20", "--answer-tokens", "64", "--time-scale", "50")
	if lv := levelAt(t, rep, 8); lv.Answers < 20 || lv.TokPerSec <= 0 {
		t.Errorf("level %+v: want it ended after 20 answers", lv)
	}
}

// The real binaries: a JSON report on stdout; SIGINT ends it with the
// levels measured so far and 130.
func TestBenchBinary(t *testing.T) {
	t.Parallel()
	ready := filepath.Join(t.TempDir(), "urls")
	testbin.Start(t, "llmsim", "--listen", "127.0.0.1:0,127.0.0.1:0", "--ready-file", ready, "--time-scale", "50")
	var urls []string
	for deadline := time.Now().Add(10 * time.Second); len(urls) != 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("llmsim did not write its ready file within 10s")
		}
		b, _ := os.ReadFile(ready)
		urls = strings.Fields(string(b))
	}
	args := []string{"bench", "--json", "-e", strings.Join(urls, ","), "--warmup", "1s", "--time-scale", "50", "--answer-tokens", "64"}

	// Levels end on answers, not on the clock (--requests): at 50x a
	// window of seconds is a tenth of a second of a loaded machine's time.
	args = append(args, "--duration", "100h", "--requests", "4")
	r := testbin.Run(t, "", nil, nil, "infer", append(args, "--concurrency", "1,4")...)
	if r.Code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	var rep Report
	if err := json.Unmarshal(r.Stdout, &rep); err != nil || len(rep.Levels) != 2 || rep.Levels[0].Concurrency != 1 || rep.Levels[1].Concurrency != 4 {
		t.Fatalf("report %+v %v\n%s", rep, err, r.Stdout)
	}

	p := testbin.Start(t, "infer", append(args, "--concurrency", "1,2,4")...)
	p.WaitFor(t, 30*time.Second, "level 2/3")
	p.Signal(t, syscall.SIGINT)
	r = p.Wait(t, 30*time.Second)
	if r.Code != cli.ExitInterrupted {
		t.Fatalf("exit %d, want 130\n%s", r.Code, r.Stderr)
	}
	rep = Report{}
	if err := json.Unmarshal(r.Stdout, &rep); err != nil || len(rep.Levels) != 1 || rep.Levels[0].Concurrency != 1 {
		t.Fatalf("after SIGINT: report %+v %v\n%s", rep, err, r.Stdout)
	}
}

// infer bench --help is the bench's own help.
func TestBenchHelp(t *testing.T) {
	r := testbin.Run(t, "", nil, nil, "infer", "bench", "--help")
	if r.Code != cli.ExitOK || !strings.Contains(string(r.Stdout), "knee") || !strings.Contains(string(r.Stdout), "--concurrency") {
		t.Errorf("bench --help: exit %d\n%s", r.Code, r.Stdout)
	}
}

// A streamed answer read to its [DONE] leaves its connection open for the
// next request: the bench pays no new connection per request, which the
// run it forecasts does not pay either. Counted by a TCP relay in front of
// the server.
func TestBenchReusesConnections(t *testing.T) {
	_, endpoint := simFleet(t, llmsim.Config{TimeScale: 50}, 1)
	rl := startRelay(t, endpoint)
	runBench(t, time.Minute, "-e", rl.URL, "--concurrency", "2",
		"--warmup", "5s", "--duration", "20s", "--prompt-tokens", "50", "--answer-tokens", "16", "--time-scale", "50")
	// The durations are the simulator's (50x): half a second of real time.
	// Every request the bench sent counts, warm-up included, so that a
	// loaded machine that answers few in the window still tells.
	n, reqs := rl.Accepted.Load(), rl.posts.Load()
	if reqs < 12 {
		t.Fatalf("only %d requests through the relay: too few to tell", reqs)
	}
	// The probes and model list take a few connections of their own; the
	// level's two workers keep one each.
	t.Logf("%d connections for %d requests", n, reqs)
	if n > 10 {
		t.Errorf("%d connections for %d requests: a new connection per request", n, reqs)
	}
}
