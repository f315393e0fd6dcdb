package forecast

import (
	"math"
	"sort"
	"sync"
	"time"
)

// ETA is how long the rest of a run will take, and what it rests on.
type ETA struct {
	Left      time.Duration // the estimate
	Low, High time.Duration // about a 95% range (98% near a run's end)
	// TokPerSec is the fleet's output now, answers in flight included.
	TokPerSec float64
	// MeanTokens is the expected answer length in tokens, with its
	// standard error.
	MeanTokens, MeanSE float64
}

// Estimator is the live forecast of how long the rest of a run takes. The
// runner tells it when each attempt starts and ends, naming the attempt by
// a key of its own (one attempt in flight per key); the progress display
// asks it for the time left.
type Estimator[K comparable] interface {
	// Started: attempt k was sent to endpoint ep at at.
	Started(k K, ep int, at time.Time)
	// Ended: attempt k ended at at; with ok, an answer of tokens
	// completion tokens that finished for finish ("stop", "length", ...).
	Ended(k K, at time.Time, ok bool, tokens int, finish string)
	// Forecast is the time needed for left more answers, or false while
	// there is too little to go on.
	Forecast(now time.Time, left int64) (ETA, bool)
}

// estimator forecasts from the fleet's output in tokens per second and
// the mean answer length, both corrected for the answers still being
// written. Early in a run the answers that have finished are the short
// ones (a long answer is still running), so neither the answer rate nor
// the mean length of finished answers can be trusted. Instead:
//
//   - A request in flight is not necessarily being written: past what a
//     server runs at once, requests wait in its queue. The pool says how
//     many each endpoint runs (its metrics' count, its reported capacity,
//     or its measured effective concurrency); the oldest that many of an
//     endpoint's requests are taken as being written, the others as
//     waiting (first come, first served), and a waiting one starts when
//     one of them ends.
//   - The per-answer decode speed v and a fixed overhead q (prefill, the
//     round trip) come from a regression of latency, from the moment a
//     request was taken as being written, on length over finished answers;
//     an answer written for a seconds has then produced about v*(a-q)
//     tokens, streaming or not. The speed depends on the batch: each
//     endpoint's step cost a + b*n is fitted too (BatchFit), from the
//     batch each answer saw over its tokens.
//   - Output tok/s is the growth, over the last window, of the tokens
//     produced: those of finished answers plus those in flight.
//   - Answer lengths are fitted as a lognormal, with max_tokens cuts and
//     answers in flight as censored (longer than what they have so far);
//     the mean is taken over every answer sent, finished ones as they were
//     and those in flight as their expected final length. The fit fills in
//     what has not been seen yet; as the run goes on the finished answers
//     dominate and the estimate becomes the plain mean.
//   - The time left is the tokens left (answers not yet sent times the
//     mean, plus what those in flight still have to write) over the rate,
//     plus the drain at the end (the run waits for its longest answers),
//     and never less than the longest answer in flight needs.
//   - With few answers left to send (a short run, or a long one's end),
//     the rest of the run is played out instead (Sim): the batch empties,
//     the last answers go faster for it, and the time left is that of the
//     few longest, which a sum does not capture.
type estimator[K comparable] struct {
	window time.Duration
	limit  float64 // max_tokens when known (0: learn it)
	// context is the model's context as the run knows it (0: not yet):
	// with no max_tokens, no answer is longer.
	context func() int
	// capacity is how many requests endpoint i runs at once (0: all).
	capacity func(i int) int

	// What the runner reports, under mu: taken briefly by every request.
	mu       sync.Mutex
	first    time.Time // the first request (zero: none yet)
	inflight map[K]*flight
	byEP     map[int][]*flight // in flight per endpoint, oldest first
	batch    map[int]*batchClock
	cost     [2]float64 // a and b of the last fit, for the batchClocks
	answers  finished

	// The forecast's own state, under fmu, so that its arithmetic does
	// not hold up requests.
	fmu      sync.Mutex
	fit      LogNormal // last fit, the next one's start
	played   played
	produced []sample
}

