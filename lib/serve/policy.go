package serve

import (
	"fmt"
	"time"

	"tokenmill/lib/backoff"
)

// policy is when serve restarts a server and when it gives up on one:
// pure decisions on the times it is given, so that they are tested on
// virtual time.
type policy struct {
	startTimeout   time.Duration // start to first ready answer
	unhealthyAfter time.Duration // a ready server's checks failing this long
	backoff        time.Duration // the first wait before a restart
	maxBackoff     time.Duration
	maxFailures    int // failed starts in a row before giving up
}

// life is one start of a server, as the checks saw it.
type life struct {
	started      time.Time
	readySince   time.Time // zero until the first ready answer
	failingSince time.Time // zero while its checks answer (or before it was ready)
}

// Outcomes of a readiness check.
type verdict int

const (
	keep       verdict = iota // nothing changes
	nowReady                  // the first ready answer of this start
	nowFailing                // a ready server's first failed check
	recovered                 // a failing server answers again
	restart                   // stop it: see the reason
)

// check is what a readiness check at now means for l: ready or not, and
// the reason when the server is to be restarted (not ready within
// --start-timeout, or failing for --unhealthy-after).
func (p policy) check(l *life, now time.Time, ready bool) (verdict, string) {
	switch {
	case ready && l.readySince.IsZero():
		l.readySince = now
		return nowReady, ""
	case ready && !l.failingSince.IsZero():
		l.failingSince = time.Time{}
		return recovered, ""
	case ready:
		return keep, ""
	case l.readySince.IsZero():
		if now.Sub(l.started) >= p.startTimeout {
			return restart, fmt.Sprintf("not ready within %v (--start-timeout)", p.startTimeout)
		}
		return keep, ""
	case l.failingSince.IsZero():
		l.failingSince = now
		if p.unhealthyAfter <= 0 {
			return restart, "its readiness check failed (--unhealthy-after 0)"
		}
		return nowFailing, ""
	case now.Sub(l.failingSince) >= p.unhealthyAfter:
		return restart, fmt.Sprintf("its readiness check failed for %v (--unhealthy-after %v)", now.Sub(l.failingSince).Round(time.Millisecond), p.unhealthyAfter)
	}
	return keep, ""
}

// history is what carries from one start of a server to the next.
type history struct {
	failedStarts int // starts in a row that ended before the server was ready
	streak       int // restarts in a row, for the backoff
}

// next decides what follows a start l that ended at now: the wait
// before the server is started again, or giving up on it (true) after
// --max-failures starts in a row that ended before it was ready. The wait
// doubles with each restart in a row and starts over once a server has
// stayed ready for --max-backoff: one that runs for hours and then
// crashes comes back at once, one that crashes on every start is not
// started in a tight loop.
func (p policy) next(h *history, l life, now time.Time) (time.Duration, bool) {
	if l.readySince.IsZero() {
		h.failedStarts++
	} else {
		h.failedStarts = 0
		if now.Sub(l.readySince) >= p.maxBackoff {
			h.streak = 0
		}
	}
	if h.failedStarts >= p.maxFailures {
		return 0, true
	}
	h.streak++
	return backoff.Exp{First: p.backoff, Max: p.maxBackoff}.Delay(h.streak), false
}
