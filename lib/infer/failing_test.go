package infer

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"tokenmill/internal/fakeclock"
	"tokenmill/internal/llmsim"
	"tokenmill/lib/cli"
)

// llmsim's answer to every request under the fail fault.
const simFail = "Internal server error: llmsim injected failure"

// Endpoints that answer the same 500 to every request, their health ready
// throughout: each is taken out as failing alike after its health brought
// it back three times, the run ends (exit 1) naming each with its answer,
// and every answer (in flight, backing off, queued or never read) is in
// the errors file as server_failing, none in the output; a --resume on a
// healthy fleet answers them all.
func TestServerFailingEveryRequest(t *testing.T) {
	tests := []struct {
		name      string
		flavor    llmsim.Flavor
		endpoints int
		prompts   int
	}{
		{"one llama.cpp server", llmsim.FlavorLlamaCpp, 1, 20},
		{"two SGLang servers", llmsim.FlavorSGLang, 2, 20},
		{"most of the input never sent", llmsim.FlavorLlamaCpp, 1, 2000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t, llmsim.Config{Instant: true, Flavor: tt.flavor, Faults: llmsim.Faults{FailRate: 1}}, tt.endpoints, promptSet{n: tt.prompts})
			res := runWant(t, cli.ExitFailure, s.args("--max-tokens", "8")...)
			for _, u := range s.fleet.URLs() {
				held := u + " is out of service for 1m0s: it answers every request alike (HTTP 500: " + simFail + "; "
				named := u + " answered "
				if !strings.Contains(res.stderr, held) || !strings.Contains(res.stderr, named) {
					t.Errorf("stderr does not say %q and %q", held, named)
				}
				if !strings.Contains(res.stderr, "taken out of service 4 times") {
					t.Errorf("%s: not taken out three times by the pool and once for good", u)
				}
			}
			if want := "error: no endpoint is left: each fails every request alike: "; !strings.Contains(res.stderr, want) ||
				!strings.Contains(res.stderr, "every answer not done is in "+s.errs()+" as server_failing, and --resume sends it again") {
				t.Errorf("the run's error is not %q... naming the errors file:\n%s", want, res.stderr)
			}
			acc := s.check(t, 1)
			if acc.ok != 0 || acc.failed != tt.prompts {
				t.Fatalf("ok %d failed %d, want 0 and %d", acc.ok, acc.failed, tt.prompts)
			}
			sent := 0
			for key, g := range acc.errors {
				e := g.Error
				if e.Reason != ReasonServerFailing || e.Status != 500 || e.Message != simFail || !e.Retriable || !strings.HasPrefix(e.Endpoint, "http://127.0.0.1:") {
					t.Fatalf("%s: error %+v", key, e)
				}
				if e.Attempts > 0 {
					sent++
				}
			}
			// Judged long before the prompts used up their retries.
			requests := s.fleet.Stats().Requests
			if limit := int64(min(tt.prompts, 50*tt.endpoints) * 9); requests >= limit {
				t.Errorf("%d requests, as many as every prompt sent its 9 attempts", requests)
			}
			if tt.prompts > 1000 && sent > tt.prompts/2 {
				t.Errorf("%d of %d prompts sent: the rest of the input was not filed unsent", sent, tt.prompts)
			}
			t.Logf("%d requests; %d of %d prompts sent", requests, sent, tt.prompts)
			if tt.name != "one llama.cpp server" {
				return
			}
			healthy := startFleet(t, llmsim.Config{Instant: true}, 1)
			args := append([]string{"-o", s.out, s.in, "-e", healthy.URLs()[0], "--max-tokens", "8", "--resume"}, fastFlags...)
			runWant(t, cli.ExitOK, args...)
			if acc := s.check(t, 1); acc.ok != tt.prompts || acc.failed != 0 {
				t.Fatalf("after --resume: ok %d failed %d", acc.ok, acc.failed)
			}
		})
	}
}

