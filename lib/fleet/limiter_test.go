package fleet

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
)

// The adaptive limit on virtual time: one endpoint of the pool, served by
// llmsim's scheduler model (internal/simfleet) with S slots, its requests sent
// as infer sends them (a free slot of the pool is refilled at once) and
// each answer observed as Complete observes it. Answers are llmsim's
// long-tailed lengths cut at max_tokens.

// simRun is one run on the model: the limit over time and the output.
type simRun struct {
	limits []limitAt
	tokens int
	wall   time.Duration
	notes  string
}

type limitAt struct {
	at    time.Duration
	limit int
	done  int // answers back by then
}

// limitAfter is the limit in force at virtual time at.
func (r simRun) limitAfter(at time.Duration) int {
	n := 0
	for _, l := range r.limits {
		if l.at > at {
			break
		}
		n = l.limit
	}
	return n
}

func (r simRun) rate() float64 { return float64(r.tokens) / r.wall.Seconds() }

// slotPlan is the endpoint's slots over virtual time.
type slotPlan []llmsim.SlotStep

func (s slotPlan) at(t time.Duration) int {
	n := s[0].Slots
	for _, st := range s {
		if st.At <= t {
			n = st.Slots
		}
	}
	return n
}

// runOnModel sends answers requests through a pool of one endpoint on
// the model of a server that says neither its capacity nor its load (a
// gateway, a vLLM without /metrics): adaptive when fixed is 0, else fixed
// in flight.
func runOnModel(t *testing.T, plan slotPlan, answers, maxTokens, fixed int) simRun {
	t.Helper()
	mode := modeDefault
	if fixed > 0 {
		mode = modeFixed(fixed)
	}
	return simulate(t, simSetup{flavour: latencyOnly, plan: plan, mode: mode, work: simWork{answers: answers, maxTokens: maxTokens}})
}

func (r simRun) String() string {
	s := ""
	for _, l := range r.limits {
		s += fmt.Sprintf(" %v:%d", l.at.Round(time.Second), l.limit)
	}
	return s
}

// share is the fraction of [from, end of run] during which the limit was
// within [lo, hi], and the lowest limit in force then.
func (r simRun) share(from time.Duration, lo, hi int) (float64, int) {
	in, lowest := time.Duration(0), 1<<30
	for i, l := range r.limits {
		end := r.wall
		if i+1 < len(r.limits) {
			end = r.limits[i+1].at
		}
		if end <= from {
			continue
		}
		start := max(l.at, from)
		lowest = min(lowest, l.limit)
		if l.limit >= lo && l.limit <= hi {
			in += end - start
		}
	}
	return float64(in) / float64(r.wall-from), lowest
}

// within is the range the limit should hold in for s slots: the slots,
// up to one step of the climb more (16 at most past 16).
func within(s int) (int, int) { return s, s + min(s, 16) }

var settledAt = regexp.MustCompile(`in flight settled at (\d+)`)

// The limit finds the server's slots: once a hundred or so answers are
// back it never holds below them, and 80% of the time at most one step
// above (it tries a step more now and then); and the run's output is at
// least 95% of the best fixed in-flight count's.
func TestLimiterConverges(t *testing.T) {
	for _, tt := range []struct {
		slots, answers, maxTokens int
		by                        int // answers back by when it must hold
		fixed                     []int
	}{
		{4, 600, 256, 100, []int{2, 4, 6, 8, 16}},
		{48, 6000, 256, 1000, []int{32, 48, 50, 64, 96}},
		{16, 3000, 512, 500, []int{8, 16, 18, 24, 32}},
	} {
		t.Run(fmt.Sprintf("%d slots", tt.slots), func(t *testing.T) {
			plan := slotPlan{{Slots: tt.slots}}
			run := runOnModel(t, plan, tt.answers, tt.maxTokens, 0)
			t.Logf("limits:%s\n%s", run, run.notes)
			var from time.Duration
			for _, l := range run.limits {
				if l.done <= tt.by {
					from = l.at
				}
			}
			// It settles at the slots and the spare at most: a probe that
			// paid (noise, on a server that did not grow) does not add
			// another.
			spare := LimiterConfig{}.withDefaults().spare(tt.slots)
			for _, m := range settledAt.FindAllStringSubmatch(run.notes, -1) {
				if n, _ := strconv.Atoi(m[1]); n > tt.slots+spare {
					t.Errorf("settled at %d on %d slots (%d spare)", n, tt.slots, spare)
				}
			}
			lo, hi := within(tt.slots)
			share, lowest := run.share(from, lo, hi)
			if share < 0.8 || lowest < tt.slots {
				t.Errorf("after %d answers (%v) the limit was within %d-%d %.0f%% of the time, and as low as %d", tt.by, from, lo, hi, 100*share, lowest)
			}
			best := 0.0
			for _, n := range tt.fixed {
				f := runOnModel(t, plan, tt.answers, tt.maxTokens, n)
				t.Logf("fixed %d: %.0f tok/s", n, f.rate())
				best = max(best, f.rate())
			}
			t.Logf("adaptive: %.0f tok/s, %.1f%% of the best fixed", run.rate(), 100*run.rate()/best)
			if run.rate() < 0.95*best {
				t.Errorf("adaptive output %.0f tok/s, under 95%% of the best fixed %.0f", run.rate(), best)
			}
		})
	}
}

