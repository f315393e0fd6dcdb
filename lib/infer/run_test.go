package infer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tokenmill/internal/fakeclock"
	"tokenmill/internal/llmsim"
	"tokenmill/lib/cli"
)

// dirState is what a directory holds: every file's name and content.
func dirState(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		names = append(names, fmt.Sprintf("%s %q", e.Name(), b))
	}
	sort.Strings(names)
	return strings.Join(names, "\n")
}

// settledGoroutines waits until the number of goroutines stops falling
// and returns it.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for i := 0; i < 50; i++ {
		time.Sleep(20 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m >= n && i >= 5 {
			return m
		}
		n = min(n, m)
	}
	return n
}

// noGoroutinesLeft fails the test unless the goroutines are back to at
// most base within the bound (fasthttp's idle-connection cleaner may
// outlive a run by its 3-second idle time), with a dump of those left.
func noGoroutinesLeft(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			var b bytes.Buffer
			pprof.Lookup("goroutine").WriteTo(&b, 1)
			t.Fatalf("%d goroutines 10s after the run returned, %d before:\n%s", runtime.NumGoroutine(), base, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hangServer answers /health and server info as SGLang does and holds
// every generation request until the client goes away; held counts them.
func hangServer(t *testing.T) (url string, held *atomic.Int64) {
	t.Helper()
	held = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
		case "/get_server_info":
			w.Write([]byte(`{"max_running_requests": 4}`))
		case "/v1/models":
			w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model"}]}`))
		default:
			if r.Method != http.MethodPost {
				http.NotFound(w, r) // a route it does not have
				return
			}
			// Read the body, so that net/http watches the connection and
			// ends the context when the client closes it.
			io.Copy(io.Discard, r.Body)
			held.Add(1)
			<-r.Context().Done()
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, held
}

// Every way Run can end early leaves no goroutine running and no file
// created, emptied or cut: bad flags, an output it refuses, files that
// collide, no endpoint ready, an interrupt before one is. An
// interrupt in the middle of the run leaves no goroutine either.
func TestEarlyReturnsLeaveNothing(t *testing.T) {
	const old = "{\"id\":\"keep\",\"output\":{\"text\":\"precious\"}}\n{\"id\":\"half"
	hang, held := hangServer(t)
	requestsHeld := func() bool { return held.Load() > 0 }
	tests := []struct {
		name    string
		args    func(dir string) []string
		cancel  func() bool // interrupt once this holds (nil: never)
		code    int
		stderr  string
		started bool // the run began: its files may exist
	}{
		{"bad flags", func(string) []string { return []string{"--samples", "0"} }, nil, cli.ExitUsage, "--samples", false},
		{"output exists", func(string) []string { return []string{"-o", "old.jsonl"} }, nil, cli.ExitUsage, "--resume", false},
		{"errors is the output", func(string) []string {
			return []string{"-o", "old.jsonl", "--resume", "--errors", "./old.jsonl"}
		}, nil, cli.ExitUsage, `--errors "./old.jsonl" is the same file as -o "old.jsonl"`, false},
		{"rejects is the output", func(string) []string { return []string{"-o", "new.jsonl", "--rejects", "new.jsonl"} }, nil, cli.ExitUsage, `--rejects "new.jsonl" is the same file as -o "new.jsonl"`, false},
		{"rejects is the errors file", func(string) []string {
			return []string{"-o", "new.jsonl", "--rejects", "new.errors.jsonl"}
		}, nil, cli.ExitUsage, `--rejects "new.errors.jsonl" is the same file as --errors "new.errors.jsonl"`, false},
		{"both on stdout", func(string) []string { return []string{"--rejects", "-"} }, nil, cli.ExitUsage, "-o and --rejects both write to stdout", false},
		{"force and resume", func(string) []string { return []string{"-o", "old.jsonl", "--force", "--resume"} }, nil, cli.ExitUsage, "choose one", false},
		{"no endpoint ready", func(string) []string {
			return []string{"-o", "new.jsonl", "--rejects", "rejects.jsonl", "-e", "127.0.0.1:1", "--wait-ready", "100ms"}
		}, nil, cli.ExitFailure, "no endpoint was ready within 100ms (--wait-ready): http://127.0.0.1:1: /health: connection refused", false},
		{"no endpoint ready, output to replace", func(string) []string {
			return []string{"-o", "old.jsonl", "--force", "-e", "127.0.0.1:1", "--wait-ready", "100ms"}
		}, nil, cli.ExitFailure, "no endpoint was ready within 100ms", false},
		{"interrupted before an endpoint is ready", func(string) []string {
			return []string{"-o", "new.jsonl", "-e", "127.0.0.1:1", "--wait-ready", "1m"}
		}, func() bool { return true }, cli.ExitInterrupted, "", false},
		{"interrupted in the middle of the run", func(string) []string {
			return []string{"-o", "new.jsonl", "-e", hang, "--grace", "50ms", "--metrics-addr", "127.0.0.1:0"}
		}, requestsHeld, cli.ExitInterrupted, "not done 20", true},
	}
	// A first run starts what a process keeps for good (the signal
	// handler's goroutine).
	runInfer(t, 10*time.Second, "", "-e", "127.0.0.1:1", "--samples", "0")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			in, _ := promptSet{n: 20}.write(t, dir, "prompts.jsonl")
			if err := os.WriteFile(filepath.Join(dir, "old.jsonl"), []byte(old), 0o644); err != nil {
				t.Fatal(err)
			}
			before := dirState(t, dir)
			wd, _ := os.Getwd()
			if err := os.Chdir(dir); err != nil {
				t.Fatal(err)
			}
			defer os.Chdir(wd)
			base := settledGoroutines()

			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			if tt.cancel != nil {
				go func() {
					for deadline := time.Now().Add(20 * time.Second); !tt.cancel() && time.Now().Before(deadline); {
						time.Sleep(5 * time.Millisecond)
					}
					cancel(cli.ErrInterrupted)
				}()
			}
			args := append(append([]string{in}, fastFlags...), tt.args(dir)...)
			if !strings.Contains(strings.Join(args, " "), " -e ") {
				args = append(args, "-e", "127.0.0.1:1")
			}
			res := runInferCtx(t, ctx, 30*time.Second, "", args...)
			if res.code != tt.code || !strings.Contains(res.stderr, tt.stderr) {
				t.Fatalf("exit %d, want %d with %q:\n%s", res.code, tt.code, tt.stderr, res.stderr)
			}
			noGoroutinesLeft(t, base)
			if after := dirState(t, dir); !tt.started && after != before {
				t.Errorf("files before the run:\n%s\nafter it:\n%s", before, after)
			}
		})
	}
}

