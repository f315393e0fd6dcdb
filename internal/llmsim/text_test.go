package llmsim

import (
	"slices"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"

	"tokenmill/lib/record"
)

// A prompt's digest is the xxh3 of the canonical form tokenmill's record
// package gives the same prompt, so tests can compute it from a record.
func TestPromptDigestMatchesRecordCanonical(t *testing.T) {
	text := "Write a haiku about pipes."
	cases := []struct {
		name string
		rec  record.Prompt
		p    Prompt
	}{
		{"chat", record.Prompt{Messages: []record.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi ünïcode"}}},
			Prompt{Messages: []Message{{"system", "Be brief."}, {"user", "Hi ünïcode"}}}},
		{"one turn", record.Prompt{Messages: []record.Message{{Role: "user", Content: ""}}},
			Prompt{Messages: []Message{{"user", ""}}}},
		{"completion", record.Prompt{Prompt: &text}, Prompt{Text: text}},
	}
	for _, c := range cases {
		want := xxh3.Hash(c.rec.AppendCanonical(nil))
		got := PromptDigest(c.p)
		if got != string(appendHex64(nil, want)) || len(got) != 16 {
			t.Errorf("%s: digest %s, want xxh3 of the record canonical %016x", c.name, got, want)
		}
	}
	if PromptDigest(Prompt{InputIDs: []int{1, 2}}) == PromptDigest(Prompt{InputIDs: []int{12}}) {
		t.Error("token-id prompts [1 2] and [12] share a digest")
	}
}

func TestTokenEstimates(t *testing.T) {
	cases := []struct {
		p    Prompt
		want int
	}{
		{Prompt{Text: ""}, 0},
		{Prompt{Text: "a"}, 1},
		{Prompt{Text: "abcd"}, 1},
		{Prompt{Text: "abcde"}, 2},
		{Prompt{Text: strings.Repeat("x", 4000)}, 1000},
		{Prompt{InputIDs: []int{5, 6, 7}}, 3},
		// 3 for the assistant turn, 4 per message, plus the contents.
		{Prompt{Messages: []Message{{"user", "hello world!"}}}, 3 + 4 + 3},
		{Prompt{Messages: []Message{{"system", ""}, {"user", "日本語"}}}, 3 + 4 + 4 + 3},
	}
	for _, c := range cases {
		if got := PromptTokens(&c.p); got != c.want {
			t.Errorf("PromptTokens(%+v) = %d, want %d", c.p, got, c.want)
		}
	}
}

// Answer lengths are long-tailed like real answers: median about 600,
// mean about 1,000, a tail past 8,000.
func TestNaturalLengthDistribution(t *testing.T) {
	const n = 20000
	lengths := make([]int, n)
	sum := 0
	for i := range lengths {
		lengths[i] = NaturalLength(xxh3.HashString(strings.Repeat("p", i%97)+string(rune(i))), 0)
		sum += lengths[i]
	}
	slices.Sort(lengths)
	median, mean := lengths[n/2], float64(sum)/n
	over8k := n - sortSearch(lengths, 8000)
	if median < 500 || median > 700 {
		t.Errorf("median %d, want 500-700", median)
	}
	if mean < 900 || mean > 1100 {
		t.Errorf("mean %.0f, want 900-1100", mean)
	}
	if over8k == 0 || over8k > n/50 {
		t.Errorf("%d of %d answers past 8,000 tokens, want a thin tail", over8k, n)
	}
	if lengths[0] < 1 {
		t.Errorf("shortest answer %d tokens", lengths[0])
	}
	if a, b := NaturalLength(42, 0), NaturalLength(42, 1); a == b && NaturalLength(43, 0) == NaturalLength(43, 1) {
		t.Error("choices of one prompt get the same lengths")
	}
	// Pinned: a prompt's lengths are the same on every machine and in every
	// release, since benchmarks and chaos figures are compared across them.
	for _, c := range []struct {
		hash       uint64
		choice, at int
	}{{42, 0, 1364}, {42, 1, 316}, {0, 0, 1}, {1 << 63, 3, 148}} {
		if got := NaturalLength(c.hash, c.choice); got != c.at {
			t.Errorf("NaturalLength(%d, %d) = %d, was %d", c.hash, c.choice, got, c.at)
		}
	}
}

func sortSearch(sorted []int, v int) int {
	i, _ := slices.BinarySearch(sorted, v)
	return i
}

// An answer of n tokens is the digest and n-1 words, and any split of the
// tokens renders the same text (what streaming relies on).
func TestAnswerText(t *testing.T) {
	d := PromptDigest(Prompt{Text: "x"})
	h := uint64(99)
	whole := string(appendTokens(nil, d, h, 0, 50))
	if !strings.HasPrefix(whole, d) || len(strings.Fields(whole)) != 50 {
		t.Fatalf("answer %q: want the digest then 49 words", whole)
	}
	var parts []byte
	for _, cut := range [][2]int{{0, 1}, {1, 7}, {7, 7}, {7, 50}} {
		parts = appendTokens(parts, d, h, cut[0], cut[1])
	}
	if string(parts) != whole {
		t.Errorf("pieces %q != whole %q", parts, whole)
	}
}
