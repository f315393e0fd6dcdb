package fleet

import (
	"fmt"
	"math"
	"slices"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/forecast"
)

// The adaptive in-flight limit of one endpoint, for servers that do not
// say how many requests they run at once (vLLM, Ollama, gateways), or any
// server with --concurrency auto (which starts from the capacity a server
// reports, with its spare, and holds there as at a level found).
//
// Where the server's metrics count its running and waiting requests, the
// limit follows them (limiter_signals.go). Elsewhere it measures latency
// in windows. A window takes a cohort of requests sent one after another
// (half the limit while climbing, the limit once held; 4 to 8 at least),
// after a change of the limit once as many requests as the limit were
// sent (the server's batch and queue have turned over), and ends when
// every one of them is back, the longest too (while climbing, half of
// them, but for the first window and a step measured again). From the cohort it takes the latency per token ℓ of an answer of
// the recent mean length (the line latency = a + b × tokens fitted on it:
// a queue's wait goes into a), and the mean number of requests in flight,
// N; by Little's law the endpoint's output is N/ℓ tokens per second.
// That figure is steady even with long-tailed answer lengths (a long
// answer has a long latency), so windows of a few answers can be
// compared, where counting the tokens of the answers that happen to
// finish in a window would swing by half.
//
// The limit climbs from its start (FirstLevel from the pool, see below)
// while each step adds at least 5% to the output:
// it doubles, or grows fourfold after a step whose ℓ stayed within 10% of
// the level before (nothing waits: the server is far from full). When a
// step adds less, the server is full: past its slots the extra requests
// only wait in its queue, and ℓ grows as fast as N. The knee lies between
// the smallest level within 5% of the best and the level measured before
// it; where those are far apart it is searched for, first at the number
// of requests the server ran at once by Little's law (N times the share
// of the latency spent being written, 1 − a/ℓ). The limit settles there,
// after trying lower levels when nothing below was measured and the
// level's answers waited, plus the spare (an eighth of the level, 2 at
// least) to wait in the server's queue, so that a slot that frees is
// refilled without a round trip. Held there, it watches for the server
// slowing down at the same limit (fewer slots, or other clients): ℓ up by
// a quarter and the output down in two windows running (the first began
// before the change and understates it), and then tries the limit that
// ℓ's growth points to (L × ℓ_before/ℓ_now, the gradient step of TCP
// Vegas and Netflix's concurrency-limits), keeping it if the output
// holds, and halving on from there only while ℓ is still above what it
// was before. Every 8 windows held it tries a quarter more, in case the
// server grew, and climbs on if that paid (the levels it then measures
// carry the spare already: it adds none). 429 and 503 answers halve the
// limit.
//
// The pool starts a server that says nothing of its slots at FirstLevel,
// 16, not 4: no window says anything before its answers are back, and a
// run of a few hundred answers is only a dozen answers' latency long on
// 32 slots. Where that first window's answers waited (its line's
// intercept, or answers a quarter slower per token than the quickest,
// all of its cohort back), the start was past the slots: the limit
// settles at the number of its answers that ran at once, and probes up
// from there as at any level held (Ollama runs 4 by default, or 1).
//
// The limiter is pure arithmetic on the times it is told: the pool calls
// it under its lock, on its clock, so tests run it on virtual time.

// LimiterConfig bounds the adaptive limit; zero fields take the defaults.
type LimiterConfig struct {
	// Start is the first limit [4]; the pool starts a server that does
	// not say its slots at FirstLevel.
	Start int

	Min        int     // the lowest [1]
	Max        int     // the ceiling [256]
	MaxStep    int     // the most added in one window [256]
	Gain       float64 // output a step up must add to be kept, and a step down may lose [0.05]
	ProbeEvery int     // windows held before one step more is tried [8]
	MinAnswers int     // answers a window needs at least [8]
	// Spare and SpareShare say how many more than the level found are
	// kept in flight, to wait in the server's queue so that a slot that
	// frees is refilled without a round trip, as --queue-depth does beyond
	// a reported capacity: SpareShare of the level, at least Spare [2 and
	// 1/8; Spare negative: none, SpareShare negative: Spare alone].
	Spare      int
	SpareShare float64
	// Capacity is what the server reports it runs at once (0: it does not
	// say): the limit starts there with its spare and holds, adapting from
	// there.
	Capacity int
}

// FirstLevel is where the pool starts the adaptive limit of a server that
// does not say how many requests it runs: the first window measures a
// level, whatever it is, only once its answers are back, a whole answer's
// latency later, and on a run of a few hundred answers a start at 4 on 32
// slots leaves most of them idle for a tenth of the run. A level past the
// slots only queues requests that run as slots free, and its first window
// shows them waiting: the limit then comes down to the number that ran.
const FirstLevel = 16

