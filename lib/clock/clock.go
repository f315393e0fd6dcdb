// Package clock is the time infer, its fleet and its bench live by: the
// real clock in a run, a fake one that moves only when a test says so.
// Every reading of the time and every wait of logic whose outcome depends
// on time goes through a Clock, so that such logic is tested on virtual
// time instead of against a wall clock on a loaded machine.
package clock

import (
	"sync"
	"time"
)

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

// Fake is a clock that stands still until Advance or Set moves it. Timers
// and tickers fire, in the order of their times, as time passes them;
// an AfterFunc's function runs in the goroutine that moves the clock, so
// a test knows it has run when Advance returns.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer // pending
}

// NewFake returns a fake clock standing at start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

type fakeTimer struct {
	f      *Fake
	at     time.Time
	period time.Duration // a ticker's; 0 for a timer
	c      chan time.Time
	fn     func()
}

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) After(d time.Duration) <-chan time.Time { return f.NewTimer(d).C() }

func (f *Fake) NewTimer(d time.Duration) Timer {
	return f.add(&fakeTimer{c: make(chan time.Time, 1)}, d)
}

func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	return fakeTicker{f.add(&fakeTimer{c: make(chan time.Time, 1), period: d}, d)}
}

type fakeTicker struct{ t *fakeTimer }

func (t fakeTicker) C() <-chan time.Time { return t.t.c }
func (t fakeTicker) Stop()               { t.t.Stop() }

func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	return f.add(&fakeTimer{fn: fn}, d)
}

func (f *Fake) add(t *fakeTimer, d time.Duration) *fakeTimer {
	t.f = f
	f.mu.Lock()
	t.at = f.now.Add(d)
	f.timers = append(f.timers, t)
	f.mu.Unlock()
	if d <= 0 {
		f.Advance(0)
	}
	return t
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	for i, p := range t.f.timers {
		if p == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Pending is the number of timers and tickers waiting to fire, so a test
// can wait until the code under test has set its timer before it moves
// the clock.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// Advance moves the clock forward by d, firing what falls due on the way.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	to := f.now.Add(d)
	f.mu.Unlock()
	f.Set(to)
}

// Set moves the clock to t (never backwards), firing what falls due on
// the way, each at its own time.
func (f *Fake) Set(t time.Time) {
	for {
		f.mu.Lock()
		next := -1
		for i, p := range f.timers {
			if !p.at.After(t) && (next < 0 || p.at.Before(f.timers[next].at)) {
				next = i
			}
		}
		if next < 0 {
			if t.After(f.now) {
				f.now = t
			}
			f.mu.Unlock()
			return
		}
		p := f.timers[next]
		if p.at.After(f.now) {
			f.now = p.at
		}
		if p.period > 0 {
			p.at = p.at.Add(p.period)
		} else {
			f.timers = append(f.timers[:next], f.timers[next+1:]...)
		}
		now := f.now
		f.mu.Unlock()
		if p.fn != nil {
			p.fn()
			continue
		}
		select {
		case p.c <- now:
		default: // a tick nobody took is dropped, as time.Ticker does
		}
	}
}
