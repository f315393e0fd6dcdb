package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/mix"
)

// benchMix is a quarter of the answers thinking, up to 8,192 tokens, and
// the rest not, up to 2,048.
const benchMix = `arms:
  - name: think
    weight: 1
    params: {chat_template_kwargs: {enable_thinking: true}, max_tokens: 8192}
  - name: no_think
    weight: 3
    params: {chat_template_kwargs: {enable_thinking: false}, max_tokens: 2048}
`

// armedPrompts are the sample prompts of writePrompts as the simulator
// answers them under their arms (the bench draws arms as a run without
// --seed does): a thinking answer is its reasoning and then its answer
// (llmsim's ThinkingLength), cut at the arm's max_tokens.
func armedPrompts(m *mix.Mix, n int) []simPrompt {
	out := make([]simPrompt, n)
	for i := range out {
		p := chatPrompt("Be brief.", promptText(i))
		a := m.Pick(0, fmt.Sprintf("p%05d", i), 0)
		p.arm = a + 1
		arm := &m.Arms[a]
		p.max = arm.MaxTokens()
		if strings.Contains(string(arm.Params), `"enable_thinking":true`) {
			var lp llmsim.Prompt
			lp.Messages = []llmsim.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: promptText(i)}}
			h, _ := strconv.ParseUint(llmsim.PromptDigest(lp), 16, 64)
			p.natural += llmsim.ThinkingLength(h, 0, "")
		}
		out[i] = p
	}
	return out
}

