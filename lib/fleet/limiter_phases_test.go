package fleet

import (
	"math"
	"slices"
	"testing"
	"time"
)

// Each phase of the adaptive limit, one window's figures at a time: what
// the limiter does with a measure, from a state set up for it, under the
// default bounds (start 4, ceiling 256, 5% gain, a probe every 8 windows
// held, a spare of an eighth, 2 at least).

// phaseCase is one window measured in a phase.
type phaseCase struct {
	name  string
	setup func(l *Limiter) // the state before the window
	m     limiterMeasure
	limit int
	phase limiterPhase
	note  string                         // the note it leaves ("" none)
	check func(t *testing.T, l *Limiter) // more of the state after, or nil
}

// measured is a settled window at limit: out tokens per second at perTok
// seconds of latency per token.
func measured(limit int, out, perTok float64) limiterMeasure {
	return limiterMeasure{limit: limit, out: out, perTok: perTok, settled: true}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Abs(b) }

func runPhase(t *testing.T, phase limiterPhase, cases []phaseCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLimiter(LimiterConfig{}, epoch)
			l.phase = phase
			tt.setup(l)
			windows := l.windows
			l.decide(tt.m, epoch.Add(time.Minute))
			if l.limit != tt.limit || l.phase != tt.phase {
				t.Errorf("limit %d in phase %d, want %d in phase %d", l.limit, l.phase, tt.limit, tt.phase)
			}
			if note := l.Note(); note != tt.note {
				t.Errorf("note %q, want %q", note, tt.note)
			}
			// A window that changes nothing lets the next cohort start at
			// once; any other decision starts afresh.
			if l.windows == windows && l.limit != tt.m.limit {
				t.Errorf("the limit moved from %d to %d without a new window", tt.m.limit, l.limit)
			}
			if tt.check != nil {
				tt.check(t, l)
			}
		})
	}
}

// TestLimiterClimbing: the climb steps up while the output grows, and
// stops at the ceiling.
func TestLimiterClimbing(t *testing.T) {
	runPhase(t, climbing, []phaseCase{
		{name: "the first window, at the start, steps fourfold; the cohort is the end of the step's burst",
			setup: func(l *Limiter) {}, m: measured(4, 100, 0.01), limit: 16, phase: climbing,
			check: func(t *testing.T, l *Limiter) {
				// 12 sent at once: the first 4 may take free slots, the 8
				// after them are the cohort, unsettled.
				if l.win.skip != 4 || !l.win.unsettled || l.cohortSize() != 8 || len(l.climb) != 1 {
					t.Errorf("skip %d, unsettled %v, cohort %d, climb %v", l.win.skip, l.win.unsettled, l.cohortSize(), l.climb)
				}
			}},
		{name: "output up at the same latency per token: fourfold",
			setup: func(l *Limiter) { l.limit, l.climb = 32, []limiterMeasure{measured(16, 400, 0.01)} },
			m:     measured(32, 800, 0.0109), limit: 128, phase: climbing},
		{name: "output up, latency per token up more than 10%: the step doubles and settles first",
			setup: func(l *Limiter) { l.limit, l.climb = 8, []limiterMeasure{measured(4, 100, 0.01)} },
			m:     measured(8, 150, 0.0111), limit: 16, phase: climbing,
			check: func(t *testing.T, l *Limiter) {
				if !l.win.settling || l.win.skip != 16 || l.win.unsettled {
					t.Errorf("settling %v, skip %d, unsettled %v", l.win.settling, l.win.skip, l.win.unsettled)
				}
			}},
		{name: "an unsettled window slower per token is measured again",
			setup: func(l *Limiter) { l.limit, l.climb = 16, []limiterMeasure{measured(4, 100, 0.01)} },
			m:     limiterMeasure{limit: 16, out: 300, perTok: 0.0111}, limit: 16, phase: climbing,
			check: func(t *testing.T, l *Limiter) {
				if len(l.climb) != 1 || !l.win.settling {
					t.Errorf("climb %v (the window is not kept), settling %v", l.climb, l.win.settling)
				}
			}},
		{name: "a step that paid at the ceiling, latency per token the same, settles there",
			setup: func(l *Limiter) { l.limit, l.climb = 256, []limiterMeasure{measured(240, 1000, 0.01)} },
			m:     measured(256, 1100, 0.01), limit: 256, phase: holding,
			check: func(t *testing.T, l *Limiter) {
				if l.why != "the ceiling" || l.found != 256 || l.spare != 0 {
					t.Errorf("why %q, found %d, spare %d", l.why, l.found, l.spare)
				}
			}},
		{name: "a step that paid at the ceiling as requests waited: the knee is searched for below",
			setup: func(l *Limiter) { l.limit, l.climb = 256, []limiterMeasure{measured(64, 1000, 0.01)} },
			// 256 in flight, 2,000 tok/s at 0.128 s a token, half of it
			// waiting: 256 × 0.5 = 128 ran at once; tried with 16 spare.
			m: limiterMeasure{limit: 256, out: 2000, perTok: 0.128, settled: true, wait: 0.5}, limit: 144, phase: searching,
			check: func(t *testing.T, l *Limiter) {
				if l.trying != 128 || l.lo != 64 || l.good != 256 || l.why != "the ceiling" {
					t.Errorf("trying %d in (%d, %d), why %q", l.trying, l.lo, l.good, l.why)
				}
			}},
	})
}

