package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/llamaserver"
	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
)

// cappedPrompts writes n sample prompts (writePrompts') and checks that
// every answer llmsim gives them is longer than cap tokens: all of them
// run to max_tokens cap.
func cappedPrompts(t *testing.T, n, cap int) (string, []simPrompt) {
	t.Helper()
	sample := samplePrompts(n)
	for i, p := range sample {
		if p.natural <= cap {
			t.Fatalf("prompt %d's answer is %d tokens, not more than %d", i, p.natural, cap)
		}
	}
	return writePrompts(t, t.TempDir(), n), sample
}

// The bench on llama.cpp's server (llmsim's flavour, 4 slots), which
// closes the connection after every streamed answer though the answer
// advertised keep-alive: each request after one finds its connection
// closed, and is sent again on a new one. Not one request fails at any
// level, every streamed request took a connection of its own, and the
// sample answers, which all run to max_tokens, give the forecast their
// length.
func TestBenchLlamaCppClosingStreams(t *testing.T) {
	const prompts, cap = 40, 16
	in, _ := cappedPrompts(t, prompts, cap)
	f, endpoint := simFleet(t, llmsim.Config{Flavor: llmsim.FlavorLlamaCpp, MaxRunning: 4, TimeScale: 50}, 1)
	rl := startRelay(t, endpoint)
	rep, r := runBench(t, 2*time.Minute, "-e", rl.URL, "--concurrency", "1,4,8", "--warmup", "2s", "--duration", "10s",
		"--time-scale", "50", "--max-tokens", fmt.Sprint(cap), in)
	if len(rep.Levels) < 3 {
		t.Fatalf("levels %+v\n%s", rep.Levels, r.stderr)
	}
	for _, lv := range rep.Levels {
		if lv.Errors != 0 || lv.Answers == 0 {
			t.Errorf("level %d: %d answers, %d failed requests (%s)", lv.Concurrency, lv.Answers, lv.Errors, lv.FirstError)
		}
	}
	if strings.Contains(r.stderr, "failed requests") {
		t.Errorf("stderr tells of failed requests:\n%s", r.stderr)
	}
	// The streams closed their connections: one each.
	if sent, conns := f.Stats().Requests, rl.Accepted.Load(); sent < 10 || conns < sent {
		t.Errorf("%d connections for %d generation requests: the streams did not close theirs", conns, sent)
	}
	fc := rep.Forecast
	if fc == nil || fc.MeanSource != sourceCapped || fc.MeanAnswerTokens != cap || fc.MeanAnswerSE != 0 || fc.Answers != prompts || fc.MaxTokens != cap {
		t.Fatalf("forecast %+v, note %q", fc, rep.ForecastNote)
	}
	var text strings.Builder
	if err := rep.write(&text, false); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("forecast: 40 answers x %d±0 tokens (max_tokens: every sample answer ran to it) at ", cap); !strings.Contains(text.String(), want) {
		t.Errorf("the report does not say %q:\n%s", want, text.String())
	}
}

