package infer

import "math"

// The statistics behind the ETA: answer lengths as a (capped) lognormal
// fitted to answers that finished and to answers still being written
// (censored: they are at least as long as what they have produced so
// far), and what follows from such a distribution: conditional means,
// the tail of a run's end.

// lengthDist is a distribution of natural answer lengths in tokens (what
// the model would write with no max_tokens).
type lengthDist interface {
	// surv is P(L > x).
	surv(x float64) float64
	// pe is the partial moment E[L^k ; a < L <= b] for k = 1 or 2.
	pe(k int, a, b float64) float64
}

// logNormal is L = exp(N(mu, sigma^2)).
type logNormal struct{ mu, sigma float64 }

func (d logNormal) surv(x float64) float64 {
	if x <= 0 {
		return 1
	}
	return 0.5 * math.Erfc((math.Log(x)-d.mu)/(d.sigma*math.Sqrt2))
}

func (d logNormal) pe(k int, a, b float64) float64 {
	if b <= a {
		return 0
	}
	kf := float64(k)
	shift := d.mu + kf*d.sigma*d.sigma
	z := func(x float64) float64 {
		if x <= 0 {
			return math.Inf(-1)
		}
		return (math.Log(x) - shift) / d.sigma
	}
	return math.Exp(kf*d.mu+kf*kf*d.sigma*d.sigma/2) * normMass(z(a), z(b))
}

// normMass is P(lo < Z <= hi) for a standard normal Z, accurate far in
// either tail (where a difference of CDFs near 1 would lose every digit).
func normMass(lo, hi float64) float64 {
	if lo > 0 {
		return 0.5 * (math.Erfc(lo/math.Sqrt2) - math.Erfc(hi/math.Sqrt2))
	}
	return 0.5 * (math.Erfc(-hi/math.Sqrt2) - math.Erfc(-lo/math.Sqrt2))
}

// pointMass is every answer exactly c tokens long: what is left when every
// answer so far was cut by max_tokens.
type pointMass struct{ c float64 }

func (d pointMass) surv(x float64) float64 {
	if x < d.c {
		return 1
	}
	return 0
}

func (d pointMass) pe(k int, a, b float64) float64 {
	if a < d.c && d.c <= b {
		return math.Pow(d.c, float64(k))
	}
	return 0
}

// cappedMoments are E[min(L, limit)] and E[min(L, limit)^2].
func cappedMoments(d lengthDist, limit float64) (m1, m2 float64) {
	s := d.surv(limit)
	return d.pe(1, 0, limit) + limit*s, d.pe(2, 0, limit) + limit*limit*s
}

// condMean is E[min(L, limit) | L > l]: the final length of an answer that
// has produced l tokens and is still going.
func condMean(d lengthDist, l, limit float64) float64 {
	if l >= limit {
		return limit
	}
	s := d.surv(l)
	if s == 0 {
		return min(limit, l+1) // beyond anything the fit allows
	}
	return min(limit, max(l, (d.pe(1, l, limit)+limit*d.surv(limit))/s))
}

// endDrain is what the end of a run adds to "remaining tokens / rate"
// when slots answers run side by side: the run ends with the longest of
// the answers in flight when the last prompt was sent, which (in a run
// long enough to have mixed) are at the stationary residual of a
// length-biased answer. It returns E[max of slots residuals] - E[one
// residual], and the 2.5% and 97.5% quantiles of the same, in tokens;
// divide by the per-answer decode speed for time.
func endDrain(d lengthDist, limit, slots float64) (mean, lo, hi float64) {
	if slots <= 1 {
		return 0, 0, 0
	}
	m1, m2 := cappedMoments(d, limit)
	if m1 <= 0 {
		return 0, 0, 0
	}
	// The residual's CDF is E[min(L, r)] / E[min(L, limit)]; the largest
	// of slots residuals has its power.
	mean, lo, hi = largest(limit, 512, func(r float64) float64 {
		return math.Pow(min((d.pe(1, 0, r)+r*d.surv(r))/m1, 1), slots)
	})
	one := m2 / (2 * m1)
	return max(0, mean-one), max(0, lo-one), max(0, hi-one)
}

// drainRange widens an estimate's range (mean +- half) by the drain's own:
// the two are independent, so they add in quadrature.
func drainRange(est, half, drainMean, drainLo, drainHi float64) (lo, hi float64) {
	lo = est - math.Sqrt(half*half+(drainMean-drainLo)*(drainMean-drainLo))
	hi = est + math.Sqrt(half*half+(drainHi-drainMean)*(drainHi-drainMean))
	return max(lo, 0), hi
}

