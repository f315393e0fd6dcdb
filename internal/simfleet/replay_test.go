package simfleet

import (
	"math"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
)

// keep holds n sequences of length tokens in flight on every endpoint for
// d of virtual time and returns the tokens delivered per endpoint.
func keep(s *Sim, n, tokens int, d time.Duration) []int {
	out := make([]int, s.Endpoints())
	s.Keep(n, func(int, time.Duration) (*llmsim.Seq, bool) {
		return &llmsim.Seq{Target: tokens, End: "length"}, true
	}, func(st Step) bool {
		if st.At > d {
			return false
		}
		out[st.Endpoint] += len(st.Running) + len(st.Finished)
		return true
	})
	return out
}

// The calibrated defaults, on virtual time: one request alone decodes
// 26.5 tok/s, 48 running 1,180 tok/s per endpoint.
func TestCalibration(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want float64
	}{{1, 26.5}, {48, 1180}} {
		s := Uniform(2, llmsim.DefaultTiming(), llmsim.DefaultMaxRunning)
		got := keep(s, tt.n, 100_000, 100*time.Second)
		for e, tokens := range got {
			if rate := float64(tokens) / 100; math.Abs(rate-tt.want) > 0.01*tt.want {
				t.Errorf("%d running on endpoint %d: %.1f tok/s, want %.1f", tt.n, e, rate, tt.want)
			}
		}
	}
}

// A request sent on seeing a step's results joins the batch a step
// later; one sent to an idle endpoint starts at once; the batch never
// holds more than its slots.
func TestSteps(t *testing.T) {
	timing := llmsim.Timing{StepBase: 10 * time.Millisecond}
	s := Uniform(1, timing, 2)
	a := &llmsim.Seq{Target: 2}
	s.Submit(0, a)
	st, _ := s.Next()
	if st.At != 10*time.Millisecond || len(st.Running) != 1 || st.Running[0].Generated != 1 {
		t.Fatalf("first step %+v", st)
	}
	b, c := &llmsim.Seq{Target: 1}, &llmsim.Seq{Target: 1}
	s.Submit(0, b)
	s.Submit(0, c)
	st, _ = s.Next() // a's second token; b and c were too late for this step
	if len(st.Finished) != 1 || st.Finished[0] != a || len(st.Running) != 0 {
		t.Fatalf("second step %+v", st)
	}
	st, _ = s.Next()
	if st.At != 30*time.Millisecond || len(st.Finished) != 2 {
		t.Fatalf("third step %+v", st)
	}
	if _, ok := s.Next(); ok {
		t.Fatal("a step from an idle endpoint")
	}
	// Idle until 1s: a request then starts at 1s, not at the model's old time.
	s.now = time.Second
	s.Submit(0, &llmsim.Seq{Target: 1})
	if st, _ = s.Next(); st.At != time.Second+10*time.Millisecond {
		t.Errorf("a request to an idle endpoint ended at %v", st.At)
	}
	full := Uniform(1, timing, 2)
	for i := 0; i < 5; i++ {
		full.Submit(0, &llmsim.Seq{Target: 3})
	}
	full.Next()
	if full.Running(0) != 2 {
		t.Errorf("batch of %d with 2 slots and 5 sent", full.Running(0))
	}
}