// TestLimiterClimbingKnee: a step that added under 5% ends the climb at
// the knee, settled there or searched for below.
func TestLimiterClimbingKnee(t *testing.T) {
	runPhase(t, climbing, []phaseCase{
		{name: "a step that added under 5% right above the level before settles at the knee, with its spare",
			setup: func(l *Limiter) {
				l.limit, l.lowest = 16, 4
				l.climb = []limiterMeasure{measured(4, 100, 0.01), measured(13, 380, 0.01), measured(15, 400, 0.01)}
			},
			m: measured(16, 410, 0.02), limit: 17, phase: holding,
			check: func(t *testing.T, l *Limiter) {
				if l.why != "16 added under 5%" || l.found != 15 || l.spare != 2 || !slices.Equal(l.below, []limiterMeasure{measured(4, 100, 0.01), measured(13, 380, 0.01)}) {
					t.Errorf("why %q, found %d, spare %d, below %v", l.why, l.found, l.spare, l.below)
				}
			}},
		{name: "a step that added under 5% far above the level before: the knee is searched for in between",
			setup: func(l *Limiter) {
				l.limit, l.lowest = 32, 4
				l.climb = []limiterMeasure{measured(4, 100, 0.01), measured(16, 400, 0.01)}
			},
			// 410 tok/s at 0.02 s a token is 8.2 in flight, none waiting:
			// 9 ran at once, tried with 2 spare.
			m: measured(32, 410, 0.02), limit: 11, phase: searching,
			check: func(t *testing.T, l *Limiter) {
				if l.trying != 9 || l.lo != 4 || l.good != 16 || l.ref != measured(32, 410, 0.02) {
					t.Errorf("trying %d in (%d, %d), ref %+v", l.trying, l.lo, l.good, l.ref)
				}
			}},
		{name: "the knee is the lowest level measured, its answers waited: lower ones are tried",
			setup: func(l *Limiter) {
				l.limit, l.lowest = 32, 16
				l.climb = []limiterMeasure{{limit: 16, out: 400, perTok: 0.01, settled: true, wait: 0.3}}
			},
			m: measured(32, 410, 0.02), limit: 8, phase: descending,
			check: func(t *testing.T, l *Limiter) {
				if l.good != 16 || l.ref != measured(32, 410, 0.02) {
					t.Errorf("good %d, ref %+v", l.good, l.ref)
				}
			}},
		{name: "the knee is the lowest level measured, its answers did not wait: settles there",
			setup: func(l *Limiter) {
				l.limit, l.lowest = 32, 16
				l.climb = []limiterMeasure{{limit: 16, out: 400, perTok: 0.01, settled: true, wait: 0.05}}
			},
			m: measured(32, 410, 0.02), limit: 18, phase: holding},
		{name: "the knee at the floor: settles there",
			setup: func(l *Limiter) { l.limit, l.lowest, l.climb = 2, 1, []limiterMeasure{measured(1, 100, 0.01)} },
			m:     measured(2, 101, 0.02), limit: 3, phase: holding},
		{name: "climbing on from a probe that paid: settles with no spare",
			setup: func(l *Limiter) {
				l.limit, l.lowest, l.probed = 32, 4, true
				l.climb = []limiterMeasure{measured(18, 400, 0.01), measured(22, 440, 0.01)}
			},
			m: measured(32, 445, 0.02), limit: 22, phase: holding,
			check: func(t *testing.T, l *Limiter) {
				if l.spare != 0 || l.probed {
					t.Errorf("spare %d, probed %v", l.spare, l.probed)
				}
			}},
	})
}

