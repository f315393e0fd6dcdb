package infer

import (
	"sync"
	"time"
)

// Estimator forecasts how long the rest of a run will take. The progress
// display feeds it what has happened and asks it for the time left; a
// better forecast (from measured output tok/s and the running mean of
// answer tokens) can replace the default without touching anything else.
type Estimator interface {
	// Observe records the run's totals at now: answers finished (this
	// run's, ok or failed) and completion tokens generated.
	Observe(now time.Time, answers, completionTokens int64)
	// Remaining returns the time needed for left more answers, or false
	// while there is too little to go on.
	Remaining(now time.Time, left int64) (time.Duration, bool)
}

// rateEstimator divides what is left by the answer rate over the last
// window. It ignores the first minSpan of the run, when the fleet is
// still filling and the rate says little.
type rateEstimator struct {
	mu      sync.Mutex
	window  time.Duration
	minSpan time.Duration
	samples []etaSample
	start   time.Time
}

type etaSample struct {
	at      time.Time
	answers int64
}

// NewRateEstimator returns the default Estimator: answers per second over
// the last window (a minute in the live display).
func NewRateEstimator(window time.Duration) Estimator {
	return &rateEstimator{window: window, minSpan: min(window/4, 15*time.Second)}
}

func (e *rateEstimator) Observe(now time.Time, answers, _ int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.start.IsZero() {
		e.start = now
	}
	e.samples = append(e.samples, etaSample{now, answers})
	// Keep one sample older than the window as its left edge.
	cut := 0
	for cut+1 < len(e.samples) && now.Sub(e.samples[cut+1].at) >= e.window {
		cut++
	}
	e.samples = e.samples[cut:]
}

func (e *rateEstimator) Remaining(now time.Time, left int64) (time.Duration, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if left <= 0 {
		return 0, true
	}
	if len(e.samples) < 2 || now.Sub(e.start) < e.minSpan {
		return 0, false
	}
	first, last := e.samples[0], e.samples[len(e.samples)-1]
	span := last.at.Sub(first.at)
	done := last.answers - first.answers
	if span <= 0 || done <= 0 {
		return 0, false
	}
	perAnswer := float64(span) / float64(done)
	return time.Duration(perAnswer * float64(left)), true
}