func (c LimiterConfig) withDefaults() LimiterConfig {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Min, 1)
	def(&c.Max, 256)
	def(&c.MaxStep, 256)
	def(&c.ProbeEvery, 8)
	def(&c.MinAnswers, 8)
	switch { // idempotent: a negative Spare stays negative, meaning none
	case c.Spare < 0:
		c.SpareShare = -1
	case c.Spare == 0:
		c.Spare = 2
	}
	switch {
	case c.SpareShare < 0:
		c.SpareShare = 0
	case c.SpareShare == 0 && c.Spare > 0:
		c.SpareShare = 1.0 / 8
	}
	if !(c.Gain > 0 && c.Gain < 1) {
		c.Gain = 0.05
	}
	c.Max = max(c.Max, c.Min)
	return c
}

// start is the first limit: Start, or 4 (0 is left as it is by
// withDefaults, for the pool to choose).
func (c LimiterConfig) start() int {
	n := c.Start
	if n <= 0 {
		n = 4
	}
	return min(max(n, c.Min), c.Max)
}

type limiterPhase int

const (
	climbing   limiterPhase = iota // stepping up while it pays
	descending                     // trying lower limits against ref
	holding                        // at the limit found, watching
	probing                        // one step above the held limit
	searching                      // between the climb's last two levels, for the knee
)

// Limiter is the adaptive limit of one endpoint.
type Limiter struct {
	cfg   LimiterConfig
	limit int
	phase limiterPhase
	win   limiterWindow

	climb  []limiterMeasure // this climb's levels, in order
	ref    limiterMeasure   // holding: the held level (smoothed); descending: the level to match
	hasRef bool
	good   int // descending, searching: the smallest limit found as good as ref
	lo     int // searching: the largest limit found short of ref
	trying int // searching: the level measured now, less its spare
	held   int // windows held since the last step up was tried
	// slowed: holding, one window was slower than ref; the next one,
	// wholly after the change, says by how much.
	slowed bool
	// base: descending after a slowdown, ℓ before it (0: not after one).
	base   float64
	lowest int // the smallest limit ever measured (0: none)
	note   string
	// lengths and answers sum the recent answers' tokens, decayed.
	lengths, answers float64
	windows          int // windows begun
	// why the limit settled, at which level, with what spare, and the
	// levels measured below it, until the first window held checks them
	// (verify).
	why          string
	found, spare int
	below        []limiterMeasure
	// probed: climbing on from a probe of the held limit, whose levels
	// carry its spare already (settling adds none, or the spare would
	// grow by 2 with every probe that paid).
	probed bool
	// signals: the server's metrics are read, and the limit follows them
	// (limiter_signals.go); load is the last reading.
	signals bool
	loads   [3]signalLoad
}

// limiterWindow is the measurement under way: a cohort of requests sent
// one after another at one limit, measured once all of them are back.
// Taking every request of a cohort, the long ones too, is what keeps
// the figures fair: a window that took the answers that happened to come
// back first would favour short answers and short waits.
type limiterWindow struct {
	// start is when the cohort began: after a change of the limit, once as
	// many requests as the limit were sent at it, so that the server's
	// batch and queue have turned over to the new level.
	start, last time.Time
	settling    bool
	skip        int  // settling: the sends to let pass before the cohort begins
	unsettled   bool // the cohort began without settling
	inflight    int
	area        float64 // request-seconds in flight since start
	sends       int     // requests sent since start
	cohort      int     // the cohort's size, once it is all sent (0: sending)
	sealed      time.Time
	back        int               // cohort requests come back
	answers     int               // of them, answered
	fit         forecast.SpeedFit // their latency on their tokens
	busy        int               // 429 and 503 answers
	// whole: the window ends once every request of its cohort is back,
	// none left out as when a climb's half is enough: the answers that
	// waited are the ones that tell (the climb's first window, at a start
	// that may lie past the slots, and a step measured again because its
	// requests began to wait).
	whole bool
	// speeds are the latencies per token of the cohort's answers of
	// minSpeedTokens or more.
	speeds []float64
}

// limiterMeasure is one window's figures.
type limiterMeasure struct {
	limit   int
	out     float64 // tokens per second, N/ℓ
	perTok  float64 // ℓ, seconds of latency per token
	settled bool    // measured after the server settled to the limit
	// wait is the share of a typical answer's latency that every answer
	// waited, whatever its length (-1: unknown).
	wait float64
	// spread is ℓ over the least latency per token of one of the window's
	// answers (0: none); ran, how many of them were within slowerLatency
	// of that least: those that did not wait.
	spread float64
	ran    int
}

