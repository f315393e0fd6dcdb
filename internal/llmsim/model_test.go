package llmsim

import (
	"math"
	"testing"
	"time"
)

// closedLoop drives a model on its own virtual timeline with `clients`
// clients that each send a new request the moment their last one finishes,
// until simulated time passes horizon. It returns the tokens generated and
// the simulated time they took. Nothing sleeps: the model is a pure state
// machine and its clock is just the sum of its step durations.
func closedLoop(t *testing.T, m *Model, clients, promptTokens int, length func(i int) int, horizon time.Duration) (int64, time.Duration) {
	t.Helper()
	next := 0
	submit := func() {
		if !m.Submit(&Seq{PromptTokens: promptTokens, Target: length(next), End: finishStop}) {
			t.Fatalf("submit %d refused", next)
		}
		next++
	}
	for i := 0; i < clients; i++ {
		submit()
	}
	var tokens int64
	for m.Now() < horizon {
		d, finished := m.Step()
		if d <= 0 {
			t.Fatalf("step at %v made no progress with %d clients", m.Now(), clients)
		}
		tokens += int64(m.LastTokens())
		for range finished {
			submit()
		}
	}
	return tokens, m.Now()
}

// lognormalLengths are answer lengths drawn the way endpoints draw them.
func lognormalLengths(i int) int { return NaturalLength(uint64(i)*0x9e3779b97f4a7c15+7, 0) }

func TestThroughputCurve(t *testing.T) {
	b, inc := DefaultStepBase.Seconds(), DefaultStepPerRequest.Seconds()
	cases := []struct {
		clients int
		want    float64 // tokens/s of one endpoint
	}{
		{1, 26.5},            // calibration: one request alone
		{8, 8 / (b + 8*inc)}, // on the line between the calibration points
		{48, 1180},           // calibration: a full batch
		{96, 1180},           // past MaxRunning the queue grows, throughput does not
	}
	for _, c := range cases {
		m := NewModel(DefaultTiming(), DefaultMaxRunning, 0)
		tokens, elapsed := closedLoop(t, m, c.clients, 200, lognormalLengths, 30*time.Minute)
		got := float64(tokens) / elapsed.Seconds()
		if math.Abs(got-c.want)/c.want > 0.10 {
			t.Errorf("%d clients: %.1f tokens/s, want %.1f ±10%%", c.clients, got, c.want)
		}
		t.Logf("%2d clients: %7.1f tokens/s (calibration %.1f)", c.clients, got, c.want)
	}
}

// The production fleet: eight endpoints with one request each make about
// 212 tokens/s together.
func TestFleetOfOneRequestEach(t *testing.T) {
	var total float64
	for i := 0; i < 8; i++ {
		m := NewModel(DefaultTiming(), DefaultMaxRunning, 0)
		tokens, elapsed := closedLoop(t, m, 1, 200, func(k int) int { return lognormalLengths(1000*i + k) }, 10*time.Minute)
		total += float64(tokens) / elapsed.Seconds()
	}
	if math.Abs(total-212)/212 > 0.10 {
		t.Errorf("8 endpoints x 1 request: %.1f tokens/s, want 212 ±10%%", total)
	}
}

// Without prefill the step law holds exactly: c running requests make c
// tokens every StepBase + c*StepPerRequest.
func TestStepLawExact(t *testing.T) {
	timing := Timing{StepBase: 30 * time.Millisecond, StepPerRequest: time.Millisecond}
	for _, c := range []int{1, 5, 10} {
		m := NewModel(timing, 10, 0)
		tokens, elapsed := closedLoop(t, m, c, 0, func(int) int { return 50 }, time.Minute)
		steps := tokens / int64(c)
		if want := time.Duration(steps) * (timing.StepBase + time.Duration(c)*timing.StepPerRequest); elapsed != want {
			t.Errorf("%d clients: %d tokens in %v, want exactly %v", c, tokens, elapsed, want)
		}
	}
}

func TestPrefillJoinsTheStep(t *testing.T) {
	timing := Timing{StepBase: 30 * time.Millisecond, StepPerRequest: time.Millisecond, PrefillPerToken: 10 * time.Microsecond}
	m := NewModel(timing, 4, 0)
	m.Submit(&Seq{PromptTokens: 1000, Target: 3, End: finishStop})
	m.Submit(&Seq{PromptTokens: 500, Target: 1, End: finishStop})
	steps := []struct {
		d        time.Duration
		finished int
	}{
		{30*time.Millisecond + 2*time.Millisecond + 15*time.Millisecond, 1}, // both join: 1,500 prompt tokens
		{31 * time.Millisecond, 0},
		{31 * time.Millisecond, 1},
		{0, 0}, // idle
	}
	for i, want := range steps {
		d, fin := m.Step()
		if d != want.d || len(fin) != want.finished {
			t.Errorf("step %d: %v and %d finished, want %v and %d", i, d, len(fin), want.d, want.finished)
		}
	}
	if m.Now() != 109*time.Millisecond {
		t.Errorf("now %v, want 109ms", m.Now())
	}
}

func TestQueueLimitAndOrder(t *testing.T) {
	m := NewModel(Timing{StepBase: time.Millisecond}, 2, 2)
	seqs := make([]*Seq, 5)
	for i := range seqs {
		seqs[i] = &Seq{Target: 10, End: finishStop}
	}
	submit := func(i int, want bool) {
		t.Helper()
		if got := m.Submit(seqs[i]); got != want {
			t.Fatalf("submit %d: accepted %v, want %v (%d waiting)", i, got, want, m.Waiting())
		}
	}
	// Requests wait until a step admits them, so the queue bound applies
	// before any runs: SGLang rejects when len(waiting)+1 > max_queued.
	submit(0, true)
	submit(1, true)
	submit(2, false)
	m.Step()
	if m.Running() != 2 || m.Waiting() != 0 {
		t.Fatalf("after a step: %d running, %d waiting", m.Running(), m.Waiting())
	}
	submit(2, true)
	submit(3, true)
	submit(4, false)
	m.Step()
	if m.Waiting() != 2 {
		t.Fatalf("slots full: %d waiting, want 2", m.Waiting())
	}
	// First come, first served when a slot frees.
	m.Cancel(seqs[0])
	m.Step()
	if seqs[2].Generated != 1 || seqs[3].Generated != 0 {
		t.Errorf("admission order: seq2 has %d tokens, seq3 %d", seqs[2].Generated, seqs[3].Generated)
	}
}

func TestCancelFreesTheSlot(t *testing.T) {
	m := NewModel(Timing{StepBase: time.Millisecond}, 1, 0)
	a, b := &Seq{Target: 100, End: finishStop}, &Seq{Target: 2, End: finishStop}
	m.Submit(a)
	m.Submit(b)
	m.Step()
	m.Cancel(a)
	m.Step()
	if a.Generated != 1 || b.Generated != 1 {
		t.Errorf("after cancelling the running seq: a %d tokens, b %d", a.Generated, b.Generated)
	}
	if lost := m.Reset(); len(lost) != 1 || lost[0] != b {
		t.Errorf("reset returned %d seqs", len(lost))
	}
}

func TestSlowMultipliesSteps(t *testing.T) {
	timing := DefaultTiming()
	timing.Slow = 3
	if got, want := timing.StepDuration(10, 0), 3*DefaultTiming().StepDuration(10, 0); got != want {
		t.Errorf("slow 3: %v, want %v", got, want)
	}
}
