package fleet

import (
	"math"
	"slices"
	"testing"
	"time"
)

// Each phase of the adaptive limit, one window's figures at a time: what
// the limiter does with a measure, from a state set up for it, under the
// default bounds (start 4, ceiling 256, steps of at most 16, 5% gain, a
// probe every 8 windows held, 2 spare).

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

func TestLimiterClimbing(t *testing.T) {
	runPhase(t, climbing, []phaseCase{
		{name: "the first window, at the start, steps fourfold, needing no settling",
			setup: func(l *Limiter) {}, m: measured(4, 100, 0.01), limit: 16, phase: climbing,
			check: func(t *testing.T, l *Limiter) {
				if l.win.settling || !l.win.unsettled || len(l.climb) != 1 {
					t.Errorf("settling %v, unsettled %v, climb %v", l.win.settling, l.win.unsettled, l.climb)
				}
			}},
		{name: "output up at the same latency per token: fourfold, by at most MaxStep",
			setup: func(l *Limiter) { l.limit, l.climb = 32, []limiterMeasure{measured(16, 400, 0.01)} },
			m:     measured(32, 800, 0.0109), limit: 48, phase: climbing},
		{name: "output up, latency per token up more than 10%: the step doubles and settles first",
			setup: func(l *Limiter) { l.limit, l.climb = 8, []limiterMeasure{measured(4, 100, 0.01)} },
			m:     measured(8, 150, 0.0111), limit: 16, phase: climbing,
			check: func(t *testing.T, l *Limiter) {
				if !l.win.settling || l.win.unsettled {
					t.Errorf("settling %v, unsettled %v", l.win.settling, l.win.unsettled)
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
		{name: "the server's metrics count a queue: the number running",
			setup: func(l *Limiter) { l.limit = 16 },
			m:     limiterMeasure{limit: 16, out: 300, perTok: 0.01, settled: true, queued: true, running: 12},
			limit: 12, phase: holding,
			note: "in flight settled at 12 (the server's metrics count 12 running and requests waiting)"},
		{name: "the server's metrics count more running than sent: the limit",
			setup: func(l *Limiter) { l.limit = 8 },
			m:     limiterMeasure{limit: 8, out: 300, perTok: 0.01, settled: true, queued: true, running: 12},
			limit: 8, phase: holding,
			note: "in flight settled at 8 (the server's metrics count 8 running and requests waiting)"},
		{name: "a step that paid at the ceiling settles there",
			setup: func(l *Limiter) { l.limit, l.climb = 256, []limiterMeasure{measured(240, 1000, 0.01)} },
			m:     measured(256, 1100, 0.01), limit: 256, phase: holding,
			check: func(t *testing.T, l *Limiter) {
				if l.why != "the ceiling" || l.found != 256 || l.spare != 2 {
					t.Errorf("why %q, found %d, spare %d", l.why, l.found, l.spare)
				}
			}},
		{name: "a step that added under 5% settles at the knee, 2 spare",
			setup: func(l *Limiter) {
				l.limit, l.lowest = 32, 4
				l.climb = []limiterMeasure{measured(4, 100, 0.01), measured(16, 400, 0.01)}
			},
			m: measured(32, 410, 0.02), limit: 18, phase: holding,
			check: func(t *testing.T, l *Limiter) {
				if l.why != "32 added under 5%" || l.found != 16 || l.spare != 2 || !slices.Equal(l.below, []limiterMeasure{measured(4, 100, 0.01)}) {
					t.Errorf("why %q, found %d, spare %d, below %v", l.why, l.found, l.spare, l.below)
				}
			}},
		{name: "the knee is the lowest level measured: lower ones are tried",
			setup: func(l *Limiter) { l.limit, l.lowest, l.climb = 32, 16, []limiterMeasure{measured(16, 400, 0.01)} },
			m:     measured(32, 410, 0.02), limit: 8, phase: descending,
			check: func(t *testing.T, l *Limiter) {
				if l.good != 16 || l.ref != measured(32, 410, 0.02) {
					t.Errorf("good %d, ref %+v", l.good, l.ref)
				}
			}},
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
		{name: "within twice the gain of the level to match: halves on",
			setup: from(8, 16, 0), m: measured(8, 370, 0.01), limit: 4, phase: descending,
			check: func(t *testing.T, l *Limiter) {
				if l.good != 8 {
					t.Errorf("good %d, want 8", l.good)
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
			setup: from(24, 48, 0.01), m: measured(24, 400, 0.0109), limit: 26, phase: holding,
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
		{name: "the server's metrics count fewer running than the limit, and a queue",
			setup: held(18, nil),
			m:     limiterMeasure{limit: 18, out: 400, perTok: 0.01, settled: true, queued: true, running: 12},
			limit: 12, phase: holding,
			note: "in flight settled at 12 (the server's metrics count 12 running and requests waiting)"},
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
		{name: "a queue the metrics see: no probe",
			setup: held(18, func(l *Limiter) { l.held = 7 }),
			m:     limiterMeasure{limit: 18, out: 400, perTok: 0.01, settled: true, queued: true},
			limit: 18, phase: holding},
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
			setup: probe(22, measured(18, 400, 0.01)), m: measured(22, 421, 0.01), limit: 38, phase: climbing,
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
		{name: "a queue the metrics see: back to the held level",
			setup: probe(22, measured(18, 400, 0.01)),
			m:     limiterMeasure{limit: 22, out: 500, perTok: 0.01, settled: true, queued: true},
			limit: 18, phase: holding,
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
	// nine answers do not); a straggler ends the window without it once it
	// has been out more than four times the mean latency (at 8 s the mean
	// is 2 s; at 10 s, 16/7 s).
	type back struct {
		at float64 // seconds after the cohort was sent
		ok bool    // answered, else busy
	}
	for _, tt := range []struct {
		name                    string
		start, cohort, answered int
		then                    []back
		limit                   int
	}{
		{"2 busy after 8 answers", 64, 16, 8, []back{{1, false}, {1, false}}, 32},
		{"2 busy after 9 answers", 64, 16, 9, []back{{1, false}, {1, false}}, 64},
		{"one of 8 out for 8 s", 32, 8, 6, []back{{8, true}}, 32},
		{"one of 8 out for 10 s", 32, 8, 6, []back{{10, true}}, 48},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLimiter(LimiterConfig{Start: tt.start}, epoch)
			sendCohort(l, epoch, tt.cohort, tt.start)
			for i := 0; i < tt.answered; i++ {
				l.Observe(second(1), epoch, time.Second, 100, true, false)
			}
			changed := false
			for _, b := range tt.then {
				changed = l.Observe(second(b.at), epoch, second(b.at).Sub(epoch), 100, b.ok, !b.ok)
			}
			if l.Limit() != tt.limit || changed != (tt.limit != tt.start) {
				t.Errorf("limit %d (changed %v), want %d", l.Limit(), changed, tt.limit)
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
			if got := l.perToken(); !near(got, tt.want) {
				t.Errorf("per token %v, want %v", got, tt.want)
			}
		})
	}
}
