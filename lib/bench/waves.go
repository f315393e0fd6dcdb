package bench

import (
	"cmp"
	"math"
	"slices"
)

// When every answer runs to max_tokens they are all one length, and a run
// goes in waves: the servers' slots start their answers together, write
// them in step and end them together, and the next answers take their
// places at once. The run is its full waves, then one of the answers left
// over, which run at the speed of that many at once. A forecast of answers
// spread in length (forecast.RunTime) would be off by up to half a wave
// either way: much of a short run.

// wavesTime is how long, in seconds, a run of answers, each length tokens,
// takes at n per endpoint, where the fleet's output is rate tokens per
// second; levels are the levels measured, for the speed of the last wave.
// lo and hi bound it: every slot busy to the end, and a last wave as slow
// as a full one.
func (r *benchRun) wavesTime(levels []Level, n int, rate, answers, length float64) (secs, lo, hi float64) {
	slots := r.slots(n)
	if rate <= 0 || slots <= 0 || answers <= 0 || length <= 0 {
		return 0, 0, 0
	}
	wave := slots * length / rate
	full := math.Floor(answers / slots)
	secs, lo, hi = full*wave, answers*length/rate, math.Ceil(answers/slots)*wave
	if rest := answers - full*slots; rest > 0 {
		// Spread over the endpoints as evenly as the balancing sends them.
		per := math.Ceil(rest / float64(len(r.maxRunning)))
		secs += length * r.tokenTime(levels, n, rate, per)
	}
	return secs, min(lo, secs), max(hi, secs)
}

// tokenTime is the time one answer takes per token when per answers run
// at once on each endpoint: a step costs a fixed part and a part per
// answer in it, so it is the time per token of the levels measured,
// interpolated in the answers they ran at once: level n itself (at rate)
// and those below it that ran fewer. Below them all it is the fewest's.
func (r *benchRun) tokenTime(levels []Level, n int, rate, per float64) float64 {
	type point struct{ running, secs float64 }
	eps := float64(len(r.maxRunning))
	top := point{r.slots(n) / eps, r.slots(n) / rate}
	pts := []point{top}
	for _, lv := range levels {
		if run := r.slots(lv.Concurrency) / eps; lv.answered() && run < top.running {
			pts = append(pts, point{run, r.slots(lv.Concurrency) / lv.TokPerSec})
		}
	}
	slices.SortFunc(pts, func(a, b point) int { return cmp.Compare(a.running, b.running) })
	if per <= pts[0].running {
		return pts[0].secs
	}
	for i := 1; i < len(pts); i++ {
		if a, b := pts[i-1], pts[i]; per <= b.running {
			return a.secs + (b.secs-a.secs)*(per-a.running)/(b.running-a.running)
		}
	}
	return top.secs
}
