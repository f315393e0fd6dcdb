package infer

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	libbackoff "tokenmill/lib/backoff"
	"tokenmill/lib/clock"
	"tokenmill/lib/fleet"
)

// The retry policy, on fleet's classes of failure: a refused connection
// (the request was never sent) goes elsewhere at once without using up an
// attempt; other retriable failures, 429 and 503 included, are tried again
// on another endpoint after an exponential backoff with jitter (or the
// server's Retry-After, capped by --max-backoff), up to --retries times;
// permanent failures go straight to the errors file; a fatal one stops
// the run. Every answer counts toward --retries, a 429's too: a server
// that refuses for ever (a quota run out) ends in error records, not in a
// run that never stops.
//
// An endpoint that fails every request alike (the same status and message
// across prompts, no success in between, though its health brings it back)
// is held out of service by fleet's Systematic, and the prompts go on
// elsewhere. Once no endpoint is left the run ends within seconds instead
// of using up every prompt's retries on it: every answer not done (in
// flight, backing off, queued, and the rest of the input) is written to
// the errors file as server_failing, the run exits 1 naming each endpoint
// and its answer, and --resume sends those answers again.

// ReasonServerFailing is the error record's reason of an answer not done
// because every endpoint failed every request alike.
const ReasonServerFailing = "server_failing"

// judge tells the detector of failing endpoints of f, an attempt of j on
// ep; the run ends when it finds no endpoint left.
func (r *runner) judge(ep *fleet.Endpoint, j *job, f *fleet.Failure) {
	if e := r.systematic.Attempt(ep, j.id+"\x00"+strconv.Itoa(j.sample), f); e != nil {
		r.endFailing(e)
	}
}

// endFailing ends the run for e: nothing more is sent, the backoffs under
// way are due at once, and every answer not done is filed (unsent).
func (r *runner) endFailing(e *fleet.FailingError) {
	if !r.failing.CompareAndSwap(nil, e) {
		return
	}
	r.logf("ending the run: no endpoint is left that does not fail every request alike; every answer not done %s", r.unsentWhere())
	// They would all say the same: the errors file has each.
	r.shownFail.Store(reportLimit)
	r.stopSending(e)
	r.retries.flush()
}

// unsent files j without sending it once the run ends for failing
// endpoints (false before): an error record with the answer they gave.
func (r *runner) unsent(j *job) bool {
	e := r.failing.Load()
	if e == nil {
		return false
	}
	r.c.queued.Add(-1)
	if j.etaOn { // a conversation between turns
		j.etaOn = false
		r.eta.Ended(j, r.clk.Now(), false, 0, "")
	}
	j.reason = ReasonServerFailing
	r.failJob(r.pool.ByName(e.Endpoint), j, &fleet.Failure{Status: e.Status, Message: e.Message, Retriable: true})
	return true
}

// failingErr is the error a run that ended for failing endpoints exits
// with; nil for any other run.
func (r *runner) failingErr() error {
	if e := r.failing.Load(); e != nil {
		return fmt.Errorf("%w; every answer not done %s", e, r.unsentWhere())
	}
	return nil
}

// unsentWhere says where the answers filed unsent go.
func (r *runner) unsentWhere() string {
	if r.errPath == "" {
		return "is counted as failed (no errors file: -o is stdout and no --errors)"
	}
	return fmt.Sprintf("is in %s as %s, and --resume sends it again", r.errPath, ReasonServerFailing)
}

// retry schedules another attempt of j after f, if f allows one, and
// reports whether it did.
func (r *runner) retry(j *job, f *fleet.Failure) bool {
	if !f.Retriable || (!f.Down && j.attempts > r.cfg.Retries) {
		return false
	}
	if r.failing.Load() != nil {
		j.reason = ReasonServerFailing // the run ends: filed, not retried
		return false
	}
	r.c.retries.Add(1)
	var wait time.Duration
	switch {
	case f.RetryAfter > 0:
		// The server said when (429/503 Retry-After): that long, at most
		// --max-backoff.
		wait = min(f.RetryAfter, r.cfg.MaxBackoff)
	case !f.Down:
		wait = r.backoff.Delay(j.attempts)
	}
	r.c.backingOff.Add(1)
	r.retries.after(r.clk, wait, func() {
		r.c.backingOff.Add(-1)
		r.c.queued.Add(1)
		r.ready.push(j)
	})
	return true
}

// retryTimers are the backoffs under way, so that the end of a run can
// stop them: a retry due after the run has ended must not fire into it.
type retryTimers struct {
	mu      sync.Mutex
	pending map[*retryTimer]struct{}
	stopped bool
	due     bool // flushed: every backoff is over at once
}

type retryTimer struct {
	t clock.Timer
	f func()
}

// after calls f once d has passed, unless stop comes first.
func (rt *retryTimers) after(clk clock.Clock, d time.Duration, f func()) {
	e := &retryTimer{f: f}
	rt.mu.Lock()
	if rt.stopped {
		rt.mu.Unlock()
		return
	}
	if rt.due {
		rt.mu.Unlock()
		f()
		return
	}
	if rt.pending == nil {
		rt.pending = map[*retryTimer]struct{}{}
	}
	rt.pending[e] = struct{}{}
	rt.mu.Unlock()
	t := clk.AfterFunc(d, func() {
		rt.mu.Lock()
		_, live := rt.pending[e]
		delete(rt.pending, e)
		rt.mu.Unlock()
		if live {
			f()
		}
	})
	rt.mu.Lock()
	e.t = t
	rt.mu.Unlock()
}

// flush ends every backoff under way at once, and every one set from now
// on: whoever takes an entry out of pending calls its f, so each is called
// once whether its timer fires meanwhile or not.
func (rt *retryTimers) flush() {
	rt.mu.Lock()
	if rt.stopped {
		rt.mu.Unlock()
		return
	}
	rt.due = true
	var fs []func()
	for e := range rt.pending {
		if e.t != nil {
			e.t.Stop()
		}
		delete(rt.pending, e)
		fs = append(fs, e.f)
	}
	rt.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// stop cancels every backoff under way.
func (rt *retryTimers) stop() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.stopped = true
	for e := range rt.pending {
		if e.t != nil {
			e.t.Stop()
		}
		delete(rt.pending, e)
	}
}

// backoff is the retries' wait: attempt n waits between half and all of
// --backoff*2^(n-1), at most --max-backoff, so that retries of requests
// that failed together do not arrive together.
type backoff = libbackoff.Jitter

// newBackoff draws the waits from seed.
func newBackoff(first, max time.Duration, seed uint64) *backoff {
	return libbackoff.NewJitter(libbackoff.Exp{First: first, Max: max}, rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}
