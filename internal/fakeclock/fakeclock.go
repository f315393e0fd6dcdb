// Package fakeclock is lib/clock's Clock for tests: it stands still until
// the test moves it, so that logic whose outcome depends on time is tested
// on virtual time instead of against a wall clock on a loaded machine.
package fakeclock

import (
	"sync"
	"time"

	"tokenmill/lib/clock"
)

var _ clock.Clock = (*Clock)(nil)

// Clock is a clock that stands still until Advance or Set moves it. Timers
// and tickers fire, in the order of their times, as time passes them;
// an AfterFunc's function runs in the goroutine that moves the clock, so
// a test knows it has run when Advance returns.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer // pending
}

// New returns a fake clock standing at start.
func New(start time.Time) *Clock { return &Clock{now: start} }

type fakeTimer struct {
	f      *Clock
	at     time.Time
	period time.Duration // a ticker's; 0 for a timer
	c      chan time.Time
	fn     func()
}

func (f *Clock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Clock) After(d time.Duration) <-chan time.Time { return f.NewTimer(d).C() }

func (f *Clock) NewTimer(d time.Duration) clock.Timer {
	return f.add(&fakeTimer{c: make(chan time.Time, 1)}, d)
}

func (f *Clock) NewTicker(d time.Duration) clock.Ticker {
	if d <= 0 {
		panic("fakeclock: non-positive interval for NewTicker")
	}
	return fakeTicker{f.add(&fakeTimer{c: make(chan time.Time, 1), period: d}, d)}
}

type fakeTicker struct{ t *fakeTimer }

func (t fakeTicker) C() <-chan time.Time { return t.t.c }
func (t fakeTicker) Stop()               { t.t.Stop() }

func (f *Clock) AfterFunc(d time.Duration, fn func()) clock.Timer {
	return f.add(&fakeTimer{fn: fn}, d)
}

func (f *Clock) add(t *fakeTimer, d time.Duration) *fakeTimer {
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
func (f *Clock) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// Advance moves the clock forward by d, firing what falls due on the way.
func (f *Clock) Advance(d time.Duration) {
	f.mu.Lock()
	to := f.now.Add(d)
	f.mu.Unlock()
	f.Set(to)
}

// Set moves the clock to t (never backwards), firing what falls due on
// the way, each at its own time.
func (f *Clock) Set(t time.Time) {
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
