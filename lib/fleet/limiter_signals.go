package fleet

import (
	"fmt"
	"math"
	"time"
)

// The adaptive limit on the server's own signals. A server whose metrics
// count the requests it runs and those waiting in its queue (SGLang's
// sglang:num_running_reqs and num_queue_reqs, vLLM's
// vllm:num_requests_running and num_requests_waiting, llama.cpp's
// requests_processing and requests_deferred, or its /slots) says at once
// what latency takes windows to show: while none of ours waits and all
// of them run, it has room for more; once some wait and the running
// count no longer grows, that count is its slots. The limit then climbs
// fourfold at every reading that finds room, and holds at the running
// count plus the spare (a share of it) once requests wait, so that a
// slot that frees is refilled from the server's own queue rather than a
// round trip later. The readings come every probe interval (a sixteenth
// of it while the limit climbs, pollEveryLocked); latency windows still
// measure, but decide nothing while they come.

// signalLoad is one reading of the server's metrics.
type signalLoad struct {
	running, waiting int
	ok               bool // a reading was taken
}

// spare is how many more than n are kept in flight to wait in the
// server's queue: a share of n, at least Spare. A slot frees every
// answer's latency over n, so the requests needed to refill the slots
// that free during a round trip grow with n.
func (c LimiterConfig) spare(n int) int {
	return max(c.Spare, int(math.Ceil(float64(n)*c.SpareShare)), 0)
}

// Load is what the server's metrics say at now: requests running and
// waiting (every client's). The first reading puts the limit on the
// server's signals from then on.
func (l *Limiter) Load(now time.Time, running, waiting int) {
	w := &l.win
	if running < 0 || waiting < 0 {
		return
	}
	prev := l.loads[len(l.loads)-1]
	copy(l.loads[:], l.loads[1:])
	l.loads[len(l.loads)-1] = signalLoad{running: running, waiting: waiting, ok: true}
	l.signals = true
	n := w.inflight
	switch {
	case waiting > 0 && running > 0 && prev.ok && prev.waiting > 0 && running <= prev.running:
		// Requests waited at two readings running and the running count
		// did not grow: the server runs that many. A request that just
		// arrived waits until the next scheduler step, so one reading
		// alone may catch it waiting while slots are free.
		if found, ok := l.fullAt(); ok {
			l.full(now, min(found, max(n, 1)))
		}
	case waiting == 0 && n >= l.limit && l.limit < l.cfg.Max && l.room(running, n, prev):
		l.roomy(now, running)
	}
}

// fullAt is the running count the last readings say the server holds
// while requests wait: the most of those that saw requests waiting, so
// that a reading taken as a slot had just freed, before the step that
// refills it, does not lower it. A lower count than the level held needs
// every reading kept to agree: the server's slots shrank, or another
// client took some.
func (l *Limiter) fullAt() (int, bool) {
	most, all := 0, true
	for _, r := range l.loads {
		if r.ok && r.waiting > 0 {
			most = max(most, r.running)
		} else {
			all = false
		}
	}
	if l.phase == holding && most < l.found && !all {
		return 0, false
	}
	return most, most > 0
}

// full holds at n, the requests the server's metrics count running while
// others wait, and the spare.
func (l *Limiter) full(now time.Time, n int) {
	target := min(n+l.cfg.spare(n), l.cfg.Max)
	if target == l.limit && l.phase == holding {
		return
	}
	l.hold(target, now)
	l.found, l.spare = n, target-n
	l.note = fmt.Sprintf("in flight settled at %d (%d + %d spare: the server's metrics count %d running and requests waiting)", target, n, target-n, n)
}

// room: none waits, and the server runs every request of ours (but for
// those on their way, a spare's worth at most) while the limit climbs, or
// more than the level held at two readings running: it has room for
// more. Held, the spare's requests on their way after an answer are not
// room.
func (l *Limiter) room(running, n int, prev signalLoad) bool {
	if l.phase != holding || l.found == 0 {
		return running >= n-l.cfg.spare(n)
	}
	return running > l.found && prev.ok && prev.waiting == 0 && prev.running > l.found
}

// roomy raises the limit on a reading that found room: fourfold while it
// climbs (a level past the slots costs nothing but a queue the next
// readings see and take back), by a quarter once it held (the server
// grew, or another client left).
func (l *Limiter) roomy(now time.Time, running int) {
	step := l.step(fastStep * l.limit)
	if l.phase == holding {
		step = max(1, l.limit/probeShare)
	}
	l.phase = climbing
	l.set(l.limit+step, now)
}