func TestLimiterDescending(t *testing.T) {
	from := func(limit, good int, base float64) func(l *Limiter) {
		return func(l *Limiter) {
			l.limit, l.good, l.base, l.ref = limit, good, base, measured(32, 410, 0.02)
			l.climb = []limiterMeasure{measured(4, 100, 0.01), measured(16, 400, 0.01), measured(32, 410, 0.02)}
		}
	}
	runPhase(t, descending, []phaseCase{
		{name: "within the gain of the level to match: halves on",
			setup: from(8, 16, 0), m: measured(8, 395, 0.01), limit: 4, phase: descending,
			check: func(t *testing.T, l *Limiter) {
				if l.good != 8 {
					t.Errorf("good %d, want 8", l.good)
				}
			}},
		{name: "within twice the gain but not the gain: settles above, with its spare",
			setup: from(8, 16, 0), m: measured(8, 370, 0.01), limit: 18, phase: holding,
			check: func(t *testing.T, l *Limiter) {
				if l.found != 16 {
					t.Errorf("found %d, want 16", l.found)
				}
			}},
		{name: "output lost: settles at the last level as good, 2 spare",
			setup: from(8, 16, 0), m: measured(8, 300, 0.01), limit: 18, phase: holding,
			check: func(t *testing.T, l *Limiter) {
				if l.why != "8 gave 27% less" || l.found != 16 || !slices.Equal(l.below, []limiterMeasure{measured(4, 100, 0.01)}) {
					t.Errorf("why %q, found %d, below %v", l.why, l.found, l.below)
				}
			}},
		{name: "as good at the floor: settles there",
			setup: from(1, 2, 0), m: measured(1, 400, 0.01), limit: 3, phase: holding,
			check: func(t *testing.T, l *Limiter) {
				if l.why != "1 gave 2% less" || l.found != 1 {
					t.Errorf("why %q, found %d", l.why, l.found)
				}
			}},
		{name: "after a slowdown, latency per token back within 10%: settles",
			setup: from(24, 48, 0.01), m: measured(24, 400, 0.0109), limit: 27, phase: holding,
			check: func(t *testing.T, l *Limiter) {
				if l.why != "latency per token back to 109% of before" || l.found != 24 || l.base != 0 {
					t.Errorf("why %q, found %d, base %v", l.why, l.found, l.base)
				}
			}},
		{name: "after a slowdown, latency per token still high: halves on",
			setup: from(24, 48, 0.01), m: measured(24, 400, 0.0111), limit: 12, phase: descending},
		{name: "the level to match below the one found counts among those checked",
			setup: func(l *Limiter) {
				from(8, 16, 0)(l)
				l.ref = measured(12, 410, 0.02)
			},
			m: measured(8, 300, 0.01), limit: 18, phase: holding,
			check: func(t *testing.T, l *Limiter) {
				if len(l.below) != 2 || l.below[1] != measured(12, 410, 0.02) {
					t.Errorf("below %v", l.below)
				}
			}},
	})
}

