package llmsim

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"
)

// decodeReading is one /llmsim/decoded reading of what an endpoint decoded.
type decodeReading struct {
	generated, prompt, through, clock float64
}

func readDecoded(t *testing.T, base string) decodeReading {
	t.Helper()
	status, body := getBody(t, base+pathDecoded)
	var w struct {
		Prompt    *float64 `json:"prompt_tokens_total"`
		Generated *float64 `json:"generation_tokens_total"`
		Through   *float64 `json:"decoded_through_seconds"`
		Clock     *float64 `json:"clock_seconds"`
	}
	if err := json.Unmarshal([]byte(body), &w); status != 200 || err != nil || w.Prompt == nil || w.Generated == nil || w.Through == nil || w.Clock == nil {
		t.Fatalf("GET %s: %d %v\n%s", pathDecoded, status, err, body)
	}
	return decodeReading{generated: *w.Generated, prompt: *w.Prompt, through: *w.Through, clock: *w.Clock}
}

// What /llmsim/decoded says was decoded between any two readings is never more
// than the model can decode in the simulated time between them (a full
// batch all along, less the prefill it did), however the readings fall on
// the steps: a window's share of the ideal counted from these figures
// cannot pass 100%, even while answers drain. The clock moves in uneven
// strides, so readings land mid catch-up as well as between steps.
func TestDecodedThroughBoundsTheTokens(t *testing.T) {
	clock := NewManualClock()
	const slots = 8
	fleet := startFleet(t, Config{Clock: clock, MaxRunning: slots, Seed: 3}, 1)
	base := fleet.URLs()[0]
	timing := DefaultTiming()
	rate := slots / timing.StepDuration(slots, 0).Seconds() // tokens a simulated second, a full batch
	const requests = 40
	var wg sync.WaitGroup
	for i := 0; i < requests; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if status, _, err := postChat(t, base, chatBody(fmt.Sprintf("Question %d: say something of length.", i), 20+7*i, false)); err != nil || status != 200 {
				t.Errorf("request %d: %d %v", i, status, err)
			}
		}()
	}
	ep := fleet.Endpoint(0)
	waitFor(t, "the requests in the scheduler", func() bool { st := ep.Stats(); return st.Running+st.Waiting == requests })
	readings := []decodeReading{readDecoded(t, base)}
	strides := []time.Duration{13 * time.Millisecond, 250 * time.Millisecond, 41 * time.Millisecond, time.Second, 3 * time.Millisecond}
	deadline := time.Now().Add(30 * time.Second)
	for k := 0; ep.Stats().Completed < requests; k++ {
		if time.Now().After(deadline) {
			t.Fatalf("the answers did not finish: %+v", ep.Stats())
		}
		clock.Advance(strides[k%len(strides)])
		time.Sleep(200 * time.Microsecond)
		readings = append(readings, readDecoded(t, base))
	}
	wg.Wait()
	readings = append(readings, readDecoded(t, base))
	last := readings[len(readings)-1]
	if st := ep.Stats(); last.generated != float64(st.GeneratedTokens) || st.GeneratedTokens == 0 {
		t.Fatalf("generation_tokens_total %v, the endpoint generated %d", last.generated, st.GeneratedTokens)
	}
	if last.through <= readings[0].through {
		t.Fatalf("decoded_through_seconds did not move: %v to %v", readings[0].through, last.through)
	}
	if want := clock.Now().Seconds(); last.clock != want {
		t.Fatalf("clock_seconds %v, the clock is at %v", last.clock, want)
	}
	prefill := timing.PrefillPerToken.Seconds()
	for i := range readings {
		for j := i + 1; j < len(readings); j++ {
			a, b := readings[i], readings[j]
			decoded := b.generated - a.generated
			ideal := rate * (b.through - a.through - (b.prompt-a.prompt)*prefill)
			if decoded > ideal*(1+1e-9)+1e-9 {
				t.Fatalf("readings %d to %d: %v tokens decoded in %.3f s (simulated) with %v prompt tokens, more than a full batch's %.1f",
					i, j, decoded, b.through-a.through, b.prompt-a.prompt, ideal)
			}
		}
	}
	if len(readings) < 20 {
		t.Errorf("only %d readings: the bound was hardly tried", len(readings))
	}
}
