package infer

import (
	"bytes"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/llmsim"
	"tokenmill/lib/openai"
)

// runBench runs `infer bench` in-process with --json and returns the
// report.
func runBench(t *testing.T, limit time.Duration, args ...string) (BenchReport, result) {
	t.Helper()
	res := runInfer(t, limit, "", append([]string{"bench", "--json", "--wait-ready", "20s"}, args...)...)
	if res.code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	var rep BenchReport
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, res.stdout)
	}
	return rep, res
}

func levelAt(t *testing.T, rep BenchReport, n int) BenchLevel {
	t.Helper()
	for _, lv := range rep.Levels {
		if lv.Concurrency == n {
			return lv
		}
	}
	t.Fatalf("no level %d in %+v", n, rep.Levels)
	return BenchLevel{}
}

// TestBenchCalibration: on eight simulated servers at their calibrated
// defaults the bench measures what the production job measured: one
// request per server, about 212 tok/s in all; 48 per server, about 9,400.
// Prompts and answers are shaped like the job's (short prompts, answers of
// hundreds of tokens), since prefill takes its share of a step.
func TestBenchCalibration(t *testing.T) {
	const scale = 10
	fleet := startFleet(t, llmsim.Config{TimeScale: scale}, 8)
	rep, res := runBench(t, time.Minute, "-e", endpointsFlag(fleet.URLs()), "--concurrency", "1,48",
		"--warmup", "3s", "--duration", "15s", "--prompt-tokens", "100", "--answer-tokens", "1024",
		"--time-scale", "10")
	t.Logf("%s", res.stderr)
	for _, tt := range []struct {
		n           int
		want        float64
		inFlight    int
		minAnswered int
	}{{1, 212, 8, 1}, {48, 9400, 384, 100}} {
		lv := levelAt(t, rep, tt.n)
		if e := math.Abs(lv.TokPerSec-tt.want) / tt.want; e > 0.10 {
			t.Errorf("%d per endpoint: %.0f tok/s, the production fleet did %.0f: off by %.0f%%", tt.n, lv.TokPerSec, tt.want, 100*e)
		}
		if lv.InFlight != tt.inFlight || lv.Errors != 0 || lv.Answers < tt.minAnswered || len(lv.ByEndpoint) != 8 {
			t.Errorf("%d per endpoint: %+v", tt.n, lv)
		}
		for i, r := range lv.ByEndpoint {
			if math.Abs(r-lv.TokPerSecPerEndpoint) > 0.2*lv.TokPerSecPerEndpoint {
				t.Errorf("%d per endpoint: endpoint %d did %.0f tok/s, the mean %.0f", tt.n, i, r, lv.TokPerSecPerEndpoint)
			}
		}
		if !(0 < lv.TTFTP50 && lv.TTFTP50 <= lv.TTFTP99 && lv.TTFTP99 < lv.LatencyP50 && lv.LatencyP50 <= lv.LatencyP99) {
			t.Errorf("%d per endpoint: latencies out of order: %+v", tt.n, lv)
		}
		// Tokens and answers per second agree through the mean answer.
		if lv.RequestsPerSec <= 0 || lv.TokPerSec/lv.RequestsPerSec > 1024 {
			t.Errorf("%d per endpoint: %.2f answers/s for %.0f tok/s, answers of at most 1,024 tokens", tt.n, lv.RequestsPerSec, lv.TokPerSec)
		}
	}
	if rep.Recommended != 48 || rep.KneeFound {
		t.Errorf("throughput still climbs to 48 per endpoint, the servers' limit: knee %d (found %v), recommended %d", rep.Knee, rep.KneeFound, rep.Recommended)
	}
	if len(rep.MaxRunning) != 8 || rep.MaxRunning[0] != llmsim.DefaultMaxRunning || rep.Model != llmsim.DefaultModelName {
		t.Errorf("server figures: %+v %q", rep.MaxRunning, rep.Model)
	}
}