// TestBenchForecastCapped: on virtual time, sample answers that all run to
// max_tokens forecast the run with that length: a run of answers of one
// length goes in waves of the servers' slots, the last one partial, and
// the forecast is within 10% of the run at every level (short runs, whose
// last wave is much of them, included). The level recommended is the
// fastest run's, or a step from it.
func TestBenchForecastCapped(t *testing.T) {
	levels := []int{1, 2, 4, 8, 16, 32}
	for _, tt := range []struct {
		endpoints, slots, prompts, cap int
	}{
		{1, 4, 50, 64},   // 12 waves and a half
		{1, 16, 50, 64},  // 3 waves and 2 answers
		{1, 16, 130, 16}, // 8 waves and 2 answers
		{1, 4, 400, 16},
		{3, 4, 200, 64}, // 16 waves of 12 and 8 answers
	} {
		t.Run(fmt.Sprintf("%d×%d slots, %d answers of %d tokens", tt.endpoints, tt.slots, tt.prompts, tt.cap), func(t *testing.T) {
			// Answers that never end on their own, as the tiny models of
			// the real-server tests write.
			sample := samplePrompts(400)
			for i := range sample {
				sample[i].natural = 1 << 20
			}
			c := benchConfig()
			c.Inputs, c.Plan.Answers, c.Sample = []string{writePrompts(t, t.TempDir(), len(sample))}, int64(tt.prompts), len(sample)
			c.Warmup, c.Duration, c.Plan.MaxTokens, c.AnswerTokens = 5*time.Second, 30*time.Second, tt.cap, tt.cap
			rep := replayBench(c, tt.endpoints, tt.slots, sample, levels...)
			f := rep.Forecast
			if f == nil || f.MeanSource != sourceCapped || f.MeanAnswerTokens != float64(tt.cap) {
				t.Fatalf("forecast %+v, note %q", f, rep.ForecastNote)
			}
			fastest, runs := 0, make([]float64, len(levels))
			for i, n := range levels {
				runs[i] = replayRun(sample[:tt.prompts], tt.endpoints, tt.slots, n, tt.cap).Seconds()
				lv := levelAt(t, *rep, n)
				t.Logf("%2d per endpoint: %6.1f tok/s, forecast %6.1fs, the run %6.1fs", n, lv.TokPerSec, lv.RunSeconds, runs[i])
				if e := math.Abs(lv.RunSeconds-runs[i]) / runs[i]; e > 0.10 {
					t.Errorf("%d per endpoint: forecast %.1fs, the run took %.1fs: off by %.0f%%", n, lv.RunSeconds, runs[i], 100*e)
				}
				if runs[i] < runs[fastest] {
					fastest = i
				}
			}
			// Levels whose runs tie with the fastest (within 1%) are as fast.
			k, near := slices.Index(levels, rep.Recommended), false
			for j := range levels {
				near = near || runs[j] <= 1.01*runs[fastest] && k >= 0 && j-1 <= k && k <= j+1
			}
			if !near {
				t.Errorf("recommended %d per endpoint; the run was fastest at %d", rep.Recommended, levels[fastest])
			}
			if actual := runs[slices.Index(levels, f.Concurrency)]; actual < f.LowSeconds || actual > f.HighSeconds {
				t.Errorf("the run's %.1fs is outside the forecast's range %.1f-%.1fs", actual, f.LowSeconds, f.HighSeconds)
			}
		})
	}
}

// The bench's binary against a real llama.cpp server with 4 slots, which
// closes the connection after each streamed answer: no request fails at
// any level; its tiny model's answers all run to max_tokens, which the
// forecast takes as their length; the run at the recommended level then
// answers every prompt at its first attempt. Skipped, saying why, where
// llama-server is not installed. The forecast against the run's time is
// logged, not held: the machine may be loaded.
func TestBenchLlamaServer(t *testing.T) {
	testbin.Long(t, "a real llama.cpp server")
	if _, err := llamaserver.Find(); err != nil {
		t.Skip(err)
	}
	const prompts, cap = 400, 32
	srv := llamaserver.Start(t, llamaserver.Options{Parallel: 4, Context: 4 * 1024})
	in := writePrompts(t, t.TempDir(), prompts)
	// In process, for a bound of its own: on a loaded machine levels are
	// measured again.
	rep, r := runBench(t, 5*time.Minute, "-e", srv.URL, "--concurrency", "1,4,8", "--warmup", "1s", "--duration", "5s",
		"--max-tokens", fmt.Sprint(cap), in)
	for _, lv := range rep.Levels {
		if lv.Errors != 0 || lv.Answers == 0 {
			t.Errorf("level %d: %d answers, %d failed requests (%s)", lv.Concurrency, lv.Answers, lv.Errors, lv.FirstError)
		}
	}
	fc := rep.Forecast
	if fc == nil || fc.MeanSource != sourceCapped || fc.MeanAnswerTokens != cap || fc.Answers != prompts || rep.Recommended == 0 {
		t.Fatalf("forecast %+v, note %q, recommended %d\n%s", fc, rep.ForecastNote, rep.Recommended, r.stderr)
	}
	out := t.TempDir() + "/gen.jsonl"
	t0 := time.Now()
	run := testbin.Run(t, "", nil, nil, "infer", "-e", srv.URL, "--concurrency", fmt.Sprint(rep.Recommended), "--max-tokens", fmt.Sprint(cap),
		"--progress", "0", "-o", out, in)
	took := time.Since(t0)
	if run.Code != cli.ExitOK {
		t.Fatalf("run: exit %d\n%s", run.Code, run.Stderr)
	}
	if want := fmt.Sprintf("(%d ok, 0 failed attempts,", prompts); !strings.Contains(run.Stderr, want) {
		t.Errorf("the run's summary does not say %q:\n%s", want, run.Stderr)
	}
	t.Logf("llama-server %s: recommended %d per endpoint; forecast %.1fs (%.1f-%.1f), the run took %.1fs",
		srv.BuildInfo, rep.Recommended, fc.Seconds, fc.LowSeconds, fc.HighSeconds, took.Seconds())
}
