package infer

import (
	"slices"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
	"tokenmill/lib/cli"
	"tokenmill/lib/record"
)

// A fleet that fails in every way still yields every answer exactly once.
func TestFaultsEverythingCompletes(t *testing.T) {
	tests := []struct {
		name   string
		faults llmsim.Faults
		extra  []string
	}{
		{"random 500s", llmsim.Faults{FailRate: 0.2}, nil},
		{"aborts", llmsim.Faults{AbortRate: 0.2}, nil},
		{"dropped connections", llmsim.Faults{DropRate: 0.2}, nil},
		{"hangs", llmsim.Faults{HangRate: 0.05}, []string{"--request-timeout", "300ms"}},
		{"everything at once", llmsim.Faults{FailRate: 0.05, AbortRate: 0.05, DropRate: 0.05, HangRate: 0.02}, []string{"--request-timeout", "300ms"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t, llmsim.Config{TimeScale: 2000, MaxRunning: 8, Faults: tt.faults}, 3, promptSet{n: 200})
			runWant(t, cli.ExitOK, s.args(append([]string{"--max-tokens", "16"}, tt.extra...)...)...)
			acc := s.check(t, 1)
			if acc.ok != 200 {
				t.Fatalf("ok %d, want 200", acc.ok)
			}
			st := s.fleet.Stats()
			faulted := st.Failed + st.Aborted + st.Dropped + st.Hung
			if faulted == 0 {
				t.Fatalf("no fault was injected: %+v", st)
			}
			retried := 0
			for _, g := range acc.outputs {
				retried += g.Output.Attempts - 1
			}
			// Every faulted request was tried again, and nothing else was.
			if int64(retried) < faulted {
				t.Errorf("%d faulted requests but only %d retries recorded in output.attempts", faulted, retried)
			}
			// With --request-timeout, an attempt the client gave up on may
			// never have been read by a loaded server: it is a retry the
			// fleet did not see. Every other attempt reached it.
			switch timeouts := slices.Contains(tt.extra, "--request-timeout"); {
			case !timeouts && st.Requests != int64(200+retried):
				t.Errorf("fleet saw %d requests, want 200 answers + %d retries", st.Requests, retried)
			case timeouts && (st.Requests > int64(200+retried) || st.Requests < 200+faulted):
				t.Errorf("fleet saw %d requests, want from 200 answers + %d faulted to 200 + %d retries", st.Requests, faulted, retried)
			}
		})
	}
}

// An endpoint that crashes mid-run and comes back, another that is
// crashed and restarted by hand: every answer arrives once.
func TestCrashAndRestart(t *testing.T) {
	t.Parallel()
	// Slow enough (a request takes about 12ms) that the run outlasts
	// endpoint 1's startup delay (20ms) and its restart (100ms).
	s := newSetup(t, llmsim.Config{TimeScale: 100, MaxRunning: 8, PerEndpoint: map[int]llmsim.Faults{
		1: {CrashAfter: 40, RestartAfter: 10 * time.Second, StartupDelay: 2 * time.Second},
	}}, 3, promptSet{n: 600})
	fleet := s.fleet
	done := make(chan result, 1)
	go func() { done <- runInfer(t, time.Minute, "", s.args("--max-tokens", "32")...) }()
	ep2 := fleet.Endpoint(2)
	waitFor(t, 20*time.Second, "endpoint 2 to serve requests", func() bool { return ep2.Stats().Requests > 20 })
	ep2.Crash()
	time.Sleep(150 * time.Millisecond)
	if err := ep2.Restart(); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	acc := s.check(t, 1)
	if acc.ok != 600 {
		t.Fatalf("ok %d", acc.ok)
	}
	if st := fleet.Endpoint(1).Stats(); st.Crashes == 0 || st.Restarts == 0 || st.Completed <= 40 {
		t.Errorf("endpoint 1 did not crash, come back and work again: %+v", st)
	}
	if !strings.Contains(res.stderr, "out of service") {
		t.Errorf("no endpoint was reported out of service:\n%s", res.stderr)
	}
	// The endpoints came back and took work again after their crash.
	for _, i := range []int{1, 2} {
		if acc.byEndpoint[fleet.Endpoint(i).URL()] == 0 {
			t.Errorf("endpoint %d answered nothing", i)
		}
	}
}

// With every endpoint down, work pauses without using up retries, and
// goes on when they come back.
func TestAllEndpointsDownThenBack(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{TimeScale: 2000, MaxRunning: 4}, 2, promptSet{n: 300})
	fleet := s.fleet
	done := make(chan result, 1)
	go func() { done <- runInfer(t, time.Minute, "", s.args("--max-tokens", "32", "--retries", "2")...) }()
	waitFor(t, 20*time.Second, "some answers", func() bool { return fleet.Stats().Completed > 30 })
	fleet.Endpoint(0).Crash()
	fleet.Endpoint(1).Crash()
	if c := fleet.Stats().Completed; c >= 300 {
		t.Fatalf("all %d answers were done before the fleet went down", c)
	}
	// Far longer than --retries 2 with a 50ms backoff would last.
	time.Sleep(600 * time.Millisecond)
	for i := 0; i < 2; i++ {
		if err := fleet.Endpoint(i).Restart(); err != nil {
			t.Fatal(err)
		}
	}
	res := <-done
	if res.code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	acc := s.check(t, 1)
	if acc.ok != 300 || acc.failed != 0 {
		t.Fatalf("ok %d failed %d: a pause used up retries", acc.ok, acc.failed)
	}
	if n := strings.Count(res.stderr, "is out of service"); n < 2 {
		t.Errorf("%d endpoints reported out of service, want both:\n%s", n, res.stderr)
	}
}

