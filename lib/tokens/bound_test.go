package tokens

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/fleet"
	"tokenmill/lib/record"
)

// denseTexts are texts of fewer bytes a token than English: digits (one
// token each in Qwen3's vocabulary), code, CJK, emoji, runs of spaces.
var denseTexts = []string{
	strings.Repeat("3 1 4 1 5 9 2 6 5 3 5 8 9 7 9 ", 40),
	strings.Repeat("31415926535897932384626433832795", 20),
	strings.Repeat("if(a[i]>b[j]){x+=y;}else{z--;}\n", 30),
	strings.Repeat("天地玄黄，宇宙洪荒。日月盈昃，辰宿列张。", 20),
	strings.Repeat("🙂🚀 ok 👍🏽 ", 40),
	strings.Repeat("a  \t  b\n\n\n", 60),
}

// realTexts are texts of real datasets, every fifth: Alpaca's
// instructions with their inputs and outputs, MT-Bench's questions.
func realTexts(t *testing.T) []string {
	t.Helper()
	var out []string
	var alpaca []struct{ Instruction, Input, Output string }
	b, err := os.ReadFile(testbin.RealData(t, "alpaca_en_demo.json"))
	if err == nil {
		err = json.Unmarshal(b, &alpaca)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alpaca {
		out = append(out, strings.TrimSpace(a.Instruction+"\n"+a.Input), a.Output)
	}
	b, err = os.ReadFile(testbin.RealData(t, "mt_bench_question.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var q struct{ Turns []string }
		if err := json.Unmarshal([]byte(line), &q); err != nil {
			t.Fatal(err)
		}
		out = append(out, q.Turns...)
	}
	var fifth []string
	for i := 0; i < len(out); i += 5 {
		fifth = append(fifth, out[i])
	}
	return fifth
}

// Bound is never under a prompt's tokens as a model's own template and
// tokenizer count them (its begin-of-text token among them where its
// vocabulary adds one), on real data and on texts far denser than
// English, where the estimate's first guess (2.5 bytes a token) is under
// for some.
func TestBoundHolds(t *testing.T) {
	texts := append(realTexts(t), denseTexts...)
	for _, name := range []string{"qwen3", "deepseek_v3"} {
		tok, err := (FitFlags{Tokenizer: testbin.Tokenizers(t, name)}).LoadTokenizer()
		if err != nil {
			t.Fatal(err)
		}
		c := NewCounter(nil, func() string { return "m" })
		c.UseTokenizer(tok)
		under := 0
		for _, text := range texts {
			for _, msgs := range [][]record.Message{
				{{Role: "user", Content: text}},
				{{Role: "system", Content: "Be brief."}, {Role: "user", Content: text}},
			} {
				n, ok := c.countLocal(Prompt{Msgs: msgs})
				if !ok {
					t.Fatalf("%s: not counted: %.40q", name, text)
				}
				s := SizeOf(msgs, nil)
				if b := c.Bound(s); b < n {
					t.Errorf("%s: bound %d under the %d tokens of %d messages, %d bytes: %.60q", name, b, n, s.Msgs, s.Bytes, text)
				}
				if c.Estimate(s) < n {
					under++
				}
			}
		}
		t.Logf("%s: the estimate's first guess is under the count for %d of %d prompts; the bound for none", name, under, 2*len(texts))
		if under == 0 {
			t.Errorf("%s: the dense texts were not denser than the guess: the test shows nothing", name)
		}
	}
}

// Near the context's limit, a prompt whose bound leaves no room is
// counted by the server's tokenizer, whatever the estimate says: on
// llama.cpp with Qwen3's vocabulary and prompts of digits (a byte a
// token), none is sent uncounted that the server would refuse, and none
// is counted whose bound fits.
func TestFitCountsNearTheLimit(t *testing.T) {
	dir := testbin.Tokenizers(t, "qwen3")
	local, err := (FitFlags{Tokenizer: dir}).LoadTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	truth := NewCounter(nil, func() string { return "m" })
	truth.UseTokenizer(local)

	f, err := llmsim.Start(context.Background(), llmsim.Config{Flavor: llmsim.FlavorLlamaCpp, Instant: true, Seed: 7, Tokenizer: dir}, 1)
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
	c := NewCounter(p, func() string { return llmsim.DefaultModelName })

	const ctxLen, requested = 1024, 16
	fl := FitFlags{FitContext: true, ContextMargin: 8, MinAnswerTokens: 32}
	need := max(requested, fl.MinAnswerTokens)
	var near, uncountedBefore, uncountedNow, counted int
	for digits := 900; digits <= 1100; digits += 4 {
		var b strings.Builder
		for i := 0; i < digits; i++ {
			b.WriteByte(byte('0' + i*7%10))
		}
		msgs := []record.Message{{Role: "user", Content: b.String()}}
		n, _ := truth.countLocal(Prompt{Msgs: msgs})
		fits := n+need+fl.ContextMargin < ctxLen
		if !fits {
			near++
			if c.Estimate(SizeOf(msgs, nil))+need+fl.ContextMargin < ctxLen {
				uncountedBefore++ // what the estimate alone sent
			}
		}
		ft := c.Fit(fl, ctxLen, msgs, nil, requested, 0, false)
		switch {
		case ft.Exact && ft.Prompt != n:
			t.Errorf("%d digits: counted %d, the template and tokenizer give %d", digits, ft.Prompt, n)
		case ft.Exact:
			counted++
		case !fits:
			uncountedNow++
			t.Errorf("%d digits: %d tokens do not leave %d, yet sent uncounted: %+v", digits, n, need, ft)
		}
		if fits != (!ft.Refused) {
			t.Errorf("%d digits, %d tokens: refused %v", digits, n, ft.Refused)
		}
	}
	t.Logf("prompts of 900-1,100 digits in a %d-token context: %d do not fit; sent uncounted by the estimate alone %d, now %d; %d counted",
		ctxLen, near, uncountedBefore, uncountedNow, counted)
	if near == 0 || uncountedBefore == 0 {
		t.Errorf("the prompts do not show the estimate's shortfall (%d past the limit, %d of them under the estimate)", near, uncountedBefore)
	}
	// Far from the limit nothing is counted.
	short := []record.Message{{Role: "user", Content: strings.Repeat("7", 100)}}
	if ft := c.Fit(fl, ctxLen, short, nil, requested, 0, false); ft.Exact {
		t.Errorf("a prompt of 100 bytes was counted: %+v", ft)
	}
}