func TestLimiterHolding(t *testing.T) {
	held := func(limit int, setup func(l *Limiter)) func(l *Limiter) {
		return func(l *Limiter) {
			l.limit, l.ref, l.hasRef = limit, measured(limit, 400, 0.01), true
			if setup != nil {
				setup(l)
			}
		}
	}
	settled := func(l *Limiter) {
		l.limit, l.why, l.found, l.spare = 18, "32 added under 5%", 16, 2
		l.below = []limiterMeasure{measured(4, 100, 0.01), measured(8, 360, 0.01)}
	}
	runPhase(t, holding, []phaseCase{
		{name: "the first window is the reference",
			setup: func(l *Limiter) { l.limit = 18 }, m: measured(18, 400, 0.01), limit: 18, phase: holding,
			check: func(t *testing.T, l *Limiter) {
				if !l.hasRef || l.ref != measured(18, 400, 0.01) {
					t.Errorf("ref %+v (%v)", l.ref, l.hasRef)
				}
			}},
		{name: "the first window after settling: a lower level measured as good wins",
			setup: settled, m: measured(18, 400, 0.01), limit: 10, phase: holding,
			note: "in flight settled at 10 (8 + 2 spare; 360 tok/s measured; 16 gave no more)"},
		{name: "the first window after settling: none lower as good, it stays",
			setup: settled, m: measured(18, 401, 0.01), limit: 18, phase: holding,
			note: "in flight settled at 18 (16 + 2 spare; 401 tok/s measured; 32 added under 5%)",
			check: func(t *testing.T, l *Limiter) {
				if l.why != "" || l.below != nil || !l.hasRef {
					t.Errorf("why %q, below %v, ref %v", l.why, l.below, l.hasRef)
				}
			}},
		{name: "slower at the same limit once: measured again",
			setup: held(18, nil), m: measured(18, 300, 0.0126), limit: 18, phase: holding,
			check: func(t *testing.T, l *Limiter) {
				if !l.slowed || l.ref != measured(18, 400, 0.01) || l.held != 0 {
					t.Errorf("slowed %v, ref %+v, held %d", l.slowed, l.ref, l.held)
				}
			}},
		{name: "slower twice: tries the limit the latency's growth points to",
			setup: held(18, func(l *Limiter) { l.slowed = true }), m: measured(18, 300, 0.015), limit: 12, phase: descending,
			check: func(t *testing.T, l *Limiter) {
				if l.good != 18 || l.base != 0.01 || l.ref != measured(18, 300, 0.015) {
					t.Errorf("good %d, base %v, ref %+v", l.good, l.base, l.ref)
				}
			}},
		{name: "slower twice at the floor: nothing lower, the reference moves",
			setup: held(1, func(l *Limiter) { l.slowed = true }), m: measured(1, 300, 0.015), limit: 1, phase: holding,
			check: func(t *testing.T, l *Limiter) {
				if l.slowed || !near(l.ref.out, 370) || l.held != 1 {
					t.Errorf("slowed %v, ref %+v, held %d", l.slowed, l.ref, l.held)
				}
			}},
		{name: "slower per token but not less output: held",
			setup: held(18, nil), m: measured(18, 390, 0.0126), limit: 18, phase: holding,
			check: func(t *testing.T, l *Limiter) {
				if l.slowed || l.held != 1 {
					t.Errorf("slowed %v, held %d", l.slowed, l.held)
				}
			}},
		{name: "steady: the reference is smoothed",
			setup: held(18, func(l *Limiter) { l.slowed = true }), m: measured(18, 500, 0.02), limit: 18, phase: holding,
			check: func(t *testing.T, l *Limiter) {
				if l.slowed || !near(l.ref.out, 430) || !near(l.ref.perTok, 0.013) || l.held != 1 {
					t.Errorf("slowed %v, ref %+v, held %d", l.slowed, l.ref, l.held)
				}
			}},
		{name: "held for ProbeEvery windows: a quarter more is tried",
			setup: held(18, func(l *Limiter) { l.held = 7 }), m: measured(18, 400, 0.01), limit: 22, phase: probing,
			check: func(t *testing.T, l *Limiter) {
				if len(l.climb) != 1 || l.climb[0].limit != 18 || !near(l.climb[0].out, 400) {
					t.Errorf("climb %v, want the held level", l.climb)
				}
			}},
		{name: "a small limit probes one more",
			setup: held(3, func(l *Limiter) { l.held = 7 }), m: measured(3, 400, 0.01), limit: 4, phase: probing},
		{name: "at the ceiling: no probe",
			setup: held(256, func(l *Limiter) { l.held = 7 }), m: measured(256, 400, 0.01), limit: 256, phase: holding},
	})
}

