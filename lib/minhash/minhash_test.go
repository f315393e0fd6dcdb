package minhash

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

var defaults = Params{Bands: DefaultBands, Rows: DefaultRows, Shingle: DefaultShingle, Seed: DefaultSeed}

func words(text string) []string {
	var out []string
	Words([]byte(text), func(w []byte) { out = append(out, string(w)) })
	return out
}

func TestWords(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"empty", "", nil},
		{"only white space", " \t\n\r\v\f", nil},
		{"ascii", "  Hello, world!\tfoo\nbar ", []string{"Hello,", "world!", "foo", "bar"}},
		{"unicode white space", "a\u00a0b\u2003c\u3000d\u0085e", []string{"a", "b", "c", "d", "e"}},
		{"accents stay in the word", "café naïve", []string{"café", "naïve"}},
		{"CJK: a character a word", "写一首诗", []string{"写", "一", "首", "诗"}},
		{"CJK beside Latin", "Go语言 is 好", []string{"Go", "语", "言", "is", "好"}},
		{"kana and hangul", "ひらがな 한국", []string{"ひ", "ら", "が", "な", "한", "국"}},
		{"invalid UTF-8 is kept in its word", "a\xffb c", []string{"a\xffb", "c"}},
		{"emoji", "hi 👋 there", []string{"hi", "👋", "there"}},
	} {
		if got := words(tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Words(%q) = %q, want %q", tc.name, tc.text, got, tc.want)
		}
	}
}

