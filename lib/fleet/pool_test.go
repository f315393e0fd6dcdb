package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"tokenmill/internal/fakeclock"
	"tokenmill/internal/llmsim"
	"tokenmill/internal/simfleet"
)

var epoch = time.Unix(1_700_000_000, 0)

// testPool is a pool of n endpoints on a fake clock with nothing behind
// them and no probes: the test sets their states.
func testPool(t testing.TB, n int, cfg Config) (*Pool, *fakeclock.Clock, *logs) {
	t.Helper()
	fake := fakeclock.New(epoch)
	l := &logs{}
	cfg.Clock, cfg.Logf = fake, l.logf
	targets, err := ParseEndpoints(fmt.Sprintf("127.0.0.1:1-%d", n))
	if err != nil {
		t.Fatal(err)
	}
	return NewPool(context.Background(), targets, cfg), fake, l
}

type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logs) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// setReady puts endpoint i into service with slots.
func (p *Pool) setReady(i, slots int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ep := p.eps[i]
	ep.slots = slots
	p.setStateLocked(ep, StateReady)
	p.broadcastLocked()
}

// pending waits (with a bound) until n timers are set on fake.
func pending(t *testing.T, fake *fakeclock.Clock, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for fake.Pending() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d timers set, want %d", fake.Pending(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitErr waits (with a bound) for what a call in another goroutine
// returned.
func waitErr(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no return within 10s")
	}
	return nil
}

// WaitReady on virtual time: it says after 2s what it waits for, gives up
// at --wait-ready, and returns as soon as an endpoint is ready.
func TestWaitReady(t *testing.T) {
	p, fake, l := testPool(t, 3, Config{})
	done := make(chan error, 1)
	go func() { done <- p.WaitReady(context.Background(), 10*time.Minute) }()
	pending(t, fake, 2) // the deadline and the notice
	fake.Advance(2 * time.Second)
	for !strings.Contains(l.text(), "waiting for one of 3 endpoints to be ready (giving up in 9m58s, --wait-ready 10m0s): http://127.0.0.1:1: not probed yet; ") {
		select {
		case err := <-done:
			t.Fatalf("returned %v before its deadline", err)
		case <-time.After(time.Millisecond):
		}
	}
	fake.Advance(10*time.Minute - 2*time.Second - time.Nanosecond)
	select {
	case err := <-done:
		t.Fatalf("returned %v before its deadline", err)
	default:
	}
	fake.Advance(time.Nanosecond)
	if err := waitErr(t, done); err == nil || !strings.HasPrefix(err.Error(), "no endpoint was ready within 10m0s (--wait-ready): http://127.0.0.1:1: not probed yet; http://127.0.0.1:2") {
		t.Fatalf("at the deadline: %v", err)
	}

	go func() { done <- p.WaitReady(context.Background(), time.Minute) }()
	pending(t, fake, 2)
	p.setReady(1, 4)
	// The others were never probed: the run waits ReadyGrace for their
	// first probes, no more.
	pending(t, fake, 3)
	fake.Advance(ReadyGrace - time.Nanosecond)
	select {
	case err := <-done:
		t.Fatalf("returned %v before the others' first probes or the grace", err)
	case <-time.After(10 * time.Millisecond):
	}
	fake.Advance(time.Nanosecond)
	if err := waitErr(t, done); err != nil {
		t.Fatalf("with an endpoint ready: %v", err)
	}
	if fake.Pending() != 0 {
		t.Errorf("%d timers left set", fake.Pending())
	}
}

// probedAll marks every endpoint probed once.
func (p *Pool) probedAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ep := range p.eps {
		ep.probed = true
	}
}

// setProbe records what endpoint i's last probe saw.
func (p *Pool) setProbe(i int, note string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.eps[i].lastProbe = note
	p.broadcastLocked()
}

// waitLog waits (with a bound) until the log holds want, n times.
func waitLog(t *testing.T, l *logs, want string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(l.text(), want) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the log does not hold %q %d times:\n%s", want, n, l.text())
		}
		time.Sleep(time.Millisecond)
	}
}