// TestBenchKnee: servers that run 16 requests at once queue the rest, so
// throughput stops growing at 16 per endpoint: that is the knee.
func TestBenchKnee(t *testing.T) {
	const scale = 25
	fleet := startFleet(t, llmsim.Config{TimeScale: scale, MaxRunning: 16}, 2)
	// Long answers: a slot that frees at 16 per endpoint waits for the
	// client's next request, which costs a little throughput per answer.
	rep, _ := runBench(t, time.Minute, "-e", endpointsFlag(fleet.URLs()), "--concurrency", "8,16,32",
		"--warmup", "3s", "--duration", "15s", "--answer-tokens", "1024", "--time-scale", "25")
	for _, lv := range rep.Levels {
		t.Logf("%3d per endpoint: %6.0f tok/s, TTFT p50 %.2fs", lv.Concurrency, lv.TokPerSec, lv.TTFTP50)
	}
	if rep.Knee != 16 || !rep.KneeFound || rep.Recommended != 16 {
		t.Errorf("knee %d (found %v), recommended %d; want 16", rep.Knee, rep.KneeFound, rep.Recommended)
	}
	// Past the knee requests wait in the servers' queues.
	if q, k := levelAt(t, rep, 32), levelAt(t, rep, 16); q.TTFTP50 < 2*k.TTFTP50 {
		t.Errorf("TTFT at 32 per endpoint %.2fs, at 16 %.2fs: no queueing seen", q.TTFTP50, k.TTFTP50)
	}
}

// TestBenchForecast: the bench's forecast of a run, from its sample
// prompts, against the run itself on the same fleet.
func TestBenchForecast(t *testing.T) {
	const prompts = 3000
	s := newSetup(t, llmsim.Config{TimeScale: 25}, 2, promptSet{n: prompts})
	rep, res := runBench(t, time.Minute, "-e", endpointsFlag(s.fleet.URLs()), "--concurrency", "48",
		"--warmup", "5s", "--duration", "60s", "--max-tokens", "2048", "--time-scale", "25", s.in)
	f := rep.Forecast
	if f == nil {
		t.Fatalf("no forecast: %s\n%s", rep.ForecastNote, res.stderr)
	}
	if f.Answers != prompts || f.MeanSource != "measured" || f.Concurrency != 48 || f.MaxTokens != 2048 {
		t.Errorf("forecast %+v", f)
	}
	// The run, on a fleet of the same servers sped up further; its wall
	// time in the servers' time.
	const runScale = 600
	fast := startFleet(t, llmsim.Config{TimeScale: runScale}, 2)
	start := time.Now()
	runWant(t, cli.ExitOK, "-o", s.out, s.in, "-e", endpointsFlag(fast.URLs()), "--max-tokens", "2048", "--concurrency", "48",
		"--progress-interval", "0", "--wait-ready", "20s")
	actual := time.Since(start).Seconds() * runScale
	t.Logf("forecast %.0fs (%.0f-%.0f) from %.0f±%.0f tokens at %.0f tok/s; the run took %.0fs",
		f.Seconds, f.LowSeconds, f.HighSeconds, f.MeanAnswerTokens, f.MeanAnswerSE, f.TokPerSec, actual)
	if e := math.Abs(f.Seconds-actual) / actual; e > 0.15 {
		t.Errorf("forecast %.0fs, the run took %.0fs: off by %.0f%%", f.Seconds, actual, 100*e)
	}
	if actual < 0.95*f.LowSeconds || actual > 1.05*f.HighSeconds {
		t.Errorf("the run's %.0fs is outside the forecast's range %.0f-%.0fs", actual, f.LowSeconds, f.HighSeconds)
	}
	// The bench only reads: the output directory holds the input and the run's files.
	entries, _ := os.ReadDir(s.dir)
	if len(entries) != 2 {
		t.Errorf("files after the bench and the run: %v", entries)
	}
}

// TestBenchTable: the text report, and what the bench says on stderr.
func TestBenchTable(t *testing.T) {
	fleet := startFleet(t, llmsim.Config{TimeScale: 50}, 2)
	res := runInfer(t, time.Minute, "", "bench", "-e", endpointsFlag(fleet.URLs()), "--concurrency", "1,2",
		"--warmup", "2s", "--duration", "10s", "--time-scale", "50", "--dataset-size", "100000", "--mean-answer-tokens", "800")
	if res.code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	out := res.stdout
	for _, want := range []string{
		"2 endpoints (max_running_requests 48), chat API, model " + llmsim.DefaultModelName,
		"1,000 generated prompts of 256 tokens, answers up to 256 tokens; each level 2.0s warm-up, then 10.0s measured",
		"per endpoint  in flight  answers/s  out tok/s  per endpoint  latency p50",
		"no knee up to 2 per endpoint",
		"recommended: --concurrency 2 (or measure higher levels with --concurrency)",
		"forecast: 100,000 answers x 800±0 tokens (given) at ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
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
	fleet := startFleet(t, llmsim.Config{TimeScale: 50, Faults: llmsim.Faults{FailRate: 1}}, 1)
	res := runInfer(t, time.Minute, "", "bench", "--json", "-e", endpointsFlag(fleet.URLs()), "--concurrency", "2",
		"--warmup", "1s", "--duration", "5s", "--time-scale", "50")
	if res.code != cli.ExitFailure || !strings.Contains(res.stderr, "no tokens came back") || !strings.Contains(res.stderr, "HTTP 500") {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	var rep BenchReport
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
			res := runInfer(t, 10*time.Second, "", append([]string{"bench"}, tt.args...)...)
			if res.code != cli.ExitUsage || !strings.Contains(res.stderr, tt.want) {
				t.Fatalf("exit %d, want %d with %q:\n%s", res.code, cli.ExitUsage, tt.want, res.stderr)
			}
		})
	}
}

