package bench

import (
	"math"
	"sync"

	"tokenmill/lib/forecast"
)

// lengthObs are the answer lengths the bench saw: finished on their own
// (exact), cut by max_tokens, or cut off by the level's end (both
// censored: the answer would have been longer).
type lengthObs struct {
	mu    sync.Mutex
	exact forecast.LogStats
	cens  []forecast.Censor
	// answers that finished (stop or length): their count and tokens.
	finished, finishedTokens float64
	// capped: answers that finished at max_tokens (finish "length").
	capped float64
	// longest is the most tokens an answer has been seen to write.
	longest float64
}

func (o *lengthObs) add(tokens float64, finish string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if finish == "abort" {
		return // cut short by the server: says nothing of the length
	}
	o.longest = max(o.longest, tokens)
	if finish != "" {
		o.finished++
		o.finishedTokens += tokens
	}
	if finish == "length" {
		o.capped++
	}
	if finish != "" && finish != "length" {
		o.exact.Add(int(tokens + 0.5))
		return
	}
	if tokens >= 1 {
		o.cens = append(o.cens, forecast.Censor{X: math.Log(max(tokens, 1)), W: 1})
	}
}

// fit is the lognormal of the answer lengths seen.
func (o *lengthObs) fit() (forecast.Dist, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.exact.N < 2 {
		return nil, false
	}
	d, ok := forecast.FitLogNormal(o.exact, o.cens, forecast.LogNormal{})
	return d, ok
}

// lengths are the run's answer lengths, cut at limit (its max_tokens), as
// the answers seen tell them: their distribution, mean, the mean's
// standard error and the lengths' standard deviation. benchCap is the
// max_tokens the bench asked with (0: none).
//
// With two answers or more that ended on their own the lengths are the
// lognormal fitted to them and to those cut short. When (all but at most
// one of) the answers that finished ran to max_tokens instead, and the
// bench asked with the run's limit, the run's answers will too: each is
// as long as its cap, and their mean is that of the answers seen (caps
// lowered to fit a prompt's context count as they were). capped says so;
// ok is false when neither holds.
func (o *lengthObs) lengths(benchCap, limit float64) (l runLengths, ok bool) {
	if d, fitted := o.fit(); fitted {
		mean, m2 := forecast.CappedMoments(d, limit)
		sd := math.Sqrt(max(m2-mean*mean, 0))
		return runLengths{d: d, mean: mean, sd: sd, se: sd / math.Sqrt(o.exact.N), exact: int(o.exact.N)}, true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.capped == 0 || o.capped < o.finished-1 || benchCap != limit {
		return runLengths{}, false
	}
	mean := o.finishedTokens / o.finished
	return runLengths{d: forecast.PointMass{C: mean}, mean: mean, capped: int(o.capped), exact: int(o.exact.N)}, true
}

// runLengths are a run's answer lengths as lengthObs.lengths finds them.
type runLengths struct {
	d            forecast.Dist
	mean, se, sd float64
	exact        int // answers seen that ended on their own
	capped       int // with capped lengths: the answers seen that ran to max_tokens; 0 otherwise
}
