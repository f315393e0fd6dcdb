// Package simfleet runs llmsim's scheduler model on virtual time, for tests
// of what a client measures and forecasts: the same continuous batching,
// step timings and queueing as a simulated fleet serving over HTTP, with
// no sockets and no wall clock, so that a figure computed from it is the
// same on every run and every machine, loaded or not.
//
// A Sim holds one llmsim.Model per endpoint and steps them in time order,
// the way each endpoint's scheduler loop does: a step is computed as soon
// as the one before is delivered, so a request submitted on seeing a
// step's results joins the batch a step later, as one sent over a network
// does. Clients are the test's loop: it submits sequences and reads each
// step's results from Next.
package simfleet

import (
	"time"

	"tokenmill/internal/llmsim"
)

// Sim is a fleet of scheduler models on one virtual timeline.
type Sim struct {
	eps []*endpoint
	now time.Duration
}

type endpoint struct {
	m       *llmsim.Model
	pending bool          // a step is computed and under way
	end     time.Duration // when it ends
}

// New is a fleet of one endpoint per timing, each running maxRunning
// sequences at most, idle at time zero.
func New(timings []llmsim.Timing, maxRunning int) *Sim {
	s := &Sim{}
	for _, t := range timings {
		s.eps = append(s.eps, &endpoint{m: llmsim.NewModel(t, maxRunning, 0)})
	}
	return s
}

// Uniform is New with n endpoints of the same timing.
func Uniform(n int, t llmsim.Timing, maxRunning int) *Sim {
	ts := make([]llmsim.Timing, n)
	for i := range ts {
		ts[i] = t
	}
	return New(ts, maxRunning)
}

// Now is the virtual time: the end of the last step delivered.
func (s *Sim) Now() time.Duration { return s.now }

// Endpoints is the number of endpoints.
func (s *Sim) Endpoints() int { return len(s.eps) }

// Submit sends seq to endpoint e now. An idle endpoint starts a step at
// once; a busy one takes seq into the batch at its next step.
func (s *Sim) Submit(e int, seq *llmsim.Seq) {
	ep := s.eps[e]
	if !ep.pending {
		ep.m.SetNow(s.now)
	}
	ep.m.Submit(seq)
	if !ep.pending {
		s.step(ep)
	}
}

func (s *Sim) step(ep *endpoint) {
	if !ep.m.Busy() {
		ep.pending = false
		return
	}
	ep.m.Step()
	ep.pending, ep.end = true, ep.m.Now()
}

// Step is what one scheduler step of one endpoint delivered when it
// ended: a token for every sequence in the batch.
type Step struct {
	Endpoint int
	At       time.Duration
	// Running are the sequences still being generated and the tokens each
	// has now; Finished those that ended in this step (Generated is their
	// length).
	Running  []Progress
	Finished []*llmsim.Seq
}

// Progress is a sequence and its tokens so far.
type Progress struct {
	Seq       *llmsim.Seq
	Generated int
}

// Next delivers the step that ends first, moving the virtual time to its
// end, and starts that endpoint's next step; false when every endpoint is
// idle.
func (s *Sim) Next() (Step, bool) { return s.next(true) }

// NextFinished is Next without the running sequences' progress (Running
// is nil), for a client that looks only at the answers that end: it
// allocates nothing a step.
func (s *Sim) NextFinished() (Step, bool) { return s.next(false) }

func (s *Sim) next(progress bool) (Step, bool) {
	var first *endpoint
	idx := -1
	for i, ep := range s.eps {
		if ep.pending && (first == nil || ep.end < first.end) {
			first, idx = ep, i
		}
	}
	if first == nil {
		return Step{}, false
	}
	s.now = first.end
	st := Step{Endpoint: idx, At: s.now}
	if f := first.m.Finished(); len(f) > 0 {
		st.Finished = append([]*llmsim.Seq(nil), f...)
	}
	if progress {
		first.m.EachRunning(func(seq *llmsim.Seq) {
			st.Running = append(st.Running, Progress{seq, seq.Generated})
		})
	}
	s.step(first)
	return st, true
}

// Peek is when the next step ends, without delivering it; false when
// every endpoint is idle.
func (s *Sim) Peek() (time.Duration, bool) {
	var end time.Duration
	found := false
	for _, ep := range s.eps {
		if ep.pending && (!found || ep.end < end) {
			end, found = ep.end, true
		}
	}
	return end, found
}

// Advance moves the virtual time to t, between steps, for a client whose
// requests arrive at times of their own (a round trip after it sent
// them): Submit then sends at t. Time never goes back, nor past the end
// of the next step (Next delivers that first).
func (s *Sim) Advance(t time.Duration) {
	if end, ok := s.Peek(); ok && t > end {
		t = end
	}
	s.now = max(s.now, t)
}

// SetMaxRunning changes endpoint e's slots from now on, as llmsim's
// --slots-schedule does: running sequences finish, and none joins until
// fewer than n run.
func (s *Sim) SetMaxRunning(e, n int) { s.eps[e].m.MaxRunning = max(n, 1) }

// Waiting is the queue length of endpoint e now.
func (s *Sim) Waiting(e int) int { return s.eps[e].m.Waiting() }

// Running is the batch size of endpoint e now.
func (s *Sim) Running(e int) int { return s.eps[e].m.Running() }

// Keep is a closed-loop client: it keeps n sequences in flight on every
// endpoint, sending a new one as soon as one finishes (next makes it: for
// endpoint e, sent at virtual time at; false when there is none left),
// and calls on with every step delivered, until every endpoint is idle or
// on returns false.
func (s *Sim) Keep(n int, next func(e int, at time.Duration) (*llmsim.Seq, bool), on func(st Step) bool) {
	send := func(e int) bool {
		seq, ok := next(e, s.now)
		if ok {
			s.Submit(e, seq)
		}
		return ok
	}
	for e := range s.eps {
		for k := 0; k < n && send(e); k++ {
		}
	}
	for {
		st, ok := s.Next()
		if !ok || !on(st) {
			return
		}
		for range st.Finished {
			send(st.Endpoint)
		}
	}
}
