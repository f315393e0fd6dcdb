package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/fakeclock"
	"tokenmill/internal/llmsim"
	"tokenmill/internal/simfleet"
	"tokenmill/lib/fleet"
	"tokenmill/lib/openai"
)

// The bench's measurements and forecast on virtual time: the simulator's
// scheduler model (internal/simfleet) serves the bench's requests, the bench's
// own arithmetic turns the streamed tokens into its figures, and a clock
// that only the test moves stands in for the wall. The same figures come
// out on every run, however loaded the machine.

var epoch = time.Unix(1_700_000_000, 0)

// simPrompt is a prompt as the simulator sees it: its tokens, and how
// long its answer is before any max_tokens; max is its own max_tokens
// (an arm's), 0 for the bench's or the run's; arm is the arm the bench
// drew for it under --mix (1 + its index, 0: none).
type simPrompt struct{ tokens, natural, max, arm int }

func chatPrompt(system, user string) simPrompt {
	var p llmsim.Prompt
	if system != "" {
		p.Messages = append(p.Messages, llmsim.Message{Role: "system", Content: system})
	}
	p.Messages = append(p.Messages, llmsim.Message{Role: "user", Content: user})
	h, err := strconv.ParseUint(llmsim.PromptDigest(p), 16, 64)
	if err != nil {
		panic(err)
	}
	return simPrompt{tokens: llmsim.PromptTokens(&p), natural: llmsim.NaturalLength(h, 0)}
}

// seq is the sequence the simulator makes of p under max_tokens limit (0:
// none), as its handler does.
func (p simPrompt) seq(limit int, ref any) *llmsim.Seq {
	lim := max(llmsim.DefaultContextLength-p.tokens-1, 1)
	if p.max > 0 {
		limit = p.max
	}
	if limit > 0 {
		lim = min(lim, limit)
	}
	s := &llmsim.Seq{PromptTokens: p.tokens, Target: p.natural, End: "stop", Ref: ref}
	if p.natural > lim {
		s.Target, s.End = lim, "length"
	}
	return s
}

// generatedPrompts are the bench's own prompts of c.
func generatedPrompts(c *Config) []simPrompt {
	out := make([]simPrompt, c.Sample)
	for k := range out {
		out[k] = chatPrompt("", benchPromptText(k, c.PromptTokens))
	}
	return out
}

// samplePrompts are the prompt records writePrompts writes.
func samplePrompts(n int) []simPrompt {
	out := make([]simPrompt, n)
	for i := range out {
		out[i] = chatPrompt("Be brief.", promptText(i))
	}
	return out
}

// benchConfig is the Config of the bench's default flags, for a bench
// built in a test. With sample prompts and --max-tokens, AnswerTokens is
// that --max-tokens, as Bench.answerTokens has it.
func benchConfig() *Config {
	return &Config{API: openai.APIChat, Duration: 30 * time.Second, Warmup: 10 * time.Second,
		PromptTokens: 256, AnswerTokens: defaultAnswerTokens, IgnoreEOS: true, Sample: 1000, TimeScale: 1}
}

// planConfig forecasts a run of answers answers of mean tokens each, the
// bench asking with its default max_tokens.
func planConfig(answers int64, mean float64) *Config {
	return &Config{AnswerTokens: defaultAnswerTokens, Plan: Plan{Answers: answers, MeanAnswerTokens: mean}}
}

// replayBench runs the bench's levels for c on a virtual fleet of
// endpoints servers of maxRunning slots each, sending the prompts in
// turn, and returns its report as Run writes it.
func replayBench(c *Config, endpoints, maxRunning int, prompts []simPrompt, levels ...int) *Report {
	return replayBenchCtx(c, endpoints, maxRunning, 0, prompts, levels...)
}

// replayBenchCtx is replayBench on servers that state their model's
// context (0: none).
func replayBenchCtx(c *Config, endpoints, maxRunning, context int, prompts []simPrompt, levels ...int) *Report {
	fake := fakeclock.New(epoch)
	r := &benchRun{cfg: c, clk: fake, eps: make([]*fleet.Client, endpoints), context: context}
	for i := 0; i < endpoints; i++ {
		r.maxRunning = append(r.maxRunning, maxRunning)
		r.urls = append(r.urls, fmt.Sprintf("http://sim:%d", 30000+i))
	}
	arms := make([]int, len(prompts))
	for i, p := range prompts {
		arms[i] = p.arm
	}
	r.setArms(arms)
	rep := r.report(llmsim.DefaultModelName)
	rep.PromptNote = "replayed prompts"
	for _, n := range levels {
		rep.Levels = append(rep.Levels, replayLevel(r, fake, n, prompts))
	}
	rep.finish(r)
	return rep
}

