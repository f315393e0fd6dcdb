package fleet

import (
	"fmt"
	"testing"
	"time"
)

// The ramp to the right in-flight level on a short run as well as a long
// one: on virtual time, 32 slots, answers of up to 128 tokens, the pool
// reading the server's metrics as it does against llmsim at
// --time-scale 8 (every 2 s of real time, 16 s of the model's), the
// default's run ends within 5% of the best fixed level's, on every kind
// of server, for 400 prompts (a dozen answers' latency) and for 2,000.
func TestRampShortRuns(t *testing.T) {
	const slots, scale = 32, 8
	for _, answers := range []int{400, 2000} {
		for _, fl := range append(simFlavours[:len(simFlavours):len(simFlavours)], latencyOnly) {
			t.Run(fmt.Sprintf("%s/%d", fl.name, answers), func(t *testing.T) {
				t.Parallel()
				s := simSetup{flavour: fl, plan: slotPlan{{Slots: slots}}, poll: scale * simPollEvery,
					work: simWork{answers: answers, maxTokens: 128, seed: 1}}
				best, bestAt := time.Duration(1<<62), 0
				for _, m := range fixedLevels(slots) {
					s.mode = m
					if w := simulate(t, s).wall; w < best {
						best, bestAt = w, m.fixed
					}
				}
				s.mode = modeDefault
				run := simulate(t, s)
				if run.tokens == 0 || run.wall <= 0 {
					t.Fatalf("no output: %+v", run)
				}
				r := float64(run.wall) / float64(best)
				t.Logf("default %v, %.3f× the best fixed level (%d: %v); limits:%s", run.wall.Round(100*time.Millisecond), r, bestAt, best.Round(100*time.Millisecond), run)
				if r > 1.05 {
					t.Errorf("default %v, %.3f× the best fixed level's %v (%d in flight); limits:%s\n%s", run.wall, r, best, bestAt, run, run.notes)
				}
			})
		}
	}
}

// The climb's first window at a start past 4: where its answers waited
// (the line's intercept, else answers a quarter slower per token than
// the quickest) the start was past the slots, and the limit settles at
// the answers that ran at once with their spare; where none waited it
// steps fourfold as any climb does.
func TestLimiterOpening(t *testing.T) {
	opening := func(spread float64, ran int, wait float64) limiterMeasure {
		m := measured(FirstLevel, 400, 0.04)
		m.wait, m.spread, m.ran = wait, spread, ran
		return m
	}
	start := func(l *Limiter) { l.limit = FirstLevel }
	runPhase(t, climbing, []phaseCase{
		{name: "answers twice as slow per token as the quickest: settles at the 4 that ran",
			setup: start, m: opening(2, 4, -1), limit: 6, phase: holding,
			check: func(t *testing.T, l *Limiter) {
				if l.found != 4 || l.spare != 2 || l.why != "16 in flight waited, 4 ran at once" {
					t.Errorf("found %d + %d spare, why %q", l.found, l.spare, l.why)
				}
			}},
		{name: "the line says a third of the latency waited: settles at the 9 that ran",
			setup: start, m: opening(1.1, 9, 0.3), limit: 11, phase: holding},
		{name: "as fast as the quickest, no line: fourfold",
			setup: start, m: opening(1.05, 8, -1), limit: 64, phase: climbing},
		{name: "the line says nothing waited, whatever the spread: fourfold",
			setup: start, m: opening(1.5, 3, 0.02), limit: 64, phase: climbing},
	})
	// From 4 (a start below MinAnswers' half) the first window steps up
	// whatever it saw, as before.
	l := NewLimiter(LimiterConfig{}, epoch)
	m := measured(4, 100, 0.04)
	m.wait, m.spread, m.ran = -1, 2, 2
	l.decide(m, epoch.Add(time.Minute))
	if l.Limit() != 16 || l.phase != climbing {
		t.Errorf("from 4: limit %d in phase %d, want 16 climbing", l.Limit(), l.phase)
	}
}

// The first window takes all of its cohort back, not half of it: the
// answers that waited are the last.
func TestLimiterOpeningWholeCohort(t *testing.T) {
	l := NewLimiter(LimiterConfig{Start: FirstLevel}, epoch)
	for i := range FirstLevel {
		at := epoch.Add(time.Duration(i) * time.Microsecond)
		l.Inflight(at, i+1)
		l.Sent(at)
	}
	cohort := l.win.cohort
	if cohort != FirstLevel/2 {
		t.Fatalf("cohort %d, want %d", cohort, FirstLevel/2)
	}
	// Four slots: the first four back after 10 s, the next four after 20.
	for i := range cohort {
		sent := epoch.Add(time.Duration(i) * time.Microsecond)
		lat := time.Duration(1+i/4) * 10 * time.Second
		l.Inflight(sent.Add(lat), FirstLevel-1)
		l.Observe(sent.Add(lat), sent, lat, 256, true, false)
		if i < cohort-1 && l.Limit() != FirstLevel {
			t.Fatalf("after %d of %d answers the limit moved to %d", i+1, cohort, l.Limit())
		}
	}
	if l.Limit() != 6 || !l.Settled() {
		t.Errorf("limit %d (settled %v), want 6: the 4 that ran and 2 spare", l.Limit(), l.Settled())
	}
}
