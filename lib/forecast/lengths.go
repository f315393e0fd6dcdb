// Package forecast is a run's forecast: the live estimator behind infer's
// ETA, and the arithmetic it shares with the report of infer bench:
// answer lengths as a (capped) lognormal fitted to answers that finished
// and to answers still being written (censored: they are at least as long
// as what they have produced so far), what follows from such a
// distribution (conditional means, the tail of a run's end), and the one
// formula for the time a run takes.
package forecast

import "math"

// Dist is a distribution of natural answer lengths in tokens (what
// the model would write with no max_tokens).
type Dist interface {
	// Surv is P(L > x).
	Surv(x float64) float64
	// PE is the partial moment E[L^k ; a < L <= b] for k = 1 or 2.
	PE(k int, a, b float64) float64
}

// LogNormal is L = exp(N(mu, sigma^2)).
type LogNormal struct{ Mu, Sigma float64 }

func (d LogNormal) Surv(x float64) float64 {
	if x <= 0 {
		return 1
	}
	return 0.5 * math.Erfc((math.Log(x)-d.Mu)/(d.Sigma*math.Sqrt2))
}

func (d LogNormal) PE(k int, a, b float64) float64 {
	if b <= a {
		return 0
	}
	kf := float64(k)
	shift := d.Mu + kf*d.Sigma*d.Sigma
	z := func(x float64) float64 {
		if x <= 0 {
			return math.Inf(-1)
		}
		return (math.Log(x) - shift) / d.Sigma
	}
	return math.Exp(kf*d.Mu+kf*kf*d.Sigma*d.Sigma/2) * normMass(z(a), z(b))
}

// normMass is P(lo < Z <= hi) for a standard normal Z, accurate far in
// either tail (where a difference of CDFs near 1 would lose every digit).
func normMass(lo, hi float64) float64 {
	if lo > 0 {
		return 0.5 * (math.Erfc(lo/math.Sqrt2) - math.Erfc(hi/math.Sqrt2))
	}
	return 0.5 * (math.Erfc(-hi/math.Sqrt2) - math.Erfc(-lo/math.Sqrt2))
}

// PointMass is every answer exactly c tokens long: what is left when every
// answer so far was cut by max_tokens.
type PointMass struct{ C float64 }

func (d PointMass) Surv(x float64) float64 {
	if x < d.C {
		return 1
	}
	return 0
}

func (d PointMass) PE(k int, a, b float64) float64 {
	if a < d.C && d.C <= b {
		return math.Pow(d.C, float64(k))
	}
	return 0
}

// CappedMoments are E[min(L, limit)] and E[min(L, limit)^2].
func CappedMoments(d Dist, limit float64) (m1, m2 float64) {
	s := d.Surv(limit)
	return d.PE(1, 0, limit) + limit*s, d.PE(2, 0, limit) + limit*limit*s
}

// CondMean is E[min(L, limit) | L > l]: the final length of an answer that
// has produced l tokens and is still going.
func CondMean(d Dist, l, limit float64) float64 {
	if l >= limit {
		return limit
	}
	s := d.Surv(l)
	if s == 0 {
		return min(limit, l+1) // beyond anything the fit allows
	}
	return min(limit, max(l, (d.PE(1, l, limit)+limit*d.Surv(limit))/s))
}

