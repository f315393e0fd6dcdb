package forecast

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"tokenmill/internal/testbin"
)

// The estimator on synthetic runs: a fleet of slots answering prompts of
// known lengths first come first served, replayed on a virtual clock, so
// every figure is exact and the test needs no servers.

type simFleet struct {
	slots    int
	speed    float64       // tokens per second of one answer
	overhead time.Duration // per answer: queue, prefill, round trip
	limit    int           // max_tokens (0: none)
}

type simEvent struct {
	at     time.Time
	id     int // the attempt's key
	start  bool
	tokens int
	finish string
}

// slotHeap holds when each slot is next free.
type slotHeap []time.Time

func (h slotHeap) Len() int           { return len(h) }
func (h slotHeap) Less(i, k int) bool { return h[i].Before(h[k]) }
func (h slotHeap) Swap(i, k int)      { h[i], h[k] = h[k], h[i] }
func (h *slotHeap) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *slotHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

var simEpoch = time.Unix(1_700_000_000, 0)

// run lays the answers out on the slots and returns the events in time
// order and the time the last answer ends.
func (f simFleet) run(lengths []int) ([]simEvent, time.Time) {
	h := make(slotHeap, f.slots)
	for i := range h {
		h[i] = simEpoch
	}
	heap.Init(&h)
	events := make([]simEvent, 0, 2*len(lengths))
	var end time.Time
	for id, natural := range lengths {
		start := heap.Pop(&h).(time.Time)
		tokens, finish := natural, "stop"
		if f.limit > 0 && tokens >= f.limit {
			tokens, finish = f.limit, "length"
		}
		d := f.overhead + time.Duration(float64(tokens)/f.speed*float64(time.Second))
		stop := start.Add(d)
		events = append(events, simEvent{at: start, id: id, start: true}, simEvent{at: stop, id: id, tokens: tokens, finish: finish})
		heap.Push(&h, stop)
		if stop.After(end) {
			end = stop
		}
	}
	sort.SliceStable(events, func(a, b int) bool { return events[a].at.Before(events[b].at) })
	return events, end
}

func logNormalLengths(n int, median, sigma float64, seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]int, n)
	for i := range out {
		out[i] = max(1, int(math.Round(median*math.Exp(sigma*r.NormFloat64()))))
	}
	return out
}

// etaAt replays a run into a fresh estimator and returns its forecast
// (and the naive one: elapsed time scaled by answers left over answers
// done) when each fraction of the answers is done, with the true time left.
type etaPoint struct {
	frac          float64
	got           ETA
	naive, actual time.Duration
}

// feed plays events into est, calling ended after each answer ends with
// the number done so far, until it returns false.
func feed(est Estimator[int], events []simEvent, ended func(ev simEvent, done int) bool) {
	done := 0
	for _, ev := range events {
		if ev.start {
			est.Started(ev.id, 0, ev.at)
			continue
		}
		est.Ended(ev.id, ev.at, true, ev.tokens, ev.finish)
		done++
		if !ended(ev, done) {
			return
		}
	}
}

func replaySynthetic(t *testing.T, f simFleet, lengths []int, fracs []float64) []etaPoint {
	t.Helper()
	events, end := f.run(lengths)
	est := NewEstimator[int](time.Minute, f.limit, nil, nil)
	n := len(lengths)
	var out []etaPoint
	next := 0
	asked := simEpoch
	feed(est, events, func(ev simEvent, done int) bool {
		// Ask every 10 seconds, as a display would, so the rate window has
		// samples, and at each checkpoint.
		due := next < len(fracs) && float64(done) >= fracs[next]*float64(n)
		if !due && ev.at.Sub(asked) < 10*time.Second {
			return true
		}
		asked = ev.at
		fc, ok := est.Forecast(ev.at, int64(n-done))
		if due {
			if !ok {
				t.Fatalf("no forecast at %.0f%% (%d answers done)", 100*fracs[next], done)
			}
			elapsed := ev.at.Sub(simEpoch)
			out = append(out, etaPoint{frac: fracs[next], got: fc, actual: end.Sub(ev.at),
				naive: time.Duration(float64(elapsed) * float64(n-done) / float64(done))})
			next++
		}
		return true
	})
	return out
}

func relErr(got, want time.Duration) float64 {
	return math.Abs(got.Seconds()-want.Seconds()) / want.Seconds()
}

