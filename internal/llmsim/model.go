package llmsim

import (
	"time"
)

// Timing is the cost model of one scheduler step.
type Timing struct {
	// StepBase is the fixed cost of one decode step (the weights are read
	// once per step whatever the batch size).
	StepBase time.Duration
	// StepPerRequest is added per running request.
	StepPerRequest time.Duration
	// PrefillPerToken is added per prompt token of every request that joins
	// the batch in the step (chunked prefill runs inside the step).
	PrefillPerToken time.Duration
	// Slow multiplies every step (a slower GPU); 0 means 1.
	Slow float64
}

// Calibration of the defaults, from the production job: one request alone
// decodes 26.5 tokens/s; 48 running requests deliver 1,180 tokens/s per
// endpoint. Solving 1/(b+i) = 26.5 and 48/(b+48i) = 1180 for b and i:
const (
	DefaultStepBase       = 37_673_600 * time.Nanosecond // b ≈ 37.67 ms
	DefaultStepPerRequest = 62_600 * time.Nanosecond     // i ≈ 62.6 µs
	// Not from the production job, and cheap for a 27B model on one GPU
	// (25k prompt tokens/s is 1.35 PFLOP/s; a real server does a few
	// thousand tokens/s): set it where prompts are long (the benchmark suite, internal/benchsuite,
	// measures regeneration at 250 µs).
	DefaultPrefillPerToken = 40 * time.Microsecond
)

// DefaultTiming is the calibrated cost model.
func DefaultTiming() Timing {
	return Timing{StepBase: DefaultStepBase, StepPerRequest: DefaultStepPerRequest, PrefillPerToken: DefaultPrefillPerToken, Slow: 1}
}

// StepDuration is how long a step with running requests, joinTokens of
// which are newly prefilled, lasts.
func (t Timing) StepDuration(running, joinTokens int) time.Duration {
	d := t.StepBase + time.Duration(running)*t.StepPerRequest + time.Duration(joinTokens)*t.PrefillPerToken
	if t.Slow > 0 && t.Slow != 1 {
		d = time.Duration(float64(d) * t.Slow)
	}
	return d
}

// Seq is one sequence being generated: a request (or one of its n choices)
// as the scheduler sees it.
type Seq struct {
	// PromptTokens are prefilled when the sequence joins (its prompt less
	// what the prefix cache had).
	PromptTokens int
	// KV is what the sequence holds of the KV cache while it runs (its
	// prompt and answer), checked against Model.KVCapacity.
	KV int
	// Target is the number of tokens the sequence will have when it ends;
	// End is why it ends then ("stop", "length" or "abort").
	Target int
	End    string

	// Set by the model.
	Arrived   time.Duration // simulated time of Submit
	Started   time.Duration // end of the step that prefilled it
	Finished  time.Duration // end of the step that produced its last token
	Generated int
	Done      bool
	cancelled bool

	// Ref is the caller's; the model never looks at it.
	Ref any
}

// Model is the continuous-batching scheduler of one endpoint as a pure
// state machine: it never reads a clock and never blocks. The caller
// submits sequences and calls Step, which says how long the step lasts; the
// caller waits that long (on a real or virtual clock) before it looks at
// the sequences again. Model is not safe for concurrent use.
type Model struct {
	Timing     Timing
	MaxRunning int
	// MaxQueued bounds the waiting queue; 0 means unbounded.
	MaxQueued int
	// KVCapacity > 0: a waiting sequence joins only while the KV of the
	// running ones and its own fit (first come, first served: the queue
	// waits behind it); one alone always runs.
	KVCapacity int
	kvUsed     int

	now     time.Duration
	running []*Seq
	waiting []*Seq
	// finished collects the sequences the last Step ended.
	finished   []*Seq
	lastTokens int
	lastJoin   int
}

// NewModel returns an idle model.
func NewModel(t Timing, maxRunning, maxQueued int) *Model {
	if maxRunning <= 0 {
		maxRunning = 1
	}
	return &Model{Timing: t, MaxRunning: maxRunning, MaxQueued: maxQueued}
}

// Now is the simulated time at the end of the last step.
func (m *Model) Now() time.Duration { return m.now }