// waited: m's answers waited for slots. Its line says so where it has one
// (a share of noWait or more); else answers of the same speed that took
// a quarter longer per token than the quickest did (answers all cut at
// max_tokens, which no line fits).
func (m limiterMeasure) waited() bool {
	if m.wait >= 0 {
		return m.wait >= noWait
	}
	return m.spread > slowerLatency
}

// NewLimiter starts a limit at cfg.Start (defaults filled in) at now.
func NewLimiter(cfg LimiterConfig, now time.Time) *Limiter {
	cfg = cfg.withDefaults()
	l := &Limiter{cfg: cfg, limit: cfg.start()}
	l.win = limiterWindow{start: now, last: now, whole: true}
	if c := cfg.Capacity; c > 0 {
		// What the server says it runs is the level found: held there with
		// its spare, measured, and probed above as any level held is.
		l.hold(c+cfg.spare(c), now)
		l.found, l.spare = c, l.limit-c
	}
	return l
}

// Limit is the number of requests to keep in flight now.
func (l *Limiter) Limit() int { return l.limit }

// Settled reports whether the limit holds at a level it found.
func (l *Limiter) Settled() bool { return l.phase == holding }

// Climbing reports whether the limit is still searching upward for the
// server's slots, where each reading of its load may raise it.
func (l *Limiter) Climbing() bool { return l.phase == climbing }

// Note is what the last decision worth telling did, once; "" otherwise.
func (l *Limiter) Note() string {
	n := l.note
	l.note = ""
	return n
}

// Inflight says that n requests are in flight from now on.
func (l *Limiter) Inflight(now time.Time, n int) {
	w := &l.win
	if now.After(w.last) {
		w.area += float64(w.inflight) * now.Sub(w.last).Seconds()
		w.last = now
	}
	w.inflight = n
}

// Sent says a request was sent at at: the time Observe will be given
// for it, so that a cohort's members are known exactly.
func (l *Limiter) Sent(at time.Time) {
	w := &l.win
	if w.cohort > 0 || at.Before(w.start) {
		return
	}
	w.sends++
	switch {
	case w.settling && w.sends >= w.skip:
		l.begin(at, w.unsettled)
	case !w.settling && w.sends >= l.cohortSize():
		w.cohort, w.sealed = w.sends, at
	}
}

// searchingUp: the limit climbs: its windows ask only whether the output
// grows with the level, which few answers say.
func (l *Limiter) searchingUp() bool {
	return l.phase == climbing
}

// begin starts the cohort now.
func (l *Limiter) begin(now time.Time, unsettled bool) {
	w := &l.win
	if now.After(w.last) {
		w.last = now
	}
	l.win = limiterWindow{start: now, last: w.last, inflight: w.inflight, unsettled: unsettled, whole: w.whole}
	l.windows++
}

// cohortSize is how many requests a window measures.
// While climbing (below the knee, no queue) the figures are steady and
// half the limit (half MinAnswers at least) is enough; at or past the knee
// a queue's waits vary from request to request, and a cohort as large as
// the limit evens them out.
// A step down is tried to see whether the output halves, which a few
// answers show.
func (l *Limiter) cohortSize() int {
	switch {
	case l.searchingUp():
		return max(l.cfg.MinAnswers/2, l.limit/2)
	case l.phase == descending:
		return max(l.cfg.MinAnswers/2, l.limit)
	}
	return max(l.cfg.MinAnswers, l.limit)
}

// Observe is a request sent at sent that came back at now after latency:
// tokens generated when ok, else busy for a 429 or 503. It reports
// whether the limit changed.
func (l *Limiter) Observe(now, sent time.Time, latency time.Duration, tokens int, ok, busy bool) bool {
	if ok && tokens > 0 {
		l.lengths = l.lengths*lengthDecay + float64(tokens)
		l.answers = l.answers*lengthDecay + 1
	}
	if !l.ofCohort(sent) {
		return false
	}
	l.tally(latency, tokens, ok, busy)
	before := l.limit
	switch {
	case l.turnedAway():
		// The server turns requests away: it is past what it can queue.
		l.hold(max(l.cfg.Min, l.limit/2), now)
		l.note = fmt.Sprintf("%d in flight answered 429/503 (busy): down to %d", before, l.limit)
	case l.cohortBack(now):
		l.endWindow(now)
	}
	return l.limit != before
}

