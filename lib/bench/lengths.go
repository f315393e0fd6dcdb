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
}

func (o *lengthObs) add(tokens float64, finish string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if finish == "abort" {
		return // cut short by the server: says nothing of the length
	}
	if finish != "" {
		o.finished++
		o.finishedTokens += tokens
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
