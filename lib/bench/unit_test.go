package bench

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/fleet"
	"tokenmill/lib/openai"
	"tokenmill/lib/tokens"
)

func TestLadderAndKnee(t *testing.T) {
	if got := ladder([]int{48, 37, 0, 48}); !slices.Equal(got, []int{1, 2, 4, 8, 16, 32, 37, 48}) {
		t.Errorf("ladder: %v", got)
	}
	if got, err := parseLevels(" 48,1, 8,8"); err != nil || !slices.Equal(got, []int{1, 8, 48}) {
		t.Errorf("parseLevels: %v %v", got, err)
	}
	lv := func(tps ...float64) []Level {
		out := make([]Level, len(tps))
		for i, x := range tps {
			out[i] = Level{Concurrency: 1 << i, TokPerSec: x, Answers: int(x)}
		}
		return out
	}
	for _, tt := range []struct {
		tps   []float64
		want  int
		found bool
	}{
		{[]float64{100, 200, 400, 410, 800}, 4, false}, // a flat step does not end the climb
		{[]float64{100, 200, 400, 800}, 3, false},
		{[]float64{100, 104}, 0, true},
		{[]float64{100, 90, 200}, 2, false}, // nor does a low one
		{[]float64{100, 200, 400, 390, 405}, 2, true},
		{[]float64{100, 0, 0}, 0, false}, // levels with only errors never qualify
		{[]float64{0, 0}, -1, false},
		{[]float64{100}, 0, false},
	} {
		if k, found := knee(lv(tt.tps...)); k != tt.want || found != tt.found {
			t.Errorf("%v: knee %d %v, want %d %v", tt.tps, k, found, tt.want, tt.found)
		}
	}
	// Tokens without a finished answer (streams still going when the
	// window closed) never make a level the recommendation.
	unfinished := []Level{{Concurrency: 1, TokPerSec: 900}, {Concurrency: 2, TokPerSec: 400, Answers: 3}}
	if k, _ := knee(unfinished); k != 1 {
		t.Errorf("a level with tokens but no answer was chosen: knee %d", k)
	}
	if k, _ := knee(unfinished[:1]); k != -1 {
		t.Errorf("the only level has no answer: knee %d, want none", k)
	}
}

