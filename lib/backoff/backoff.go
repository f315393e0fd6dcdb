// Package backoff is how long to wait before trying again after failures
// in a row: a first wait that doubles with each failure up to a cap, and,
// where many requests fail together, a jitter that spreads their retries.
// infer's retries, bench's workers and serve's restarts wait by it; the
// waiting itself is on the caller's clock.
package backoff

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Exp is exponential backoff: the wait after the n-th failure in a row
// (n from 1) is First*2^(n-1), at most Max. A First of zero or less never
// waits.
type Exp struct {
	First, Max time.Duration
}

// Delay is the wait after the n-th failure in a row.
func (e Exp) Delay(n int) time.Duration {
	if e.First <= 0 {
		return 0
	}
	d := e.First
	for i := 1; i < n && d < e.Max; i++ {
		if d > e.Max/2 { // doubling reaches the cap (and cannot overflow)
			return e.Max
		}
		d *= 2
	}
	return min(d, e.Max)
}

// Jitter draws each wait between half and all of its Exp's, so that the
// retries of requests that failed together do not arrive together. It is
// safe for concurrent use.
type Jitter struct {
	exp  Exp
	mu   sync.Mutex
	draw func(n int64) int64 // in [0, n)
}

// NewJitter draws e's waits from src: a seeded source makes them
// repeatable.
func NewJitter(e Exp, src rand.Source) *Jitter {
	return &Jitter{exp: e, draw: rand.New(src).Int64N}
}

// Delay is the wait after the n-th failure in a row.
func (j *Jitter) Delay(n int) time.Duration {
	d := j.exp.Delay(n)
	if d <= 0 {
		return 0
	}
	j.mu.Lock()
	r := j.draw(int64(d/2) + 1)
	j.mu.Unlock()
	return d/2 + time.Duration(r)
}