// The thresholds of a window's end.
const (
	// busyAnswers and busyShare: two 429/503 answers, and at least a fifth
	// of the cohort's answers so far, say the server turns requests away;
	// one alone may be a blip.
	busyAnswers = 2
	busyShare   = 5
	// minFill: a window whose mean in flight stayed under 80% of the limit
	// was not filled (the input runs dry): it says nothing of the server.
	minFill = 0.8
	// lengthDecay weighs the mean answer length toward the last few
	// hundred.
	lengthDecay = 0.998
	// meanAnswers is how many recent answers (decayed) the mean length
	// needs before it stands for the cohort's own.
	meanAnswers = 8
	// lineAnswers is how many answers a cohort's line needs; lineSpread,
	// how much their lengths must spread (variance over mean square) for
	// the line to say anything of the slope.
	lineAnswers = 4
	lineSpread  = 0.05
	// minSpeedTokens: an answer this long says how fast the server writes
	// (in a shorter one the round trip and the prefill weigh).
	minSpeedTokens = 32
)

// ofCohort: a request sent at sent is one of the cohort the window
// measures.
func (l *Limiter) ofCohort(sent time.Time) bool {
	w := &l.win
	return !(sent.Before(w.start) || w.settling || w.cohort > 0 && (sent.After(w.sealed) || w.back >= w.cohort))
}

// tally counts a cohort request come back.
func (l *Limiter) tally(latency time.Duration, tokens int, ok, busy bool) {
	w := &l.win
	w.back++
	switch {
	case ok:
		w.answers++
		w.fit.Add(float64(tokens), latency.Seconds())
		if tokens >= minSpeedTokens {
			w.speeds = append(w.speeds, latency.Seconds()/float64(tokens))
		}
	case busy:
		w.busy++
	}
}

// turnedAway: enough of the cohort was answered 429 or 503.
func (l *Limiter) turnedAway() bool {
	w := &l.win
	return w.busy >= busyAnswers && busyShare*w.busy >= w.answers+w.busy
}

// cohortBack: the whole cohort is sent and back, or all but stragglers.
//
// While it climbs, half the cohort back is enough when it was sent one
// request after another, on answers coming back (settled): all of them
// met the level's queue, the climb asks only whether the output grew with
// the level, and a step taken a long answer sooner keeps a large server's
// slots idle for less. A step's burst, sent at once (unsettled), waits for
// all: the first back are those that found free slots, the last those
// that waited.
func (l *Limiter) cohortBack(now time.Time) bool {
	w := &l.win
	if w.cohort > 0 && l.searchingUp() && !w.unsettled && !w.whole && 2*w.back >= w.cohort && w.answers >= l.quorum() {
		return true
	}
	return w.cohort > 0 && (w.back >= w.cohort || l.straggling(now))
}

// endWindow measures the cohort back at now and decides on it; a window
// with nothing to go on, or one the input did not fill, is begun again.
func (l *Limiter) endWindow(now time.Time) {
	w := &l.win
	l.Inflight(now, w.inflight)
	dur := now.Sub(w.start).Seconds()
	if dur <= 0 || w.fit.Tokens() <= 0 {
		l.restart(now)
		return
	}
	mean := w.area / dur
	if mean < minFill*float64(l.limit) {
		l.restart(now)
		return
	}
	m := limiterMeasure{limit: l.limit, settled: !w.unsettled}
	m.perTok, m.wait = l.perToken()
	m.out = mean / m.perTok
	if len(w.speeds) > 0 {
		least := slices.Min(w.speeds)
		m.spread = m.perTok / least
		for _, v := range w.speeds {
			if v <= slowerLatency*least {
				m.ran++
			}
		}
	}
	if l.lowest == 0 || m.limit < l.lowest {
		l.lowest = m.limit
	}
	windows := l.windows
	if !l.signals {
		l.decide(m, now)
	}
	if l.windows == windows {
		l.begin(now, false) // the same limit: the next cohort starts at once
	}
}

// perToken is the window's latency per token of a typical answer: the
// line latency = a + b × tokens fitted on the cohort, at the mean answer
// length of every recent answer. A queue's wait does not depend on an
// answer's length, so it goes into a and the cohort's own mix of short
// and long answers does not move the figure; answers all of one length
// (a model that always runs to max_tokens) fall back to Σ latency / Σ
// tokens.
//
// It also returns the share of that typical answer's latency the line
// puts in a, what every answer waited whatever its length (the server's
// queue, and the round trip); -1 when the line says nothing.
func (l *Limiter) perToken() (float64, float64) {
	fit := &l.win.fit
	ratio := fit.Seconds() / fit.Tokens()
	mean := fit.Tokens() / fit.N()
	if l.answers >= meanAnswers {
		mean = l.lengths / l.answers
	}
	if fit.N() < lineAnswers {
		return ratio, -1
	}
	b, a, ok := fit.Slope(lineSpread)
	if !ok || a+b*mean <= 0 {
		return ratio, -1
	}
	return (a + b*mean) / mean, max(a, 0) / (a + b*mean)
}