// The default command stays generation: infer [flags] [files], infer
// generate [flags] [files], and help naming both commands.
func TestCommands(t *testing.T) {
	s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 20})
	runWant(t, cli.ExitOK, append([]string{"generate"}, s.args()...)...)
	if acc := s.check(t, 1); acc.ok != 20 {
		t.Fatalf("infer generate: %d answers", acc.ok)
	}
	res := runInfer(t, 10*time.Second, "", "--help")
	help := strings.Join(strings.Fields(res.stdout), " ")
	for _, want := range []string{"generate Generate answers", "bench Measure the fleet", "infer generate --help"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q:\n%s", want, res.stdout)
		}
	}
	res = runInfer(t, 10*time.Second, "", "bench", "--help")
	if !strings.Contains(res.stdout, "knee") || !strings.Contains(res.stdout, "--concurrency") {
		t.Errorf("bench --help:\n%s", res.stdout)
	}
}

func TestLadderAndKnee(t *testing.T) {
	if got := ladder([]int{48, 37, 0, 48}); !slices.Equal(got, []int{1, 2, 4, 8, 16, 32, 37, 48}) {
		t.Errorf("ladder: %v", got)
	}
	if got, err := parseLevels(" 48,1, 8,8"); err != nil || !slices.Equal(got, []int{1, 8, 48}) {
		t.Errorf("parseLevels: %v %v", got, err)
	}
	lv := func(tps ...float64) []BenchLevel {
		out := make([]BenchLevel, len(tps))
		for i, x := range tps {
			out[i] = BenchLevel{Concurrency: 1 << i, TokPerSec: x}
		}
		return out
	}
	for _, tt := range []struct {
		tps   []float64
		want  int
		found bool
	}{
		{[]float64{100, 200, 400, 410, 800}, 2, true}, // the first flat step counts
		{[]float64{100, 200, 400, 800}, 3, false},
		{[]float64{100, 104}, 0, true},
		{[]float64{100, 90, 200}, 0, true}, // a drop is no gain
		{[]float64{100}, 0, false},
	} {
		if k, found := knee(lv(tt.tps...)); k != tt.want || found != tt.found {
			t.Errorf("%v: knee %d %v, want %d %v", tt.tps, k, found, tt.want, tt.found)
		}
	}
}

// TestBenchWindow: tokens count in the window they arrive in, whether the
// server counts them in each event or only at the end.
func TestBenchWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := clock{measure: t0.Add(10 * time.Second), slice: time.Second}
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	inWindow := func(r *reqStats, ratio float64) (in, sofar float64) {
		per, sofar := r.tokensPer(ratio)
		for _, a := range r.arrivals {
			in += float64(a.amount) * per
		}
		return in, sofar
	}
	// A server that counts (continuous usage): 4 tokens before the window, 6 in it.
	exact := &reqStats{sent: t0, total: -1}
	for i, s := range []float64{2, 5, 9, 11, 12, 15} {
		exact.event(at(s), c, openai.Delta{Text: "xx", CompletionTokens: []int{1, 2, 4, 6, 8, 10}[i]})
	}
	exact.event(at(15), c, openai.Delta{FinishReason: "stop", CompletionTokens: 10})
	if in, sofar := inWindow(exact, 0.25); in != 6 || sofar != 10 || exact.finish != "stop" || !exact.first.Equal(at(2)) {
		t.Errorf("exact: %v in the window, %v in all, %+v", in, sofar, exact)
	}
	// Slices 1, 2 and 5 of the window.
	if want := []arrival{{1, 2}, {2, 2}, {5, 2}}; len(exact.arrivals) != 3 || exact.arrivals[0] != want[0] || exact.arrivals[2] != want[2] {
		t.Errorf("arrivals %v, want %v", exact.arrivals, want)
	}
	// A server that only says at the end: text apportioned.
	late := &reqStats{sent: t0, total: -1}
	late.event(at(1), c, openai.Delta{CompletionTokens: -1}) // the role chunk
	late.event(at(8), c, openai.Delta{Text: "abcd", CompletionTokens: -1})
	late.event(at(12), c, openai.Delta{Text: "efghijkl", CompletionTokens: -1, FinishReason: "length"})
	late.event(at(12), c, openai.Delta{CompletionTokens: 6})
	if in, sofar := inWindow(late, 0.25); in != 4 || sofar != 6 || !late.first.Equal(at(8)) {
		t.Errorf("late: %v in the window, %v in all", in, sofar)
	}
	// Cut off before it said: the level's ratio.
	cut := &reqStats{sent: t0, total: -1}
	cut.event(at(11), c, openai.Delta{Text: "abcdefgh", CompletionTokens: -1})
	if in, sofar := inWindow(cut, 0.5); in != 4 || sofar != 4 {
		t.Errorf("cut: %v in the window, %v in all", in, sofar)
	}
}