// endDrain is what the end of a run adds to "remaining tokens / rate"
// when slots answers run side by side: the run ends with the longest of
// the answers in flight when the last prompt was sent, which (in a run
// long enough to have mixed) are at the stationary residual of a
// length-biased answer. It returns E[max of slots residuals] - E[one
// residual], and the 2.5% and 97.5% quantiles of the same, in tokens;
// divide by the per-answer decode speed for time.
func endDrain(d Dist, limit, slots float64) (mean, lo, hi float64) {
	if slots <= 1 {
		return 0, 0, 0
	}
	m1, m2 := CappedMoments(d, limit)
	if m1 <= 0 {
		return 0, 0, 0
	}
	// The residual's CDF is E[min(L, r)] / E[min(L, limit)]; the largest
	// of slots residuals has its power.
	mean, lo, hi = largest(limit, 512, func(r float64) float64 {
		return math.Pow(min((d.PE(1, 0, r)+r*d.Surv(r))/m1, 1), slots)
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

// longestTime is the expected time until the last of the answers in
// flight ends, and its 2.5% and 97.5% quantiles, in seconds: answer i has
// l[i] tokens so far, a length of distribution d cut at limit, and is
// written at speeds[i] tokens per second (nil or 0: v).
func longestTime(d Dist, l, speeds []float64, v, limit float64) (mean, lo, hi float64) {
	if len(l) == 0 {
		return 0, 0, 0
	}
	speed := func(i int) float64 {
		if i < len(speeds) && speeds[i] > 0 {
			return speeds[i]
		}
		return v
	}
	slowest := v
	for i := range l {
		slowest = min(slowest, speed(i))
	}
	return largest(limit/slowest, 256, func(tau float64) float64 {
		// P(every answer ends within tau).
		logAll := 0.0
		for i, li := range l {
			r := tau * speed(i)
			if li+r >= limit {
				continue
			}
			s0 := d.Surv(li)
			if s0 <= 0 {
				continue
			}
			g := 1 - d.Surv(li+r)/s0
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

// Censor is w answers known only to be longer than exp(x) tokens.
type Censor struct{ X, W float64 }

// LogStats are the sufficient statistics of exactly known lengths, in
// log space.
type LogStats struct{ N, S1, S2 float64 }

// Add counts one answer of tokens tokens.
func (s *LogStats) Add(tokens int) {
	x := math.Log(float64(max(tokens, 1)))
	s.N++
	s.S1 += x
	s.S2 += x * x
}

// Bounds on the fitted spread: below, a run of equal lengths still gets a
// usable distribution; above, a handful of answers cannot claim a tail of
// million-token answers.
const (
	minSigma = 0.05
	maxSigma = 3.0
)

// FitLogNormal is the maximum-likelihood lognormal for exact lengths (in
// s) and censored ones, by expectation-maximisation on the log scale,
// started at start (zero: from the exact lengths). It needs one exact
// length at least.
func FitLogNormal(s LogStats, cens []Censor, start LogNormal) (LogNormal, bool) {
	return fitTruncated(s, cens, start, math.Inf(-1))
}

// fitTruncated is FitLogNormal for lengths seen only above exp(t): the
// answers below it, never counted, are what expectation-maximisation
// fills in beside the censored ones' excess.
func fitTruncated(s LogStats, cens []Censor, start LogNormal, t float64) (LogNormal, bool) {
	if s.N < 1 {
		return LogNormal{}, false
	}
	seen := s.N
	for _, c := range cens {
		seen += c.W
	}
	d := start
	if d.Sigma == 0 {
		d.Mu = s.S1 / s.N
		d.Sigma = 1
		if s.N >= 2 {
			d.Sigma = math.Sqrt(max(s.S2/s.N-d.Mu*d.Mu, minSigma*minSigma))
		}
	}
	for iter := 0; iter < 500; iter++ {
		t1, t2, total := s.S1, s.S2, seen
		for _, c := range cens {
			a := (c.X - d.Mu) / d.Sigma
			lam := mills(a)
			ex := d.Mu + d.Sigma*lam
			vx := d.Sigma * d.Sigma * max(1+a*lam-lam*lam, 0)
			t1 += c.W * ex
			t2 += c.W * (vx + ex*ex)
		}
		if !math.IsInf(t, -1) {
			// The answers below t, as many as the fit says there are
			// for those seen, at the moments of a normal cut above t.
			a := (t - d.Mu) / d.Sigma
			if below := 0.5 * math.Erfc(-a/math.Sqrt2); below > 0 && below < 1 {
				m := seen * below / (1 - below)
				lam := mills(-a)
				ex := d.Mu - d.Sigma*lam
				vx := d.Sigma * d.Sigma * max(1-a*lam-lam*lam, 0)
				t1 += m * ex
				t2 += m * (vx + ex*ex)
				total += m
			}
		}
		mu := t1 / total
		sigma := math.Sqrt(max(t2/total-mu*mu, minSigma*minSigma))
		sigma = min(sigma, maxSigma)
		done := math.Abs(mu-d.Mu) < 1e-7 && math.Abs(sigma-d.Sigma) < 1e-7
		d = LogNormal{mu, sigma}
		if done {
			break
		}
	}
	return d, !math.IsNaN(d.Mu) && !math.IsInf(d.Mu, 0)
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