// quorum is how many answers a climbing window needs before half its
// cohort back ends it: half the cohort, and on the first window enough
// for the line (lineAnswers), whose wait share says whether the level
// ran every request at once (nothingWaited), or a lower one is tried.
func (l *Limiter) quorum() int {
	w := &l.win
	if len(l.climb) == 0 {
		return min(w.cohort, max(lineAnswers, (w.cohort+1)/2))
	}
	return (w.cohort + 1) / 2
}

// straggling: three quarters of the cohort are back and the rest have
// taken four times their mean latency since the last was sent, as a
// request that hangs does: the window ends without them.
func (l *Limiter) straggling(now time.Time) bool {
	w := &l.win
	if 4*w.back < 3*w.cohort || w.answers == 0 {
		return false
	}
	return now.Sub(w.sealed).Seconds() > 4*w.fit.Seconds()/float64(w.answers)
}

// The thresholds the limit's decisions turn on, beyond the configured
// Gain.
const (
	// sameLatency: ℓ up by at most 10% is ℓ unchanged. One window's ℓ
	// moves that much from the mix of answers alone; requests that begin
	// to wait in the server's queue move it more.
	sameLatency = 1.1
	// slowerLatency: held at one limit, ℓ up by a quarter says the server
	// slowed (fewer slots, or other clients), well past a window's noise.
	slowerLatency = 1.25
	// kneeMargin widens Gain for comparisons of levels that may both be
	// past the knee, where one window's figure is less exact: a level too
	// low is found again by the next step down and the probes up.
	kneeMargin = 2
	// fastStep: a step that finds nothing waiting adds three times the
	// limit (it grows fourfold): the server is far from full.
	fastStep = 3
	// probeShare: a probe adds a quarter of the held limit, enough to see
	// a server that grew, little queue for one that did not.
	probeShare = 4
	// refKeep is the weight of the held reference against each new window,
	// so that one odd window does not move it far.
	refKeep = 0.7
	// searchGap: a knee more than a quarter above the level measured
	// before it is searched for in between; the search ends within an
	// eighth of the level.
	searchGap = 4
	// noWait: a level whose answers waited under a tenth of their latency
	// ran them all at once.
	noWait = 0.1
)

// step is how much one step up adds to limit n: it doubles, by at most
// MaxStep.
func (l *Limiter) step(n int) int { return min(max(n, 1), l.cfg.MaxStep) }

// decide takes one window's figures m in the phase the limit is in.
func (l *Limiter) decide(m limiterMeasure, now time.Time) {
	switch l.phase {
	case climbing:
		l.climbWindow(m, now)
	case descending:
		l.descendWindow(m, now)
	case holding:
		l.holdWindow(m, now)
	case probing:
		l.probeWindow(m, now)
	case searching:
		l.searchWindow(m, now)
	}
}

// climbWindow: stepping up while each step adds Gain to the output; at
// the first that does not, the knee.
func (l *Limiter) climbWindow(m limiterMeasure, now time.Time) {
	prev, stepped := l.lastLevel()
	if stepped && !m.settled && m.perTok > sameLatency*prev.perTok {
		// Requests began to wait, and a queue's first window after a step
		// flatters it: measure the level again, settled, on all of its
		// cohort (the first half back ran, the rest waited).
		l.restart(now)
		l.win.whole = true
		return
	}
	l.climb = append(l.climb, m)
	switch {
	case !stepped && m.limit > l.cfg.MinAnswers/2 && m.waited() && m.ran > 0:
		// The start was past the slots: the server runs about as many as
		// the answers that did not wait.
		l.settle(max(l.cfg.Min, min(m.ran, m.limit)), now, fmt.Sprintf("%d in flight waited, %d ran at once", m.limit, m.ran))
	case !stepped || m.out >= prev.out*(1+l.cfg.Gain):
		l.stepUp(m, prev, stepped, now)
	default:
		l.atKnee(m, now, fmt.Sprintf("%d added under %.0f%%", m.limit, 100*l.cfg.Gain))
	}
}

