package forecast

import (
	"math"
	"math/rand/v2"
	"sort"

	"tokenmill/lib/minheap"
)

// The end of a short run is played out many times over instead of
// summed up: a run of a few hundred answers is mostly its end, where the
// batch empties, the last answers go faster for it, and the time left is
// that of its few longest answers. Each play draws the lengths still
// unknown (those in flight longer than what they have written), the
// length distribution's parameters and the servers' step costs from what
// the fit knows of them, and lays the answers left out on the servers as
// the runner does (a new one where one ends); the plays' median is the
// time left and their 2.5% and 97.5% quantiles its range.

// SimServer is one endpoint as the end of the run starts from it.
type SimServer struct {
	// Cap is how many it writes at once.
	Cap int
	// Writing are the tokens each answer it writes has so far; Waiting
	// how many wait in its queue.
	Writing []float64
	Waiting int
	// Keep is how many requests the runner keeps on it: a new one is
	// sent when one ends, while answers are left to send.
	Keep int
	// Step is its fitted cost model.
	Step Step
}

// Sim is the rest of a run.
type Sim struct {
	Servers []SimServer
	Unsent  int // answers not yet sent
	// Lengths are the answers' natural lengths (a LogNormal's parameters
	// are drawn from LenCov, over (mu, log sigma)), cut at Limit.
	Lengths Dist
	LenCov  [2][2]float64
	Limit   float64
	// Seen, if not nil, are the lengths the run has shown: answers are
	// drawn from them, Lengths being their tail beyond the longest seen
	// to end; the range's plays draw from a bootstrap of them.
	Seen *Seen
	// Unbounded: no max_tokens, the tail reaches the context, far past
	// any length seen, and the range's low end is played with the
	// lightest tail the lengths seen allow too (Seen.Light). With
	// max_tokens the tail's plays end at the cap.
	Unbounded bool
	Plays     int
	Seed      uint64
}

// Play plays the rest of the run and returns the time left and about a
// 98% range, in seconds. The time left is the median of s.Plays/2 plays at
// the fits' parameters (only the lengths still unknown drawn), the range
// the 1% and 99% quantiles of s.Plays plays with the parameters drawn
// too: a parameter the data cannot pin down (how much faster a server
// writes as its batch empties, while it never did) widens the range and
// leaves the time left where the fit is. The range is wider than
// RunTime's 95%: a short run's end is a handful of answers, each of which
// can end any moment, and a range that misses one in twenty of the lines
// shown misses at the end of most runs.
func (s Sim) Play() (mid, lo, hi float64) {
	plays := max(s.Plays, 40)
	rng := rand.New(rand.NewPCG(s.Seed, 0x5eed))
	// The median needs fewer plays than the range's tails.
	at := make([]float64, plays/2)
	drawn := make([]float64, plays)
	lenL := chol2(s.LenCov)
	covL := make([][3][3]float64, len(s.Servers))
	for i, sv := range s.Servers {
		covL[i] = chol3(sv.Step.Cov)
	}
	// The low end is also played with the lightest tail the lengths seen
	// allow (Light): a tail fitted beyond them has low quantiles that
	// already assume long answers no answer has shown, and a run whose
	// long answers are no longer than those seen ends before them. Their
	// own draws leave the other plays as they were.
	var light *Seen
	var short []float64
	rngLight := rand.New(rand.NewPCG(s.Seed, 0x119e7))
	if s.Seen != nil && s.Unbounded {
		if light = s.Seen.Light(); light != nil {
			short = make([]float64, plays)
		}
	}
	var st simState
	var seen, seenLight Seen
	for p := range drawn {
		if p < len(at) {
			at[p] = st.play(&s, s.Lengths, s.Seen, nil, [3]float64{}, rng)
		}
		d := s.Lengths
		if ln, ok := d.(LogNormal); ok {
			z0, z1 := rng.NormFloat64(), rng.NormFloat64()
			ln.Mu += lenL[0][0] * z0
			ln.Sigma = min(max(ln.Sigma*math.Exp(lenL[1][0]*z0+lenL[1][1]*z1), minSigma), maxSigma)
			d = ln
		}
		// One draw of the step costs for every server: servers alike are
		// wrong alike.
		z := [3]float64{rng.NormFloat64(), rng.NormFloat64(), rng.NormFloat64()}
		var sn *Seen
		if s.Seen != nil {
			s.Seen.resample(&seen, rng)
			sn = &seen
		}
		drawn[p] = st.play(&s, d, sn, covL, z, rng)
		if light != nil {
			light.resample(&seenLight, rngLight)
			short[p] = st.play(&s, d, &seenLight, covL, z, rngLight)
		}
	}
	sort.Float64s(at)
	sort.Float64s(drawn)
	q := func(times []float64, f float64) float64 {
		return times[min(int(f*float64(len(times))), len(times)-1)]
	}
	mid, lo = q(at, 0.5), q(drawn, rangeTail)
	if short != nil {
		sort.Float64s(short)
		lo = min(lo, q(short, rangeTail))
	}
	return mid, min(lo, mid), max(q(drawn, 1-rangeTail), mid)
}