func TestLimiterProbing(t *testing.T) {
	probe := func(limit int, base limiterMeasure) func(l *Limiter) {
		return func(l *Limiter) { l.limit, l.climb = limit, []limiterMeasure{base} }
	}
	runPhase(t, probing, []phaseCase{
		{name: "it paid: climbs on, carrying the spare",
			setup: probe(22, measured(18, 400, 0.01)), m: measured(22, 421, 0.01), limit: 44, phase: climbing,
			check: func(t *testing.T, l *Limiter) {
				if !l.probed || len(l.climb) != 2 {
					t.Errorf("probed %v, climb %v", l.probed, l.climb)
				}
			}},
		{name: "it paid at the ceiling: settles there, no spare added",
			setup: probe(256, measured(240, 400, 0.01)), m: measured(256, 500, 0.01), limit: 256, phase: holding,
			check: func(t *testing.T, l *Limiter) {
				if l.why != "the ceiling" || l.spare != 0 || l.found != 256 {
					t.Errorf("why %q, spare %d, found %d", l.why, l.spare, l.found)
				}
			}},
		{name: "under the gain: back to the held level",
			setup: probe(22, measured(18, 400, 0.01)), m: measured(22, 419, 0.01), limit: 18, phase: holding},
		{name: "under the gain: the held level is measured afresh",
			setup: probe(22, measured(18, 400, 0.01)), m: measured(22, 410, 0.01), limit: 18, phase: holding,
			check: func(t *testing.T, l *Limiter) {
				if l.hasRef || l.climb != nil {
					t.Errorf("hasRef %v, climb %v: the held level is measured afresh", l.hasRef, l.climb)
				}
			}},
	})
}

// sendCohort sends n requests at at, with inflight in flight.
func sendCohort(l *Limiter, at time.Time, n, inflight int) {
	l.Inflight(at, inflight)
	for i := 0; i < n; i++ {
		l.Sent(at)
	}
}

// The end of a window, before any phase sees it: a window the input did
// not fill is begun again, enough 429/503 answers halve the limit at
// once, and stragglers do not hold the window open.
func TestLimiterWindowEnd(t *testing.T) {
	second := func(s float64) time.Time { return epoch.Add(time.Duration(s * float64(time.Second))) }
	t.Run("a window filled to 82.5% is measured", func(t *testing.T) {
		l := NewLimiter(LimiterConfig{}, epoch)
		sendCohort(l, epoch, 4, 3)
		l.Inflight(second(7), 4) // 3 for 7 s, 4 for 3 s: a mean of 3.3 of 4
		for i := 0; i < 4; i++ {
			l.Observe(second(10), epoch, 10*time.Second, 100, true, false)
		}
		if l.Limit() != 16 {
			t.Errorf("limit %d, want 16: the first window steps up", l.Limit())
		}
	})
	t.Run("a window filled to 77.5% is begun again", func(t *testing.T) {
		l := NewLimiter(LimiterConfig{}, epoch)
		sendCohort(l, epoch, 4, 3)
		l.Inflight(second(9), 4) // a mean of 3.1 of 4
		for i := 0; i < 4; i++ {
			l.Observe(second(10), epoch, 10*time.Second, 100, true, false)
		}
		if l.Limit() != 4 || !l.win.settling || len(l.climb) != 0 {
			t.Errorf("limit %d, settling %v, climb %v: want the window begun again at 4", l.Limit(), l.win.settling, l.climb)
		}
	})
	// A cohort sent at once, answered after 1 s but for its last few:
	// two busy answers, a fifth of those back, halve the limit (two after
	// nine answers do not); held, a straggler ends the window without it
	// once it has been out more than four times the mean latency (at 8 s
	// the mean is 2 s; at 10 s, 16/7 s).
	type back struct {
		at float64 // seconds after the cohort was sent
		ok bool    // answered, else busy
	}
	for _, tt := range []struct {
		name                    string
		start, cohort, answered int
		then                    []back
		limit                   int
		ended                   bool // the window ended, the limit the same
	}{
		{"2 busy after 8 answers", 64, 32, 8, []back{{1, false}, {1, false}}, 32, false},
		{"2 busy after 9 answers", 64, 32, 9, []back{{1, false}, {1, false}}, 64, false},
		{"one of 8 out for 8 s", 8, 8, 6, []back{{8, true}}, 8, false},
		{"one of 8 out for 10 s", 8, 8, 6, []back{{10, true}}, 8, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLimiter(LimiterConfig{Start: tt.start}, epoch)
			if tt.start == 8 {
				l.hold(8, epoch)
				l.win.settling = false // the held level's cohort, sent at once
			}
			windows := l.windows
			sendCohort(l, epoch, tt.cohort, tt.start)
			for i := 0; i < tt.answered; i++ {
				l.Observe(second(1), epoch, time.Second, 100, true, false)
			}
			changed := false
			for _, b := range tt.then {
				changed = l.Observe(second(b.at), epoch, second(b.at).Sub(epoch), 100, b.ok, !b.ok)
			}
			if l.Limit() != tt.limit || changed != (tt.limit != tt.start) || (l.windows > windows) != (tt.ended || changed) {
				t.Errorf("limit %d (changed %v), windows %d from %d, want %d (ended %v)", l.Limit(), changed, l.windows, windows, tt.limit, tt.ended)
			}
		})
	}
}