// When the server's slots change mid-run, the limit follows: down within a
// few windows of a drop, up within a few probes of a rise. After a drop it
// never goes below the slots left (no level is tried that idles them), and
// the run's output is at least 95% of the best fixed count's, as it is
// when the slots hold.
func TestLimiterFollowsSlots(t *testing.T) {
	for _, tt := range []struct {
		name     string
		plan     slotPlan
		within   time.Duration
		answers  int
		maxToken int
		fixed    []int // the fixed counts the output is compared with (none: not compared)
	}{
		{"48 to 16", slotPlan{{Slots: 48}, {At: 4 * time.Minute, Slots: 16}}, 3 * time.Minute, 4000, 256, []int{16, 48, 64}},
		{"16 to 48", slotPlan{{Slots: 16}, {At: 4 * time.Minute, Slots: 48}}, 5 * time.Minute, 5000, 256, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			run := runOnModel(t, tt.plan, tt.answers, tt.maxToken, 0)
			t.Logf("limits:%s\n%s", run, run.notes)
			change, before, after := tt.plan[1].At, tt.plan[0].Slots, tt.plan[1].Slots
			if run.wall < change+tt.within+5*time.Minute {
				t.Fatalf("the run ended at %v, too soon after the change at %v", run.wall, change)
			}
			lo, hi := within(before)
			if n := run.limitAfter(change); n < lo || n > hi {
				t.Errorf("before the change to %d slots the limit is %d, want %d-%d", after, n, lo, hi)
			}
			lo, hi = within(after)
			if share, _ := run.share(change+tt.within, lo, hi); share < 0.75 {
				t.Errorf("from %v after the change to %d slots the limit was within %d-%d only %.0f%% of the time", tt.within, after, lo, hi, 100*share)
			}
			if _, lowest := run.share(change, 0, 0); after < before && lowest < after {
				t.Errorf("after the drop to %d slots the limit went as low as %d", after, lowest)
			}
			if len(tt.fixed) == 0 {
				return
			}
			best := 0.0
			for _, n := range tt.fixed {
				best = max(best, runOnModel(t, tt.plan, tt.answers, tt.maxToken, n).rate())
			}
			t.Logf("adaptive: %.0f tok/s, %.1f%% of the best fixed", run.rate(), 100*run.rate()/best)
			if run.rate() < 0.95*best {
				t.Errorf("adaptive output %.0f tok/s, under 95%% of the best fixed %.0f", run.rate(), best)
			}
		})
	}
}

// A dip in the server's slots shorter than a window or two (another
// client's burst) does not move a settled limit: the window that sees it
// is measured again before the limit acts, and by then it is over.
func TestLimiterRidesOutDip(t *testing.T) {
	plan := slotPlan{{Slots: 48}, {At: 4 * time.Minute, Slots: 16}, {At: 4*time.Minute + 30*time.Second, Slots: 48}}
	run := runOnModel(t, plan, 4000, 256, 0)
	t.Logf("limits:%s\n%s", run, run.notes)
	if n := run.limitAfter(plan[1].At); n < 48 {
		t.Fatalf("the limit is %d before the dip, want 48 or more", n)
	}
	if _, lowest := run.share(plan[1].At, 0, 0); lowest < 48 {
		t.Errorf("a 30 s dip to 16 slots sent the limit to %d", lowest)
	}
}

// rounds keeps l's limit in flight on a server that answers every
// request in latency with tokens, the requests of a round sent 1 ms
// apart, until the limit changes (at most 16 rounds); it returns the
// time after the last round.
func rounds(l *Limiter, now time.Time, latency time.Duration, tokens int) time.Time {
	start := l.Limit()
	for r := 0; r < 16 && l.Limit() == start; r++ {
		n := l.Limit()
		sent := make([]time.Time, n)
		for i := range sent {
			sent[i] = now.Add(time.Duration(i) * time.Millisecond)
			l.Inflight(sent[i], i+1)
			l.Sent(sent[i])
		}
		for i, at := range sent {
			back := at.Add(latency)
			l.Inflight(back, n-i-1)
			l.Observe(back, at, latency, tokens, true, false)
		}
		now = sent[n-1].Add(latency)
	}
	return now
}

// While a step's output grows with the limit at the same latency per
// token, nothing waits and the next step is 4× the limit; once the
// latency grows the limit only doubles (both by at most MaxStep).
func TestLimiterClimbSteps(t *testing.T) {
	l := NewLimiter(LimiterConfig{}, epoch)
	now := rounds(l, epoch, time.Second, 100)
	if l.Limit() != 16 {
		t.Fatalf("after a window at 4: limit %d, want 16 (4 + 3×4)", l.Limit())
	}
	now = rounds(l, now, time.Second, 100)
	if l.Limit() != 64 {
		t.Fatalf("after a window at 16 as fast per token: limit %d, want 64 (16 + 3×16)", l.Limit())
	}
	// At 64, 50% more latency: output up a third, but requests wait.
	rounds(l, now, 1500*time.Millisecond, 100)
	if l.Limit() != 128 {
		t.Fatalf("after a window at 64 half as slow again per token: limit %d, want 128 (doubled)", l.Limit())
	}
	l = NewLimiter(LimiterConfig{MaxStep: 16}, epoch)
	rounds(l, rounds(l, epoch, time.Second, 100), time.Second, 100)
	if l.Limit() != 32 {
		t.Errorf("with MaxStep 16, 4 then 16 as fast: limit %d, want 32 (16 + 16)", l.Limit())
	}
}
