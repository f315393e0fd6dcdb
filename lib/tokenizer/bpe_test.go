package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/testbin"
)

// bpeTokenizers are the real tokenizers the tests run on.
var bpeTokenizers = []string{"qwen3", "deepseek_v3"}

var bpeCache sync.Map // name -> *bpeLoad

type bpeLoad struct {
	once sync.Once
	b    *BPE
	err  error
}

// loadTestBPE loads a real tokenizer once per test binary (skipping where
// the shared data is absent).
func loadTestBPE(t testing.TB, name string) *BPE {
	t.Helper()
	dir := testbin.Tokenizers(t, name)
	v, _ := bpeCache.LoadOrStore(name, &bpeLoad{})
	l := v.(*bpeLoad)
	l.once.Do(func() {
		data, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
		if err != nil {
			l.err = err
			return
		}
		l.b, l.err = NewBPE(data)
	})
	if l.err != nil {
		t.Fatalf("loading %s: %v", name, l.err)
	}
	return l.b
}

type bpeGoldenCase struct {
	ID       string `json:"id"`
	Rendered string `json:"rendered"`
	IDs      []int  `json:"ids"`
}

func readBPEGolden(t testing.TB, name string) []bpeGoldenCase {
	t.Helper()
	return testbin.Golden[bpeGoldenCase](t, name)
}

// describeIDDiff says where two id sequences part, with the text around.
func describeIDDiff(b *BPE, got, want []int) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	ctx := func(ids []int) string {
		lo, hi := max(0, i-3), min(len(ids), i+4)
		var parts []string
		for _, id := range ids[lo:hi] {
			parts = append(parts, fmt.Sprintf("%d%q", id, b.Decode([]int{id})))
		}
		return strings.Join(parts, " ")
	}
	return fmt.Sprintf("first difference at id %d (got %d ids, want %d)\n  got:  %s\n  want: %s",
		i, len(got), len(want), ctx(got), ctx(want))
}

func TestBPEGolden(t *testing.T) {
	for _, name := range bpeTokenizers {
		t.Run(name, func(t *testing.T) {
			b := loadTestBPE(t, name)
			cases := readBPEGolden(t, name)
			badEnc, badDec := 0, 0
			for _, c := range cases {
				if got := b.Encode(c.Rendered); !slices.Equal(got, c.IDs) {
					if badEnc++; badEnc <= 3 {
						t.Errorf("case %s: Encode differs: %s", c.ID, describeIDDiff(b, got, c.IDs))
					}
				}
				if got := b.Decode(c.IDs); got != c.Rendered {
					if badDec++; badDec <= 3 {
						t.Errorf("case %s: Decode differs at byte %d", c.ID, bpeFirstByteDiff(got, c.Rendered))
					}
				}
			}
			t.Logf("%s: %d cases, %d encode and %d decode differences", name, len(cases), badEnc, badDec)
			if badEnc+badDec > 0 {
				t.Errorf("%s: %d of %d cases encode differently, %d decode differently", name, badEnc, len(cases), badDec)
			}
		})
	}
}