// replayLevel is benchRun.level on virtual time: n requests in flight on
// every endpoint, their streamed tokens counted as they arrive, each
// level on servers that start idle.
func replayLevel(r *benchRun, fake *fakeclock.Clock, n int, prompts []simPrompt) Level {
	lv := r.newLevel(n)
	start := fake.Now()
	sim := simfleet.Uniform(len(r.eps), llmsim.DefaultTiming(), r.maxRunning[0])
	limit := r.cfg.AnswerTokens
	var sent []*reqStats
	sim.Keep(n, func(e int, at time.Duration) (*llmsim.Seq, bool) {
		k := (r.next.Add(1) - 1) % uint64(len(prompts))
		rs := &reqStats{ep: e, sent: start.Add(at), total: -1, arm: r.armOf(int(k))}
		sent = append(sent, rs)
		return prompts[k].seq(limit, rs), true
	}, func(st simfleet.Step) bool {
		at := start.Add(st.At)
		if at.After(lv.stopAt) || lv.isEnded() {
			return false
		}
		fake.Set(at)
		for _, p := range st.Running {
			lv.event(p.Seq.Ref.(*reqStats), at, openai.Delta{Text: " w", CompletionTokens: p.Generated})
		}
		for _, s := range st.Finished {
			lv.event(s.Ref.(*reqStats), at, openai.Delta{Text: " w", FinishReason: s.End, CompletionTokens: s.Generated})
		}
		return true
	})
	if !lv.isEnded() {
		fake.Set(lv.stopAt)
		lv.stop()
	}
	for _, rs := range sent {
		lv.add(rs)
	}
	return lv.result()
}

// replayRun is the run itself on virtual time: every prompt sent in turn,
// perEndpoint in flight on each endpoint (--concurrency); its wall time.
func replayRun(prompts []simPrompt, endpoints, maxRunning, perEndpoint, maxTokens int) time.Duration {
	sim := simfleet.Uniform(endpoints, llmsim.DefaultTiming(), maxRunning)
	next, end := 0, time.Duration(0)
	sim.Keep(perEndpoint, func(int, time.Duration) (*llmsim.Seq, bool) {
		if next == len(prompts) {
			return nil, false
		}
		next++
		return prompts[next-1].seq(maxTokens, nil), true
	}, func(st simfleet.Step) bool {
		end = st.At
		return true
	})
	return end
}