// Waiting for servers that are not up, on virtual time: a line every
// WaitNotice naming each endpoint with what its last probe saw (refused,
// 503 while loading, no answer) and how long until it gives up; once one
// is ready the run goes on, and at the first minute the endpoints still
// not ready are named in a warning, with their reasons; NeverReady gives
// the summary its reason for each.
func TestWaitReadySaysWhy(t *testing.T) {
	p, fake, l := testPool(t, 4, Config{WaitNotice: 10 * time.Second, ProbeInterval: 2 * time.Second})
	start := fake.Now()
	p.setProbe(0, "/health: connection refused")
	p.setProbe(1, "/health 503 (starting)")
	p.setProbe(2, "/health: no answer within 10s")
	done := make(chan error, 1)
	go func() { done <- p.WaitReady(context.Background(), 10*time.Minute) }()
	pending(t, fake, 2)
	fake.Advance(2 * time.Second)
	why := "http://127.0.0.1:1: /health: connection refused; http://127.0.0.1:2: /health 503 (starting); http://127.0.0.1:3: /health: no answer within 10s; http://127.0.0.1:4: not probed yet"
	waitLog(t, l, "waiting for one of 4 endpoints to be ready (giving up in 9m58s, --wait-ready 10m0s): "+why, 1)
	for i, left := range []string{"9m48s", "9m38s", "9m28s"} {
		pending(t, fake, 2) // the deadline and the next notice
		fake.Advance(10 * time.Second)
		waitLog(t, l, "waiting for one of 4 endpoints to be ready (giving up in "+left+", --wait-ready 10m0s)", 1)
		if n := strings.Count(l.text(), "waiting for"); n != i+2 {
			t.Fatalf("%d waiting lines after %v, want %d:\n%s", n, fake.Now().Sub(start), i+2, l.text())
		}
	}
	pending(t, fake, 2)
	p.probedAll()
	p.setReady(3, 4)
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
	stop := p.WarnNotReady(start, time.Minute)
	defer stop()
	fake.Advance(time.Minute - fake.Now().Sub(start) - time.Nanosecond)
	if strings.Contains(l.text(), "warning") {
		t.Fatalf("warned before the first minute:\n%s", l.text())
	}
	p.setReady(2, 4) // the slow one came up in time
	fake.Advance(time.Nanosecond)
	waitLog(t, l, "warning: 2 of 4 endpoints not ready after 1m0s (still probed every 2s; each joins once ready): "+
		"http://127.0.0.1:1: /health: connection refused; http://127.0.0.1:2: /health 503 (starting)", 1)
	// The warning is said again, every WaitNotice, when what the probes
	// see changed: the server that refused connections now loads.
	pending(t, fake, 1)
	fake.Advance(10 * time.Second)
	if n := strings.Count(l.text(), "warning"); n != 1 {
		t.Fatalf("%d warnings with nothing changed:\n%s", n, l.text())
	}
	p.setProbe(0, "/health 503 (starting: Loading model)")
	pending(t, fake, 1)
	fake.Advance(10 * time.Second)
	waitLog(t, l, "warning: 2 of 4 endpoints still not ready after 1m20s (still probed every 2s; each joins once ready): "+
		"http://127.0.0.1:1: /health 503 (starting: Loading model); http://127.0.0.1:2: /health 503 (starting)", 1)
	for i, want := range []string{"/health 503 (starting: Loading model)", "/health 503 (starting)", "", ""} {
		got, never := p.NeverReady(i)
		if never != (want != "") || got != want {
			t.Errorf("endpoint %d: NeverReady %q, %v; want %q", i, got, never, want)
		}
	}
}

// WaitAll goes on with the endpoints that are ready at the deadline.
func TestWaitAll(t *testing.T) {
	p, fake, l := testPool(t, 2, Config{})
	p.setReady(1, 4)
	ready := make(chan []int, 1)
	done := make(chan error, 1)
	go func() {
		r, err := p.WaitAll(context.Background(), time.Minute)
		ready <- r
		done <- err
	}()
	pending(t, fake, 1)
	fake.Advance(time.Minute)
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
	if r := <-ready; fmt.Sprint(r) != "[1]" || !strings.Contains(l.text(), "1 of 2 endpoints are not ready after 1m0s (--wait-ready); measuring the 1 that are: http://127.0.0.1:1: not probed yet") {
		t.Errorf("ready %v, logs %q", r, l.text())
	}
	// All of them ready: at once.
	p.setReady(0, 4)
	if r, err := p.WaitAll(context.Background(), time.Minute); err != nil || fmt.Sprint(r) != "[0 1]" {
		t.Errorf("all ready: %v %v", r, err)
	}
}

