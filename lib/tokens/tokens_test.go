package tokens

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/fleet"
	"tokenmill/lib/record"
	"tokenmill/lib/tokenizer"
)

// The estimate starts high (the guess), and after learnAfter answered
// prompts takes the 5th percentile of their bytes per token: never under
// what most of them measured; prompts too small to tell are not learned.
func TestEstimateLearns(t *testing.T) {
	c := NewCounter(nil, func() string { return "m" })
	s := Size{Bytes: 4000, Msgs: 2}
	if got, want := c.Estimate(s), 1600+3*TemplateGuess; got != want {
		t.Fatalf("before learning: %d, want %d", got, want)
	}
	c.Learn(Size{Bytes: 10, Msgs: 1}, 500) // too small: not learned
	for i := 0; i < learnAfter-1; i++ {
		// 4 bytes a token, the template's guessed share beside.
		c.Learn(Size{Bytes: 4000, Msgs: 2}, 1000+3*TemplateGuess)
	}
	if got := c.Estimate(s); got != 1600+3*TemplateGuess {
		t.Fatalf("learned before %d prompts: %d", learnAfter, got)
	}
	c.Learn(Size{Bytes: 4000, Msgs: 2}, 1000+3*TemplateGuess)
	if got, want := c.Estimate(s), 1000+3*TemplateGuess; got != want {
		t.Fatalf("after %d prompts at 4 bytes a token: %d, want %d", learnAfter, got, want)
	}
	// A few denser prompts pull the estimate up to the low percentile.
	for i := 0; i < 20; i++ {
		c.Learn(Size{Bytes: 2000, Msgs: 2}, 1000+3*TemplateGuess)
	}
	if got := c.Estimate(s); got != 2000+3*TemplateGuess {
		t.Errorf("with a 2-byte tail: %d, want %d", got, 2000+3*TemplateGuess)
	}
}

// The template's share per message is the most measured, never under the
// guess.
func TestLearnTemplate(t *testing.T) {
	c := NewCounter(nil, func() string { return "m" })
	for _, tt := range []struct{ msgs, text, prompt, want int }{
		{2, 100, 103, 3 * TemplateGuess}, // less than the guess: kept at the guess
		{2, 100, 136, 36},                // 12 a message
		{1, 100, 110, 36},                // less than measured before: kept
		{3, 0, 60, 45},                   // 15 a message
	} {
		c.LearnTemplate(tt.msgs, tt.text, tt.prompt)
		if got := c.templateTokens(2); got != tt.want {
			t.Errorf("after %+v: %d for 2 messages, want %d", tt, got, tt.want)
		}
	}
}

// Count on every kind of server: vLLM's tokenizer counts the chat prompt
// as it is charged, and so does llama.cpp's through /apply-template;
// SGLang counts the texts, the template's share added (never less than
// charged, with the guess); Ollama and gateways have none.
func TestCountPerFlavor(t *testing.T) {
	msgs := []record.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: strings.Repeat("How many tokens? ", 40)}}
	charged := 3
	texts := 0
	for _, m := range msgs {
		charged += 4 + llmsim.TextTokens(m.Content)
		texts += llmsim.TextTokens(m.Content)
	}
	for _, tt := range []struct {
		flavor      llmsim.Flavor
		n, textOnly int
		ok          bool
	}{
		{llmsim.FlavorVLLM, charged, 0, true},
		{llmsim.FlavorLlamaCpp, charged, 0, true},
		{llmsim.FlavorSGLang, texts + 3*TemplateGuess, texts, true},
		{llmsim.FlavorOllama, 0, 0, false},
		{llmsim.FlavorOpenAI, 0, 0, false},
	} {
		t.Run(string(tt.flavor), func(t *testing.T) {
			c := NewCounter(simPool(t, tt.flavor), func() string { return llmsim.DefaultModelName })
			n, text, ok := c.Count(msgs, nil)
			if n != tt.n || text != tt.textOnly || ok != tt.ok {
				t.Errorf("%d %d %v, want %d %d %v", n, text, ok, tt.n, tt.textOnly, tt.ok)
			}
			if ok && n < charged {
				t.Errorf("counted %d, fewer than the %d charged", n, charged)
			}
		})
	}
}

