package fleet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/fakeclock"
	"tokenmill/lib/cli"
	"tokenmill/lib/openai"
)

// failer plays infer's side of a failing endpoint on a test pool: every
// attempt is judged by the detector first, then counted by the pool, as
// infer's dispatcher does; each attempt is another prompt's unless the
// test says.
type failer struct {
	t      *testing.T
	p      *Pool
	s      *Systematic
	prompt int
}

// spell puts endpoint i back into service (as its probe would) and fails
// n attempts on it with f, stopping at the first that holds it out or
// ends the run; it returns that error and how many attempts were made.
func (fl *failer) spell(i, n int, f *Failure) (*FailingError, int) {
	fl.p.setReady(i, 8)
	return fl.fail(i, n, f)
}

// fail fails n attempts on endpoint i with f, without bringing it back.
func (fl *failer) fail(i, n int, f *Failure) (*FailingError, int) {
	ep := fl.p.Endpoints()[i]
	for k := 1; k <= n; k++ {
		fl.prompt++
		err := fl.s.Attempt(ep, fmt.Sprintf("p%d", fl.prompt), f)
		if f.Blame {
			fl.p.Failed(ep, f.Down, f.Error())
		}
		if err != nil || fl.held(i) {
			return err, k
		}
	}
	return nil, n
}

func (fl *failer) held(i int) bool {
	fl.s.mu.Lock()
	defer fl.s.mu.Unlock()
	st := fl.s.eps[fl.p.Endpoints()[i]]
	return st != nil && st.held
}

func (fl *failer) state(i int) State { return fl.p.View()[i].State }

var (
	fail500 = &Failure{Status: 500, Message: "Internal server error: llmsim injected failure", Retriable: true, Blame: true}
	other   = &Failure{Status: 500, Message: "CUDA error: out of memory", Retriable: true, Blame: true}
)

// An endpoint that answers the same 500 to every request, though its
// health brings it back after each ejection, is held out of service after
// its fourth spell of service; the run goes on with the others. Held, it
// is probed again after a minute, and failing alike at once then, held
// twice as long; a success ends it all.
func TestFailingEndpointHeld(t *testing.T) {
	p, fake, l := testPool(t, 2, Config{EjectAfter: 5, ProbeInterval: 2 * time.Second})
	p.setReady(1, 8)
	fl := &failer{t: t, p: p, s: NewSystematic(p, openai.APIChat, "m")}
	for spell := 1; spell <= 3; spell++ {
		if err, n := fl.spell(0, 5, fail500); err != nil || n != 5 || fl.held(0) {
			t.Fatalf("spell %d: held after %d failures (%v); want only ejected by the pool", spell, n, err)
		}
		if fl.state(0) != StateDown {
			t.Fatalf("spell %d: not ejected after 5 failures", spell)
		}
	}
	if err, n := fl.spell(0, 5, fail500); err != nil || n != 1 || !fl.held(0) || fl.state(0) != StateDown {
		t.Fatalf("spell 4: held %v after %d failures, state %v, err %v; want held at the first, the run going on", fl.held(0), n, fl.state(0), err)
	}
	want := "http://127.0.0.1:1 is out of service for 1m0s: it answers every request alike (HTTP 500: Internal server error: llmsim injected failure; 16 requests in a row), though its /health (else /v1/models) brought it back 3 times; probed again after that"
	if !strings.Contains(l.text(), want) {
		t.Fatalf("no %q in:\n%s", want, l.text())
	}
	// Answers to requests sent before it was held change nothing.
	if err, _ := fl.fail(0, 3, fail500); err != nil || !fl.held(0) {
		t.Fatalf("late answers: held %v, %v", fl.held(0), err)
	}

	probed := "http://127.0.0.1:1: probing /health (else /v1/models) again after 1m0s out of service for failing every request alike"
	fake.Advance(time.Minute - time.Second)
	if fl.held(0) == false || strings.Contains(l.text(), probed) {
		t.Fatal("probed again before its hold was over")
	}
	fake.Advance(time.Second)
	if fl.held(0) || !strings.Contains(l.text(), probed) {
		t.Fatalf("not probed again after its hold:\n%s", l.text())
	}
	// Back, and failing alike at once: held again, twice as long.
	if err, n := fl.spell(0, 5, fail500); err != nil || n != 1 || !fl.held(0) {
		t.Fatalf("back after the hold: held %v after %d failures, %v", fl.held(0), n, err)
	}
	if !strings.Contains(l.text(), "is out of service for 2m0s") {
		t.Fatalf("the second hold is not twice the first:\n%s", l.text())
	}
	fake.Advance(2 * time.Minute)
	p.setReady(0, 8)
	fl.s.SucceededOn(p.Endpoints()[0])
	for spell := 1; spell <= 3; spell++ {
		if err, _ := fl.spell(0, 5, fail500); err != nil || fl.held(0) {
			t.Fatalf("after a success, spell %d: held (%v)", spell, err)
		}
	}
}

