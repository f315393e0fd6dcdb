package minheap

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// Values pushed in any order, with pops between, come out in order: each
// Pop is the least of what is in the heap, as a sorted slice says.
func TestHeap(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		span uint64
	}{
		{"empty", 0, 1}, {"one", 1, 1}, {"repeats", 200, 3}, {"spread", 1000, 1 << 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(tc.n)))
			var h Heap[uint64]
			var want []uint64
			for i := 0; i < tc.n; i++ {
				v := r.Uint64N(tc.span)
				h.Push(v)
				want = append(want, v)
				if r.IntN(3) == 0 {
					slices.Sort(want)
					if got := h.Pop(); got != want[0] {
						t.Fatalf("pop %d after %d pushes: %d, want %d", i, i+1, got, want[0])
					}
					want = want[1:]
				}
			}
			slices.Sort(want)
			for i, w := range want {
				if got := h.Pop(); got != w {
					t.Fatalf("drain %d: %d, want %d", i, got, w)
				}
			}
			if len(h) != 0 {
				t.Fatalf("%d values left after draining", len(h))
			}
		})
	}
}

func FuzzHeap(f *testing.F) {
	f.Add([]byte{3, 1, 2, 0, 255, 7, 7})
	f.Fuzz(func(t *testing.T, data []byte) {
		var h Heap[float64]
		for _, b := range data {
			h.Push(float64(b) / 2)
		}
		slices.Sort(data)
		for _, b := range data {
			if got := h.Pop(); got != float64(b)/2 {
				t.Fatalf("popped %g, want %g", got, float64(b)/2)
			}
		}
	})
}