func TestShingles(t *testing.T) {
	h := NewHasher(Params{Bands: 2, Rows: 2, Shingle: 3, Seed: 1})
	count := func(text string) int { return len(h.Shingles(nil, []byte(text))) }
	same := func(a, b string) bool {
		return slices.Equal(h.Shingles(nil, []byte(a)), h.Shingles(nil, []byte(b)))
	}
	for _, tc := range []struct {
		name string
		text string
		want int
	}{
		{"empty: one empty shingle", "", 1},
		{"white space only: as empty", "  \n ", 1},
		{"one word, below the shingle size", "hello", 1},
		{"two words, below the shingle size", "hello world", 1},
		{"exactly the shingle size", "a b c", 1},
		{"one more word, one more shingle", "a b c d", 2},
		{"ten words", "a b c d e f g h i j", 8},
		{"CJK counts characters", "写一首关于海的诗", 6},
	} {
		if got := count(tc.text); got != tc.want {
			t.Errorf("%s: %q has %d shingles, want %d", tc.name, tc.text, got, tc.want)
		}
	}
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"a b c d", "a  b\tc\nd", true},               // white space between words does not count
		{" a b c d ", "a b c d", true},                // nor around them
		{"a b c d", "a b c e", false},                 // a word does
		{"a b", "a b c", false},                       // a short text is not a prefix's shingle
		{"", "a", false},                              // empty is not one word
		{"a b", "b a", false},                         // order counts
		{"a\u00a0b c", "a b c", true},                 // a no-break space is white space
		{"Hello world foo", "hello world foo", false}, // case is --normalize's business
	} {
		if got := same(tc.a, tc.b); got != tc.want {
			t.Errorf("Shingles(%q) == Shingles(%q) is %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	// A shingle that recurs is hashed each time, to the same value.
	sh := h.Shingles(nil, []byte("x y z x y z x y z"))
	if len(sh) != 7 || sh[0] != sh[3] || sh[0] != sh[6] || sh[0] == sh[1] {
		t.Errorf("recurring shingles: %x", sh)
	}
}

func TestParamsValidate(t *testing.T) {
	for _, tc := range []struct {
		p  Params
		ok bool
	}{
		{defaults, true},
		{Params{Bands: 1, Rows: 1, Shingle: 1}, true},
		{Params{Bands: 0, Rows: 8, Shingle: 5}, false},
		{Params{Bands: 14, Rows: 0, Shingle: 5}, false},
		{Params{Bands: 14, Rows: 8, Shingle: 0}, false},
		{Params{Bands: 14, Rows: 8, Shingle: MaxShingle + 1}, false},
		{Params{Bands: 64, Rows: 17, Shingle: 5}, false}, // K 1088 > MaxK
		{Params{Bands: -1, Rows: -8, Shingle: 5}, false},
	} {
		if err := tc.p.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v, want ok %v", tc.p, err, tc.ok)
		}
	}
}

// TestCandidateProbability pins the S-curve of the defaults that the help
// text and the README state.
func TestCandidateProbability(t *testing.T) {
	for _, tc := range []struct{ j, want float64 }{
		{0.5, 0.0533}, {0.6, 0.2115}, {0.7, 0.5650}, {0.8, 0.9237}, {0.9, 0.9996},
	} {
		if got := defaults.CandidateProbability(tc.j); math.Abs(got-tc.want) > 5e-4 {
			t.Errorf("P(candidate | J=%g) = %.4f, want %.4f", tc.j, got, tc.want)
		}
	}
}

// TestNeed is the threshold rule: a pair is a near-duplicate when at least
// Need(threshold, K) of its K positions agree, the share being >= threshold.
func TestNeed(t *testing.T) {
	for _, tc := range []struct {
		threshold float64
		k, want   int
	}{
		{0.8, 112, 90}, // 89.6 rounds up
		{0.8, 10, 8},   // exactly 8: at the threshold counts
		{0.75, 4, 3},
		{0.7, 10, 7}, // 0.7*10 is 6.999... in floating point
		{1, 112, 112},
		{0.001, 112, 1},
		{0.5, 3, 2},
	} {
		if got := Need(tc.threshold, tc.k); got != tc.want {
			t.Errorf("Need(%g, %d) = %d, want %d", tc.threshold, tc.k, got, tc.want)
		}
	}
}

// TestThresholdRule: a kept signature that agrees in exactly Need
// positions (and so shares a band) is a match, one agreeing in one fewer
// is not, and the match reports the similarity.
func TestThresholdRule(t *testing.T) {
	p := Params{Bands: 5, Rows: 2, Shingle: 1, Seed: 1} // K 10
	base := Signature{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	changed := func(n int) Signature { // the last n positions differ
		s := slices.Clone(base)
		for i := range n {
			s[len(s)-1-i] += 100
		}
		return s
	}
	for _, tc := range []struct {
		threshold float64
		differ    int
		match     bool
	}{
		{0.8, 2, true},  // 8/10
		{0.8, 3, false}, // 7/10
		{0.7, 3, true},
		{1, 0, true},
		{1, 1, false},
		{0.5, 5, true},
	} {
		x := NewIndex(p, Options{})
		if _, err := x.Insert(base, []byte(`"kept"`)); err != nil {
			t.Fatal(err)
		}
		m, ok, err := x.Query(changed(tc.differ), tc.threshold)
		if err != nil {
			t.Fatal(err)
		}
		if ok != tc.match {
			t.Errorf("threshold %g, %d of 10 differ: match %v, want %v", tc.threshold, tc.differ, ok, tc.match)
		}
		if ok && (string(m.ID) != `"kept"` || m.Similarity != float64(10-tc.differ)/10 || m.Ref != 0) {
			t.Errorf("threshold %g: match %+v", tc.threshold, m)
		}
	}
	// Agreeing in 8 of 10 positions but in no whole band is no candidate:
	// LSH never compares them.
	x := NewIndex(p, Options{})
	x.Insert(base, nil)
	other := slices.Clone(base)
	other[0], other[2] = 0, 0
	other[4], other[6], other[8] = 0, 0, 0
	if _, ok, _ := x.Query(other, 0.5); ok {
		t.Error("a signature sharing no band was matched")
	}
}

// randomText is n words drawn from a vocabulary of vocab words.
func randomText(r *rand.Rand, n, vocab int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("w%d", r.IntN(vocab))
	}
	return out
}

// jaccard is the exact Jaccard similarity of two texts' shingle sets.
func jaccard(h *Hasher, a, b []byte) float64 {
	sa, sb := map[uint64]bool{}, map[uint64]bool{}
	for _, s := range h.Shingles(nil, a) {
		sa[s] = true
	}
	for _, s := range h.Shingles(nil, b) {
		sb[s] = true
	}
	both := 0
	for s := range sa {
		if sb[s] {
			both++
		}
	}
	return float64(both) / float64(len(sa)+len(sb)-both)
}

// edit replaces a share of a text's words with fresh ones, which lowers the
// Jaccard similarity of their shingles by a drawn amount.
func edit(r *rand.Rand, text []string, share float64) []string {
	out := slices.Clone(text)
	for i := range out {
		if r.Float64() < share {
			out[i] = fmt.Sprintf("x%d", r.Int())
		}
	}
	return out
}

// TestEstimateAndDrops is the property the drop rule rests on, over many
// random pairs: the estimate is within 5 standard errors of the exact
// Jaccard similarity; a pair below J=0.6 is dropped (matched at the default
// threshold 0.8) at most once in 100 (the bound; the binomial tail
// gives about 1e-5 at J=0.6); a pair at J>=0.9 is found at least 95 times
// in 100 (0.9996 x 0.9998 expected).
func TestEstimateAndDrops(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	h := NewHasher(defaults)
	var low, lowDropped, high, highFound int
	for i := range 3000 {
		a := randomText(r, 20+r.IntN(300), 5000)
		b := edit(r, a, []float64{0.005, 0.01, 0.02, 0.05, 0.1, 0.2}[i%6])
		ta, tb := []byte(strings.Join(a, " ")), []byte(strings.Join(b, " "))
		j := jaccard(h, ta, tb)
		sa, sb := h.Sign(nil, ta), h.Sign(nil, tb)
		est := similarity(sa, sb)
		if se := math.Sqrt(j * (1 - j) / float64(len(sa))); math.Abs(est-j) > 5*se+1e-9 {
			t.Errorf("pair %d: estimate %.3f, exact %.3f: beyond 5 standard errors (%.3f)", i, est, j, se)
		}
		x := NewIndex(defaults, Options{})
		x.Insert(sa, nil)
		_, matched, err := x.Query(sb, 0.8)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case j < 0.6:
			low++
			if matched {
				lowDropped++
			}
		case j >= 0.9:
			high++
			if matched {
				highFound++
			}
		}
	}
	if low < 300 || high < 300 {
		t.Fatalf("the draw made %d pairs below 0.6 and %d at 0.9 or above: too few to judge", low, high)
	}
	if lowDropped*100 > low {
		t.Errorf("%d of %d pairs below J=0.6 matched: more than 1%%", lowDropped, low)
	}
	if highFound*100 < 95*high {
		t.Errorf("%d of %d pairs at J>=0.9 matched: fewer than 95%%", highFound, high)
	}
	t.Logf("below 0.6: %d of %d matched; at 0.9 or above: %d of %d", lowDropped, low, highFound, high)
}

