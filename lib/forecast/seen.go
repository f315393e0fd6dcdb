package forecast

import (
	"math"
	"math/rand/v2"
	"sort"
)

// Seen is the answer lengths a run has shown so far, as a Kaplan-Meier
// estimate: answers that ended on their own are lengths, answers cut (by
// max_tokens or the context) and answers still being written are known
// only to be at least as long as they are. Real lengths are rarely
// lognormal: a dataset of many very short answers and a few of a page has
// a lognormal fit whose tail is far heavier than its answers', and a
// play-out drawing from it waits for answers that never come. The
// estimate carries the real shape up to the longest answer seen to end;
// beyond it (what the answers cut or still running there have yet to
// write) a fitted tail takes over.
type Seen struct {
	obs []seenObs // by length, ascending
	// x are the lengths seen to end, ascending; s[i] is P(L > x[i]).
	x, s []float64
	// trusted is how many of x the estimate stands on: the lengths with
	// at least minAtRisk answers as long or longer. Above the last of
	// them the answers are too few to tell a tail (the longest to end is
	// not the longest there is), and the fitted tail takes over.
	trusted int
	// hazard, if not 0, is the rate per token at which the answers past
	// the longest length seen to end end (Light), in place of a tail.
	hazard float64
}

// minAtRisk is how many answers at least as long as a length the
// estimate needs to stand there.
const minAtRisk = 10

type seenObs struct {
	x     float64
	ended float64 // answers that ended at x
	least float64 // answers known only to be at least x long
}

// Count is n answers of length x.
type Count struct{ X, N float64 }

// NewSeen is the estimate from answers that ended at their lengths and
// answers known only to be at least as long as theirs.
func NewSeen(ended, least []Count) *Seen {
	at := map[float64]*seenObs{}
	add := func(c Count, isEnd bool) {
		if c.N <= 0 {
			return
		}
		o := at[c.X]
		if o == nil {
			o = &seenObs{x: c.X}
			at[c.X] = o
		}
		if isEnd {
			o.ended += c.N
		} else {
			o.least += c.N
		}
	}
	for _, c := range ended {
		add(c, true)
	}
	for _, c := range least {
		add(c, false)
	}
	k := &Seen{obs: make([]seenObs, 0, len(at))}
	for _, o := range at {
		k.obs = append(k.obs, *o)
	}
	sort.Slice(k.obs, func(i, j int) bool { return k.obs[i].x < k.obs[j].x })
	risk := 0.0
	for _, o := range k.obs {
		risk += o.ended + o.least
	}
	for _, o := range k.obs {
		if o.ended > 0 {
			k.x = append(k.x, o.x)
			if risk >= minAtRisk {
				k.trusted = len(k.x)
			}
		}
		risk -= o.ended + o.least
	}
	k.s = make([]float64, len(k.x))
	k.survive(nil)
	return k
}

// Light is the estimate with the lightest tail the answers seen allow:
// every length seen trusted, and past the longest seen to end answers
// ending at the constant rate per token at which those of the upper
// half of the lengths ended (nil where none did). Lengths whose rate of
// ending falls as they grow, the lognormal's and any heavier tail's, run
// longer past the seen than that; a run whose long answers are no longer
// than those seen ends sooner.
func (k *Seen) Light() *Seen {
	n := len(k.x)
	if n == 0 {
		return nil
	}
	last := k.s[n-1]
	i := sort.Search(n, func(i int) bool { return k.s[i] <= last+(1-last)/2 })
	u := k.x[min(i, n-1)]
	ended, exposure := 0.0, 0.0
	for _, o := range k.obs {
		if o.x > u {
			ended += o.ended
			exposure += (o.x - u) * (o.ended + o.least)
		}
	}
	if ended == 0 || exposure <= 0 {
		return nil
	}
	c := *k
	c.trusted, c.hazard = n, ended/exposure
	return &c
}

// survive fills k.s: the product-limit estimate, each group of n answers
// weighted by w(n) (nil: n). An answer known to be at least x long is at
// risk of ending at x. The answers at risk are summed from the longest
// down, the factors then multiplied up: no scratch space.
func (k *Seen) survive(w func(n float64) float64) {
	weight := func(n float64) float64 {
		if w == nil || n == 0 {
			return n
		}
		return w(n)
	}
	risk, j := 0.0, len(k.x)
	for i := len(k.obs) - 1; i >= 0; i-- {
		o := k.obs[i]
		e := weight(o.ended)
		risk += e + weight(o.least)
		if o.ended > 0 {
			j--
			k.s[j] = 1
			if risk > 0 {
				k.s[j] = max(1-e/risk, 0)
			}
		}
	}
	for j := 1; j < len(k.s); j++ {
		k.s[j] *= k.s[j-1]
	}
}

// resample is into as k's estimate from a Bayesian bootstrap of the
// answers (each weighted by an exponential draw): the spread of the
// estimate a play-out's range carries.
func (k *Seen) resample(into *Seen, rng *rand.Rand) {
	into.obs, into.x, into.trusted, into.hazard = k.obs, k.x, k.trusted, k.hazard
	if cap(into.s) < len(k.x) {
		into.s = make([]float64, len(k.x))
	}
	into.s = into.s[:len(k.x)]
	into.survive(func(n float64) float64 { return gammaDraw(n, rng) })
}