// TestSlope: the rate of a steady stream, whatever a stall does at the
// window's edges.
func TestSlope(t *testing.T) {
	steady := make([]float64, 100)
	for i := range steady {
		steady[i] = 50
	}
	burst := slices.Clone(steady)
	burst[0] += 500 // tokens held up before the window arrive in its first slice
	burst[99] = 0   // and a stall at its end holds some back
	for _, tt := range []struct {
		name   string
		counts []float64
	}{{"steady", steady}, {"stalls at the edges", burst}} {
		if r, ok := slope(tt.counts, 0.5); !ok || math.Abs(r-100) > 2 {
			t.Errorf("%s: rate %v %v, want 100/s", tt.name, r, ok)
		}
	}
	if _, ok := slope([]float64{1, 2}, 1); ok {
		t.Error("a rate from two slices")
	}
}

func TestBenchPromptText(t *testing.T) {
	a, b := benchPromptText(1, 256), benchPromptText(2, 256)
	if a == b || len(a) < 1024 || len(a) > 1100 || !strings.HasPrefix(a, "Request 1. ") {
		t.Errorf("prompt texts: %d bytes %q", len(a), a[:40])
	}
}

// The real binary: a JSON report on stdout; SIGINT ends it with the
// levels measured so far and 130.
func TestBenchBinary(t *testing.T) {
	t.Parallel()
	urls := startSimBinary(t, 2, "--time-scale", "50")
	args := []string{"bench", "--json", "-e", strings.Join(urls, ","), "--warmup", "1s", "--time-scale", "50"}

	var stdout, stderr bytes.Buffer
	cmd := exec.Command(inferBin, append(args, "--concurrency", "1,4", "--duration", "5s")...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var rep BenchReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || len(rep.Levels) != 2 || rep.Levels[1].TokPerSec <= rep.Levels[0].TokPerSec {
		t.Fatalf("report %+v %v\n%s", rep, err, stdout.String())
	}

	stdout.Reset()
	stderr.Reset()
	cmd = exec.Command(inferBin, append(args, "--concurrency", "1,2,4", "--duration", "1m")...)
	cmd.Stdout = &stdout
	var mu sync.Mutex
	cmd.Stderr = writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return stderr.Write(p)
	})
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the second level", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(stderr.String(), "level 2/3")
	})
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != cli.ExitInterrupted {
		t.Fatalf("exit %d (%v), want 130\n%s", code, err, stderr.String())
	}
	rep = BenchReport{}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || len(rep.Levels) != 1 || rep.Levels[0].Concurrency != 1 {
		t.Fatalf("after SIGINT: report %+v %v\n%s", rep, err, stdout.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// --requests ends a level once that many answers finished in its window.
func TestBenchRequests(t *testing.T) {
	fleet := startFleet(t, llmsim.Config{TimeScale: 50}, 2)
	rep, _ := runBench(t, time.Minute, "-e", endpointsFlag(fleet.URLs()), "--concurrency", "8",
		"--warmup", "1s", "--duration", "1h", "--requests", "20", "--answer-tokens", "64", "--time-scale", "50")
	lv := levelAt(t, rep, 8)
	if lv.Answers < 20 || lv.Seconds > 600 || lv.TokPerSec <= 0 {
		t.Errorf("level %+v: want it ended after 20 answers, well before the hour", lv)
	}
}
