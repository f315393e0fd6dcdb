package chaos

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/testbin"
)

// litterTool is a tool with every kind of file it writes named: its
// arguments before the input, and the names it may leave after a run
// that finished (exit 0 or 3). A run that was refused, failed or was
// interrupted leaves none of them (but infer's -o, continued by --resume).
type litterTool struct {
	name    string
	args    []string
	outputs []string
	kept    []string // left even when interrupted: infer's -o
}

func litterTools(endpoint string) []litterTool {
	return []litterTool{
		{"extract", []string{"-o", "out.jsonl", "--rejects", "rej.jsonl"}, []string{"out.jsonl", "rej.jsonl"}, nil},
		{"dedup", []string{"-o", "out.jsonl", "--state", "seen.state", "--dups", "dups.jsonl", "--rejects", "rej.jsonl"},
			[]string{"out.jsonl", "seen.state", "dups.jsonl", "rej.jsonl"}, nil},
		{"shard", []string{"-n", "2", "-o", "part-{i}.jsonl", "--rejects", "rej.jsonl"}, []string{"part-0.jsonl", "part-1.jsonl", "rej.jsonl"}, nil},
		{"merge", []string{"-o", "out.jsonl", "--errors", "errs.jsonl", "--rejects", "rej.jsonl"}, []string{"out.jsonl", "errs.jsonl", "rej.jsonl"}, nil},
		{"stats", []string{"--json", "--plot", "plot.png", "--rejects", "rej.jsonl"}, []string{"plot.png", "rej.jsonl"}, nil},
		{"filter", []string{"-o", "out.jsonl", "--rejects", "rej.jsonl"}, []string{"out.jsonl", "rej.jsonl"}, nil},
		{"infer", []string{"-o", "gen.jsonl", "--rejects", "rej.jsonl", "-e", endpoint, "--max-tokens", "8", "--progress", "0", "--wait-ready", "20s"},
			[]string{"gen.jsonl", "gen.jsonl.settings.jsonl", "gen.errors.jsonl", "rej.jsonl"}, []string{"gen.jsonl", "gen.jsonl.settings.jsonl", "gen.errors.jsonl"}},
	}
}

// checkLitter fails on a name in dir that is neither the input nor one
// the run may leave: a lock file, a temporary file, an output of a run
// that did not finish.
func checkLitter(t *testing.T, dir, path string, may []string) {
	t.Helper()
	for _, name := range listDir(t, dir) {
		if name == "in.jsonl" || name == "in.fifo" || slices.Contains(may, name) {
			continue
		}
		t.Errorf("%s: %s left in the directory (%v)", path, name, listDir(t, dir))
	}
}