// A prompt longer than the context SGLang states at start is an error
// record prompt_too_long with its tokens (counted by the server's
// tokenizer), never sent: the fleet sees no bad request; the rest are
// answered. (Learning the context from refusals, where no server states
// it, is TestFitContextLearnsFromRefusals.)
func TestOverlongPromptIsPermanent(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{TimeScale: 2000, MaxRunning: 8, ContextLength: 200}, 2, promptSet{n: 50})
	lengthen(t, s, 3, 17, 42)
	runWant(t, cli.ExitRejects, s.args("--max-tokens", "16")...)
	acc := s.check(t, 1)
	if acc.ok != 47 || acc.failed != 3 {
		t.Fatalf("ok %d failed %d", acc.ok, acc.failed)
	}
	for key, g := range acc.errors {
		e := g.Error
		if e.Status != 0 || e.Attempts != 0 || !strings.Contains(e.Message, "leave fewer than --min-answer-tokens") ||
			e.Retriable || e.Reason != record.ReasonPromptTooLong || e.PromptTokens < 200 {
			t.Errorf("%s: error %+v", key, e)
		}
	}
	if bad := s.fleet.Stats().BadRequests; bad != 0 {
		t.Errorf("the fleet saw %d bad requests: a prompt too long was sent", bad)
	}
}

// Both policies through the real HTTP path, on a fleet with a slower
// endpoint: every answer exactly once, and never more requests running
// on a server than its slots. (The policies' shares of the work are
// measured on virtual time, in lib/fleet's TestHeterogeneousFleetShares.)
func TestPoliciesKeepTheCap(t *testing.T) {
	for _, policy := range []string{"least-outstanding", "round-robin"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t, llmsim.Config{TimeScale: 500, MaxRunning: 4, PerEndpoint: map[int]llmsim.Faults{0: {Slow: 3}}}, 3, promptSet{n: 300})
			fleet := s.fleet
			runWant(t, cli.ExitOK, s.args("--max-tokens", "16", "--queue-depth", "0", "--policy", policy)...)
			if acc := s.check(t, 1); acc.ok != 300 {
				t.Fatalf("ok %d", acc.ok)
			}
			for i := 0; i < 3; i++ {
				if m := fleet.Endpoint(i).Stats().MaxRunning; m > 4 {
					t.Errorf("endpoint %d ran %d at once, more than its 4 slots", i, m)
				}
			}
		})
	}
}

// Nothing answering at start, or everything gone for longer than
// --down-timeout: the run stops with exit 1 and says why.
func TestGivesUp(t *testing.T) {
	t.Parallel()
	t.Run("never ready", func(t *testing.T) {
		t.Parallel()
		s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 5})
		res := runWant(t, cli.ExitFailure, s.args("-e", "127.0.0.1:1", "--wait-ready", "200ms")...)
		if !strings.Contains(res.stderr, "no endpoint was ready within 200ms (--wait-ready)") {
			t.Fatal(res.stderr)
		}
	})
	t.Run("down too long", func(t *testing.T) {
		t.Parallel()
		s := newSetup(t, llmsim.Config{TimeScale: 50, MaxRunning: 4}, 1, promptSet{n: 200})
		fleet, lines := s.fleet, s.lines
		done := make(chan result, 1)
		go func() {
			done <- runInfer(t, time.Minute, "", s.args("--max-tokens", "16", "--down-timeout", "300ms")...)
		}()
		waitFor(t, 20*time.Second, "some answers", func() bool { return fleet.Stats().Completed > 10 })
		fleet.Endpoint(0).Crash()
		res := <-done
		if res.code != cli.ExitFailure || !strings.Contains(res.stderr, "every endpoint has been down for 300ms") {
			t.Fatalf("exit %d\n%s", res.code, res.stderr)
		}
		// What was done is kept, and nothing else was written.
		outs := readRecords(t, s.out)
		if len(outs) == 0 || len(outs) >= 200 || !strings.Contains(res.stderr, "run again with --resume") {
			t.Fatalf("%d records\n%s", len(outs), res.stderr)
		}
		seen := map[string]bool{}
		for _, g := range outs {
			if _, ok := lines[g.ID.Text]; !ok || seen[g.ID.Text] {
				t.Fatalf("unknown or repeated id %s", g.ID.Text)
			}
			seen[g.ID.Text] = true
		}
		if errs := readRecords(t, s.errs()); len(errs) != 0 {
			t.Errorf("%d error records: an outage is not the prompts' fault", len(errs))
		}
	})
}

// lengthen makes the prompts with the given numbers far longer than a
// 200-token context.
func lengthen(t testing.TB, s *setup, nums ...int) {
	t.Helper()
	for _, i := range nums {
		id := idOf(i)
		s.lines[id] = strings.Replace(s.lines[id], "in a few words.", strings.Repeat("and more ", 200)+"in a few words.", 1)
	}
	rewrite(t, s.in, s.lines)
}