func TestEstimatorSyntheticRuns(t *testing.T) {
	late := []float64{0.05, 0.1, 0.25, 0.5, 0.9}
	tests := []struct {
		name    string
		fleet   simFleet
		lengths []int
		fracs   []float64
		tol     float64 // relative error allowed at every checkpoint
		ranged  bool    // lengths vary: the range must be honest
		long    bool    // in the long test tier only: the smaller runs cover the same ground
	}{
		// Checkpoints from one fleetful of answers done on.
		{"production-like: 400 slots, lognormal, max 8192", simFleet{400, 24.6, 300 * time.Millisecond, 8192},
			logNormalLengths(100_000, 600, 1.01, 1), append([]float64{0.004, 0.008, 0.02}, late...), 0.07, true, true},
		{"5% is one fleetful: 400 slots, 8,000 prompts", simFleet{400, 24.6, 300 * time.Millisecond, 2048},
			logNormalLengths(8_000, 600, 1.01, 5), []float64{0.05, 0.1, 0.25, 0.5}, 0.06, true, false},
		{"test-sized: 100 slots, lognormal, max 2048", simFleet{100, 24.6, 300 * time.Millisecond, 2048},
			logNormalLengths(20_000, 600, 1.01, 2), late, 0.05, true, false},
		{"narrow lognormal, no max_tokens", simFleet{200, 30, 100 * time.Millisecond, 0},
			logNormalLengths(20_000, 400, 0.5, 3), late, 0.05, true, false},
		{"every answer cut at 256", simFleet{200, 25, 50 * time.Millisecond, 256},
			logNormalLengths(20_000, 2000, 0.3, 4), late, 0.05, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.long {
				testbin.Long(t, "a long simulated run")
			}
			points := replaySynthetic(t, tt.fleet, tt.lengths, tt.fracs)
			inRange := 0
			for _, p := range points {
				if p.got.Low <= p.actual && p.actual <= p.got.High {
					inRange++
				}
				e := relErr(p.got.Left, p.actual)
				t.Logf("%4.1f%%: forecast %v (%v-%v) actual %v: error %.1f%%; naive %v (%.1f%%); mean %.0f±%.0f, %.0f tok/s",
					100*p.frac, p.got.Left.Round(time.Second), p.got.Low.Round(time.Second), p.got.High.Round(time.Second),
					p.actual.Round(time.Second), 100*e, p.naive.Round(time.Second), 100*relErr(p.naive, p.actual),
					p.got.MeanTokens, p.got.MeanSE, p.got.TokPerSec)
				if e > tt.tol {
					t.Errorf("at %.1f%%: forecast %v, actual %v: off by %.1f%%, more than %.0f%%", 100*p.frac, p.got.Left, p.actual, 100*e, 100*tt.tol)
				}
			}
			// The range is about 95%; with lengths that vary it must hold
			// the truth most of the time.
			if tt.ranged && 5*inRange < 4*len(points) {
				t.Errorf("the true time left was inside the forecast's range at %d of %d checkpoints", inRange, len(points))
			}
		})
	}
}

// TestEstimatorMeanEarly: after one fleetful of answers, those finished
// average far less than all answers will; the estimator's mean must not.
func TestEstimatorMeanEarly(t *testing.T) {
	f := simFleet{400, 24.6, 300 * time.Millisecond, 8192}
	lengths := logNormalLengths(20_000, 600, 1.01, 9)
	var trueSum float64
	for _, l := range lengths {
		trueSum += float64(min(l, f.limit))
	}
	trueMean := trueSum / float64(len(lengths))
	events, _ := f.run(lengths)
	est := NewEstimator[int](time.Minute, f.limit, nil, nil)
	var finishedSum float64
	feed(est, events, func(ev simEvent, done int) bool {
		finishedSum += float64(ev.tokens)
		if done < 400 {
			return true
		}
		fc, ok := est.Forecast(ev.at, int64(len(lengths))-400)
		if !ok {
			t.Fatal("no forecast after 400 answers")
		}
		naive := finishedSum / float64(done)
		t.Logf("true mean %.0f; finished answers %.0f; estimate %.0f±%.0f", trueMean, naive, fc.MeanTokens, fc.MeanSE)
		if naive > 0.75*trueMean {
			t.Fatalf("the finished answers' mean %.0f is not biased short (true %.0f): the case tests nothing", naive, trueMean)
		}
		if e := math.Abs(fc.MeanTokens-trueMean) / trueMean; e > 0.10 {
			t.Errorf("mean estimate %.0f, true %.0f: off by %.0f%%", fc.MeanTokens, trueMean, 100*e)
		}
		if math.Abs(fc.MeanTokens-trueMean) > 3*fc.MeanSE {
			t.Errorf("mean estimate %.0f±%.0f is more than 3 standard errors from the true %.0f", fc.MeanTokens, fc.MeanSE, trueMean)
		}
		return false
	})
}