// TestBenchForecastMix: on virtual time, a bench of a mixed run's sample
// prompts under --mix forecasts the mixed run's wall time, with each arm's
// lengths fitted apart and mixed in the arms' shares; the run itself, every
// prompt under its arm, ends inside the forecast's range. Without the
// arms' own limits and lengths the same prompts forecast a far shorter run.
func TestBenchForecastMix(t *testing.T) {
	const prompts = 3000
	dir := t.TempDir()
	mixPath := filepath.Join(dir, "mix.yaml")
	if err := os.WriteFile(mixPath, []byte(benchMix), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := mix.Load(mixPath)
	if err != nil {
		t.Fatal(err)
	}
	c := benchConfig()
	c.Inputs = []string{writePrompts(t, dir, prompts)}
	c.Warmup, c.Duration, c.Plan.MaxTokens, c.AnswerTokens, c.Mix = 5*time.Second, 60*time.Second, 2048, 2048, m
	sample := armedPrompts(m, prompts)
	rep := replayBench(c, 2, llmsim.DefaultMaxRunning, sample[:c.Sample], 48)
	f := rep.Forecast
	if f == nil {
		t.Fatalf("no forecast: %s", rep.ForecastNote)
	}
	if f.Answers != prompts || f.MeanSource != "measured per arm" || len(rep.Arms) != 2 {
		t.Fatalf("forecast %+v, arms %+v", f, rep.Arms)
	}
	for _, a := range rep.Arms {
		t.Logf("arm %s (%.0f%%): %.0f±%.0f tokens up to %d, %d sample answers", a.Arm, 100*a.Share, a.MeanAnswerTokens, a.MeanAnswerSE, a.MaxTokens, a.Answers)
	}
	think, plain := rep.Arms[0], rep.Arms[1]
	if think.Arm != "think" || think.MaxTokens != 8192 || plain.MaxTokens != 2048 || think.Share != 0.25 || !(think.MeanAnswerTokens > 2*plain.MeanAnswerTokens) {
		t.Errorf("arms %+v: the thinking arm's answers should be over twice as long", rep.Arms)
	}
	// The run, every prompt under its arm (replayRun's max_tokens is
	// each prompt's own, its arm's).
	actual := replayRun(sample, 2, llmsim.DefaultMaxRunning, 48, 2048).Seconds()
	checkForecast(t, f, actual)
	// The same sample benched as one run (no arms) would mislead: the
	// mixed run takes far longer than a run of answers as long as
	// no_think's.
	plainRun := replayRun(samplePrompts(prompts), 2, llmsim.DefaultMaxRunning, 48, 2048).Seconds()
	if actual < 1.3*plainRun {
		t.Errorf("the mixed run took %.0fs, a run without thinking %.0fs: the mixture should cost far more", actual, plainRun)
	}
	var b strings.Builder
	if err := rep.write(&b, false); err != nil {
		t.Fatal(err)
	}
	t.Logf("the report:\n%s", b.String())
	for _, want := range []string{"tokens (measured per arm) at ", "  arm think (25%): ", "  arm no_think (75%): ", ", up to 8,192 ("} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestBenchMixNote: an arm all of whose sample answers ran to its own
// max_tokens is forecast at that length, and its line says so; an arm none
// of whose sample answers finished (all cut by the level's end) leaves the
// forecast out, saying which.
func TestBenchMixNote(t *testing.T) {
	dir := t.TempDir()
	replay := func(arms string, armA func(p *simPrompt)) *Report {
		mixPath := filepath.Join(dir, "mix.yaml")
		os.WriteFile(mixPath, []byte(arms), 0o644)
		m, err := mix.Load(mixPath)
		if err != nil {
			t.Fatal(err)
		}
		c := benchConfig()
		c.Inputs = []string{writePrompts(t, dir, 200)}
		c.Warmup, c.Duration, c.Sample, c.Mix, c.Plan.MaxTokens, c.AnswerTokens = time.Second, 120*time.Second, 200, m, 8192, 8192
		sample := samplePrompts(200)
		for i := range sample {
			sample[i].arm = m.Pick(0, fmt.Sprintf("p%05d", i), 0) + 1
			if sample[i].arm == 1 {
				armA(&sample[i])
			}
		}
		return replayBench(c, 1, llmsim.DefaultMaxRunning, sample, 48)
	}

	capped := replay("arms:\n  - name: a\n    params: {max_tokens: 4}\n  - name: b\n", func(p *simPrompt) { p.max = 4 })
	if f := capped.Forecast; f == nil || len(capped.Arms) != 2 {
		t.Fatalf("forecast %+v, arms %+v, note %q", f, capped.Arms, capped.ForecastNote)
	}
	a, b := capped.Arms[0], capped.Arms[1]
	if a.Arm != "a" || a.MeanAnswerTokens != 4 || a.MaxTokens != 4 || a.Capped == 0 || b.Capped != 0 || b.Answers < 2 {
		t.Errorf("arms %+v", capped.Arms)
	}
	if want := fmt.Sprintf("  arm a (50%%): 4±0 tokens, up to 4 (%d sample answers ran to it)\n", a.Capped); !strings.Contains(armsText(capped.Arms), want) {
		t.Errorf("arms' lines lack %q:\n%s", want, armsText(capped.Arms))
	}

	// Arm a's answers would run past the level's end.
	endless := replay("arms:\n  - name: a\n  - name: b\n", func(p *simPrompt) { p.natural = 1 << 20 })
	if endless.Forecast != nil || !strings.Contains(endless.ForecastNote, "no sample answer of arm a ended on its own, nor did all run to the run's max_tokens (") {
		t.Errorf("forecast %+v, note %q", endless.Forecast, endless.ForecastNote)
	}
}

// TestBenchMixSent: infer bench --mix asks each sample prompt under its
// arm (the server's request log shows the arm's settings); a mixture that
// cannot be read is a usage error.
func TestBenchMixSent(t *testing.T) {
	dir := t.TempDir()
	in := writePrompts(t, dir, 40)
	mixPath := filepath.Join(dir, "mix.yaml")
	os.WriteFile(mixPath, []byte(benchMix), 0o644)
	m, _ := mix.Load(mixPath)
	var reqlog testbin.LockedBuffer
	f, endpoints := simFleet(t, llmsim.Config{TimeScale: 200, RequestLog: &reqlog}, 1)
	runBench(t, time.Minute, "-e", endpoints, "--concurrency", "4", "--warmup", "0s", "--duration", "120s",
		"--time-scale", "200", "--mix", mixPath, in)
	f.Close()
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(reqlog.String()), "\n") {
		var l struct {
			Body struct {
				Messages []struct{ Content string } `json:"messages"`
				Kwargs   struct {
					EnableThinking *bool `json:"enable_thinking"`
				} `json:"chat_template_kwargs"`
				MaxTokens int `json:"max_tokens"`
			} `json:"body"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		var i, topic int
		if _, err := fmt.Sscanf(l.Body.Messages[len(l.Body.Messages)-1].Content, "Question %d: explain topic number %d", &i, &topic); err != nil {
			t.Fatalf("a request the test cannot place: %s", line)
		}
		arm := m.Arms[m.Pick(0, fmt.Sprintf("p%05d", i), 0)]
		on := l.Body.Kwargs.EnableThinking
		// The first request, the stream options' preflight, asks for 1 token.
		if on == nil || *on != (arm.Name == "think") || l.Body.MaxTokens != arm.MaxTokens() && l.Body.MaxTokens != 1 {
			t.Errorf("p%05d (arm %s) was sent enable_thinking %v, max_tokens %d", i, arm.Name, on, l.Body.MaxTokens)
		}
		seen[arm.Name]++
	}
	if seen["think"] == 0 || seen["no_think"] == 0 {
		t.Errorf("requests per arm %v: both arms should be asked", seen)
	}
	res := runBenchArgs(t, time.Minute, "-e", endpoints, "--mix", filepath.Join(dir, "none.yaml"), in)
	if res.code != 2 || !strings.Contains(res.stderr, "--mix ") {
		t.Errorf("a missing --mix: exit %d\n%s", res.code, res.stderr)
	}
}
