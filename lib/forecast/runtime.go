package forecast

import "math"

// Run is what the time a run (or the rest of one) takes rests on.
type Run struct {
	// Answers is how many answers are still to be sent.
	Answers float64
	// InFlight are the tokens each answer in flight has produced so far;
	// Rest is the tokens they are expected still to write.
	InFlight []float64
	// Speeds are the decode speeds of the endpoints writing the answers
	// in flight, one per InFlight (nil: Speed for all).
	Speeds []float64
	Rest   float64
	// TokPerSec is the fleet's output; Speed is one answer's decode
	// speed. Both are in tokens per second.
	TokPerSec, Speed float64
	// Lengths is the distribution of the answers' lengths, cut at Limit;
	// Mean is their expected length, SE its standard error and SD their
	// standard deviation.
	Lengths             Dist
	Limit, Mean, SE, SD float64
}

// RunTime is the time, in seconds, the run takes, and about a 95% range.
// It is the tokens still to write (the answers not yet sent times the
// mean, plus what those in flight still have to write) over the rate,
// plus the drain at the end: the run waits for its longest answers, which
// finish one by one at one answer's speed. It is never less than the
// longest answer in flight needs. The range holds the mean's error, the
// chance in the lengths still to come, in the bulk and in the drain.
func RunTime(r Run) (secs, lo, hi float64) {
	if r.Speed <= 0 || r.Lengths == nil || (r.TokPerSec <= 0 && r.Answers > 0) {
		return 0, 0, 0
	}
	v := r.Speed
	var bulk float64
	if r.Answers > 0 {
		slots := min(r.TokPerSec/v, r.Answers+float64(len(r.InFlight)))
		dm, dlo, dhi := endDrain(r.Lengths, r.Limit, slots)
		bulk = (r.Answers*r.Mean+r.Rest)/r.TokPerSec + dm/v
		spread := math.Sqrt(r.Answers*r.Answers*r.SE*r.SE+r.Answers*r.SD*r.SD) / r.TokPerSec
		lo, hi = drainRange(bulk, 2*spread, dm/v, dlo/v, dhi/v)
		secs = bulk
	}
	// The longest answer in flight bounds the time left from below; it
	// matters only once no answer in flight can outlast the bulk.
	slowest := v
	for _, s := range r.Speeds {
		if s > 0 {
			slowest = min(slowest, s)
		}
	}
	if bulk < r.Limit/slowest {
		longest, llo, lhi := longestTime(r.Lengths, r.InFlight, r.Speeds, v, r.Limit)
		if longest > bulk {
			secs, lo, hi = longest, max(llo, lo), max(lhi, hi)
		}
	}
	return secs, lo, hi
}

// DefaultLimit bounds answer lengths when neither max_tokens nor the
// model's context is known: a common context length.
const DefaultLimit = 32768