// longestOf is the distribution of the longest remaining part of the
// answers in flight (produced l[i] tokens each so far): its mean and its
// 2.5% and 97.5% quantiles, in tokens.
func longestOf(d lengthDist, l []float64, limit float64) (mean, lo, hi float64) {
	if len(l) == 0 {
		return 0, 0, 0
	}
	return largest(limit, 256, func(r float64) float64 {
		// P(every residual <= r).
		logAll := 0.0
		for _, li := range l {
			if li+r >= limit {
				continue
			}
			s0 := d.surv(li)
			if s0 <= 0 {
				continue
			}
			g := 1 - d.surv(li+r)/s0
			if g <= 0 {
				return 0
			}
			logAll += math.Log(g)
		}
		return math.Exp(logAll)
	})
}

// largest integrates a maximum's CDF over [0, limit] in steps: its mean
// (the integral of 1 - cdf) and its 2.5% and 97.5% quantiles.
func largest(limit float64, steps int, cdf func(r float64) float64) (mean, lo, hi float64) {
	h := limit / float64(steps)
	lo, hi = -1, -1
	for i := 0; i < steps; i++ {
		r := (float64(i) + 0.5) * h
		p := cdf(r)
		mean += (1 - p) * h
		if lo < 0 && p >= 0.025 {
			lo = r
		}
		if hi < 0 && p >= 0.975 {
			hi = r
		}
	}
	if lo < 0 {
		lo = limit
	}
	if hi < 0 {
		hi = limit
	}
	return mean, lo, hi
}

// censor is w answers known only to be longer than exp(x) tokens.
type censor struct{ x, w float64 }

// logStats are the sufficient statistics of exactly known lengths, in
// log space.
type logStats struct{ n, s1, s2 float64 }

func (s *logStats) add(tokens int) {
	x := math.Log(float64(max(tokens, 1)))
	s.n++
	s.s1 += x
	s.s2 += x * x
}

// Bounds on the fitted spread: below, a run of equal lengths still gets a
// usable distribution; above, a handful of answers cannot claim a tail of
// million-token answers.
const (
	minSigma = 0.05
	maxSigma = 3.0
)

// fitLogNormal is the maximum-likelihood lognormal for exact lengths (in
// s) and censored ones, by expectation-maximisation on the log scale,
// started at start (zero: from the exact lengths). It needs one exact
// length at least.
func fitLogNormal(s logStats, cens []censor, start logNormal) (logNormal, bool) {
	if s.n < 1 {
		return logNormal{}, false
	}
	total := s.n
	for _, c := range cens {
		total += c.w
	}
	d := start
	if d.sigma == 0 {
		d.mu = s.s1 / s.n
		d.sigma = 1
		if s.n >= 2 {
			d.sigma = math.Sqrt(max(s.s2/s.n-d.mu*d.mu, minSigma*minSigma))
		}
	}
	for iter := 0; iter < 500; iter++ {
		t1, t2 := s.s1, s.s2
		for _, c := range cens {
			a := (c.x - d.mu) / d.sigma
			lam := mills(a)
			ex := d.mu + d.sigma*lam
			vx := d.sigma * d.sigma * max(1+a*lam-lam*lam, 0)
			t1 += c.w * ex
			t2 += c.w * (vx + ex*ex)
		}
		mu := t1 / total
		sigma := math.Sqrt(max(t2/total-mu*mu, minSigma*minSigma))
		sigma = min(sigma, maxSigma)
		done := math.Abs(mu-d.mu) < 1e-7 && math.Abs(sigma-d.sigma) < 1e-7
		d = logNormal{mu, sigma}
		if done {
			break
		}
	}
	return d, !math.IsNaN(d.mu) && !math.IsInf(d.mu, 0)
}

// mills is the inverse Mills ratio phi(a) / (1 - Phi(a)), the mean excess
// of a standard normal truncated below at a.
func mills(a float64) float64 {
	if a > 30 {
		return a + 1/a
	}
	q := 0.5 * math.Erfc(a/math.Sqrt2)
	if q <= 0 {
		return a + 1/a
	}
	return math.Exp(-a*a/2) / math.Sqrt(2*math.Pi) / q
}