// gammaDraw is the sum of n exponential draws: a group of n answers'
// bootstrap weight (its normal approximation for many).
func gammaDraw(n float64, rng *rand.Rand) float64 {
	if n > 16 {
		return max(n+math.Sqrt(n)*rng.NormFloat64(), 0)
	}
	w := 0.0
	for i := 0; i < int(n); i++ {
		w += rng.ExpFloat64()
	}
	if f := n - math.Floor(n); f > 0 {
		w += f * rng.ExpFloat64()
	}
	return w
}

// draw is the final length of an answer that has written above tokens,
// cut at limit, for the uniform u: the inverse of the estimate's survival
// above it, and beyond the longest length seen to end, tail's survival
// beyond there.
func (k *Seen) draw(tail Dist, above, limit, u float64) float64 {
	if above >= limit {
		return limit
	}
	n := k.trusted
	j := sort.Search(n, func(i int) bool { return k.x[i] > above })
	s0 := 1.0
	if j > 0 {
		s0 = k.s[j-1]
	}
	if s0 <= 0 { // the longest seen to end, with many answers as long
		return min(max(above, k.x[n-1]), limit)
	}
	target := u * s0
	i := j + sort.Search(n-j, func(i int) bool { return k.s[j+i] <= target })
	if i < n {
		return min(k.x[i], limit)
	}
	// Beyond the longest length seen to end.
	from, sl := above, 1.0
	if n > 0 {
		from, sl = max(above, k.x[n-1]), k.s[n-1]
	}
	if k.hazard > 0 {
		return min(from-math.Log(target/sl)/k.hazard, limit)
	}
	return drawLength(tail, from, limit, target/sl)
}

// lengthKey groups answer lengths for Seen: exactly up to exactUpTo
// tokens, then keysPerDoubling groups to each doubling (0.3% apart), so
// that a run's histogram stays a few thousand entries whatever it lasts.
func lengthKey(tokens int) int {
	if tokens < exactUpTo {
		return tokens
	}
	return exactUpTo + int(keysPerDoubling*math.Log2(float64(tokens)/exactUpTo))
}

// keyLength is the middle of lengthKey's group k, in tokens.
func keyLength(k int) float64 {
	if k < exactUpTo {
		return float64(k)
	}
	return exactUpTo * math.Exp2((float64(k-exactUpTo)+0.5)/keysPerDoubling)
}

const (
	exactUpTo       = 1024
	keysPerDoubling = 256
)

// Tail is a lognormal fitted to the upper part of the lengths seen to end,
// the answers cut or in flight there censored, and the covariance of its
// (mu, log sigma); false where the fit to every length, start, explains
// the upper half. A fit to every length answers to the short ones: a
// dataset with many answers of a line has a wide one, and a tail far
// heavier than its answers'. The upper half is the lengths from where the
// estimate's survival is halfway to its last; the upper quarter's own fit
// replaces the half's where the half's does not explain it, and so on,
// while minTail lengths are left to fit.
func (k *Seen) Tail(start LogNormal) (LogNormal, [2][2]float64, bool) {
	if k.trusted == 0 {
		return LogNormal{}, [2][2]float64{}, false
	}
	last := k.s[k.trusted-1]
	var cov [2][2]float64
	found := false
	for part := 0.5; part >= 1.0/16; part /= 2 {
		level := last + part*(1-last)
		i := sort.Search(k.trusted, func(i int) bool { return k.s[i] <= level })
		s, cens, t := k.above(k.x[min(i, k.trusted-1)])
		if s.N < minTail {
			break
		}
		d, ok := fitTruncated(s, cens, start, t)
		// Where the fit so far explains the lengths up here as well (a
		// likelihood ratio below chi-squared's 95% with two degrees of
		// freedom), it stays: it stands on more lengths. Taken every
		// time, the upper part's own fit brings its few lengths' noise
		// into the forecast: runs of lognormal lengths miss up to one
		// line in 15 where the bar allows one in 40, for a range that
		// holds the time left at half of alpaca's answers with no
		// max_tokens, the point still 16 times it.
		if !ok || 2*(truncLL(s, cens, t, d.Mu, math.Log(d.Sigma))-truncLL(s, cens, t, start.Mu, math.Log(start.Sigma))) < chi2Two95 {
			break
		}
		start, found = d, true
		cov, _ = fitCov(s, cens, d, t)
	}
	return start, cov, found
}

// above is the lengths at least u long: the log-stats of those that
// ended, those cut or in flight as censored, and log u.
func (k *Seen) above(u float64) (LogStats, []Censor, float64) {
	var s LogStats
	var cens []Censor
	for _, o := range k.obs {
		if o.x < u {
			continue
		}
		if o.ended > 0 {
			x := math.Log(max(o.x, 1))
			s.N += o.ended
			s.S1 += o.ended * x
			s.S2 += o.ended * x * x
		}
		if o.least > 0 {
			cens = append(cens, Censor{X: math.Log(max(o.x, 1)), W: o.least})
		}
	}
	return s, cens, math.Log(max(u, 1))
}

const chi2Two95 = 5.99

// minTail is how many lengths seen to end a tail is fitted to.
const minTail = 20
