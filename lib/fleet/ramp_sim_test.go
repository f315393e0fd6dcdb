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