// lastLevel is the climb's last level measured, if any.
func (l *Limiter) lastLevel() (limiterMeasure, bool) {
	if n := len(l.climb); n > 0 {
		return l.climb[n-1], true
	}
	return limiterMeasure{}, false
}

// stepUp climbs from m, the step before at prev when stepped. Output that
// grew in step with the limit (ℓ the same) says no request waits: the
// next level needs no time to settle, and it may be a longer step, since
// the server is not near full. Its cohort, the first half of the level
// sent, is large enough to fill slots beyond the level before and wait
// when the server has fewer than the new level.
func (l *Limiter) stepUp(m, prev limiterMeasure, stepped bool, now time.Time) {
	linear := !stepped && m.perTok > 0 || stepped && m.perTok <= sameLatency*prev.perTok
	if !linear && l.limit >= l.cfg.Max {
		// At the ceiling, and requests waited: the knee may lie below.
		l.atKnee(m, now, "the ceiling")
		return
	}
	if l.settledAtCeiling(now) {
		return
	}
	next := l.limit + l.step(l.limit)
	if linear {
		next = l.limit + l.step(fastStep*l.limit)
	}
	burst := next - l.limit
	l.set(next, now)
	if linear {
		// The step's requests go out at once: the first of them take the
		// slots the last level left free (burst less the cohort's share),
		// the cohort is the rest, those that wait if the server has fewer
		// slots than the new level.
		l.win.skip, l.win.unsettled = max(0, burst-l.cohortSize()), true
	}
}

// settledAtCeiling settles at the ceiling when the limit is there: no
// step up is left.
func (l *Limiter) settledAtCeiling(now time.Time) bool {
	if l.limit < l.cfg.Max {
		return false
	}
	l.settle(l.limit, now, "the ceiling")
	return true
}

// atKnee ends the climb at m, the step that added less than Gain: it
// settles at the knee, or, when nothing below the knee was measured,
// tries lower levels for the same output.
//
// When the knee was reached by a long step (fourfold while nothing
// waited), the slots lie somewhere between the level before and the knee:
// it searches there (searching), first at the number of requests the
// server ran at once past the knee, by Little's law (running).
func (l *Limiter) atKnee(m limiterMeasure, now time.Time, why string) {
	k, best := l.knee()
	if below, ok := l.levelBelow(k); ok && k > below.limit+max(2, below.limit/searchGap) {
		l.phase, l.ref, l.good, l.lo = searching, best, k, below.limit
		l.why = why
		l.try(l.searchAt(l.running(best, k)), now)
		return
	}
	if k <= l.lowest && k > l.cfg.Min && !l.nothingWaited(k) {
		l.phase, l.ref, l.good = descending, best, k
		l.set(max(l.cfg.Min, k/2), now)
		return
	}
	l.settle(k, now, why)
}

// running is how many requests the server ran at once during m, a level
// past the knee k, by Little's law: the requests in flight (m's output
// times its latency per token) times the share of their latency spent
// being written rather than waiting (m.wait is the share of a typical
// answer's latency its line puts in the intercept). Without a line, the
// output over the latency per token of a request that does not wait.
func (l *Limiter) running(m limiterMeasure, k int) float64 {
	if m.wait >= 0 {
		return m.out * m.perTok * (1 - m.wait)
	}
	return m.out * l.freeLatency(k)
}

// freeLatency is the latency per token of a request that does not wait:
// the least the climb measured below level n. The level just below the
// knee may have had some of its requests wait (a step's burst that
// reached past the free slots looks nearly linear), and one answer's
// speed changes little with the batch, so the least is the nearest.
func (l *Limiter) freeLatency(n int) float64 {
	least := 0.0
	for _, m := range l.climb {
		if m.limit < n && m.perTok > 0 && (least == 0 || m.perTok < least) {
			least = m.perTok
		}
	}
	return least
}

// levelBelow is the climb's highest level measured under n.
func (l *Limiter) levelBelow(n int) (limiterMeasure, bool) {
	var b limiterMeasure
	found := false
	for _, m := range l.climb {
		if m.limit < n && (!found || m.limit > b.limit) {
			b, found = m, true
		}
	}
	return b, found
}

// nothingWaited: the climb's measure of level n says its answers waited
// next to nothing (the server ran them all at once): no lower level can
// do as well.
func (l *Limiter) nothingWaited(n int) bool {
	for _, m := range l.climb {
		if m.limit == n {
			return m.wait >= 0 && m.wait < noWait
		}
	}
	return false
}