func TestEstimatorEdges(t *testing.T) {
	est := NewEstimator[int](time.Minute, 0, nil, nil)
	t0 := simEpoch
	if _, ok := est.Forecast(t0, 100); ok {
		t.Fatal("a forecast before anything was sent")
	}
	const failing = 40
	for k := range failing {
		est.Started(k, 0, t0)
	}
	// Failed attempts teach nothing.
	for k := range failing {
		est.Ended(k, t0.Add(time.Second), false, 0, "")
	}
	if _, ok := est.Forecast(t0.Add(time.Second), 100); ok {
		t.Fatal("a forecast from failed attempts only")
	}
	// Answers of 100 tokens at 50 tok/s after a 0.1 s overhead.
	var at time.Time
	for i := 0; i < 25; i++ {
		k := failing + i
		sent := t0.Add(time.Duration(i) * time.Second)
		at = sent.Add(2100 * time.Millisecond)
		est.Started(k, 0, sent)
		est.Ended(k, at, true, 100, "stop")
	}
	fc, ok := est.Forecast(at, 50)
	if !ok {
		t.Fatal("no forecast after 25 answers")
	}
	if math.Abs(fc.MeanTokens-100) > 1 {
		t.Errorf("mean %v, want 100", fc.MeanTokens)
	}
	if fc, ok := est.Forecast(at, 0); !ok || fc.Left != 0 {
		t.Errorf("nothing left: %+v %v", fc, ok)
	}
	// An answer ending that was never seen starting is ignored.
	est.Ended(-1, at, true, 1_000_000, "stop")
	if fc, _ := est.Forecast(at, 50); math.Abs(fc.MeanTokens-100) > 1 {
		t.Errorf("an unknown answer moved the mean to %v", fc.MeanTokens)
	}
}

// BenchmarkForecast: one forecast in a production-like run (400 answers
// in flight), as the live display asks four times a second.
func BenchmarkForecast(b *testing.B) {
	f := simFleet{400, 24.6, 300 * time.Millisecond, 8192}
	events, _ := f.run(logNormalLengths(20_000, 600, 1.01, 1))
	est := NewEstimator[int](time.Minute, f.limit, nil, nil)
	var at time.Time
	feed(est, events, func(ev simEvent, done int) bool {
		at = ev.at
		return done < 1000
	})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := est.Forecast(at.Add(time.Duration(i)*time.Millisecond), 19_000); !ok {
			b.Fatal("no forecast")
		}
	}
}

// BenchmarkEstimatorEvents: what the estimator adds to every request.
func BenchmarkEstimatorEvents(b *testing.B) {
	est := NewEstimator[int](time.Minute, 0, nil, nil)
	const inFlight = 400
	t0 := simEpoch
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % inFlight
		est.Started(k, 0, t0)
		est.Ended(k, t0.Add(time.Second), true, 100+i%500, "stop")
	}
}

// TestAnswerLimit: the longest an answer can be is max_tokens; else,
// with the model's context known, the longest answer it cut (the context
// less that answer's prompt) or the context while none is cut; else
// DefaultLimit. Never shorter than an answer seen; and no bound at all
// once an answer passed the context (the server shifts it).
func TestAnswerLimit(t *testing.T) {
	for _, c := range []struct {
		name    string
		limit   float64
		context int
		cut     []int
		longest int
		want    float64
	}{
		{"max_tokens", 512, 4096, []int{512}, 512, 512},
		{"nothing known", 0, 0, nil, 300, DefaultLimit},
		{"a cut past the default", 0, 0, []int{40000}, 300, 40000},
		{"the context", 0, 4096, nil, 300, 4096},
		{"the context's cuts", 0, 4096, []int{4000, 4056}, 300, 4056},
		{"an answer past them", 0, 4096, []int{4000}, 4050, 4050},
		{"an answer past the context: it shifts", 0, 4096, nil, 5000, DefaultLimit},
	} {
		a := finished{cut: map[int]float64{}, longest: c.longest}
		for _, l := range c.cut {
			a.cut[l]++
		}
		if got := a.answerLimit(c.limit, c.context); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
