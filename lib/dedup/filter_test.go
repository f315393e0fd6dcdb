package dedup

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/zeebo/xxh3"

	"tokenmill/internal/testbin"
)

// distinct returns the hash of the i-th of a family of distinct keys.
func distinct(family string, i int) xxh3.Uint128 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(i))
	return xxh3.Hash128(append([]byte(family), b[:]...))
}

// Fill a filter far past --expected: layers are added, the analytical rate
// never passes fp, and the empirical false-positive rate on keys never
// added, and the false drops while filling, agree with it.
func TestFilterGrowsWithinFP(t *testing.T) {
	tests := []struct {
		expected uint64
		fp       float64
		n        int
	}{
		{expected: 1000, fp: 0.01, n: 200_000}, // 200x past: 8 layers
		{expected: 50_000, fp: 0.001, n: 400_000},
		{expected: 20_000, fp: 1e-4, n: 300_000}, // fewer probes than the optimal 15
	}
	for _, tt := range tests {
		s := NewSet(tt.expected, tt.fp, false)
		falseDrops := 0
		maxRate := 0.0
		for i := range tt.n {
			maxRate = math.Max(maxRate, s.Filter.Rate())
			if seen, _ := s.Seen(distinct("in", i), nil); seen {
				falseDrops++
			}
		}
		layers := len(s.Filter.layers)
		if wantLayers := int(math.Ceil(math.Log2(float64(tt.n)/float64(tt.expected)+1))) - 1; layers < wantLayers {
			t.Errorf("expected %d: %d keys gave %d layers, want at least %d", tt.expected, tt.n, layers, wantLayers)
		}
		if maxRate > tt.fp {
			t.Errorf("expected %d: the rate reached %g, over --fp %g", tt.expected, maxRate, tt.fp)
		}
		if got := s.Filter.Keys() + uint64(falseDrops); got != uint64(tt.n) {
			t.Errorf("keys %d + false drops %d != %d checked", s.Filter.Keys(), falseDrops, tt.n)
		}

		// Empirical rate on keys never added: a binomial count whose mean
		// is at most fp * trials; allow five standard deviations.
		const trials = 200_000
		fps := 0
		for i := range trials {
			h := distinct("out", i).Bytes()
			if s.Filter.Test(&h) {
				fps++
			}
		}
		limit := tt.fp*trials + 5*math.Sqrt(tt.fp*trials)
		if float64(fps) > limit {
			t.Errorf("expected %d: %d false positives in %d unseen keys, over %.0f (fp %g)", tt.expected, fps, trials, limit, tt.fp)
		}
		// The reported expectation matches the false drops seen while
		// filling (Poisson: five standard deviations, at least 5).
		exp := s.ExpectedFalseDrops
		if d := math.Abs(float64(falseDrops) - exp); d > math.Max(5, 5*math.Sqrt(exp)) {
			t.Errorf("expected %d: %d false drops while filling, but %.1f expected", tt.expected, falseDrops, exp)
		}
		t.Logf("expected %d, fp %g: %d keys in %d layers (%d KB); %d false drops (%.1f expected); %d of %d unseen keys falsely present",
			tt.expected, tt.fp, s.Filter.Keys(), layers, s.Filter.Bytes()>>10, falseDrops, exp, fps, trials)
	}
}

func TestLayerSize(t *testing.T) {
	for _, n := range []uint64{10, 1000, 1_000_000, 64_000_000} {
		for _, p := range []float64{0.3, 0.1, 1e-3, 5e-7, 1e-12} {
			m, k := layerSize(n, p)
			rate := math.Pow(-math.Expm1(-float64(k)*float64(n)/float64(m)), float64(k))
			least := -float64(n) * math.Log(p) / (math.Ln2 * math.Ln2) // the optimum's bits
			switch {
			case k < 1 || float64(k) > math.Ceil(-math.Log2(p)):
				t.Errorf("n %d, p %g: %d probes", n, p, k)
			case rate > p:
				t.Errorf("n %d, p %g: m %d, k %d give rate %g at capacity", n, p, m, k, rate)
			case float64(m) > least*(1+extraBits)+64:
				t.Errorf("n %d, p %g: %d bits, the optimum needs %.0f", n, p, m, least)
			}
		}
	}
}

func TestExactSetNeverDropsWrongly(t *testing.T) {
	// A tiny, overfull filter gives many false positives; the exact set
	// must overrule every one and still catch every real duplicate.
	s := NewSet(10, 0.3, true)
	for i := range 5000 {
		if seen, _ := s.Seen(distinct("k", i), []byte(`"id`+string(rune('a'+i%26))+`"`)); seen {
			t.Fatalf("key %d: a new key was called seen in exact mode", i)
		}
	}
	if s.Overruled == 0 {
		t.Error("no false positive was overruled: the test does not exercise the exact set")
	}
	for i := range 5000 {
		seen, first := s.Seen(distinct("k", i), []byte(`"other"`))
		if want := `"id` + string(rune('a'+i%26)) + `"`; !seen || first != want {
			t.Fatalf("key %d: seen=%v first=%s, want true %s", i, seen, first, want)
		}
	}
	if s.Filter.Keys() != 5000 || s.exactLen() != 5000 {
		t.Errorf("filter holds %d keys, exact set %d, want 5000", s.Filter.Keys(), s.exactLen())
	}
}

// The default settings on a run the size of the real dataset report
// expected false drops well under 0.01.
func TestDefaultFPAtDatasetScale(t *testing.T) {
	n := testbin.Size(66_000, 660_000) // the dataset's size in the long tier
	s := NewSet(1_000_000, 1e-6, false)
	for i := range n {
		s.Seen(distinct("d", i), nil)
	}
	if s.ExpectedFalseDrops >= 0.001 {
		t.Errorf("%d keys at the defaults: expected false drops %g, want well under 0.01", n, s.ExpectedFalseDrops)
	}
	if mb := float64(s.Filter.Bytes()) / 1e6; mb > 8 {
		t.Errorf("the default filter takes %.1f MB", mb)
	}
}