// searchAt is the next level searching tries: est (the running count
// Little's law gives) rounded up, within the range still open (lo, good).
func (l *Limiter) searchAt(est float64) int {
	n := int(math.Ceil(est))
	if n <= l.lo || n >= l.good {
		n = (l.lo + l.good + 1) / 2
	}
	return n
}

// try measures level n of the search, with the spare it would settle
// with: a level found by Little's law is a little under the slots (the
// latency per token grows with the batch), which the spare makes up.
func (l *Limiter) try(n int, now time.Time) {
	l.trying = n
	l.set(min(n, l.good)+l.cfg.spare(n), now)
}

// searchWindow: a level between the last one short of the best output (lo)
// and the knee (good), with its spare. One as good (within Gain) is where
// it settles; one short of it is the new lo, and the next try is the
// level its shortfall points to.
func (l *Limiter) searchWindow(m limiterMeasure, now time.Time) {
	n := l.trying
	if m.out >= l.ref.out*(1-l.cfg.Gain) || l.good-n <= max(1, l.good/(2*searchGap)) {
		// As good as the knee, or too close to it to tell: no lower level
		// is tried, each would idle slots. A climb from a probe settles
		// with no spare added: at the level measured, its spare in it.
		n = min(n, l.good)
		if l.probed {
			n = l.limit
		}
		l.settle(n, now, l.why)
		return
	}
	// Short of it: the slots are more, by about the share of the output
	// missing (the requests in flight all ran, and each slot adds its
	// share), and one more.
	l.lo = n
	next := n + 1
	if m.out > 0 {
		next = max(next, int(math.Ceil(float64(n)*l.ref.out/m.out))+1)
	}
	l.try(l.searchAt(float64(next)), now)
}

// descendWindow: halving while a level keeps ref's output (within Gain;
// after a slowdown, kneeMargin Gains, and until ℓ is back where it was
// before it); it settles at the smallest level as good.
func (l *Limiter) descendWindow(m limiterMeasure, now time.Time) {
	// Checking below a knee that was the lowest level measured, a level
	// must be as good within Gain: too low a level idles slots, where one
	// too high only queues a few requests (a CPU server on which fewer at
	// once are a little faster, or noise, must not walk the limit down
	// by a margin a step).
	margin := l.cfg.Gain
	if l.base > 0 {
		margin = kneeMargin * l.cfg.Gain
	}
	if m.out >= l.ref.out*(1-margin) {
		l.good = m.limit
		if l.base > 0 && m.perTok <= sameLatency*l.base {
			// ℓ is back where it was before the slowdown: no request
			// waits at this level, and a lower one would idle slots.
			l.settle(l.good, now, fmt.Sprintf("latency per token back to %.0f%% of before", 100*m.perTok/l.base))
			return
		}
		if next := max(l.cfg.Min, m.limit/2); next < m.limit {
			l.set(next, now)
			return
		}
	}
	l.settle(l.good, now, fmt.Sprintf("%d gave %.0f%% less", m.limit, 100*(1-m.out/l.ref.out)))
}

// holdWindow: held at the limit found, the first window is the reference
// (and checks the levels below it after settling); later ones watch for
// the server slowing down, and move the reference.
func (l *Limiter) holdWindow(m limiterMeasure, now time.Time) {
	if !l.hasRef {
		l.ref, l.hasRef = m, true
		if l.why != "" {
			l.verify(m, now)
		}
		return
	}
	if l.slower(m) {
		// The window that saw it began before the change and understates
		// it (and a level measured against it looks worse than it is):
		// measure again, on requests sent from now on, all after the
		// change, then try the limit the latency's growth points to.
		if !l.slowed {
			l.slowed = true
			return // the next cohort starts at once
		}
		if l.followSlowdown(m, now) {
			return
		}
	}
	l.keepHolding(m, now)
}

// keepHolding takes m into the reference and, every ProbeEvery windows
// held, tries a step more.
func (l *Limiter) keepHolding(m limiterMeasure, now time.Time) {
	l.slowed = false
	l.ref.out = refKeep*l.ref.out + (1-refKeep)*m.out
	l.ref.perTok = refKeep*l.ref.perTok + (1-refKeep)*m.perTok
	l.held++
	if l.held >= l.cfg.ProbeEvery && l.limit < l.cfg.Max {
		l.phase = probing
		l.climb = []limiterMeasure{l.ref}
		l.set(l.limit+max(1, l.limit/probeShare), now)
	}
}

// slower: held at one limit, m is slower than the reference: ℓ up by
// slowerLatency and the output down by Gain. Fewer slots than before, or
// other clients.
func (l *Limiter) slower(m limiterMeasure) bool {
	return m.perTok > slowerLatency*l.ref.perTok && m.out < (1-l.cfg.Gain)*l.ref.out
}