// finished sums up the answers that finished.
type finished struct {
	done        float64 // answers finished ok
	credited    float64 // their tokens
	sumL, sumL2 float64
	exact       LogStats        // log lengths of answers that stopped on their own
	ended       map[int]float64 // the same by lengthKey, for Seen
	cut         map[int]float64 // answers cut by max_tokens (or the context), by length
	longest     int
	speed       SpeedFit
	// byEP is each endpoint's own speed: one slower than the rest writes
	// its answers slower, and the run's end waits for them.
	byEP map[int]*SpeedFit
	// steps is the cost model of the fleet's servers, stepsEP each one's.
	steps   BatchFit
	stepsEP map[int]*BatchFit
}

// batchClock is an endpoint's batch over time: how many answers it writes
// now, and since the run began the integrals over time of w(n) and of
// n*w(n), where w(n) = 1/(a + b*n) is the tokens a second one answer gets
// in a batch of n (by the last fit): an answer's average batch over its
// tokens (not its seconds: it writes more of them while the batch is
// small) is their growth's ratio.
type batchClock struct {
	n          int
	tok, batch float64 // the integrals of w and n*w
	last       time.Time
	peak       int // the most requests in flight on it at once
}

// at moves the clock to t, the tokens a second being w(n) = 1/(a + b*n)
// (a = 1, b = 0 before any fit: the average over seconds).
func (b *batchClock) at(t time.Time, cost [2]float64) {
	if d := t.Sub(b.last).Seconds(); d > 0 && !b.last.IsZero() && b.n > 0 {
		w := 1 / (cost[0] + cost[1]*float64(b.n))
		b.tok += w * d
		b.batch += float64(b.n) * w * d
	}
	if b.last.IsZero() || t.After(b.last) {
		b.last = t
	}
}

type sample struct {
	at     time.Time
	tokens float64
}

// flight is a request in flight: where it went, and since when it is
// taken as being written (zero while it waits in the server's queue).
type flight struct {
	ep      int
	sent    time.Time
	writing time.Time
	tok0    float64 // the endpoint's batchClock integrals when it
	batch0  float64 // started being written
	nbar    float64 // in a snapshot: the average batch it saw so far
}

// batchSince is the average batch answer f saw from when it was taken as
// being written until now, itself included.
func (f *flight) batchSince(b *batchClock) float64 {
	if d := b.tok - f.tok0; d > 0 {
		return max((b.batch-f.batch0)/d, 1)
	}
	return float64(max(b.n, 1))
}

// lineOf is a fit's v (tokens per second of one answer) and q (seconds):
// the line once three answers make one and it does not start below zero,
// else the line through the origin.
func lineOf(s *SpeedFit) (v, q float64) {
	if s.N() >= 3 {
		if v, q, ok := s.Line(0); ok && q >= 0 {
			return v, q
		}
	}
	v, _ = s.Origin()
	return v, 0
}

// Forecasting needs this many finished answers.
const minAnswers = 20

// NewEstimator returns the forecast the progress display uses: tokens per
// second over the last window, answers of at most maxTokens (0: unknown),
// else of at most the model's context (context(), 0 or a nil context:
// unknown), and capacity(i) requests written at once by endpoint i (nil,
// or 0: all those in flight). K names an attempt in flight.
func NewEstimator[K comparable](window time.Duration, maxTokens int, context func() int, capacity func(i int) int) Estimator[K] {
	return &estimator[K]{window: window, limit: float64(maxTokens), context: context, capacity: capacity,
		inflight: map[K]*flight{}, byEP: map[int][]*flight{}, batch: map[int]*batchClock{}, cost: [2]float64{1, 0},
		answers: finished{cut: map[int]float64{}, ended: map[int]float64{}}}
}

func (e *estimator[K]) Started(k K, ep int, at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.first.IsZero() {
		e.first = at
	}
	f := &flight{ep: ep, sent: at}
	e.inflight[k] = f
	e.clockLocked(ep, at)
	e.byEP[ep] = append(e.byEP[ep], f)
	e.batch[ep].peak = max(e.batch[ep].peak, len(e.byEP[ep]))
	e.promoteLocked(ep, at)
}