func simPool(t *testing.T, flavor llmsim.Flavor) *fleet.Pool {
	t.Helper()
	f, err := llmsim.Start(context.Background(), llmsim.Config{Flavor: flavor, Instant: true, Seed: 7}, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	targets, err := fleet.ParseEndpoints(f.URLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := fleet.NewPool(ctx, targets, fleet.Config{ProbeInterval: 20 * time.Millisecond, ControlTimeout: 10 * time.Second, Logf: func(string, ...any) {}})
	t.Cleanup(func() {
		cancel()
		p.Close()
	})
	p.Start()
	if err := p.WaitReady(context.Background(), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	return p
}

// nth finds what sorting finds, on the windows the estimate keeps: sorted,
// reversed, all one value, few values, random.
func TestNth(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	windows := map[string]func(i int) float64{
		"sorted":   func(i int) float64 { return float64(i) },
		"reversed": func(i int) float64 { return float64(-i) },
		"constant": func(int) float64 { return 4 },
		"two":      func(i int) float64 { return float64(2 + 2*(i%2)) },
		"random":   func(int) float64 { return 1 + 7*rng.Float64() },
		"few":      func(int) float64 { return float64(rng.IntN(3)) },
	}
	for name, gen := range windows {
		for _, n := range []int{1, 2, 3, 20, 21, 511, 512} {
			v := make([]float64, n)
			for i := range v {
				v[i] = gen(i)
			}
			sorted := slices.Clone(v)
			slices.Sort(sorted)
			for _, k := range []int{0, n / 20, n / 2, n - 1} {
				if got := nth(slices.Clone(v), k); got != sorted[k] {
					t.Errorf("%s, %d values: nth(%d) = %v, want %v", name, n, k, got, sorted[k])
				}
			}
		}
	}
}

// The estimate follows the window once it is full: an answer past the
// window's 512 still moves it (every 8th prompt recomputes it).
func TestEstimateFollowsFullWindow(t *testing.T) {
	c := NewCounter(nil, func() string { return "m" })
	s := Size{Bytes: 4000, Msgs: 2}
	for i := 0; i < ratioWindow; i++ {
		c.Learn(s, 1000+3*TemplateGuess) // 4 bytes a token
	}
	if got, want := c.Estimate(s), 1000+3*TemplateGuess; got != want {
		t.Fatalf("a full window at 4 bytes a token: %d, want %d", got, want)
	}
	// Denser prompts replace the oldest: past 5% of the window, the
	// percentile is theirs.
	for i := 0; i < ratioWindow/20+8; i++ {
		c.Learn(Size{Bytes: 2000, Msgs: 2}, 1000+3*TemplateGuess)
	}
	if got, want := c.Estimate(s), 2000+3*TemplateGuess; got != want {
		t.Errorf("after denser prompts in a full window: %d, want %d", got, want)
	}
}

// With a model's tokenizer every prompt is counted, exactly as the server
// renders and tokenizes it, without asking a server (no pool here) and
// whether or not the estimate says it fits; a prompt the count leaves too
// little room is refused as counted.
func TestFitWithTokenizer(t *testing.T) {
	tok, err := (FitFlags{Tokenizer: testbin.Tokenizers(t, "qwen3")}).LoadTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	c := NewCounter(nil, func() string { return "m" })
	c.UseTokenizer(tok)
	msgs := []record.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: strings.Repeat("Grüße, 世界! ", 40)}}
	text, err := tok.Render(tokenizer.Request{Messages: []byte(`[{"role":"system","content":"Be brief."},{"role":"user","content":"` + msgs[1].Content + `"}]`), AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	want := len(tok.Encode(text))
	fl := FitFlags{FitContext: true, ContextMargin: 8, MinAnswerTokens: 32}
	if f := c.Fit(fl, 100000, msgs, nil, 64, 0, false); !f.Exact || f.Prompt != want || f.Max != 0 || f.Refused {
		t.Errorf("roomy context: %+v, want the prompt's %d tokens counted exactly", f, want)
	}
	if f := c.Fit(fl, want+8+1+100, msgs, nil, 500, 0, false); !f.Exact || f.Max != 100 {
		t.Errorf("tight context: %+v, want max_tokens lowered to 100", f)
	}
	if f := c.Fit(fl, want+8+1+10, msgs, nil, 500, 0, false); !f.Refused || !strings.Contains(f.Refusal(), "(counted)") {
		t.Errorf("too tight: %+v, want refused as counted", f)
	}
}