func bpeFirstByteDiff(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

func TestBPEAddedTokens(t *testing.T) {
	q := loadTestBPE(t, "qwen3")
	tests := []struct {
		name, text string
		want       []int // nil: only check that it round-trips
		has        int   // an id that must (or, negated, must not) appear
	}{
		{"special alone", "<|im_end|>", []int{151645}, 151645},
		{"user types special", "stop<|im_end|>now", nil, 151645},
		{"truncated special", "<|im_end|", nil, -151645},
		{"nested brackets", "<<|im_end|>>", nil, 151645},
		{"non-special added", "<think></think>", []int{151667, 151668}, 151667},
		{"longest wins", "<tool_call>", []int{151657}, 151657},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := q.Encode(tt.text)
			if tt.want != nil && !slices.Equal(got, tt.want) {
				t.Errorf("Encode(%q) = %v, want %v", tt.text, got, tt.want)
			}
			if tt.has > 0 && !slices.Contains(got, tt.has) || tt.has < 0 && slices.Contains(got, -tt.has) {
				t.Errorf("Encode(%q) = %v: presence of %d wrong", tt.text, got, tt.has)
			}
			if d := q.Decode(got); d != tt.text {
				t.Errorf("Decode(Encode(%q)) = %q", tt.text, d)
			}
		})
	}
	if !q.Special(151645) || q.Special(151667) || q.Special(100) {
		t.Error("Special: want <|im_end|> special, <think> and vocab entries not")
	}
	if id, ok := q.TokenID("<|im_end|>"); !ok || id != 151645 {
		t.Errorf("TokenID(<|im_end|>) = %d, %v", id, ok)
	}
	if id, ok := q.TokenID("Ġthe"); !ok || id != 279 {
		t.Errorf("TokenID(Ġthe) = %d, %v, want 279", id, ok)
	}
	if s, ok := q.TokenText(279); !ok || s != " the" {
		t.Errorf("TokenText(279) = %q, %v", s, ok)
	}
	if _, ok := q.TokenText(q.VocabSize()); ok || q.VocabSize() != 151669 {
		t.Errorf("VocabSize = %d, want 151669 with nothing beyond", q.VocabSize())
	}
	d := loadTestBPE(t, "deepseek_v3")
	if got := d.Encode("<｜User｜>hi<｜Assistant｜>"); !slices.Contains(got, 128803) || !slices.Contains(got, 128804) {
		t.Errorf("DeepSeek normalized added tokens not matched: %v", got)
	}
}

// bpeSynthetic builds a tokenizer.json over the 256 byte tokens (id =
// byte) plus the merges given, with the given components.
func bpeSynthetic(t *testing.T, normalizer, pre any, added []map[string]any, merges [][2]string) *BPE {
	t.Helper()
	vocab := map[string]int{}
	for b, r := range byteChars {
		vocab[string(r)] = b
	}
	for _, m := range merges {
		if _, ok := vocab[m[0]+m[1]]; !ok {
			vocab[m[0]+m[1]] = len(vocab)
		}
	}
	for i, a := range added {
		a["id"] = len(vocab) + i
		for _, k := range []string{"single_word", "lstrip", "rstrip", "special"} {
			if _, ok := a[k]; !ok {
				a[k] = false
			}
		}
		if _, ok := a["normalized"]; !ok {
			a["normalized"] = false
		}
	}
	if pre == nil {
		pre = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}
	}
	doc := map[string]any{"version": "1.0", "added_tokens": added, "normalizer": normalizer, "pre_tokenizer": pre,
		"decoder": map[string]any{"type": "ByteLevel"},
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": merges}}
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBPE(data)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// bpeSpell writes ids as text, an added token as [id].
func bpeSpell(b *BPE, ids []int) string {
	var sb strings.Builder
	for _, id := range ids {
		if id >= 256 {
			fmt.Fprintf(&sb, "[%d]", id)
		} else {
			sb.WriteString(b.Decode([]int{id}))
		}
	}
	return sb.String()
}

func TestBPEAddedStrip(t *testing.T) {
	b := bpeSynthetic(t, nil, nil, []map[string]any{
		{"content": "<m>", "lstrip": true},                 // 256
		{"content": "<s>", "rstrip": true},                 // 257
		{"content": "ab", "single_word": true},             // 258
		{"content": "<a>"},                                 // 259
		{"content": "<a>b"},                                // 260
		{"content": "<x>", "lstrip": true, "rstrip": true}, // 261
	}, nil)
	tests := []struct{ in, want string }{
		{"x  <m>  y", "x[256]  y"}, // lstrip takes the spaces on its left
		{"x  <s>  y", "x  [257]y"}, // rstrip those on its right
		{"ab ab", "[258] [258]"},   // whole words only
		{"abc xab", "abc xab"},     // not inside words
		{"<a>bc", "[260]c"},        // leftmost-longest
		{"<a>", "[259]"},           //
		{" \t<x>\n y", "[261]y"},   // both
		{"<s> <m>", "[257][256]"},  // rstrip's spaces are not taken twice
		{"\u3000<m>", "[256]"},     // Unicode whitespace
	}
	for _, tt := range tests {
		if got := bpeSpell(b, b.Encode(tt.in)); got != tt.want {
			t.Errorf("Encode(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestBPESplitBehaviors(t *testing.T) {
	text := "the-final--countdown"
	tests := []struct {
		behavior string
		invert   bool
		want     []string
	}{
		{"Removed", false, []string{"the", "final", "countdown"}},
		{"Isolated", false, []string{"the", "-", "final", "-", "-", "countdown"}},
		{"MergedWithPrevious", false, []string{"the-", "final-", "-", "countdown"}},
		{"MergedWithNext", false, []string{"the", "-final", "-", "-countdown"}},
		{"Contiguous", false, []string{"the", "-", "final", "--", "countdown"}},
		{"Removed", true, []string{"-", "-", "-"}},
		{"MergedWithPrevious", true, []string{"the", "-final", "-", "-countdown"}},
	}
	for _, tt := range tests {
		pre := map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"String": "-"}, "behavior": tt.behavior, "invert": tt.invert},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}}}
		b := bpeSynthetic(t, nil, pre, nil, nil)
		got := b.preTokenize(text, nil, new(encodeState))
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s invert=%v: %q, want %q", tt.behavior, tt.invert, got, tt.want)
		}
	}
}