// TestBenchCalibration: on eight simulated servers at their calibrated
// defaults the bench measures what the production job measured: one
// request per server, about 212 tok/s in all; 48 per server, about 9,400.
// Prompts and answers are shaped like the job's (short prompts, answers of
// hundreds of tokens), since prefill takes its share of a step.
func TestBenchCalibration(t *testing.T) {
	c := benchConfig()
	c.Warmup, c.Duration, c.PromptTokens, c.AnswerTokens = 3*time.Second, 15*time.Second, 100, 1024
	rep := replayBench(c, 8, llmsim.DefaultMaxRunning, generatedPrompts(c), 1, 48)
	for _, tt := range []struct {
		n           int
		want        float64
		inFlight    int
		minAnswered int
	}{{1, 212, 8, 1}, {48, 9400, 384, 100}} {
		lv := levelAt(t, *rep, tt.n)
		t.Logf("%2d per endpoint: %.0f tok/s, %d answers, latency p50 %.1fs, TTFT p50 %.3fs", tt.n, lv.TokPerSec, lv.Answers, lv.LatencyP50, lv.TTFTP50)
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
	if want := "recommended: --concurrency 48 (the servers' max_running_requests: infer's default, which adds --queue-depth, does the same)"; !strings.Contains(rep.kneeText(), want) {
		t.Errorf("knee text lacks %q:\n%s", want, rep.kneeText())
	}
}

// TestBenchKnee: servers that run 16 requests at once queue the rest, so
// throughput stops growing at 16 per endpoint: that is the knee.
func TestBenchKnee(t *testing.T) {
	c := benchConfig()
	// Long answers: a slot that frees at 16 per endpoint waits for the
	// client's next request, which costs a little throughput per answer.
	c.Warmup, c.Duration, c.AnswerTokens = 3*time.Second, 15*time.Second, 1024
	rep := replayBench(c, 2, 16, generatedPrompts(c), 8, 16, 32)
	for _, lv := range rep.Levels {
		t.Logf("%3d per endpoint: %6.0f tok/s, TTFT p50 %.2fs", lv.Concurrency, lv.TokPerSec, lv.TTFTP50)
	}
	if rep.Knee != 16 || !rep.KneeFound || rep.Recommended != 16 {
		t.Errorf("knee %d (found %v), recommended %d; want 16", rep.Knee, rep.KneeFound, rep.Recommended)
	}
	if text := rep.kneeText(); !strings.Contains(text, "knee: 16 per endpoint (") || !strings.Contains(text, " tok/s), within 5% of the best, 32 per endpoint (") {
		t.Errorf("knee text:\n%s", text)
	}
	// Past the knee requests wait in the servers' queues.
	if q, k := levelAt(t, *rep, 32), levelAt(t, *rep, 16); q.TTFTP50 < 2*k.TTFTP50 {
		t.Errorf("TTFT at 32 per endpoint %.2fs, at 16 %.2fs: no queueing seen", q.TTFTP50, k.TTFTP50)
	}
}

// TestBenchForecast: the bench's forecast of a run, from its sample
// prompts, against the run itself on the same fleet.
func TestBenchForecast(t *testing.T) {
	const prompts = 3000
	c := benchConfig()
	c.Inputs = []string{writePrompts(t, t.TempDir(), prompts)}
	c.Warmup, c.Duration, c.Plan.MaxTokens, c.AnswerTokens = 5*time.Second, 60*time.Second, 2048, 2048
	sample := samplePrompts(prompts)
	rep := replayBench(c, 2, llmsim.DefaultMaxRunning, sample[:c.Sample], 48)
	f := rep.Forecast
	if f == nil {
		t.Fatalf("no forecast: %s", rep.ForecastNote)
	}
	if f.Answers != prompts || f.MeanSource != "measured" || f.Concurrency != 48 || f.MaxTokens != 2048 {
		t.Errorf("forecast %+v", f)
	}
	checkForecast(t, f, replayRun(sample, 2, llmsim.DefaultMaxRunning, 48, 2048).Seconds())
}

// With no --max-tokens, the run's answers are cut by the model's context
// (4,096 here), which the servers state: the forecast bounds the answers'
// fitted lengths there, not at 32,768 tokens (50% over the run, its range
// missing it, when it did).
func TestBenchForecastContext(t *testing.T) {
	const prompts, context = 3000, 4096
	c := benchConfig()
	c.Inputs = []string{writePrompts(t, t.TempDir(), prompts)}
	c.Warmup, c.Duration = 5*time.Second, 60*time.Second
	sample := samplePrompts(prompts)
	for i := range sample {
		sample[i].max = context - sample[i].tokens
	}
	rep := replayBenchCtx(c, 2, llmsim.DefaultMaxRunning, context, sample[:c.Sample], 48)
	f := rep.Forecast
	if f == nil || f.Answers != prompts || f.MaxTokens != 0 {
		t.Fatalf("forecast %+v: %s", f, rep.ForecastNote)
	}
	checkForecast(t, f, replayRun(sample, 2, llmsim.DefaultMaxRunning, 48, 0).Seconds())

	// A server whose answers run past the context it states shifts it
	// (Ollama): the context bounds nothing, and the forecast is the one
	// of servers that state none.
	unbounded := replayBench(c, 2, llmsim.DefaultMaxRunning, samplePrompts(c.Sample), 48).Forecast
	shifted := replayBenchCtx(c, 2, llmsim.DefaultMaxRunning, 100, samplePrompts(c.Sample), 48).Forecast
	if unbounded == nil || shifted == nil || shifted.Seconds != unbounded.Seconds || shifted.HighSeconds != unbounded.HighSeconds {
		t.Errorf("answers past a stated context of 100 tokens: forecast %+v, want that of no context stated, %+v", shifted, unbounded)
	}
}

// checkForecast holds a forecast to the run's actual seconds: within 15%,
// and the run inside the forecast's range.
func checkForecast(t *testing.T, f *Forecast, actual float64) {
	t.Helper()
	t.Logf("forecast %.0fs (%.0f-%.0f) from %.0f±%.0f tokens at %.0f tok/s; the run took %.0fs",
		f.Seconds, f.LowSeconds, f.HighSeconds, f.MeanAnswerTokens, f.MeanAnswerSE, f.TokPerSec, actual)
	if e := math.Abs(f.Seconds-actual) / actual; e > 0.15 {
		t.Errorf("forecast %.0fs, the run took %.0fs: off by %.0f%%", f.Seconds, actual, 100*e)
	}
	if actual < 0.95*f.LowSeconds || actual > 1.05*f.HighSeconds {
		t.Errorf("the run's %.0fs is outside the forecast's range %.0f-%.0fs", actual, f.LowSeconds, f.HighSeconds)
	}
}

// The text report, on replayed levels: the table, the knee and the
// forecast as a person reads them.
func TestBenchTableReplayed(t *testing.T) {
	c := benchConfig()
	c.Warmup, c.Duration, c.Plan.Answers, c.Plan.MeanAnswerTokens = 2*time.Second, 10*time.Second, 100_000, 800
	rep := replayBench(c, 2, llmsim.DefaultMaxRunning, generatedPrompts(c), 1, 2)
	var b strings.Builder
	if err := rep.write(&b, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	// With a forecast, a run-time column for each level.
	if head := strings.Split(out, "\n")[3]; !strings.HasSuffix(head, "  run") {
		t.Errorf("the table's head has no run column: %q", head)
	}
	hasAll(t, "the report", out,
		"2 endpoints (max_running_requests 48), chat API, model "+llmsim.DefaultModelName,
		"replayed prompts, answers up to 256 tokens; each level 2.0s warm-up, then 10.0s measured",
		"per endpoint  in flight  answers/s  out tok/s  per endpoint  latency p50",
		"no knee up to 2 per endpoint",
		"recommended: --concurrency 2 (or measure higher levels with --concurrency)",
		"forecast: 100,000 answers x 800±0 tokens (given) at ")
}
