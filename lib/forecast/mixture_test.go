package forecast

import (
	"math"
	"testing"
)

// TestMixture: a capped lognormal's moments are the lognormal's cut at
// its limit, and a mixture's are its parts' in their shares; both against
// sums over a fine grid of the distributions themselves.
func TestMixture(t *testing.T) {
	short, long := LogNormal{Mu: math.Log(300), Sigma: 0.8}, LogNormal{Mu: math.Log(3000), Sigma: 0.9}
	m := Mixture{{0.7, Capped{short, 2048}}, {0.3, Capped{long, 8192}}}
	m1, m2 := CappedMoments(m, 8192)
	// By the definition: E[min(L, limit)] per part, as a sum over the CDF.
	grid := func(d Dist, limit float64) (float64, float64) {
		var e1, e2 float64
		const n = 200000
		for i := 0; i < n; i++ {
			x0, x1 := limit*float64(i)/n, limit*float64(i+1)/n
			mid := (x0 + x1) / 2
			p := d.Surv(x0) - d.Surv(x1)
			e1 += p * mid
			e2 += p * mid * mid
		}
		s := d.Surv(limit)
		return e1 + s*limit, e2 + s*limit*limit
	}
	a1, a2 := grid(short, 2048)
	b1, b2 := grid(long, 8192)
	want1, want2 := 0.7*a1+0.3*b1, 0.7*a2+0.3*b2
	if math.Abs(m1-want1)/want1 > 1e-3 || math.Abs(m2-want2)/want2 > 1e-3 {
		t.Errorf("moments %.1f, %.0f; want %.1f, %.0f", m1, m2, want1, want2)
	}
	if s := m.Surv(2048); math.Abs(s-0.3*long.Surv(2048)) > 1e-12 {
		t.Errorf("past the short arm's limit only the long arm is left: %v", s)
	}
	if m.Surv(8192) != 0 || m.PE(1, 8192, 1e9) != 0 {
		t.Errorf("nothing past the longest limit")
	}
	if c := (Capped{short, 100}); math.Abs(c.PE(1, 0, 1e9)-(short.PE(1, 0, 100)+100*short.Surv(100))) > 1e-9 {
		t.Errorf("capped mean %v", c.PE(1, 0, 1e9))
	}
}
