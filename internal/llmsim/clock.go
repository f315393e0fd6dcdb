package llmsim

import (
	"context"
	"sync"
	"time"
)

// Clock is the simulated time an endpoint lives by: how far simulated time
// has run since the clock started, and a way to wait until it reaches a
// point. The default runs TimeScale times faster than real time; tests may
// pass a ManualClock and move time themselves.
type Clock interface {
	Now() time.Duration
	// Sleep blocks until Now() >= until or ctx ends; it reports whether the
	// time was reached.
	Sleep(ctx context.Context, until time.Duration) bool
}

// scaledClock is real time times scale.
type scaledClock struct {
	start time.Time
	scale float64
}

// NewScaledClock returns a clock running scale times faster than real time
// (scale <= 0 means 1).
func NewScaledClock(scale float64) Clock {
	if scale <= 0 {
		scale = 1
	}
	return &scaledClock{start: time.Now(), scale: scale}
}

func (c *scaledClock) Now() time.Duration {
	return time.Duration(float64(time.Since(c.start)) * c.scale)
}

func (c *scaledClock) Sleep(ctx context.Context, until time.Duration) bool {
	wait := time.Duration(float64(until-c.Now()) / c.scale)
	if wait <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// ManualClock is a clock that moves only when Advance is called: tests use
// it to hold an endpoint in a state (starting, crashed, mid-step) for as
// long as they need, without sleeping.
type ManualClock struct {
	mu      sync.Mutex
	now     time.Duration
	waiters []manualWaiter
}

type manualWaiter struct {
	until time.Duration
	ch    chan struct{}
}

// NewManualClock returns a clock standing at zero.
func NewManualClock() *ManualClock { return &ManualClock{} }

func (c *ManualClock) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves time forward by d and wakes every sleeper whose time came.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now += d
	kept := c.waiters[:0]
	var wake []chan struct{}
	for _, w := range c.waiters {
		if w.until <= c.now {
			wake = append(wake, w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
	c.mu.Unlock()
	for _, ch := range wake {
		close(ch)
	}
}

// Sleepers is the number of goroutines waiting on the clock, so a test can
// wait until the code under test has reached its sleep before advancing.
func (c *ManualClock) Sleepers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

func (c *ManualClock) Sleep(ctx context.Context, until time.Duration) bool {
	c.mu.Lock()
	if until <= c.now {
		c.mu.Unlock()
		return ctx.Err() == nil
	}
	ch := make(chan struct{})
	c.waiters = append(c.waiters, manualWaiter{until: until, ch: ch})
	c.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		c.mu.Lock()
		for i, w := range c.waiters {
			if w.ch == ch {
				c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
				break
			}
		}
		c.mu.Unlock()
		return false
	}
}
