package infer

import (
	"testing"
	"time"

	"tokenmill/internal/fakeclock"
	"tokenmill/lib/fleet"
)

func TestStripOwnFields(t *testing.T) {
	for in, want := range map[string]string{
		`{"id":1, "messages":[]}`:                              `{"id":1, "messages":[]}`,
		`{"id":1,"output":{"text":"old"},"meta":{"output":1}}`: `{"id":1,"meta":{"output":1}}`,
		`{"error":{},"id":"x"}`:                                `{"id":"x"}`,
	} {
		got, err := stripOwnFields([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("%s: got %s %v, want %s", in, got, err, want)
		}
	}
}

// retry's waits on the run's clock: attempt n of a retriable failure
// waits between half and all of --backoff*2^(n-1), at most --max-backoff;
// a server's Retry-After that long, at most --max-backoff; an endpoint
// down, nothing. Past --retries, or for a permanent failure, no retry.
func TestRetryWaits(t *testing.T) {
	const first, most = 100 * time.Millisecond, 300 * time.Millisecond
	fake := fakeclock.New(simEpoch)
	r := &runner{cfg: &Config{Limits: Limits{Retries: 4, Backoff: first, MaxBackoff: most}}, clk: fake, ready: newReadyQueue()}
	r.backoff = newBackoff(first, most, 1)
	fail := &fleet.Failure{Status: 500, Retriable: true}
	for _, tt := range []struct {
		name     string
		attempts int
		f        *fleet.Failure
		from, to time.Duration // the wait's bounds; to<0: no retry
	}{
		{"first", 1, fail, first / 2, first},
		{"second", 2, fail, first, 2 * first},
		{"capped", 4, fail, most / 2, most},
		{"retry-after", 1, &fleet.Failure{Status: 429, Retriable: true, RetryAfter: time.Second}, most, most},
		{"retry-after under the cap", 1, &fleet.Failure{Status: 503, Retriable: true, RetryAfter: 20 * time.Millisecond}, 20 * time.Millisecond, 20 * time.Millisecond},
		{"down", 9, &fleet.Failure{Down: true, Retriable: true}, 0, 0},
		{"retries used up", 5, fail, 0, -1},
		{"permanent", 1, &fleet.Failure{Status: 400}, 0, -1},
	} {
		j := &job{id: tt.name, attempts: tt.attempts}
		if got := r.retry(j, tt.f); got != (tt.to >= 0) {
			t.Errorf("%s: retry %v, want %v", tt.name, got, tt.to >= 0)
			continue
		}
		if tt.to < 0 {
			continue
		}
		if tt.from > 0 {
			fake.Advance(tt.from - time.Nanosecond)
			if r.ready.len() != 0 {
				t.Errorf("%s: ready before %v", tt.name, tt.from)
			}
		}
		fake.Advance(tt.to - max(tt.from-time.Nanosecond, 0))
		if got := r.ready.pop(); got != j {
			t.Errorf("%s: not ready after %v", tt.name, tt.to)
		}
	}
	if n := r.c.retries.Load(); n != 6 {
		t.Errorf("%d retries counted, want 6", n)
	}
}