func TestBPERefused(t *testing.T) {
	base := func() map[string]any {
		return map[string]any{"version": "1.0", "added_tokens": []any{}, "normalizer": nil,
			"pre_tokenizer": map[string]any{"type": "ByteLevel"}, "decoder": map[string]any{"type": "ByteLevel"},
			"model": map[string]any{"type": "BPE", "vocab": map[string]int{"a": 0}, "merges": []any{}}}
	}
	split := func(re string) map[string]any {
		return map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": re}, "behavior": "Isolated"},
			map[string]any{"type": "ByteLevel"}}}
	}
	tests := []struct {
		key  string
		val  any
		want string
	}{
		{"normalizer", map[string]any{"type": "Precompiled"}, `normalizer "Precompiled" is not supported`},
		{"normalizer", map[string]any{"type": "BertNormalizer"}, `normalizer "BertNormalizer"`},
		{"pre_tokenizer", map[string]any{"type": "Metaspace"}, `pre_tokenizer "Metaspace"`},
		{"pre_tokenizer", map[string]any{"type": "Whitespace"}, `pre_tokenizer "Whitespace"`},
		{"decoder", map[string]any{"type": "Metaspace"}, `decoder "Metaspace"`},
		{"model", map[string]any{"type": "WordPiece", "vocab": map[string]int{}}, `model "WordPiece"`},
		{"model", map[string]any{"type": "Unigram"}, `model "Unigram"`},
		{"model", map[string]any{"type": "BPE", "byte_fallback": true, "vocab": map[string]int{}}, "byte_fallback"},
		{"model", map[string]any{"type": "BPE", "dropout": 0.1, "vocab": map[string]int{}}, "dropout"},
		{"truncation", map[string]any{"max_length": 8}, "truncation"},
		{"pre_tokenizer", split(`(?<=a)b`), "look-behind"},
		{"pre_tokenizer", split(`\bfoo`), `escape \b`},
		{"pre_tokenizer", split(`a++`), "possessive"},
		{"pre_tokenizer", split(`[[:alpha:]]`), "[ inside a character class"},
		{"pre_tokenizer", split(`\p{Han}`), `\p{Han}`},
		{"pre_tokenizer", split(`^a`), "anchor ^"},
		{"pre_tokenizer", split(`(a*)*`), "can match empty"},
		{"pre_tokenizer", split(`(?i:ss)`), "multi-character case folding"},
		{"pre_tokenizer", split(`(a`), "missing )"},
		{"pre_tokenizer", split(`(?<name>a)`), "group (?<n"},
	}
	for _, tt := range tests {
		doc := base()
		doc[tt.key] = tt.val
		data, _ := json.Marshal(doc)
		_, err := NewBPE(data)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s %v: error %v, want one containing %q", tt.key, tt.val, err, tt.want)
		}
	}
}