// --force replaces an existing output once a server is ready; without
// it the output is refused and left as it was.
func TestForceReplaces(t *testing.T) {
	s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 10})
	const old = "{\"id\":\"gone\",\"output\":{\"text\":\"old\"}}\n"
	os.WriteFile(s.out, []byte(old), 0o644)
	res := runWant(t, cli.ExitUsage, s.args()...)
	if !strings.Contains(res.stderr, "already exists and is not empty: add --resume to continue it") || !strings.Contains(res.stderr, "--force") {
		t.Errorf("stderr:\n%s", res.stderr)
	}
	if b, _ := os.ReadFile(s.out); string(b) != old {
		t.Fatalf("the refused output was changed: %q", b)
	}
	runWant(t, cli.ExitOK, s.args("--force")...)
	if acc := s.check(t, 1); acc.ok != 10 {
		t.Fatalf("ok %d", acc.ok)
	}
}

// --rejects - sends rejects to stdout, where they do not mix with
// records written to -o FILE.
func TestRejectsOnStdout(t *testing.T) {
	s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 5})
	f, _ := os.OpenFile(s.in, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("not json\n")
	f.Close()
	res := runWant(t, cli.ExitRejects, s.args("--rejects", "-")...)
	if !strings.Contains(res.stdout, `"reject"`) || strings.Contains(res.stdout, `"output"`) {
		t.Errorf("stdout:\n%s", res.stdout)
	}
	s.check(t, 1)
}

// The run's clock is the pool's: on a fake clock, --wait-ready 10m is
// over when the test moves the clock ten minutes, and nothing is left
// behind.
func TestWaitReadyOnTheRunsClock(t *testing.T) {
	fake := fakeclock.New(simEpoch)
	s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 5})
	before := dirState(t, s.dir)
	done := make(chan result, 1)
	go func() {
		done <- runCommand(t, context.Background(), time.Minute, false, "", &Generate{clock: fake}, s.args("-e", "127.0.0.1:1", "--wait-ready", "10m")...)
	}()
	// The wait's deadline and its notice, and the probe's next try.
	for deadline := time.Now().Add(10 * time.Second); fake.Pending() < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d timers set on the run's clock, want 3", fake.Pending())
		}
	}
	fake.Advance(10 * time.Minute)
	var res result
	select {
	case res = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the run did not end within 20s of its clock passing --wait-ready")
	}
	if res.code != cli.ExitFailure || !strings.Contains(res.stderr, "no endpoint was ready within 10m0s (--wait-ready): http://127.0.0.1:1: /health: connection refused") {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	if after := dirState(t, s.dir); after != before {
		t.Errorf("files before the run:\n%s\nafter it:\n%s", before, after)
	}
}

// An endpoint that never came up is named in the summary with what its
// last probe saw, not shown as an endpoint of 0 slots; the run is done by
// the others.
func TestSummaryNamesEndpointNeverReady(t *testing.T) {
	s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 5})
	dead := "http://127.0.0.1:1"
	r := runCommand(t, context.Background(), time.Minute, false, "", &Generate{}, s.args("-e", endpointsFlag(s.fleet.URLs())+","+dead, "--max-tokens", "8")...)
	if r.code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if want := "infer:   " + dead + ": never ready, no answers (last probe: /health: connection refused)"; !strings.Contains(r.stderr, want) {
		t.Errorf("the summary does not say %q:\n%s", want, r.stderr)
	}
	s.check(t, 1)
}
