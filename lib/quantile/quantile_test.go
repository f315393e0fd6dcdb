package quantile

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestOf(t *testing.T) {
	tests := []struct {
		values []float64
		p      float64
		want   float64
	}{
		{nil, 50, 0},
		{[]float64{7}, 99, 7},
		{[]float64{1, 2, 3, 4}, 50, 2},
		{[]float64{1, 2, 3, 4}, 51, 3},
		{[]float64{1, 2, 3, 4}, 100, 4},
		{[]float64{1, 2, 3, 4}, 0, 1},
	}
	for _, tt := range tests {
		if got := Of(tt.values, tt.p); got != tt.want {
			t.Errorf("Of(%v, %v) = %v, want %v", tt.values, tt.p, got, tt.want)
		}
	}
}

// TestOfAgainstCounting checks the nearest-rank definition by brute force:
// at least p% of values are <= the result, and fewer than p% are below it.
func TestOfAgainstCounting(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		n := 1 + r.IntN(300)
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(r.IntN(50))
		}
		slices.Sort(v)
		for _, p := range []float64{1, 50, 90, 99, 100} {
			q := Of(v, p)
			atOrBelow, below := 0, 0
			for _, x := range v {
				if x <= q {
					atOrBelow++
				}
				if x < q {
					below++
				}
			}
			if float64(atOrBelow) < p/100*float64(n) || float64(below) >= p/100*float64(n) {
				t.Fatalf("n=%d p=%v: got %v (at or below %d, below %d)", n, p, q, atOrBelow, below)
			}
		}
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize([]float64{5, 1, 4, 2, 3})
	want := Summary{Count: 5, Mean: 3, P50: 3, P90: 5, P99: 5, Max: 5}
	if s != want {
		t.Fatalf("got %+v, want %+v", s, want)
	}
}