// clockLocked moves endpoint ep's batch clock to at.
func (e *estimator[K]) clockLocked(ep int, at time.Time) *batchClock {
	b := e.batch[ep]
	if b == nil {
		b = &batchClock{}
		e.batch[ep] = b
	}
	b.at(at, e.cost)
	return b
}

// promoteLocked takes the oldest waiting requests of endpoint ep as being
// written from at on, while it writes fewer than it can.
func (e *estimator[K]) promoteLocked(ep int, at time.Time) {
	list := e.byEP[ep]
	room := len(list)
	if e.capacity != nil {
		if c := e.capacity(ep); c > 0 {
			room = c
		}
	}
	for _, f := range list {
		if !f.writing.IsZero() {
			room--
		}
	}
	b := e.clockLocked(ep, at)
	defer func() {
		b.n = 0
		for _, f := range list {
			if !f.writing.IsZero() {
				b.n++
			}
		}
	}()
	for _, f := range list {
		if room <= 0 {
			return
		}
		if f.writing.IsZero() {
			f.writing, f.tok0, f.batch0 = at, b.tok, b.batch
			room--
		}
	}
}

func (e *estimator[K]) Ended(k K, at time.Time, ok bool, tokens int, finish string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f, found := e.inflight[k]
	delete(e.inflight, k)
	if !found {
		return
	}
	b := e.clockLocked(f.ep, at)
	nbar := 1.0
	if !f.writing.IsZero() {
		nbar = f.batchSince(b)
	}
	list := e.byEP[f.ep]
	for i, g := range list {
		if g == f {
			e.byEP[f.ep] = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	e.promoteLocked(f.ep, at)
	if !ok {
		return
	}
	sent := f.writing
	if sent.IsZero() {
		sent = f.sent
	}
	a := &e.answers
	l := float64(tokens)
	a.done++
	a.credited += l
	a.sumL += l
	a.sumL2 += l * l
	a.longest = max(a.longest, tokens)
	if finish == "length" {
		a.cut[tokens]++
	} else {
		a.exact.Add(tokens)
		a.ended[lengthKey(tokens)]++
	}
	if tokens > 0 {
		secs := at.Sub(sent).Seconds()
		a.speed.Add(l, secs)
		if a.byEP == nil {
			a.byEP = map[int]*SpeedFit{}
		}
		if a.byEP[f.ep] == nil {
			a.byEP[f.ep] = &SpeedFit{}
		}
		a.byEP[f.ep].Add(l, secs)
		a.steps.Add(l, secs, nbar)
		if a.stepsEP == nil {
			a.stepsEP = map[int]*BatchFit{}
		}
		if a.stepsEP[f.ep] == nil {
			a.stepsEP[f.ep] = &BatchFit{}
		}
		a.stepsEP[f.ep].Add(l, secs, nbar)
	}
}

// snapshot copies what the runner reported: the answers, when the first
// request went out, since when each answer in flight is being written
// and the batch it saw (those waiting in a server's queue are left out),
// and each endpoint's state.
func (e *estimator[K]) snapshot(now time.Time) (finished, time.Time, []flight, map[int]*server) {
	e.mu.Lock()
	defer e.mu.Unlock()
	a := e.answers
	a.cut = make(map[int]float64, len(e.answers.cut))
	for l, w := range e.answers.cut {
		a.cut[l] = w
	}
	a.ended = make(map[int]float64, len(e.answers.ended))
	for k, w := range e.answers.ended {
		a.ended[k] = w
	}
	a.byEP = make(map[int]*SpeedFit, len(e.answers.byEP))
	for ep, s := range e.answers.byEP {
		c := *s
		a.byEP[ep] = &c
	}
	a.stepsEP = make(map[int]*BatchFit, len(e.answers.stepsEP))
	for ep, s := range e.answers.stepsEP {
		c := *s
		a.stepsEP[ep] = &c
	}
	writing := make([]flight, 0, len(e.inflight))
	servers := make(map[int]*server, len(e.byEP))
	for ep, list := range e.byEP {
		e.promoteLocked(ep, now) // an endpoint that grew
		b := e.batch[ep]
		// Without a capacity every request in flight is written: as many
		// as the runner keeps there.
		sv := &server{cap: b.peak, keep: b.peak}
		if e.capacity != nil {
			if c := e.capacity(ep); c > 0 {
				sv.cap = c
			}
		}
		for _, f := range list {
			if f.writing.IsZero() {
				sv.waiting++
				continue
			}
			c := *f
			c.nbar = f.batchSince(b)
			writing = append(writing, c)
		}
		servers[ep] = sv
	}
	return a, e.first, writing, servers
}

// server is an endpoint as a forecast sees it: how many it writes at once,
// how many wait in its queue, how many the runner keeps on it.
type server struct {
	cap, waiting, keep int
}

// speedOf is endpoint ep's answer speed and overhead, or the fleet's
// (v, q) until it has answered enough to fit its own.
func (a *finished) speedOf(ep int, v, q float64) (float64, float64) {
	if s := a.byEP[ep]; s != nil && s.N() >= 3 {
		if ve, qe := lineOf(s); ve > 0 {
			return ve, qe
		}
	}
	return v, q
}

// seen is the lengths the answers have shown: those that ended on their
// own, and those cut or still being written (progress) as at least what
// they have.
func (a *finished) seen(progress []float64) *Seen {
	ended := make([]Count, 0, len(a.ended))
	for k, n := range a.ended {
		ended = append(ended, Count{X: keyLength(k), N: n})
	}
	least := make([]Count, 0, len(a.cut)+len(progress))
	for l, n := range a.cut {
		least = append(least, Count{X: float64(l), N: n})
	}
	for _, l := range progress {
		least = append(least, Count{X: l, N: 1})
	}
	return NewSeen(ended, least)
}

// answerLimit is the longest an answer can be: max_tokens; else, the
// model's context known, the longest answer it cut (the context less its
// prompt) or, none cut yet, the context; else DefaultLimit. Never shorter
// than an answer seen. An answer longer than the context shows a server
// that shifts its context (Ollama) rather than cut: the context then
// bounds nothing.
func (a *finished) answerLimit(limit float64, context int) float64 {
	if limit > 0 {
		return limit
	}
	cut := 0.0
	for l := range a.cut {
		cut = max(cut, float64(l))
	}
	lim := max(float64(DefaultLimit), cut)
	switch {
	case context <= 0 || a.longest > context: // unknown, or shifted: no bound
	case cut > 0:
		lim = cut
	default:
		lim = float64(context)
	}
	return max(lim, float64(a.longest))
}

// lengths fits the answer lengths given the progress of those in flight,
// starting from the last fit.
func (e *estimator[K]) lengths(a *finished, progress []float64) (Dist, []Censor, bool) {
	if a.exact.N == 0 {
		if len(a.cut) == 0 {
			return nil, nil, false
		}
		// Every answer was cut: they will all be as long as the longest cut.
		c := 0
		for l := range a.cut {
			c = max(c, l)
		}
		return PointMass{C: float64(c)}, nil, true
	}
	cens := make([]Censor, 0, len(a.cut)+len(progress))
	for l, w := range a.cut {
		cens = append(cens, Censor{X: math.Log(float64(max(l, 1))), W: w})
	}
	for _, l := range progress {
		if l >= 1 {
			cens = append(cens, Censor{X: math.Log(l), W: 1})
		}
	}
	d, ok := FitLogNormal(a.exact, cens, e.fit)
	if !ok {
		return nil, nil, false
	}
	e.fit = d
	return d, cens, true
}

func (e *estimator[K]) Forecast(now time.Time, left int64) (ETA, bool) {
	a, first, inflight, servers := e.snapshot(now)
	e.fmu.Lock()
	defer e.fmu.Unlock()
	if a.done < minAnswers || first.IsZero() {
		return ETA{}, false
	}
	v, q := lineOf(&a.speed)
	if v <= 0 {
		return ETA{}, false
	}
	context := 0
	if e.context != nil {
		context = e.context()
	}
	limit := a.answerLimit(e.limit, context)
	fleetStep, batchOK := a.steps.Fit()
	if batchOK {
		e.mu.Lock()
		e.cost = [2]float64{fleetStep.A, fleetStep.B}
		e.mu.Unlock()
	}

	var fleet *Step
	if batchOK {
		fleet = &fleetStep
	}
	progress, speeds, steps := a.inFlight(now, inflight, v, q, fleet, limit)
	producing := a.credited
	for _, l := range progress {
		producing += l
	}
	rate := e.rate(now, first, producing)
	d, cens, ok := e.lengths(&a, progress)
	// With every answer left in flight, the time left is theirs: it needs
	// no rate (which stalls while the last, long ones are written).
	if !ok || (rate <= 0 && left > int64(len(progress))) {
		return ETA{}, false
	}

	// The mean over every answer sent: finished ones as they were, those
	// in flight as their expected final length.
	sum, rest := a.sumL, 0.0
	for _, l := range progress {
		final := CondMean(d, l, limit)
		sum += final
		rest += final - l
	}
	n := a.done + float64(len(progress))
	mean := sum / n
	_, m2 := CappedMoments(d, limit)
	sd := math.Sqrt(max(m2-mean*mean, 0))
	if a.done >= 2 {
		sd = max(sd, math.Sqrt(max(a.sumL2/a.done-(a.sumL/a.done)*(a.sumL/a.done), 0)))
	}
	se := sd / math.Sqrt(a.done)
	f := ETA{TokPerSec: rate, MeanTokens: mean, MeanSE: se}
	if left <= 0 {
		return f, true
	}

	var secs, lo, hi float64
	waiting := 0
	for _, sv := range servers {
		waiting += sv.waiting
	}
	unsent := left - int64(len(progress)) - int64(waiting)
	if e.played.fresh(now, a.done, left) {
		// Played out a moment ago.
		el := now.Sub(e.played.at).Seconds()
		secs, lo, hi = e.played.secs-el, e.played.lo-el, e.played.hi-el
	} else if batchOK && unsent <= maxPlayed {
		sim := a.simulation(unsent, left, d, limit, cens, progress)
		sim.Unbounded = e.limit <= 0
		sim.Servers = a.simServers(servers, inflight, progress, steps, fleetStep)
		secs, lo, hi = sim.Play()
		e.played = played{at: now, done: a.done, secs: secs, lo: lo, hi: hi}
	} else {
		secs, lo, hi = RunTime(Run{
			Answers: max(float64(left)-float64(len(progress)), 0), InFlight: progress, Speeds: speeds, Rest: rest,
			TokPerSec: rate, Speed: v, Lengths: d, Limit: limit, Mean: mean, SE: se, SD: sd,
		})
	}
	// Answers are left: the run is not over, whatever the arithmetic says.
	secs, lo, hi = max(secs, minLeft), max(lo, 0), max(hi, minLeft)
	f.Left, f.Low, f.High = seconds(secs), seconds(lo), seconds(hi)
	return f, true
}

// inFlight is what each answer in flight has produced so far, at the speed
// of the endpoint writing it in the batch it saw (fleet is nil without a
// batch fit), with those speeds and the steps it fitted per endpoint.
func (a *finished) inFlight(now time.Time, inflight []flight, v, q float64, fleet *Step, limit float64) (progress, speeds []float64, steps map[int]Step) {
	progress = make([]float64, 0, len(inflight))
	speeds = make([]float64, 0, len(inflight))
	steps = map[int]Step{}
	for _, f := range inflight {
		vi, qi := a.speedOf(f.ep, v, q)
		age := now.Sub(f.writing).Seconds()
		l := vi * (age - qi)
		if fleet != nil {
			st, ok := steps[f.ep]
			if !ok {
				st = a.stepOf(f.ep, *fleet)
				steps[f.ep] = st
			}
			l = (age - st.Q) / st.PerToken(f.nbar)
		}
		l = min(max(l, 0), limit-1)
		progress = append(progress, l)
		speeds = append(speeds, vi)
	}
	return progress, speeds, steps
}

// simulation sets up the play-out of the unsent answers: the fitted
// lengths, or the tail of the lengths seen once enough answers ended.
func (a *finished) simulation(unsent, left int64, d Dist, limit float64, cens []Censor, progress []float64) Sim {
	sim := Sim{Unsent: int(max(unsent, 0)), Lengths: d, Limit: limit, Seed: 1,
		Plays: min(maxPlays, max(minPlays, playedAnswers/int(left)))}
	if ln, ok := d.(LogNormal); ok {
		sim.LenCov, _ = FitCov(a.exact, cens, ln)
	}
	if a.exact.N >= minAnswers {
		sim.Seen = a.seen(progress)
		if ln, ok := d.(LogNormal); ok {
			if tail, cov, ok := sim.Seen.Tail(ln); ok {
				sim.Lengths, sim.LenCov = tail, cov
			}
		}
	}
	return sim
}

// simServers is the servers as they stand, with the answers each is
// writing, in endpoint order so the plays draw the same way every time.
func (a *finished) simServers(servers map[int]*server, inflight []flight, progress []float64, steps map[int]Step, fleet Step) []SimServer {
	at := map[int]int{}
	eps := make([]int, 0, len(servers))
	for ep := range servers {
		eps = append(eps, ep)
	}
	sort.Ints(eps)
	out := make([]SimServer, 0, len(eps))
	for _, ep := range eps {
		sv := servers[ep]
		at[ep] = len(out)
		st, ok := steps[ep]
		if !ok {
			st = a.stepOf(ep, fleet)
		}
		out = append(out, SimServer{Cap: sv.cap, Waiting: sv.waiting, Keep: max(sv.keep, sv.cap), Step: st})
	}
	for i, f := range inflight {
		s := &out[at[f.ep]]
		s.Writing = append(s.Writing, progress[i])
	}
	return out
}

// played is the last play-out of a run's end.
type played struct {
	at           time.Time
	done         float64 // answers finished then
	secs, lo, hi float64
}

// fresh: played less than staleness of its time left before now, with at
// least a second left, and fewer answers finished since than staleness of
// those left (none when few are left): used again, less the time since.
func (p played) fresh(now time.Time, done float64, left int64) bool {
	el := now.Sub(p.at).Seconds()
	return !p.at.IsZero() && el >= 0 && el < staleness*p.secs && p.secs-el > 1 &&
		done-p.done < staleness*float64(left)
}

// staleness is how old a play-out may be, as a share of the time it gave
// and of the answers left: the plays move little in that, and cost
// milliseconds.
const staleness = 0.05

// A run with at most maxPlayed answers left to send is played out, from
// maxPlays times down to minPlays as the answers left grow, about
// playedAnswers answers in all (a few milliseconds); a longer one is
// summed up by RunTime, its end a small part of it.
const (
	maxPlayed          = 1000
	maxPlays, minPlays = 400, 60
	playedAnswers      = 60_000
)

// stepOf is endpoint ep's cost model, or the fleet's until it has answered
// enough to fit its own.
func (a *finished) stepOf(ep int, fleet Step) Step {
	if s := a.stepsEP[ep]; s != nil && s.N() >= 3 {
		if st, ok := s.Fit(); ok {
			return st
		}
	}
	return fleet
}

// minLeft is the least time left the forecast gives while answers are
// left, in seconds: never 0 before the end (the display's precision).
const minLeft = 0.1

// rate records the tokens produced so far and returns their growth per
// second over the window. Nothing was produced before the first request.
func (e *estimator[K]) rate(now, first time.Time, producing float64) float64 {
	if len(e.produced) == 0 {
		e.produced = append(e.produced, sample{at: first})
	}
	e.produced = append(e.produced, sample{now, producing})
	// Keep one sample older than the window as its left edge.
	cut := 0
	for cut+1 < len(e.produced) && now.Sub(e.produced[cut+1].at) >= e.window {
		cut++
	}
	e.produced = e.produced[cut:]
	edge := e.produced[0]
	span := now.Sub(edge.at).Seconds()
	if span <= 0 {
		return 0
	}
	return (producing - edge.tokens) / span
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