// SetNow moves the model's time forward, for a model that sat idle.
func (m *Model) SetNow(t time.Duration) {
	if t > m.now {
		m.now = t
	}
}

// Running and Waiting are the current batch and queue lengths.
func (m *Model) Running() int { return len(m.running) }
func (m *Model) Waiting() int { return len(m.waiting) }

// Busy reports whether a Step would do anything.
func (m *Model) Busy() bool { return len(m.running)+len(m.waiting) > 0 }

// RunningTokens is the number of tokens held by running sequences (what
// SGLang's /get_load reports as num_tokens).
func (m *Model) RunningTokens() int {
	n := 0
	for _, s := range m.running {
		n += s.PromptTokens + s.Generated
	}
	return n
}

// Submit queues s at the model's current time. It reports false when the
// waiting queue is full, as SGLang's scheduler does: a request is rejected
// when len(waiting)+1 > max_queued_requests.
func (m *Model) Submit(s *Seq) bool {
	if m.MaxQueued > 0 && len(m.waiting)+1 > m.MaxQueued {
		return false
	}
	s.Arrived = m.now
	m.waiting = append(m.waiting, s)
	return true
}

// Cancel removes s from the model at the next step (the client went away).
func (m *Model) Cancel(s *Seq) { s.cancelled = true }

// Step runs one scheduler step starting at Now: cancelled sequences leave,
// waiting ones join the batch while slots are free (first come, first
// served), every running sequence gets one more token, and those that reach
// their target finish. It returns the step's duration (Now advances by it)
// and the sequences that finished in it; the slice is reused by the next
// Step. An idle model returns 0 and nothing.
func (m *Model) Step() (time.Duration, []*Seq) {
	m.finished = m.finished[:0]
	m.lastTokens, m.lastJoin = 0, 0
	m.running = m.dropCancelledRunning()
	m.waiting = dropCancelled(m.waiting)
	joinTokens := 0
	for len(m.running) < m.MaxRunning && len(m.waiting) > 0 {
		s := m.waiting[0]
		if m.KVCapacity > 0 && len(m.running) > 0 && m.kvUsed+s.KV > m.KVCapacity {
			break
		}
		m.kvUsed += s.KV
		m.waiting[0] = nil
		m.waiting = m.waiting[1:]
		joinTokens += s.PromptTokens
		m.running = append(m.running, s)
	}
	if len(m.running) == 0 {
		return 0, nil
	}
	d := m.Timing.StepDuration(len(m.running), joinTokens)
	m.now += d
	m.lastTokens, m.lastJoin = len(m.running), joinTokens
	kept := m.running[:0]
	for _, s := range m.running {
		if s.Generated == 0 {
			s.Started = m.now
		}
		s.Generated++
		if s.Generated >= s.Target {
			m.kvUsed -= s.KV
			s.Done = true
			s.Finished = m.now
			m.finished = append(m.finished, s)
			continue
		}
		kept = append(kept, s)
	}
	clear(m.running[len(kept):])
	m.running = kept
	return d, m.finished
}

// Reset drops every sequence, as a crash does, and returns them.
func (m *Model) Reset() []*Seq {
	all := append(append([]*Seq(nil), m.running...), m.waiting...)
	m.running, m.waiting, m.kvUsed = nil, nil, 0
	return all
}

// EachRunning calls fn for every running sequence.
func (m *Model) EachRunning(fn func(s *Seq)) {
	for _, s := range m.running {
		fn(s)
	}
}

// Finished are the sequences the last Step ended.
func (m *Model) Finished() []*Seq { return m.finished }

// LastTokens is the number of tokens the last Step produced (its batch
// size); LastJoinTokens the prompt tokens it prefilled.
func (m *Model) LastTokens() int     { return m.lastTokens }
func (m *Model) LastJoinTokens() int { return m.lastJoin }

func (m *Model) dropCancelledRunning() []*Seq {
	for _, s := range m.running {
		if s.cancelled {
			m.kvUsed -= s.KV
		}
	}
	return dropCancelled(m.running)
}

func dropCancelled(q []*Seq) []*Seq {
	kept := q[:0]
	for _, s := range q {
		if !s.cancelled {
			kept = append(kept, s)
		}
	}
	clear(q[len(kept):])
	return kept
}
