package forecast

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestFitLogNormalCensored(t *testing.T) {
	const mu, sigma = 6.4, 1.0
	r := rand.New(rand.NewPCG(11, 12))
	tests := []struct {
		name string
		cut  float64 // every length above it is censored there
	}{
		{"no censoring", math.Inf(1)},
		{"censored at the median", math.Exp(mu)},
		{"censored at the 16th percentile", math.Exp(mu - sigma)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s LogStats
			var cens []Censor
			for i := 0; i < 20000; i++ {
				l := math.Exp(mu + sigma*r.NormFloat64())
				if l > tt.cut {
					cens = append(cens, Censor{math.Log(tt.cut), 1})
					continue
				}
				x := math.Log(l)
				s.N++
				s.S1 += x
				s.S2 += x * x
			}
			d, ok := FitLogNormal(s, cens, LogNormal{})
			if !ok || math.Abs(d.Mu-mu) > 0.05 || math.Abs(d.Sigma-sigma) > 0.05 {
				t.Errorf("fit %+v %v, want mu %v sigma %v", d, ok, mu, sigma)
			}
		})
	}
	if _, ok := FitLogNormal(LogStats{}, []Censor{{5, 10}}, LogNormal{}); ok {
		t.Error("a fit from censored lengths alone")
	}
}

// The closed forms against plain numerical integration and simulation.
func TestLengthDistMath(t *testing.T) {
	for _, d := range []Dist{LogNormal{6.4, 1.01}, LogNormal{5, 0.3}, PointMass{256}} {
		for _, tt := range []struct{ l, limit float64 }{{0, 2048}, {300, 2048}, {1500, 2048}, {100, 32768}, {2000, 2048}} {
			// E[min(L, limit) | L > l] = l + (integral of P(L > x) from l to limit) / P(L > l).
			const steps = 200000
			h := (tt.limit - tt.l) / steps
			var area float64
			for i := 0; i < steps; i++ {
				area += d.Surv(tt.l+(float64(i)+0.5)*h) * h
			}
			s := d.Surv(tt.l)
			if s == 0 {
				continue // beyond the distribution: CondMean's fallback
			}
			want := tt.l + area/s
			if got := CondMean(d, tt.l, tt.limit); math.Abs(got-want) > 0.005*want+0.5 {
				t.Errorf("%+v: CondMean(%v, %v) = %v, integration gives %v", d, tt.l, tt.limit, got, want)
			}
		}
	}
	// Far in a lognormal's tail, E[L | L > l] = exp(mu + sigma^2/2) *
	// Q(z - sigma) / Q(z), z the standard score of ln l, with the normal
	// tail Q from its asymptotic series.
	far := LogNormal{5, 0.3}
	q := func(a float64) float64 {
		return math.Exp(-a*a/2) / a * (1 - 1/(a*a) + 3/math.Pow(a, 4) - 15/math.Pow(a, 6) + 105/math.Pow(a, 8))
	}
	for _, l := range []float64{1500, 3000} {
		z := (math.Log(l) - far.Mu) / far.Sigma
		want := math.Exp(far.Mu+far.Sigma*far.Sigma/2) * q(z-far.Sigma) / q(z)
		if got := CondMean(far, l, 1e9); math.Abs(got-want) > 0.01*(want-l) {
			t.Errorf("far tail: CondMean(%v) = %v, asymptotically %v", l, got, want)
		}
	}
	// drain against a simulation of the largest of n residuals.
	d, limit := LogNormal{6.4, 1.01}, 4096.0
	m1, m2 := CappedMoments(d, limit)
	r := rand.New(rand.NewPCG(3, 4))
	// A residual: a length drawn in proportion to itself, then a uniform part of it.
	pool := make([]float64, 0, 1<<16)
	for len(pool) < cap(pool) {
		l := min(math.Exp(6.4+1.01*r.NormFloat64()), limit)
		if r.Float64()*limit < l {
			pool = append(pool, r.Float64()*l)
		}
	}
	for _, slots := range []float64{10, 400} {
		var sum float64
		const trials = 2000
		for i := 0; i < trials; i++ {
			var longest float64
			for k := 0; k < int(slots); k++ {
				longest = max(longest, pool[r.IntN(len(pool))])
			}
			sum += longest
		}
		want := sum/trials - m2/(2*m1)
		got, lo, hi := endDrain(d, limit, slots)
		if math.Abs(got-want) > 0.03*want || !(lo < got && got < hi) {
			t.Errorf("drain with %v slots: %v (%v-%v), simulation %v", slots, got, lo, hi, want)
		}
	}
}