// On a server whose output falls as more are sent at once (a CPU: 1
// gives the most), the ladder holds once two levels fell under the best,
// the knee is the best level, and steady levels are taken over unsteady
// ones (an unsteady 8 that caught a burst is not the knee); when none is
// steady the report says it could not measure, and the forecast's range
// spans the knee's two halves.
func TestBenchOnAFallingServer(t *testing.T) {
	cpu := []Level{{Concurrency: 1, TokPerSec: 67, Answers: 9}, {Concurrency: 2, TokPerSec: 60, Answers: 8}, {Concurrency: 4, TokPerSec: 39, Answers: 5}}
	if why := falling(cpu); why != "the output fell as more were sent at once (2 and 4 per endpoint gave 60 and 39 tok/s, 1 gave 67)" {
		t.Errorf("falling: %q", why)
	}
	for _, tt := range []struct {
		tps  []float64
		want bool
	}{{[]float64{67, 66, 39}, false}, {[]float64{67, 60}, false}, {[]float64{10, 20, 40}, false}, {[]float64{67, 120, 100, 90}, true}} {
		var lv []Level
		for i, x := range tt.tps {
			lv = append(lv, Level{Concurrency: 1 << i, TokPerSec: x, Answers: 3})
		}
		if got := falling(lv) != ""; got != tt.want {
			t.Errorf("%v: falling %v, want %v", tt.tps, got, tt.want)
		}
	}
	mixed := []Level{{Concurrency: 1, TokPerSec: 67, Answers: 9}, {Concurrency: 2, TokPerSec: 50, Answers: 7}, {Concurrency: 8, TokPerSec: 90, Answers: 12, Unsteady: true}}
	if k, _ := knee(mixed); k != 0 {
		t.Errorf("knee %d among a steady 1 and an unsteady 8, want the steady 1", k)
	}
	// An unsteady level whose slower half beat every steady one gave more
	// whatever it caught: on a CPU server 1 at a time, unsteady, and a
	// steady 4 at a third of its rate.
	cpuUnsteady := []Level{{Concurrency: 1, TokPerSec: 1084, Answers: 900, Unsteady: true, Halves: []float64{900, 1250}},
		{Concurrency: 2, TokPerSec: 428, Answers: 400, Unsteady: true, Halves: []float64{300, 550}}, {Concurrency: 4, TokPerSec: 334, Answers: 300}}
	if k, _ := knee(cpuUnsteady); k != 0 {
		t.Errorf("knee %d, want the unsteady 1 whose slower half beat the steady 4", k)
	}
	// A level settled, so the report does not say it could not measure.
	cpuRep := &Report{Levels: slices.Clone(cpuUnsteady), Held: "the output fell", AnswerTokens: 32}
	cpuRep.finish(&benchRun{cfg: planConfig(100, 32), maxRunning: []int{0}})
	if cpuRep.Unsteady || cpuRep.Recommended != 1 {
		t.Errorf("report %+v: unsteady or not recommending the unsteady 1", cpuRep)
	}
	cpuUnsteady[0].Halves = []float64{300, 1900}
	if k, _ := knee(cpuUnsteady); k != 2 {
		t.Errorf("knee %d, want the steady 4 over an unsteady 1 whose slower half fell under it", k)
	}
	for i := range mixed {
		mixed[i].Unsteady = true
	}
	if k, _ := knee(mixed); k != 2 {
		t.Errorf("knee %d with none steady, want the best measured", k)
	}
	rep := &Report{Levels: []Level{{Concurrency: 1, TokPerSec: 67, Answers: 9, Unsteady: true, Halves: []float64{50, 84}}, {Concurrency: 2, TokPerSec: 40, Answers: 5, Unsteady: true, Halves: []float64{30, 50}}},
		Held: "the output fell", AnswerTokens: 32}
	rep.finish(&benchRun{cfg: planConfig(100, 32), maxRunning: []int{0}})
	if !rep.Unsteady || rep.Recommended != 1 || !rep.KneeFound || rep.Forecast == nil {
		t.Fatalf("report %+v", rep)
	}
	if f := rep.Forecast; !(f.LowSeconds <= 100*32/84.0 && f.HighSeconds >= 100*32/50.0) {
		t.Errorf("forecast %+v: the range does not span the halves' rates (%.0f-%.0f s)", f, 100*32/84.0, 100*32/50.0)
	}
	var b strings.Builder
	rep.write(&b, false)
	for _, want := range []string{"held: the output fell; the levels above were not measured", "could not measure steadily: ", "recommended: --concurrency 1"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestBenchWindow: tokens count in the window they arrive in, whether the
// server counts them in each event or only at the end.
func TestBenchWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := window{measure: t0.Add(10 * time.Second), slice: time.Second}
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

// Ollama's completion chunks carry a usage of zeros each, and the real
// count comes after the finish: the text is what is counted as it
// streams, not the zeros.
func TestBenchWindowZeroUsage(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := window{measure: t0, slice: time.Second}
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	r := &reqStats{sent: t0, total: -1}
	for i := 1; i <= 4; i++ {
		r.event(at(float64(i)), c, openai.Delta{Text: "abcd", CompletionTokens: 0})
	}
	r.event(at(5), c, openai.Delta{FinishReason: "length", CompletionTokens: 0})
	if r.exact || r.usage {
		t.Fatalf("zeros taken as counts: exact %v, usage %v", r.exact, r.usage)
	}
	r.event(at(5), c, openai.Delta{CompletionTokens: 4})
	per, sofar := r.tokensPer(1) // the answer's own ratio wins over the level's
	in := 0.0
	for _, a := range r.arrivals {
		in += float64(a.amount) * per
	}
	if !r.usage || sofar != 4 || in != 4 || r.arrivals[0].slice != 1 {
		t.Errorf("usage %v, %v tokens, arrivals %v", r.usage, sofar, r.arrivals)
	}
	// A server that counts (vLLM's continuous usage) says one or more with
	// its first text.
	v := &reqStats{sent: t0, total: -1}
	v.event(at(1), c, openai.Delta{CompletionTokens: 0}) // the role chunk
	v.event(at(2), c, openai.Delta{Text: "ab", CompletionTokens: 1})
	if !v.exact {
		t.Error("continuous usage not taken as counts")
	}
}

// No figure of the report is ever NaN or infinite, in the table or the
// JSON, whatever the levels: nothing answered, a window of no length, a
// level with only errors, figures that came out NaN.
func TestReportFinite(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	rep := &Report{Endpoints: []string{"http://h:1"}, MaxRunning: []int{0}, Warmup: nan, Duration: inf, Levels: []Level{
		{Concurrency: 1, InFlight: 1},
		{Concurrency: 2, InFlight: 2, Seconds: nan, TokPerSec: nan, TokPerSecPerEndpoint: inf, ByEndpoint: []float64{nan}, Halves: []float64{inf, nan},
			LatencyP50: inf, LatencyP99: nan, TTFTP50: -inf, TTFTP99: nan, RequestsPerSec: inf, RunSeconds: nan},
		{Concurrency: 4, InFlight: 4, Errors: 9, FirstError: "HTTP 500: boom"},
	}}
	rep.Forecast = &Forecast{Answers: 10, MeanAnswerTokens: nan, MeanAnswerSE: inf, TokPerSec: nan, Seconds: inf, LowSeconds: nan, HighSeconds: inf}
	c := benchConfig()
	c.Plan.Answers = 100
	rep.finish(&benchRun{cfg: c})
	var text, js strings.Builder
	if err := rep.write(&text, false); err != nil {
		t.Fatal(err)
	}
	if err := rep.write(&js, true); err != nil {
		t.Fatalf("JSON: %v", err)
	}
	for _, out := range []string{text.String(), js.String()} {
		for _, bad := range []string{"NaN", "Inf", "nan", "inf"} {
			if strings.Contains(out, bad) {
				t.Errorf("%q printed:\n%s", bad, out)
			}
		}
	}
	if !strings.Contains(text.String(), "all 9 failed") || !strings.Contains(text.String(), "recommended: nothing: no level answered") {
		t.Errorf("table:\n%s", text.String())
	}
	var anyJSON any
	if err := json.Unmarshal([]byte(js.String()), &anyJSON); err != nil {
		t.Fatal(err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				t.Errorf("JSON holds %v", x)
			}
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(anyJSON)
}

// A level whose two halves disagree by more than the margin is unsteady;
// the recommendation takes the best level, so one low level does not end
// the climb early.
func TestLevelSteady(t *testing.T) {
	for _, tt := range []struct {
		halves []float64
		steady bool
	}{{nil, true}, {[]float64{100, 104}, true}, {[]float64{100, 106}, false}, {[]float64{0, 0}, true}, {[]float64{50, 0}, false}} {
		lv := Level{Halves: tt.halves}
		if lv.steady() != tt.steady {
			t.Errorf("halves %v: steady %v", tt.halves, lv.steady())
		}
	}
}

// TestConfig: the flags become the Config once: the default flags give
// the Config the replayed benches start from, and the bench's max_tokens
// is --answer-tokens, else, with sample prompts, the run's --max-tokens,
// else 256.
func TestConfig(t *testing.T) {
	flags := func() *Bench {
		return &Bench{ServerFlags: fleet.ServerFlags{Endpoints: "127.0.0.1:30000-30001", API: openai.APIChat},
			FitFlags: tokens.FitFlags{FitContext: true, ContextMargin: 8, MinAnswerTokens: 32},
			Duration: 30 * time.Second, Warmup: 10 * time.Second, WaitReady: 10 * time.Minute,
			PromptTokens: 256, IgnoreEOS: true, Sample: 1000, TimeScale: 1}
	}
	cfg, err := flags().config(&cli.Env{})
	if err != nil {
		t.Fatal(err)
	}
	want := benchConfig()
	if len(cfg.Targets) != 2 || cfg.API != want.API || cfg.Warmup != want.Warmup || cfg.Duration != want.Duration ||
		cfg.PromptTokens != want.PromptTokens || cfg.AnswerTokens != want.AnswerTokens || cfg.IgnoreEOS != want.IgnoreEOS ||
		cfg.Sample != want.Sample || cfg.TimeScale != want.TimeScale || cfg.Levels != nil || cfg.Plan != (Plan{}) || cfg.Mix != nil {
		t.Errorf("the default flags' config %+v, want as %+v", cfg, want)
	}
	ptr := func(n int) *int { return &n }
	for _, tt := range []struct {
		name          string
		answer, max   *int
		inputs        []string
		wantAnswer    int
		wantMaxTokens int
	}{
		{"generated", nil, nil, nil, 256, 0},
		{"generated, --max-tokens", nil, ptr(2048), nil, 256, 2048},
		{"sample", nil, nil, []string{"p.jsonl"}, 256, 0},
		{"sample, --max-tokens", nil, ptr(2048), []string{"p.jsonl"}, 2048, 2048},
		{"sample, --answer-tokens and --max-tokens", ptr(100), ptr(2048), []string{"p.jsonl"}, 100, 2048},
		{"sample, --answer-tokens 0", ptr(0), nil, []string{"p.jsonl"}, 0, 0},
	} {
		c := flags()
		c.AnswerTokens, c.MaxTokens, c.Inputs, c.Concurrency, c.DatasetSize = tt.answer, tt.max, tt.inputs, "8, 1,8", 5000
		cfg, err := c.config(&cli.Env{})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if cfg.AnswerTokens != tt.wantAnswer || cfg.Plan.MaxTokens != tt.wantMaxTokens || cfg.Plan.Answers != 5000 || !slices.Equal(cfg.Levels, []int{1, 8}) {
			t.Errorf("%s: answer tokens %d, plan %+v, levels %v; want %d, max_tokens %d", tt.name, cfg.AnswerTokens, cfg.Plan, cfg.Levels, tt.wantAnswer, tt.wantMaxTokens)
		}
	}
}