// One endpoint of three answers the same 500 to everything: it is taken
// out as failing alike (the others held back until it is, so that the
// run cannot end first) and every prompt is answered by the other two.
func TestServerFailingOthersGoOn(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{Instant: true, PerEndpoint: map[int]llmsim.Faults{1: {FailRate: 1}}}, 3, promptSet{n: 300})
	bad := s.fleet.URLs()[1]
	s.fleet.Endpoint(0).SetHealthy(false)
	s.fleet.Endpoint(2).SetHealthy(false)
	var stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		// --retries 30: no prompt can use its retries up on the failing
		// endpoint before it is judged, however the attempts fall.
		args := s.args("--max-tokens", "8", "--retries", "30")
		env := &cli.Env{Name: "infer", Stdin: strings.NewReader(""), Stdout: &lockedBuffer{}, Stderr: &stderr}
		done <- cli.Run(context.Background(), env, Description, &Generate{}, args)
	}()
	held := bad + " is out of service for 1m0s: it answers every request alike (HTTP 500: " + simFail + "; "
	waitFor(t, 30*time.Second, "the failing endpoint to be held out", func() bool { return strings.Contains(stderr.String(), held) })
	s.fleet.Endpoint(0).SetHealthy(true)
	s.fleet.Endpoint(2).SetHealthy(true)
	select {
	case code := <-done:
		if code != cli.ExitOK {
			t.Fatalf("exit %d\n%s", code, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("the run did not end within a minute of the others coming up:\n%s", stderr.String())
	}
	acc := s.check(t, 1)
	if acc.ok != 300 || acc.failed != 0 || acc.byEndpoint[bad] != 0 {
		t.Fatalf("ok %d failed %d, %d answered by the failing endpoint", acc.ok, acc.failed, acc.byEndpoint[bad])
	}
	if strings.Contains(stderr.String(), "no endpoint is left") {
		t.Errorf("the run was said to end for failing endpoints:\n%s", stderr.String())
	}
}

// Bursts of the same 500 that end (a server warming up after every
// restart, one out of memory for a while with its health ready) are not a
// server failing every request: the run goes on and answers every prompt.
// Each burst is as long as three spells of service can hold (15 failures
// with --eject-after 5), so the endpoint is taken out and brought back on
// the way, its evidence kept.
func TestServerFailingBurstsRecover(t *testing.T) {
	tests := []struct {
		name   string
		faults llmsim.Faults
		// crashes: the burst comes after restarts
		crashes bool
	}{
		{"after every restart", llmsim.Faults{FailBurst: 12, CrashAfter: 40, RestartAfter: 5 * time.Second, StartupDelay: 2 * time.Second}, true},
		{"out of memory for a while", llmsim.Faults{FailBurst: 15, FailBurstAfter: 20}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t, llmsim.Config{TimeScale: 200, MaxRunning: 8, Faults: tt.faults}, 1, promptSet{n: 150})
			// --retries 40: a prompt lost in every crash and failed in every
			// burst still has attempts left; what is tested is the run.
			res := runWant(t, cli.ExitOK, s.args("--max-tokens", "8", "--retries", "40")...)
			if acc := s.check(t, 1); acc.ok != 150 || acc.failed != 0 {
				t.Fatalf("ok %d failed %d", acc.ok, acc.failed)
			}
			st := s.fleet.Stats()
			if st.Failed < int64(tt.faults.FailBurst) || (st.Crashes == 0) == tt.crashes {
				t.Errorf("the bursts did not happen as set: %+v", st)
			}
			if !strings.Contains(res.stderr, "is out of service after 5 failure(s) (last: HTTP 500: "+simFail+")") {
				t.Errorf("the burst never took the endpoint out: the evidence across spells is untested:\n%s", res.stderr)
			}
			if strings.Contains(res.stderr, "alike") {
				t.Errorf("a burst was judged failing alike:\n%s", res.stderr)
			}
		})
	}
}

// When the run ends for failing endpoints, the backoffs under way are over
// at once (the run does not wait up to --max-backoff to file them), each
// retry is handed on once whether its timer fires too or not, and one set
// from then on is handed on at once; a stop cancels what is left.
func TestRetryTimersFlush(t *testing.T) {
	fake := fakeclock.New(time.Unix(1_700_000_000, 0))
	var rt retryTimers
	var mu sync.Mutex
	fired := map[int]int{}
	fire := func(i int) func() {
		return func() {
			mu.Lock()
			fired[i]++
			mu.Unlock()
		}
	}
	count := func() (n int, each string) {
		mu.Lock()
		defer mu.Unlock()
		var parts []string
		for i := 0; i < 4; i++ {
			n += fired[i]
			parts = append(parts, strconv.Itoa(fired[i]))
		}
		return n, strings.Join(parts, " ")
	}
	rt.after(fake, time.Hour, fire(0))
	rt.after(fake, time.Minute, fire(1))
	fake.Advance(time.Minute)
	if n, each := count(); n != 1 || each != "0 1 0 0" {
		t.Fatalf("after a minute: fired %s", each)
	}
	rt.flush()
	if _, each := count(); each != "1 1 0 0" {
		t.Fatalf("after the flush: fired %s, want the hour's backoff over at once", each)
	}
	rt.after(fake, time.Hour, fire(2))
	if _, each := count(); each != "1 1 1 0" {
		t.Fatalf("a backoff set after the flush: fired %s, want at once", each)
	}
	fake.Advance(2 * time.Hour)
	rt.stop()
	rt.after(fake, time.Second, fire(3))
	fake.Advance(time.Hour)
	if _, each := count(); each != "1 1 1 0" {
		t.Fatalf("at the end: fired %s, want each once and none after the stop", each)
	}
}
