package corpus

import (
	"slices"
	"testing"
)

func testNearOptions() NearOptions {
	return NearOptions{Shingle: 5, Prefix: "user\n", Buckets: DefaultNearBuckets, Median: 80, MinWords: 20, MaxWords: 400}
}

// Every planted pair's similarity, computed again from its two texts, is
// the one stated and inside its bucket; every bucket and edit kind is
// planted; the same seed plants the same pairs.
func TestPlantNear(t *testing.T) {
	o := testNearOptions()
	pairs := PlantNear(7, 360, o)
	if len(pairs) != 360 {
		t.Fatalf("%d pairs, want 360", len(pairs))
	}
	type cell struct {
		bucket int
		kind   string
	}
	cells := map[cell]int{}
	bases := map[string]bool{}
	for i, p := range pairs {
		j := Jaccard(o.Prefix+p.Base, o.Prefix+p.Variant, o.Shingle)
		lo, hi := o.Buckets[p.Bucket], o.Buckets[p.Bucket+1]
		if j != p.Jaccard || j < lo || j > hi || (j == hi && hi < 1) {
			t.Fatalf("pair %d: Jaccard %v (stated %v), outside its bucket [%v, %v)", i, j, p.Jaccard, lo, hi)
		}
		if p.Edits < 1 || p.Base == p.Variant {
			t.Fatalf("pair %d: %d edits, variant equal to base: %v", i, p.Edits, p.Base == p.Variant)
		}
		if bases[p.Base] {
			t.Fatalf("pair %d: base planted twice", i)
		}
		bases[p.Base] = true
		cells[cell{p.Bucket, p.Kind}]++
	}
	for b := range len(o.Buckets) - 1 {
		for _, k := range EditKinds {
			if cells[cell{b, k}] == 0 {
				t.Errorf("no pair of kind %s in bucket %d", k, b)
			}
		}
	}
	if again := PlantNear(7, 360, o); !slices.Equal(again, pairs) {
		t.Fatal("the same seed planted other pairs")
	}
}

func TestJaccard(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		k    int
		want float64
	}{
		{"a b c d", "a b c d", 2, 1},
		{"a b c d", "a b c e", 2, 2.0 / 4},   // {ab bc cd} vs {ab bc ce}
		{"a b c d", "d c b a", 2, 0},         // reversed: no shingle shared
		{"a b", "a b", 3, 1},                 // shorter than k: one shingle, whole
		{"a b", "a b c", 3, 0},               // the whole of a short text is no shingle of a longer one
		{"a  b\tc", "a b c", 1, 1},           // white space of any kind separates words
		{"x y z x y z", "x y z", 2, 2.0 / 3}, // sets {xy yz zx} and {xy yz}: repeats count once
	} {
		if got := Jaccard(tc.a, tc.b, tc.k); got != tc.want {
			t.Errorf("Jaccard(%q, %q, %d) = %v, want %v", tc.a, tc.b, tc.k, got, tc.want)
		}
	}
}