// With every endpoint out of service, Acquire waits --down-timeout (from
// the moment the last one went) and then gives up.
func TestDownTimeout(t *testing.T) {
	p, fake, _ := testPool(t, 2, Config{DownTimeout: time.Hour})
	fake.Advance(10 * time.Minute) // down since the start
	done := make(chan error, 1)
	go func() {
		_, err := p.Acquire(context.Background(), nil)
		done <- err
	}()
	pending(t, fake, 1)
	fake.Advance(50*time.Minute - time.Nanosecond)
	select {
	case err := <-done:
		t.Fatalf("gave up %v early: %v", time.Nanosecond, err)
	case <-time.After(10 * time.Millisecond):
	}
	fake.Advance(time.Nanosecond)
	if err := waitErr(t, done); !errors.Is(err, ErrAllDown) || !strings.Contains(err.Error(), "every endpoint has been down for 1h0m0s (--down-timeout)") {
		t.Fatalf("at the timeout: %v", err)
	}
	// An endpoint back in service ends the wait.
	p, fake, _ = testPool(t, 2, Config{DownTimeout: time.Hour})
	go func() {
		_, err := p.Acquire(context.Background(), nil)
		done <- err
	}()
	pending(t, fake, 1)
	p.setReady(0, 1)
	if err := waitErr(t, done); err != nil {
		t.Fatalf("with an endpoint back: %v", err)
	}
}

// A slower endpoint gets proportionally less of the work under
// least-outstanding; round-robin hands every endpoint the same share. The
// pool's policies at work on the simulator's scheduler model, on virtual
// time: three servers of 4 slots, one three times slower, 300 answers of
// 16 tokens.
func TestHeterogeneousFleetShares(t *testing.T) {
	for _, policy := range []Policy{LeastOutstanding, RoundRobin} {
		t.Run(string(policy), func(t *testing.T) {
			p, _, _ := testPool(t, 3, Config{Policy: policy})
			for i := range 3 {
				p.setReady(i, 4)
			}
			slow := llmsim.DefaultTiming()
			slow.Slow = 3
			sim := simfleet.New([]llmsim.Timing{slow, llmsim.DefaultTiming(), llmsim.DefaultTiming()}, 4)
			const answers = 300
			sent := 0
			var done, most [3]int
			dispatch := func() {
				for sent < answers {
					ep := p.TryAcquire(nil)
					if ep == nil {
						return
					}
					sim.Submit(ep.Index(), &llmsim.Seq{PromptTokens: 20, Target: min(llmsim.NaturalLength(uint64(sent), 0), 16), Ref: ep})
					sent++
					for i, v := range p.View() {
						most[i] = max(most[i], v.Inflight)
					}
				}
			}
			dispatch()
			for {
				st, ok := sim.Next()
				if !ok {
					break
				}
				if r := sim.Running(st.Endpoint); r > 4 {
					t.Fatalf("endpoint %d runs %d at once, more than its 4 slots", st.Endpoint, r)
				}
				for _, s := range st.Finished {
					ep := s.Ref.(*Endpoint)
					p.Release(ep)
					done[ep.Index()]++
				}
				dispatch()
			}
			if done[0]+done[1]+done[2] != answers {
				t.Fatalf("answers done %v, want %d in all", done, answers)
			}
			share := float64(done[0]) / answers
			t.Logf("%s: slow endpoint share %.2f, fast %.2f and %.2f", policy, share, float64(done[1])/answers, float64(done[2])/answers)
			if policy == LeastOutstanding && (share > 0.20 || share < 0.10) {
				t.Errorf("slow endpoint did %.0f%% of the work, want about 1/7 (14%%)", 100*share)
			}
			if policy == RoundRobin && done[0] != answers/3 {
				t.Errorf("round-robin gave the slow endpoint %d of %d answers, want a third", done[0], answers)
			}
			// The cap is the server's slots: never more in flight, and all used.
			if most != [3]int{4, 4, 4} {
				t.Errorf("most in flight per endpoint %v, want every endpoint's 4 slots full", most)
			}
		})
	}
}