// With every endpoint held (here the only one), no endpoint is left: the
// error names each with its answer, the message bounded.
func TestFailingEndpointEndsTheRun(t *testing.T) {
	p, _, _ := testPool(t, 1, Config{EjectAfter: 5, ProbeInterval: 2 * time.Second})
	long := &Failure{Status: 500, Message: strings.Repeat("x", 5000), Retriable: true, Blame: true}
	for _, f := range []*Failure{fail500, long} {
		fl := &failer{t: t, p: p, s: NewSystematic(p, openai.APIChat, "m")}
		var err *FailingError
		for spell := 1; spell <= 4 && err == nil; spell++ {
			err, _ = fl.spell(0, 5, f)
			if err != nil && spell < 4 {
				t.Fatalf("ended in spell %d: %v", spell, err)
			}
		}
		if err == nil || err.Endpoint != "http://127.0.0.1:1" || err.Status != 500 || err.Message != cli.Escape(f.Message, failingMessage) || len(err.Message) > failingMessage+40 {
			t.Fatalf("%+v", err)
		}
		want := "no endpoint is left: each fails every request alike: http://127.0.0.1:1 answered 16 requests in a row alike (HTTP 500: " + err.Message + "), though its /health (else /v1/models) brought it back 3 times"
		if err.Error() != want {
			t.Errorf("error\n%s\nwant\n%s", err, want)
		}
		fl.s.SucceededOn(p.Endpoints()[0]) // probed back at once: ready for the next case
		p.setReady(0, 8)
	}
}

// What is not an endpoint failing every request alike: each case runs four
// spells of five failures, ejected after each but the last, and must not
// be held.
func TestFailingEndpointNotJudged(t *testing.T) {
	busy := &Failure{Status: 503, Message: "Loading model", Retriable: true}
	closed := &Failure{Message: "the server closed the connection before answering", Retriable: true, Blame: true}
	tests := []struct {
		name string
		// spell k (1-4) fails with f(k, attempt)
		f func(k, i int) *Failure
		// success after spell k (0: none)
		success   int
		onePrompt bool
	}{
		{"a success between", func(k, i int) *Failure { return fail500 }, 2, false},
		{"another answer in one spell", func(k, i int) *Failure {
			if k == 3 && i == 2 {
				return other
			}
			return fail500
		}, 0, false},
		{"503 while loading", func(k, i int) *Failure { return busy }, 0, false},
		{"dropped connections", func(k, i int) *Failure { return closed }, 0, false},
		{"one prompt", func(k, i int) *Failure { return fail500 }, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _, _ := testPool(t, 1, Config{EjectAfter: 5, ProbeInterval: 2 * time.Second})
			fl := &failer{t: t, p: p, s: NewSystematic(p, openai.APIChat, "m")}
			ep := p.Endpoints()[0]
			for k := 1; k <= 4; k++ {
				p.setReady(0, 8)
				for i := 1; i <= 5; i++ {
					f := tt.f(k, i)
					if tt.onePrompt {
						fl.prompt = 0
					}
					if err, _ := fl.fail(0, 1, f); err != nil || fl.held(0) {
						t.Fatalf("spell %d, failure %d: held (%v)", k, i, err)
					}
					if !f.Blame { // the pool does not eject for it: as if it had
						p.Failed(ep, true, "test")
					}
				}
				if k == tt.success {
					fl.s.SucceededOn(ep)
				}
			}
		})
	}
	// Never ejected (--eject-after larger than the streak): never judged.
	p, _, _ := testPool(t, 1, Config{EjectAfter: 1000, ProbeInterval: 2 * time.Second})
	fl := &failer{t: t, p: p, s: NewSystematic(p, openai.APIChat, "m")}
	if err, _ := fl.spell(0, 500, fail500); err != nil || fl.held(0) {
		t.Fatalf("500 failures without an ejection: held (%v)", err)
	}
}

// A burst of identical failures shorter than EjectAfter*3+1 is never
// judged, however it falls across spells: the shortest streak judged.
func TestFailingShortestStreak(t *testing.T) {
	p, _, _ := testPool(t, 1, Config{EjectAfter: 5, ProbeInterval: 2 * time.Second})
	fl := &failer{t: t, p: p, s: NewSystematic(p, openai.APIChat, "m")}
	total := 0
	for spell := 1; spell <= 3; spell++ {
		_, n := fl.spell(0, 5, fail500)
		total += n
	}
	if total != 15 || fl.held(0) {
		t.Fatalf("%d failures in three spells, held %v", total, fl.held(0))
	}
	if err, n := fl.spell(0, 5, fail500); n != 1 || err == nil {
		t.Fatalf("the 16th failure: %d attempts, %v", n, err)
	}
}

// A hold's timer ends with the pool: a process that goes on after a run
// (infer run in-process) keeps no pool alive for up to half an hour.
func TestFailingHoldEndsWithThePool(t *testing.T) {
	fake := fakeclock.New(epoch)
	targets, err := ParseEndpoints("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := NewPool(ctx, targets, Config{EjectAfter: 5, ProbeInterval: 2 * time.Second, Clock: fake})
	s := NewSystematic(p, openai.APIChat, "m")
	ep := p.Endpoints()[0]
	var end *FailingError
	for spell := 0; spell < 4 && end == nil; spell++ {
		// Taken out and brought back by hand: no prober sets a timer.
		p.mu.Lock()
		p.setStateLocked(ep, StateDown)
		ep.stats.Ejections.Add(1)
		p.mu.Unlock()
		p.setReady(0, 8)
		for i := 0; i < 5 && end == nil; i++ {
			end = s.Attempt(ep, fmt.Sprintf("s%dp%d", spell, i), fail500)
		}
	}
	if end == nil || fake.Pending() != 1 {
		t.Fatalf("not held (%v), %d timers set", end, fake.Pending())
	}
	cancel()
	pending(t, fake, 0)
}
