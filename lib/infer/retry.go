package infer

import (
	"math/rand/v2"
	"sync"
	"time"

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

// retry schedules another attempt of j after f, if f allows one, and
// reports whether it did.
func (r *runner) retry(j *job, f *fleet.Failure) bool {
	if !f.Retriable || (!f.Down && j.attempts > r.cfg.Retries) {
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
		wait = r.backoff.delay(j.attempts)
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
}

type retryTimer struct{ t clock.Timer }

// after calls f once d has passed, unless stop comes first.
func (rt *retryTimers) after(clk clock.Clock, d time.Duration, f func()) {
	e := &retryTimer{}
	rt.mu.Lock()
	if rt.stopped {
		rt.mu.Unlock()
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

// backoff is exponential with jitter: attempt n waits between half and
// all of base*2^(n-1), capped at max, so retries of requests that failed
// together do not arrive together.
type backoff struct {
	base, max time.Duration
	mu        sync.Mutex
	rnd       *rand.Rand
}

func newBackoff(base, max time.Duration, seed uint64) *backoff {
	return &backoff{base: base, max: max, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (b *backoff) delay(attempt int) time.Duration {
	if b.base <= 0 {
		return 0
	}
	d := b.base
	for i := 1; i < attempt && d < b.max; i++ {
		d *= 2
	}
	d = min(d, b.max)
	b.mu.Lock()
	j := time.Duration(b.rnd.Int64N(int64(d/2) + 1))
	b.mu.Unlock()
	return d/2 + j
}