// rangeTail is what the range leaves out on either side.
const rangeTail = 0.01

// drawStep is step s with the posterior's spread: its mean plus l*z.
func drawStep(s Step, l [3][3]float64, z [3]float64) Step {
	beta := s.Mean
	for i := 0; i < 3; i++ {
		for k := 0; k <= i; k++ {
			beta[i] += l[i][k] * z[k]
		}
	}
	return s.fromBeta(beta)
}

// simState is one play's servers, kept between plays to reuse memory.
type simState struct {
	servers []simServer
}

type simServer struct {
	step    Step
	cap     int
	keep    int
	w       float64    // tokens one answer of the batch has written since the play began
	running thresholds // the w at which each running answer ends
	waiting fifo       // lengths of the answers waiting, first come first served
}

// thresholds is a min-heap of the w at which running answers end.
type thresholds = minheap.Heap[float64]

// fifo is the lengths of the answers waiting in a server's queue.
type fifo struct {
	q    []float64
	head int
}

func (f *fifo) len() int       { return len(f.q) - f.head }
func (f *fifo) push(x float64) { f.q = append(f.q, x) }
func (f *fifo) reset()         { f.q, f.head = f.q[:0], 0 }
func (f *fifo) pop() (x float64) {
	x = f.q[f.head]
	f.head++
	if f.head == len(f.q) {
		f.reset()
	}
	return x
}

func (sv *simServer) perToken() float64 { return sv.step.PerToken(float64(len(sv.running))) }

// join starts an answer of length tokens: its overhead is paid as tokens
// at the batch's speed now.
func (sv *simServer) join(length float64) {
	over := sv.step.Q / sv.step.PerToken(float64(len(sv.running)+1))
	sv.running.Push(sv.w + length + over)
}

func (st *simState) play(s *Sim, d Dist, seen *Seen, covL [][3][3]float64, z [3]float64, rng *rand.Rand) float64 {
	if cap(st.servers) < len(s.Servers) {
		st.servers = make([]simServer, len(s.Servers))
	}
	st.servers = st.servers[:len(s.Servers)]
	draw := func(above float64) float64 {
		if seen != nil {
			return seen.draw(d, above, s.Limit, rng.Float64())
		}
		return drawLength(d, above, s.Limit, rng.Float64())
	}
	for i := range s.Servers {
		src := &s.Servers[i]
		sv := &st.servers[i]
		sv.step = src.Step
		if covL != nil {
			sv.step = drawStep(src.Step, covL[i], z)
		}
		sv.cap, sv.keep, sv.w = max(src.Cap, 1), src.Keep, 0
		sv.running = sv.running[:0]
		sv.waiting.reset()
		for _, l := range src.Writing {
			sv.running.Push(max(draw(l)-l, 0))
		}
		for k := 0; k < src.Waiting; k++ {
			sv.waiting.push(draw(0))
		}
		for len(sv.running) < sv.cap && sv.waiting.len() > 0 {
			sv.join(sv.waiting.pop())
		}
	}
	unsent := s.Unsent
	// An answer left to send goes to the first server with room.
	for unsent > 0 {
		placed := false
		for i := range st.servers {
			sv := &st.servers[i]
			if unsent > 0 && len(sv.running)+sv.waiting.len() < sv.keep {
				sv.waiting.push(draw(0))
				unsent--
				placed = true
			}
			for len(sv.running) < sv.cap && sv.waiting.len() > 0 {
				sv.join(sv.waiting.pop())
			}
		}
		if !placed {
			break
		}
	}
	t := 0.0
	for {
		next, dt := -1, math.Inf(1)
		for i := range st.servers {
			sv := &st.servers[i]
			if len(sv.running) == 0 {
				continue
			}
			if d := (sv.running[0] - sv.w) * sv.perToken(); d < dt {
				next, dt = i, d
			}
		}
		if next < 0 {
			return t
		}
		dt = max(dt, 0)
		t += dt
		for i := range st.servers {
			sv := &st.servers[i]
			if len(sv.running) > 0 {
				sv.w += dt / sv.perToken()
			}
		}
		sv := &st.servers[next]
		sv.w = max(sv.w, sv.running[0])
		for len(sv.running) > 0 && sv.running[0] <= sv.w*(1+1e-12) {
			sv.running.Pop()
			if unsent > 0 {
				sv.waiting.push(draw(0))
				unsent--
			}
			if sv.waiting.len() > 0 {
				sv.join(sv.waiting.pop())
			}
		}
	}
}