// Every tool, on every way out, leaves its directory as it should: no
// lock file, no temporary file, and no output of a run that did not
// finish. The ways out: done (exit 0), done with rejects (3), refused
// for an output that exists (2), failed (1: a damaged dedup state, infer
// with no server), and interrupted while it reads a FIFO: by SIGINT, by
// SIGTERM, and by a second SIGINT (which exits at once).
func TestNoLitter(t *testing.T) {
	t.Parallel()
	ready := filepath.Join(t.TempDir(), "urls")
	testbin.Start(t, "llmsim", "--listen", "127.0.0.1:0", "--ready-file", ready, "--instant")
	var endpoint string
	for deadline := time.Now().Add(10 * time.Second); endpoint == ""; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("llmsim did not write its ready file within 10s")
		}
		b, _ := os.ReadFile(ready)
		endpoint = strings.TrimSpace(string(b))
	}
	good := answers(50)
	bad := append(append([]byte(nil), good...), "{not json\n"...)
	for _, tool := range litterTools(endpoint) {
		t.Run(tool.name, func(t *testing.T) {
			t.Parallel()
			run := func(path string, input []byte, extra ...string) (string, testbin.Result) {
				dir := t.TempDir()
				os.WriteFile(filepath.Join(dir, "in.jsonl"), input, 0o644)
				args := append(append(slices.Clone(tool.args), extra...), "in.jsonl")
				cmd := testbin.Command(tool.name, args...)
				cmd.Dir = dir
				return dir, testbin.Exec(t, cmd)
			}
			for _, p := range []struct {
				path  string
				input []byte
				code  int
			}{{"done", good, 0}, {"rejects", bad, 3}} {
				dir, r := run(p.path, p.input)
				if r.Code != p.code {
					t.Fatalf("%s: exit %d, want %d\n%s", p.path, r.Code, p.code, r.Stderr)
				}
				checkLitter(t, dir, p.path, tool.outputs)
			}

			// Refused: the first output exists (without --force).
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "in.jsonl"), good, 0o644)
			existing := tool.outputs[0]
			os.WriteFile(filepath.Join(dir, existing), []byte("{\"id\":\"old\"}\n"), 0o644)
			cmd := testbin.Command(tool.name, append(slices.Clone(tool.args), "in.jsonl")...)
			cmd.Dir = dir
			if r := testbin.Exec(t, cmd); r.Code != 2 {
				t.Fatalf("refused: exit %d, want 2\n%s", r.Code, r.Stderr)
			}
			checkLitter(t, dir, "refused", []string{existing})

			// Failed.
			switch tool.name {
			case "dedup":
				dir := t.TempDir()
				os.WriteFile(filepath.Join(dir, "seen.state"), []byte("not a state"), 0o644)
				os.WriteFile(filepath.Join(dir, "in.jsonl"), good, 0o644)
				cmd := testbin.Command(tool.name, append(slices.Clone(tool.args), "in.jsonl")...)
				cmd.Dir = dir
				if r := testbin.Exec(t, cmd); r.Code != 1 {
					t.Fatalf("damaged state: exit %d, want 1\n%s", r.Code, r.Stderr)
				}
				checkLitter(t, dir, "failed", []string{"seen.state"})
			case "infer":
				dir := t.TempDir()
				os.WriteFile(filepath.Join(dir, "in.jsonl"), good, 0o644)
				args := slices.Clone(tool.args)
				args[slices.Index(args, "-e")+1] = "127.0.0.1:1"
				args[slices.Index(args, "--wait-ready")+1] = "300ms"
				cmd := testbin.Command(tool.name, append(args, "in.jsonl")...)
				cmd.Dir = dir
				if r := testbin.Exec(t, cmd); r.Code != 1 {
					t.Fatalf("no server: exit %d, want 1\n%s", r.Code, r.Stderr)
				}
				checkLitter(t, dir, "failed", nil)
			}

			// Interrupted while reading a FIFO the test holds open.
			for _, sig := range []struct {
				path    string
				signals []os.Signal
			}{{"SIGINT", []os.Signal{os.Interrupt}}, {"SIGTERM", []os.Signal{syscall.SIGTERM}}, {"SIGINT twice", []os.Signal{os.Interrupt, os.Interrupt}}} {
				dir := t.TempDir()
				fifo := filepath.Join(dir, "in.fifo")
				if err := syscall.Mkfifo(fifo, 0o644); err != nil {
					t.Skipf("mkfifo: %v", err)
				}
				cmd := testbin.Command(tool.name, append(slices.Clone(tool.args), "in.fifo")...)
				cmd.Dir = dir
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				done := make(chan struct{})
				go func() { cmd.Wait(); close(done) }()
				w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				w.Write(good)
				// Running: its outputs begun (a temporary file, a lock) or,
				// for infer, answers written.
				waitUntil(t, done, sig.path, func() bool {
					for _, name := range listDir(t, dir) {
						if strings.Contains(name, ".tmp-") || strings.HasSuffix(name, ".lock") {
							return true
						}
					}
					return false
				})
				for _, s := range sig.signals {
					cmd.Process.Signal(s)
					time.Sleep(50 * time.Millisecond)
				}
				if len(sig.signals) == 1 {
					w.Close() // the blocked read ends; the tool sees the signal
				}
				select {
				case <-done:
				case <-time.After(testbin.Timeout):
					cmd.Process.Kill()
					t.Fatalf("%s: still running\n%s", sig.path, stderr.String())
				}
				w.Close()
				if code := cmd.ProcessState.ExitCode(); code != 130 {
					t.Fatalf("%s: exit %d, want 130\n%s", sig.path, code, stderr.String())
				}
				checkLitter(t, dir, sig.path, tool.kept)
			}
		})
	}
}

// waitUntil polls cond until it holds, failing the test if the process
// ends (done) first or it does not within testbin.Timeout.
func waitUntil(t *testing.T, done <-chan struct{}, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testbin.Timeout)
	for !cond() {
		select {
		case <-done:
			t.Fatalf("%s: the tool exited before it was running", what)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not running within %v", what, testbin.Timeout)
		}
	}
}
