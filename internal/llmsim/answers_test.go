package llmsim

import (
	"slices"
	"strings"
	"testing"
)

func TestAnswers(t *testing.T) {
	a := Answers(200, 7)
	if len(a) != 200 {
		t.Fatalf("%d answers, want 200", len(a))
	}
	if !slices.Equal(a, Answers(200, 7)) {
		t.Fatal("two calls with one seed differ")
	}
	if b := Answers(200, 8); slices.Equal(a, b) || slices.Equal(a[:1], b[:1]) {
		t.Fatal("seeds 7 and 8 give the same answers")
	}
	known := map[string]bool{}
	for _, w := range vocabulary {
		known[w] = true
	}
	var lists, code, shortest, longest int
	shortest = 1 << 30
	for i, s := range a {
		shortest, longest = min(shortest, len(s)), max(longest, len(s))
		inCode := false
		for _, line := range strings.Split(s, "\n") {
			switch {
			case strings.HasPrefix(line, "```python"):
				inCode = true
				code++
				continue
			case line == "```":
				inCode = false
				continue
			case inCode || line == "":
				continue
			case strings.HasPrefix(line, "1."):
				lists++
			}
			for _, f := range strings.Fields(line) {
				w := strings.TrimRight(strings.TrimLeft(f, "0123456789"), ".")
				if w != "" && !known[w] {
					t.Fatalf("answer %d: %q is no word of the vocabulary in line %q", i, f, line)
				}
			}
		}
		if inCode {
			t.Fatalf("answer %d: a code block not closed:\n%s", i, s)
		}
	}
	if shortest < 400 || longest > 5000 || longest < 3000 { // the last block passes the size drawn
		t.Errorf("answers of %d to %d bytes, want 0.4 to about 4 kB", shortest, longest)
	}
	if lists < 50 || code < 50 {
		t.Errorf("%d numbered lists and %d code blocks in 200 answers", lists, code)
	}
}

// TestAnswersWriteTheServersWords: a paragraph of Answers is the text a
// simulated server writes after the digest for the same seed of words.
func TestAnswersWriteTheServersWords(t *testing.T) {
	for _, h := range []uint64{0, 1, 0x9e3779b97f4a7c15, 1 << 63} {
		server := string(appendTokens(nil, "digest", h, 0, 40))
		var own []byte
		for k := 1; k < 40; k++ {
			own = appendWord(own, h, k)
		}
		if server != "digest"+string(own) {
			t.Fatalf("seed %d: the server writes %q, the words are %q", h, server, own)
		}
	}
}

func TestProse(t *testing.T) {
	p := Prose(100 << 10)
	if len(p) < 100<<10 {
		t.Fatalf("%d bytes, want 100 KiB or more", len(p))
	}
	if !strings.HasPrefix(p, Answers(1, 1)[0]) {
		t.Error("Prose does not start with seed 1's answers")
	}
}

func BenchmarkAnswers(b *testing.B) {
	var n int64
	for _, a := range Answers(200, 1) {
		n += int64(len(a))
	}
	b.SetBytes(n)
	for b.Loop() {
		Answers(200, 1)
	}
}