// An endpoint that answers nothing but 429 for --down-timeout is taken out
// of service; any other answer clears the count; once every endpoint is in
// that state Acquire ends the run with ErrRateLimited, on virtual time.
func TestRateLimitedEndpoints(t *testing.T) {
	p, fake, l := testPool(t, 2, Config{DownTimeout: 15 * time.Second, ProbeInterval: time.Hour})
	p.setReady(0, 4)
	p.setReady(1, 4)
	ep0, ep1 := p.eps[0], p.eps[1]
	p.answered(ep0, 429)
	p.answered(ep1, 429)
	fake.Advance(14 * time.Second)
	p.answered(ep0, 429)
	p.answered(ep1, 200) // endpoint 1 answers: its count starts again
	if v := p.View(); v[0].State != StateReady || v[1].State != StateReady {
		t.Fatalf("out of service before --down-timeout: %v %v", v[0].State, v[1].State)
	}
	fake.Advance(time.Second)
	p.answered(ep0, 429)
	if v := p.View(); v[0].State != StateDown || v[1].State != StateReady {
		t.Fatalf("after 15s of 429s: %v %v", v[0].State, v[1].State)
	}
	if !strings.Contains(l.text(), "http://127.0.0.1:1 has answered nothing but 429 Too Many Requests for 15s (--down-timeout)") {
		t.Fatalf("logs: %s", l.text())
	}
	if ep, err := p.Acquire(context.Background(), nil); err != nil || ep != ep1 {
		t.Fatalf("with one endpoint still answering: %v %v", ep, err)
	}
	p.Release(ep1)
	p.answered(ep1, 429)
	fake.Advance(15 * time.Second)
	_, err := p.Acquire(context.Background(), nil)
	if !errors.Is(err, ErrRateLimited) || !strings.Contains(err.Error(), "refusing every request for quota or rate limit") {
		t.Fatalf("every endpoint refusing: %v", err)
	}
	// Without --down-timeout nothing is taken out.
	p, fake, _ = testPool(t, 1, Config{})
	p.setReady(0, 1)
	p.answered(p.eps[0], 429)
	fake.Advance(24 * time.Hour)
	p.answered(p.eps[0], 429)
	if ep, err := p.Acquire(context.Background(), nil); err != nil || ep == nil {
		t.Fatalf("--down-timeout 0: %v", err)
	}
}

// An endpoint that answers 429 or 503 is left alone for its Retry-After,
// at most MaxPause: new requests go to the others, or wait until the
// pause ends, on virtual time.
func TestPauseAfterRefusal(t *testing.T) {
	p, fake, _ := testPool(t, 2, Config{MaxPause: time.Minute})
	p.setReady(0, 1)
	p.setReady(1, 1)
	p.pause(p.eps[0], time.Hour) // capped at a minute
	ep, err := p.Acquire(context.Background(), nil)
	if err != nil || ep != p.eps[1] {
		t.Fatalf("with endpoint 0 paused: %v %v", ep, err)
	}
	done := make(chan error, 1)
	go func() {
		ep, err := p.Acquire(context.Background(), nil)
		if err == nil && ep != p.eps[0] {
			err = fmt.Errorf("got endpoint %d", ep.Index())
		}
		done <- err
	}()
	pending(t, fake, 1) // the wait until the pause ends
	fake.Advance(time.Minute - time.Nanosecond)
	select {
	case err := <-done:
		t.Fatalf("acquired during the pause: %v", err)
	case <-time.After(10 * time.Millisecond):
	}
	fake.Advance(time.Nanosecond)
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
	// Without MaxPause nothing is paused.
	p, _, _ = testPool(t, 1, Config{})
	p.setReady(0, 1)
	p.pause(p.eps[0], time.Hour)
	if ep := p.TryAcquire(nil); ep == nil {
		t.Fatal("paused with MaxPause 0")
	}
}