// A window's latency per token: the cohort's line at the recent mean
// length, Σ latency / Σ tokens where the line says nothing.
func TestLimiterPerToken(t *testing.T) {
	type answer struct{ tokens, seconds float64 }
	line := func(tokens ...float64) []answer { // latency = 1 s + tokens/100
		var out []answer
		for _, n := range tokens {
			out = append(out, answer{n, 1 + n/100})
		}
		return out
	}
	for _, tt := range []struct {
		name            string
		answers         []answer
		lengths, recent float64 // the recent answers' decayed tokens and count
		want            float64
	}{
		{"three answers: the ratio", line(100, 200, 300), 0, 0, (3 + 6) / 600.0},
		{"four on a line, at their mean length", line(100, 200, 300, 400), 0, 0, (1 + 2.5) / 250},
		{"at the mean of the recent answers once eight are in", line(100, 200, 300, 400), 8 * 1000, 8, (1 + 10) / 1000.0},
		{"seven recent answers are too few", line(100, 200, 300, 400), 7 * 1000, 7, (1 + 2.5) / 250},
		{"one length: the ratio", line(300, 300, 300, 300), 0, 0, 4 / 300.0},
		// On a line the ratio is the line at the cohort's own mean: only
		// a recent mean apart from it tells the two apart.
		{"lengths spread under 5% (variance over mean square): the ratio", line(100, 100, 100, 160), 8 * 1000, 8, 8.6 / 460},
		{"lengths spread over 5%: the line", line(100, 100, 100, 170), 8 * 1000, 8, (1 + 10) / 1000.0},
		{"longer answers faster: the ratio", []answer{{100, 4}, {200, 3}, {300, 2}, {400, 1}}, 0, 0, 10 / 1000.0},
		{"the line below zero at the mean: the ratio", []answer{{100, 0.1}, {200, 0.1}, {300, 0.1}, {400, 10}}, 8 * 10, 8, 10.3 / 1000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLimiter(LimiterConfig{}, epoch)
			for _, a := range tt.answers {
				l.win.answers++
				l.win.fit.Add(a.tokens, a.seconds)
			}
			l.lengths, l.answers = tt.lengths, tt.recent
			if got, _ := l.perToken(); !near(got, tt.want) {
				t.Errorf("per token %v, want %v", got, tt.want)
			}
		})
	}
}

