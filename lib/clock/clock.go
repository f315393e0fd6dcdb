// Package clock is the time infer, its fleet and its bench live by: the
// real clock in a run, internal/fakeclock's in tests, which moves only
// when the test says so.
// Every reading of the time and every wait of logic whose outcome depends
// on time goes through a Clock, so that such logic is tested on virtual
// time instead of against a wall clock on a loaded machine.
package clock

import "time"

// Clock tells the time and waits.
type Clock interface {
	Now() time.Time
	// After is a channel that receives the time once d has passed.
	After(d time.Duration) <-chan time.Time
	NewTimer(d time.Duration) Timer
	NewTicker(d time.Duration) Ticker
	// AfterFunc calls f once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a time.Timer of a Clock.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; false if it had fired or was
	// stopped.
	Stop() bool
}

// Ticker is a time.Ticker of a Clock.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the system clock.
var Real Clock = realClock{}

// Or is c, or Real when c is nil: the default of an optional Clock field.
func Or(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (realClock) NewTimer(d time.Duration) Timer         { return realTimer{time.NewTimer(d)} }
func (realClock) NewTicker(d time.Duration) Ticker       { return realTicker{time.NewTicker(d)} }
func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{time.AfterFunc(d, f)}
}

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }
