package corpus

import (
	"math/rand/v2"
	"slices"
	"strings"
)

// Planted near-duplicates: pairs of prompts whose Jaccard similarity is
// known exactly, to measure a near-duplicate finder's precision and
// recall. A base text is changed by one kind of edit, repeated until the
// pair's similarity falls in the bucket asked for; the similarity is then
// computed exactly on the two shingle sets, never estimated.
//
// Words and shingles are those of lib/minhash (runs of non-white-space;
// Shingle consecutive words; a text with fewer words is one shingle of
// them all). The planted texts are ASCII, so minhash's rule that a CJK
// character is a word alone never applies.

// Edit kinds.
const (
	EditSubstitute = "substitute" // a word replaced by another
	EditInsert     = "insert"     // a word inserted
	EditReorder    = "reorder"    // a run of words moved elsewhere
)

// EditKinds are the kinds PlantNear uses, in turn.
var EditKinds = []string{EditSubstitute, EditInsert, EditReorder}

// NearPair is a planted pair: Variant is Base after Edits edits of Kind,
// and Jaccard their exact similarity over Shingle-word shingles of
// Prefix+text.
type NearPair struct {
	Base, Variant string
	Kind          string
	Edits         int
	Jaccard       float64
	Bucket        int // index into NearOptions.Buckets: Buckets[i] <= Jaccard < Buckets[i+1]
}

// NearOptions say what PlantNear makes.
type NearOptions struct {
	Shingle int // words in a shingle
	// Prefix is put before each text when the similarity is computed: the
	// rest of what the finder compares (e.g. the role line dedup --near
	// puts before a message's content).
	Prefix string
	// Buckets are the bounds of the similarity buckets, ascending, from 0
	// to 1; a pair of similarity 1 (no edit) falls in the last one.
	Buckets []float64
	// Words bounds a base text's length in words (lognormal around Median).
	Median, MinWords, MaxWords int
}

// DefaultNearBuckets cut the similarities where a finder's goals are
// stated: below 0.6 (must not be dropped), 0.6-0.8, 0.8-0.9 and at least
// 0.9 (must be found).
var DefaultNearBuckets = []float64{0, 0.3, 0.6, 0.7, 0.8, 0.9, 1}

// PlantNear returns n pairs, their buckets taken in turn (so each holds
// about n/len(buckets) pairs) and their edit kinds in turn within each;
// the same seed gives the same pairs. The bases are independent texts of
// the corpus's English vocabulary: two bases share a shingle by chance
// only.
func PlantNear(seed uint64, n int, o NearOptions) []NearPair {
	rng := rand.New(rand.NewPCG(seed, 0x6e656172))
	buckets := len(o.Buckets) - 1
	pairs := make([]NearPair, 0, n)
	for i := 0; len(pairs) < n; i++ {
		bucket := i % buckets
		kind := EditKinds[(i/buckets)%len(EditKinds)]
		for {
			base := baseWords(rng, o)
			if p, ok := plantOne(rng, base, kind, bucket, o); ok {
				pairs = append(pairs, p)
				break
			}
		}
	}
	return pairs
}

// baseWords draws a base text's words.
func baseWords(rng *rand.Rand, o NearOptions) []string {
	n := lognormal(rng, float64(o.Median), 0.5, o.MinWords, o.MaxWords)
	words := make([]string, n)
	for i := range words {
		words[i] = englishWords[rng.IntN(len(englishWords))]
	}
	return words
}

// plantOne edits base until its similarity falls in the bucket; false
// when an edit jumps past it (the caller draws another base).
func plantOne(rng *rand.Rand, base []string, kind string, bucket int, o NearOptions) (NearPair, bool) {
	lo, hi := o.Buckets[bucket], o.Buckets[bucket+1]
	baseText := strings.Join(base, " ")
	baseSet := ShingleSet(o.Prefix+baseText, o.Shingle)
	v := slices.Clone(base)
	for edits := 1; edits <= 4*len(base); edits++ {
		v = edit(rng, v, kind)
		text := strings.Join(v, " ")
		j := jaccardSets(baseSet, ShingleSet(o.Prefix+text, o.Shingle))
		switch {
		case text == baseText: // a run moved back where it was: edit again
		case j >= lo && (j < hi || (hi == 1 && j == 1)):
			return NearPair{Base: baseText, Variant: text, Kind: kind, Edits: edits, Jaccard: j, Bucket: bucket}, true
		case j < lo:
			return NearPair{}, false
		}
	}
	return NearPair{}, false
}

// edit applies one edit of kind to words.
func edit(rng *rand.Rand, words []string, kind string) []string {
	w := englishWords[rng.IntN(len(englishWords))]
	switch kind {
	case EditSubstitute:
		words[rng.IntN(len(words))] = "x" + w // never a vocabulary word: a real change
	case EditInsert:
		words = slices.Insert(words, rng.IntN(len(words)+1), "x"+w)
	case EditReorder:
		// Move a run of 1-8 words to another place.
		n := 1 + rng.IntN(min(8, len(words)))
		from := rng.IntN(len(words) - n + 1)
		run := slices.Clone(words[from : from+n])
		words = slices.Delete(words, from, from+n)
		words = slices.Insert(words, rng.IntN(len(words)+1), run...)
	}
	return words
}

// ShingleSet is the set of a text's shingles of k words.
func ShingleSet(text string, k int) map[string]struct{} {
	words := strings.Fields(text)
	set := map[string]struct{}{}
	if len(words) < k {
		set["\x00"+strings.Join(words, " ")] = struct{}{} // never equal to a shingle of k words
		return set
	}
	for i := 0; i+k <= len(words); i++ {
		set[strings.Join(words[i:i+k], " ")] = struct{}{}
	}
	return set
}

// Jaccard is the exact Jaccard similarity of two texts' k-word shingle sets.
func Jaccard(a, b string, k int) float64 {
	return jaccardSets(ShingleSet(a, k), ShingleSet(b, k))
}

func jaccardSets(a, b map[string]struct{}) float64 {
	both := 0
	for s := range a {
		if _, ok := b[s]; ok {
			both++
		}
	}
	union := len(a) + len(b) - both
	if union == 0 {
		return 1
	}
	return float64(both) / float64(union)
}
