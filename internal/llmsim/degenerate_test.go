package llmsim

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

type plainAnswer struct {
	Choices []struct {
		Message      struct{ Content string } `json:"message"`
		FinishReason string                   `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

func askPlain(t *testing.T, base, user string, maxTokens int, stream bool) (plainAnswer, []byte) {
	t.Helper()
	s, b := postJSON(t, base+pathChat, chatBody(user, maxTokens, stream))
	var a plainAnswer
	if s != 200 || (!stream && (json.Unmarshal(b, &a) != nil || len(a.Choices) != 1)) {
		t.Fatalf("%d %s", s, b)
	}
	return a, b
}

// periodic reports whether the last words repeat with a period of at most 10.
func periodic(words []string) bool {
	for p := 1; p <= 10; p++ {
		ok := len(words) > 3*p
		for i := len(words) - 3*p; ok && i < len(words); i++ {
			ok = words[i] == words[i-p]
		}
		if ok {
			return true
		}
	}
	return false
}

// Each degeneracy at rate 1: its shape, the digest first where there is
// text, and a stream that says the same.
func TestDegenerateAnswers(t *testing.T) {
	cases := []struct {
		name  string
		cfg   Config
		check func(t *testing.T, a plainAnswer, digest string, natural int)
	}{
		{"loop", Config{LoopRate: 1}, func(t *testing.T, a plainAnswer, digest string, _ int) {
			c := a.Choices[0]
			w := strings.Fields(c.Message.Content)
			if c.FinishReason != "length" || a.Usage.CompletionTokens != 300 || len(w) != 300 || !periodic(w) {
				t.Errorf("loop: finish %q, %d tokens, %d words, periodic %v: %.200s", c.FinishReason, a.Usage.CompletionTokens, len(w), periodic(w), c.Message.Content)
			}
		}},
		{"empty", Config{EmptyRate: 1}, func(t *testing.T, a plainAnswer, _ string, _ int) {
			if c := a.Choices[0]; c.Message.Content != "" || c.FinishReason != "stop" {
				t.Errorf("empty: %q finish %q", c.Message.Content, c.FinishReason)
			}
		}},
		{"think residue", Config{ThinkResidueRate: 1}, func(t *testing.T, a plainAnswer, _ string, natural int) {
			c := a.Choices[0]
			open, close := strings.Index(c.Message.Content, " <think>"), strings.Index(c.Message.Content, " </think>")
			if open < 0 || close < open || a.Usage.CompletionTokens != min(natural+1, 300) { // +1: the end-of-turn id
				t.Errorf("think residue: %d tokens (natural %d): %.300s", a.Usage.CompletionTokens, natural, c.Message.Content)
			}
		}},
		{"truncate", Config{TruncateRate: 1}, func(t *testing.T, a plainAnswer, _ string, natural int) {
			if c := a.Choices[0]; c.FinishReason != "length" || a.Usage.CompletionTokens >= min(natural, 300) {
				t.Errorf("truncate: finish %q after %d tokens (natural %d)", c.FinishReason, a.Usage.CompletionTokens, natural)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Instant = true
			fleet := startFleet(t, c.cfg, 1)
			for i := 0; i < 5; i++ {
				user := fmt.Sprintf("degenerate %d", i)
				p := Prompt{Messages: []Message{{"user", user}}}
				digest := PromptDigest(p)
				a, _ := askPlain(t, fleet.URLs()[0], user, 300, false)
				if text := a.Choices[0].Message.Content; text != "" && !strings.HasPrefix(text, digest) {
					t.Errorf("%.40q does not start with the digest %s", text, digest)
				}
				c.check(t, a, digest, NaturalLength(xxh3Canonical(p), 0))
				_, streamed := askPlain(t, fleet.URLs()[0], user, 300, true)
				if text, _ := streamedText(t, streamed); text != a.Choices[0].Message.Content {
					t.Errorf("streamed %.60q, whole %.60q", text, a.Choices[0].Message.Content)
				}
			}
		})
	}
}

// The rates hold on average, drawn from the prompt: the same prompt
// degenerates the same way every time.
func TestDegenerateRates(t *testing.T) {
	fleet := startFleet(t, Config{Instant: true, LoopRate: 0.2, EmptyRate: 0.2, ThinkResidueRate: 0.2, TruncateRate: 0.2, Seed: 5}, 1)
	base := fleet.URLs()[0]
	const n = 400
	counts := map[string]int{}
	for i := 0; i < n; i++ {
		a, _ := askPlain(t, base, fmt.Sprintf("rate %d", i), 3000, false)
		c := a.Choices[0]
		kind := "none"
		switch {
		case c.Message.Content == "":
			kind = "empty"
		case strings.Contains(c.Message.Content, "<think>"):
			kind = "think"
		case c.FinishReason == "length" && a.Usage.CompletionTokens == 3000:
			kind = "loop"
		case c.FinishReason == "length":
			kind = "truncate"
		}
		counts[kind]++
		if i < 5 {
			again, _ := askPlain(t, base, fmt.Sprintf("rate %d", i), 3000, false)
			if again.Choices[0].Message.Content != c.Message.Content {
				t.Errorf("prompt %d answered differently twice", i)
			}
		}
	}
	for _, k := range []string{"loop", "empty", "think", "truncate", "none"} {
		if got := float64(counts[k]) / n; got < 0.13 || got > 0.27 {
			t.Errorf("%s: %d of %d, want about 20%%", k, counts[k], n)
		}
	}
	if _, err := Start(t.Context(), Config{LoopRate: 0.6, EmptyRate: 0.6}, 1); err == nil {
		t.Error("rates adding up to 1.2 were accepted")
	}
}

func xxh3Canonical(p Prompt) uint64 { return xxh3.Hash(p.AppendCanonical(nil)) }