// drawLength is the final length of an answer that has written above
// tokens (0: one not started), cut at limit, for the uniform u: the
// inverse of d's survival above it.
func drawLength(d Dist, above, limit, u float64) float64 {
	if above >= limit {
		return limit
	}
	switch d := d.(type) {
	case LogNormal:
		s0 := 1.0
		if above > 0 {
			s0 = d.Surv(above)
		}
		if s0 <= 0 {
			return above
		}
		s := u * s0
		if s <= 0 {
			return limit
		}
		x := math.Exp(d.Mu + d.Sigma*math.Sqrt2*math.Erfcinv(2*s))
		return min(max(x, above), limit)
	case PointMass:
		return min(max(d.C, above), limit)
	}
	// Any other: bisect the survival.
	s0 := d.Surv(above)
	if s0 <= 0 {
		return above
	}
	target := u * s0
	lo, hi := above, limit
	if d.Surv(hi) >= target {
		return limit
	}
	for k := 0; k < 60; k++ {
		m := (lo + hi) / 2
		if d.Surv(m) > target {
			lo = m
		} else {
			hi = m
		}
	}
	return hi
}

// chol2 is the lower Cholesky factor of a 2x2 covariance.
func chol2(m [2][2]float64) [2][2]float64 {
	var l [2][2]float64
	l[0][0] = math.Sqrt(max(m[0][0], 0))
	if l[0][0] > 0 {
		l[1][0] = m[1][0] / l[0][0]
	}
	l[1][1] = math.Sqrt(max(m[1][1]-l[1][0]*l[1][0], 0))
	return l
}

// FitCov is the covariance of a lognormal fit's (mu, log sigma): the
// inverse of the log-likelihood's curvature at the fit, exact lengths in
// s and censored ones in cens. false where the curvature is not that of
// a maximum.
func FitCov(s LogStats, cens []Censor, d LogNormal) ([2][2]float64, bool) {
	return fitCov(s, cens, d, math.Inf(-1))
}

// fitCov is FitCov for a fit of lengths seen only above exp(t).
func fitCov(s LogStats, cens []Censor, d LogNormal, t float64) ([2][2]float64, bool) {
	ll := func(mu, ls float64) float64 { return truncLL(s, cens, t, mu, ls) }
	const h = 1e-3
	mu, ls := d.Mu, math.Log(d.Sigma)
	f0 := ll(mu, ls)
	hmm := (ll(mu+h, ls) - 2*f0 + ll(mu-h, ls)) / (h * h)
	hss := (ll(mu, ls+h) - 2*f0 + ll(mu, ls-h)) / (h * h)
	hms := (ll(mu+h, ls+h) - ll(mu+h, ls-h) - ll(mu-h, ls+h) + ll(mu-h, ls-h)) / (4 * h * h)
	// The information is minus the curvature.
	a, b, c := -hmm, -hms, -hss
	det := a*c - b*b
	if !(a > 0 && c > 0 && det > 0) {
		return [2][2]float64{}, false
	}
	return [2][2]float64{{c / det, -b / det}, {-b / det, a / det}}, true
}

// truncLL is the log-likelihood, up to a constant, of a lognormal of
// (mu, log sigma) for exact lengths in s and censored ones, all seen
// only above exp(t) (-Inf: all seen).
func truncLL(s LogStats, cens []Censor, t, mu, ls float64) float64 {
	sig := math.Exp(ls)
	v := -s.N*ls - (s.S2-2*mu*s.S1+s.N*mu*mu)/(2*sig*sig)
	seen := s.N
	for _, c := range cens {
		v += c.W * logQ((c.X-mu)/sig)
		seen += c.W
	}
	if !math.IsInf(t, -1) {
		v -= seen * logQ((t-mu)/sig)
	}
	return v
}

// logQ is log P(Z > a) for a standard normal Z, accurate far in the tail.
func logQ(a float64) float64 {
	if a < 30 {
		if q := 0.5 * math.Erfc(a/math.Sqrt2); q > 0 {
			return math.Log(q)
		}
	}
	return -a*a/2 - math.Log(a*math.Sqrt(2*math.Pi))
}