// TestNeverItself: a query never matches a text not yet inserted, however
// similar the index's texts are to each other, and once inserted a text
// matches itself, at similarity 1, as the earliest of equal copies.
func TestNeverItself(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	h := NewHasher(defaults)
	x := NewIndex(defaults, Options{})
	for i := range 500 {
		text := []byte(strings.Join(randomText(r, 1+r.IntN(60), 200000), " "))
		sig := h.Sign(nil, text)
		if m, ok, _ := x.Query(sig, 0.8); ok {
			t.Fatalf("text %d matched kept text %d (similarity %.3f) before it was inserted", i, m.Ref, m.Similarity)
		}
		ref, err := x.Insert(sig, []byte(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		x.Insert(sig, []byte("copy"))
		m, ok, _ := x.Query(h.Sign(nil, text), 1)
		if !ok || m.Ref != ref || m.Agree != len(sig) || string(m.ID) != fmt.Sprint(i) {
			t.Fatalf("text %d: after insertion, Query gives %+v %v, want itself (ref %d) at similarity 1", i, m, ok, ref)
		}
	}
}

// TestSeedDeterminism: a seed gives the same signature every time, with a
// fresh Hasher; another seed gives another.
func TestSeedDeterminism(t *testing.T) {
	text := []byte("Write a program that reads numbers from a file and prints their sum and mean.")
	a := NewHasher(defaults).Sign(nil, text)
	b := NewHasher(defaults).Sign(nil, text)
	other := defaults
	other.Seed = 2
	c := NewHasher(other).Sign(nil, text)
	if !slices.Equal(a, b) || slices.Equal(a, c) || len(a) != 112 {
		t.Fatalf("seed 1 twice: equal %v; seed 2: equal %v; length %d", slices.Equal(a, b), slices.Equal(a, c), len(a))
	}
	// Pinned values: a change of hash family or permutation must be seen
	// (states saved with --state hold signatures).
	if got := fmt.Sprint(a[:4]); got != pinnedSignature {
		t.Errorf("signature starts %s, pinned %s", got, pinnedSignature)
	}
}

const pinnedSignature = "[1499853579 41204504 78541806 82970736]"

// FuzzSign: any text (any bytes) signs without panicking, the same each
// time, to K values; white space between words does not change it; a text
// matches its own signature at similarity 1.
func FuzzSign(f *testing.F) {
	for _, s := range []string{"", " ", "a", "a b c d e f", "写一首诗", "a\xffb", "x\u00a0y z", strings.Repeat("w ", 100)} {
		f.Add(s)
	}
	h := NewHasher(defaults)
	f.Fuzz(func(t *testing.T, s string) {
		a := h.Sign(nil, []byte(s))
		b := h.Sign(nil, []byte(s))
		if len(a) != defaults.K() || !slices.Equal(a, b) {
			t.Fatalf("%q: signature of length %d, equal twice %v", s, len(a), slices.Equal(a, b))
		}
		spaced := strings.Join(words(s), "  \t")
		if c := h.Sign(nil, []byte(spaced)); !slices.Equal(a, c) {
			t.Fatalf("%q and %q: the same words, other signatures", s, spaced)
		}
		x := NewIndex(defaults, Options{})
		x.Insert(a, nil)
		if m, ok, _ := x.Query(b, 1); !ok || m.Similarity != 1 {
			t.Fatalf("%q: no match with itself", s)
		}
	})
}

// TestMin4: the platform's min4 (assembly on amd64) agrees with the Go
// reference on random shingles and coefficients, empty input included.
func TestMin4(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for n := range 300 {
		sh := make([]uint64, n%37)
		for i := range sh {
			sh[i] = r.Uint64()
		}
		var ab [8]uint64
		for i := range ab {
			ab[i] = r.Uint64()
		}
		if n%50 == 0 {
			ab[4] = math.MaxUint64 // an addend that wraps
		}
		var got, want [4]uint64
		min4(sh, &ab, &got)
		min4Go(sh, &ab, &want)
		if got != want {
			t.Fatalf("%d shingles: min4 %x, the Go reference %x", len(sh), got, want)
		}
	}
}

// similarity is the share of positions where a and b agree: the estimate
// of their texts' Jaccard similarity. Signatures of other lengths are 0.
func similarity(a, b Signature) float64 {
	if len(a) != len(b) || len(a) == 0 {
		return 0
	}
	return float64(Agree(a, b)) / float64(len(a))
}
