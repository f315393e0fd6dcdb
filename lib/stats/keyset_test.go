package stats

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestKeySet: against a map, on random keys with repeats, the key 0 and
// keys that collide in the table's low bits, across growths.
func TestKeySet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s keySet
	want := map[uint64]bool{}
	for i := range 200_000 {
		var h uint64
		switch i % 5 {
		case 0:
			h = rng.Uint64()
		case 1:
			h = uint64(rng.IntN(50_000)) << 40 // same low bits
		case 2:
			h = uint64(rng.IntN(3))
		default:
			h = uint64(rng.IntN(100_000)) * 0x9e3779b97f4a7c15
		}
		if got := s.add(h); got != want[h] {
			t.Fatalf("add %#x (%d): %v, a map says %v", h, i, got, want[h])
		}
		want[h] = true
	}
	if n := s.n + map[bool]int{true: 1}[s.zero]; n != len(want) {
		t.Fatalf("%d keys held, want %d", n, len(want))
	}
}

// BenchmarkKeySet is the duplicate check's cost per record on 660,000
// distinct keys, against the map it replaced.
func BenchmarkKeySet(b *testing.B) {
	keys := make([]uint64, 660_000)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range keys {
		keys[i] = rng.Uint64()
	}
	b.Run("keySet", func(b *testing.B) {
		for b.Loop() {
			var s keySet
			for _, k := range keys {
				s.add(k)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(keys)), "ns/key")
	})
	b.Run("map", func(b *testing.B) {
		for b.Loop() {
			m := map[uint64]struct{}{}
			for _, k := range keys {
				if _, ok := m[k]; !ok {
					m[k] = struct{}{}
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(keys)), "ns/key")
	})
}

// TestSortValues: the radix sort gives slices.Sort's order, on lengths
// either side of its threshold and on values sharing high bytes.
func TestSortValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 100, 1<<12 - 1, 1 << 12, 100_000} {
		for _, bound := range []uint32{1, 200, 70_000, 1<<32 - 1} {
			d := make([]uint32, n)
			for i := range d {
				d[i] = rng.Uint32N(bound) | uint32(i%2)<<31*uint32(bound>>31)
			}
			want := slices.Clone(d)
			slices.Sort(want)
			sortValues(d)
			if !slices.Equal(d, want) {
				t.Fatalf("n=%d bound=%d: not sorted as slices.Sort sorts", n, bound)
			}
		}
	}
}

// BenchmarkSortValues sorts 660,000 answer lengths, as the report does
// for each distribution.
func BenchmarkSortValues(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 8))
	d := make([]uint32, 660_000)
	for i := range d {
		d[i] = rng.Uint32N(20_000)
	}
	c := make([]uint32, len(d))
	b.SetBytes(int64(4 * len(d)))
	for b.Loop() {
		copy(c, d)
		sortValues(c)
	}
}