// followSlowdown tries the limit ℓ's growth points to, L × ℓ_before/ℓ_now
// (the gradient step of TCP Vegas), descending from there while ℓ stays
// above what it was before; false when that is no lower.
func (l *Limiter) followSlowdown(m limiterMeasure, now time.Time) bool {
	target := max(l.cfg.Min, int(math.Round(float64(l.limit)*l.ref.perTok/m.perTok)))
	if target >= l.limit {
		return false
	}
	base := l.ref.perTok
	l.phase, l.ref, l.good = descending, m, l.limit
	l.set(target, now)
	l.base = base
	return true
}

// probeWindow: one step above the held limit. Output up by Gain says the
// server grew: the climb goes on from there; otherwise back to the held
// limit.
func (l *Limiter) probeWindow(m limiterMeasure, now time.Time) {
	base := l.climb[0]
	l.climb = append(l.climb, m)
	if m.out < base.out*(1+l.cfg.Gain) {
		l.hold(base.limit, now)
		return
	}
	l.phase, l.probed = climbing, true
	if !l.settledAtCeiling(now) {
		l.set(l.limit+l.step(l.limit), now)
	}
}

// knee is the smallest level of the climb within Gain of the best one,
// and that best level.
func (l *Limiter) knee() (int, limiterMeasure) {
	best := l.climb[0]
	for _, m := range l.climb {
		if m.out > best.out {
			best = m
		}
	}
	k := best.limit
	for _, m := range l.climb {
		if m.out >= (1-l.cfg.Gain)*best.out && m.limit < k {
			k = m.limit
		}
	}
	return k, best
}

// settle holds at n and Spare more, why the climb stopped, and checks on
// the first window there that no lower level measured did as well: a
// level just past the knee looks better on its first window than it is,
// since the queue it makes has not yet built up waits.
func (l *Limiter) settle(n int, now time.Time, why string) {
	var below []limiterMeasure
	for _, m := range l.climb {
		if m.limit < n {
			below = append(below, m)
		}
	}
	if l.phase == descending && l.ref.limit < n {
		below = append(below, l.ref)
	}
	spare := min(l.cfg.spare(n), l.cfg.Max-n)
	if l.probed {
		spare = 0
	}
	l.hold(n+spare, now)
	l.below, l.why, l.found, l.spare = below, why, n, spare
}

// verify is the first window held after settling, m: it moves to the
// lowest level measured on the way within twice Gain of m (m, past the
// knee, is the less exact of the two) whose output did not fall with its
// level, and Spare more, or says where it holds.
func (l *Limiter) verify(m limiterMeasure, now time.Time) {
	k, kOut := l.found, m.out
	for _, b := range l.below {
		// A level that gave up half as large a share of the output as of
		// the requests in flight, or more, ran below the slots (44 under
		// a knee found at 47 gave 8% less): within kneeMargin Gains, but
		// no knee.
		short := 1 - b.out/m.out
		if b.limit < k && short <= kneeMargin*l.cfg.Gain && 2*short < 1-float64(b.limit)/float64(l.found) {
			k, kOut = b.limit, b.out
		}
	}
	why := l.why
	if k < l.found {
		why = fmt.Sprintf("%d gave no more", l.found)
		if l.spare > 0 {
			l.spare = l.cfg.spare(k)
		}
		l.hold(k+l.spare, now)
	}
	l.why, l.below = "", nil
	spare := ""
	if l.limit > k {
		spare = fmt.Sprintf("%d + %d spare; ", k, l.limit-k)
	}
	l.note = fmt.Sprintf("in flight settled at %d (%s%s tok/s measured; %s)", l.limit, spare, cli.Thousands(int64(kOut+0.5)), why)
}

// hold keeps n from now on, measuring afresh.
func (l *Limiter) hold(n int, now time.Time) {
	l.phase, l.hasRef, l.held, l.climb = holding, false, 0, nil
	l.slowed, l.base, l.probed = false, 0, false
	l.why, l.below = "", nil
	l.set(n, now)
}

// set makes n the limit and starts a new window, which first lets the
// requests sent under the old limit come back.
func (l *Limiter) set(n int, now time.Time) {
	l.limit = min(max(n, l.cfg.Min), l.cfg.Max)
	l.restart(now)
}

func (l *Limiter) restart(now time.Time) {
	l.win = limiterWindow{start: now, last: now, inflight: l.win.inflight, settling: true, skip: l.limit}
	l.windows++
}