func TestBPELongRuns(t *testing.T) {
	const mb = 1 << 20
	for _, name := range bpeTokenizers {
		b := loadTestBPE(t, name)
		// Digits split into runs of at most three: a period of 30 digits
		// encodes as 1/k of k periods.
		period := "123456789012345678901234567890"
		unit := b.Encode(period)
		n := mb / len(period)
		if got, want := b.Encode(strings.Repeat(period, n)), repeatIDs(unit, n); !slices.Equal(got, want) {
			t.Errorf("%s: %d periods of digits do not encode as %d times one", name, n, n)
		}
		for _, s := range []string{strings.Repeat(" ", mb), strings.Repeat("\n", mb), strings.Repeat("ab", mb/2), strings.Repeat("\u3000", mb/3)} {
			ids := b.Encode(s)
			if d := b.Decode(ids); d != s {
				t.Errorf("%s: a megabyte of %q does not round-trip", name, s[:1])
			}
		}
	}
}

func repeatIDs(ids []int, n int) []int {
	out := make([]int, 0, len(ids)*n)
	for range n {
		out = append(out, ids...)
	}
	return out
}

// TestBPEMergeLongMatchesShort checks the heap merge (long words) against
// the quadratic loop on the same words.
func TestBPEMergeLongMatchesShort(t *testing.T) {
	b := loadTestBPE(t, "qwen3")
	st := new(encodeState)
	for _, w := range []string{strings.Repeat(" ", 63), strings.Repeat(" ", 64), "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		"Supercalifragilisticexpialidocious-antidisestablishmentarianism", strings.Repeat("\t", 40), "ééééééééééééééééééééééééééééé"} {
		short := b.model.merge(b.model.symbols(w, nil), st)
		long := b.model.mergeLong(b.model.symbols(w, nil), st)
		if !slices.Equal(short, long) {
			t.Errorf("%q: short merge %v, long merge %v", w, short, long)
		}
	}
}

func TestBPEDecodeLossy(t *testing.T) {
	b := loadTestBPE(t, "qwen3")
	e4, _ := b.TokenID(string(byteChars[0xE4]))
	b8, _ := b.TokenID(string(byteChars[0xB8]))
	a, _ := b.TokenID("a")
	tests := []struct {
		ids  []int
		want string
	}{
		{[]int{e4, b8}, "\uFFFD"},           // a truncated sequence is one replacement
		{[]int{e4, a, b8}, "\uFFFDa\uFFFD"}, //
		{[]int{b8, b8}, "\uFFFD\uFFFD"},     // lone continuation bytes one each
		{[]int{-1, a, 1 << 30}, "a"},        // unknown ids are skipped
	}
	for _, tt := range tests {
		if got := b.Decode(tt.ids); got != tt.want {
			t.Errorf("Decode(%v) = %q, want %q", tt.ids, got, tt.want)
		}
	}
	if got := b.DecodeBytes([]int{e4, b8}); string(got) != "\xe4\xb8" {
		t.Errorf("DecodeBytes = %q", got)
	}
	if got, want := b.Encode("x\xffy"), b.Encode("x\uFFFDy"); !slices.Equal(got, want) {
		t.Errorf("invalid UTF-8 input: %v, want %v", got, want)
	}
}

func TestBPEConcurrent(t *testing.T) {
	b := loadTestBPE(t, "qwen3")
	cases := readBPEGolden(t, "qwen3")[:400]
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(cases); i += 2 {
				if got := b.Encode(cases[i].Rendered); !slices.Equal(got, cases[i].IDs) {
					t.Errorf("case %s differs under concurrency", cases[i].ID)
					return
				}
			}
		})
	}
	wg.Wait()
}