// The limit on the server's signals, one reading at a time: what the
// limiter does with each reading of the server's running and waiting
// counts, with our requests in flight as given.
func TestLimiterSignals(t *testing.T) {
	type reading struct{ inflight, running, waiting int }
	for _, tt := range []struct {
		name     string
		start    LimiterConfig
		readings []reading
		limits   []int // the limit after each reading
		note     string
	}{
		{"room at every reading: fourfold, to the ceiling", LimiterConfig{},
			[]reading{{4, 4, 0}, {16, 16, 0}, {64, 63, 0}, {256, 256, 0}}, []int{16, 64, 256, 256}, ""},
		{"below the limit (the input runs dry): no step", LimiterConfig{},
			[]reading{{3, 3, 0}}, []int{4}, ""},
		{"one reading with requests waiting (they just arrived): nothing", LimiterConfig{Start: 32},
			[]reading{{32, 30, 2}, {32, 32, 0}}, []int{32, 128}, ""},
		{"waiting at two readings, running flat: its slots and the spare", LimiterConfig{Start: 64},
			[]reading{{64, 48, 16}, {64, 48, 16}}, []int{64, 54},
			"in flight settled at 54 (48 + 6 spare: the server's metrics count 48 running and requests waiting)"},
		{"waiting while the running count still grows: not yet", LimiterConfig{Start: 64},
			[]reading{{64, 40, 24}, {64, 48, 16}, {64, 48, 16}}, []int{64, 64, 54}, ""},
		{"held: the spare's requests waiting change nothing", LimiterConfig{Capacity: 48},
			[]reading{{54, 48, 6}, {54, 48, 6}, {54, 48, 4}}, []int{54, 54, 54}, ""},
		{"held: a reading taken as a slot freed does not lower it", LimiterConfig{Capacity: 48},
			[]reading{{54, 48, 6}, {54, 47, 7}, {54, 47, 7}}, []int{54, 54, 54}, ""},
		{"held: fewer running at every reading kept (slots shrank): down", LimiterConfig{Capacity: 48},
			[]reading{{54, 16, 38}, {54, 16, 38}, {54, 16, 38}}, []int{54, 54, 18}, ""},
		{"held: more running than held, none waiting, twice: up a quarter", LimiterConfig{Capacity: 16},
			[]reading{{18, 18, 0}, {18, 18, 0}}, []int{18, 22}, ""},
		{"held: none waiting once, the spare on its way: nothing", LimiterConfig{Capacity: 16},
			[]reading{{18, 16, 0}, {18, 16, 0}}, []int{18, 18}, ""},
		{"other clients' requests running: our share at most", LimiterConfig{Start: 8},
			[]reading{{8, 40, 10}, {8, 40, 10}}, []int{8, 10}, ""},
		{"the ceiling: no step past it", LimiterConfig{Start: 256},
			[]reading{{256, 256, 0}}, []int{256}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLimiter(tt.start, epoch)
			for i, r := range tt.readings {
				now := epoch.Add(time.Duration(i+1) * 2 * time.Second)
				l.Inflight(now, r.inflight)
				l.Load(now, r.running, r.waiting)
				if l.Limit() != tt.limits[i] {
					t.Fatalf("after reading %d %+v: limit %d, want %d", i, r, l.Limit(), tt.limits[i])
				}
				if i == len(tt.readings)-1 && tt.note != "" {
					if note := l.Note(); note != tt.note {
						t.Errorf("note %q, want %q", note, tt.note)
					}
				}
			}
			// Once read, the windows decide nothing.
			if !l.signals {
				t.Error("the limit is not on the server's signals")
			}
		})
	}
}

// The spare grows with the level: an eighth of it, 2 at least.
func TestLimiterSpare(t *testing.T) {
	cfg := LimiterConfig{}.withDefaults()
	for n, want := range map[int]int{1: 2, 4: 2, 16: 2, 17: 3, 32: 4, 48: 6, 128: 16} {
		if got := cfg.spare(n); got != want {
			t.Errorf("spare(%d) = %d, want %d", n, got, want)
		}
	}
	if got := (LimiterConfig{Spare: -1}).withDefaults().withDefaults().spare(128); got != 0 {
		t.Errorf("no spare: spare(128) = %d", got)
	}
	if got := (LimiterConfig{SpareShare: -1}).withDefaults().spare(128); got != 2 {
		t.Errorf("no share: spare(128) = %d, want 2", got)
	}
	l := NewLimiter(LimiterConfig{Capacity: 32}, epoch)
	if l.Limit() != 36 || l.phase != holding || l.found != 32 {
		t.Errorf("a reported capacity of 32: limit %d in phase %d (found %d), want 36 held", l.Limit(), l.phase, l.found)
	}
}
