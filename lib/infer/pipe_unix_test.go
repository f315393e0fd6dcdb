//go:build unix

package infer

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
)

// Input from a pipe is read, not drained to count its lines first:
// /dev/stdin fed by a pipe, and a named FIFO, each give every prompt its
// answer.
func TestPipesAsInput(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{TimeScale: 2000, MaxRunning: 8}, 1, promptSet{n: 50})
	data, err := os.ReadFile(s.in)
	if err != nil {
		t.Fatal(err)
	}

	// reading is the run's arguments with name for the input file.
	reading := func(name string) []string {
		args := s.args("--max-tokens", "8")
		for i, a := range args {
			if a == s.in {
				args[i] = name
			}
		}
		return args
	}

	// /dev/stdin, a pipe.
	p := &proc{}
	p.cmd = testbin.Command("infer", reading("/dev/stdin")...)
	p.cmd.Stderr = &p.stderr
	w := stdinPipe(t, p.cmd)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	w.Close()
	if code := p.wait(t, time.Minute); code != cli.ExitOK {
		t.Fatalf("/dev/stdin: exit %d\n%s", code, p.stderr.String())
	}
	if acc := s.check(t, 1); acc.ok != 50 {
		t.Fatalf("/dev/stdin: %d answers", acc.ok)
	}

	// A named FIFO, written once infer has opened it.
	fifo := filepath.Join(s.dir, "prompts.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFOs: %v", err)
	}
	os.Remove(s.out)
	os.Remove(s.errs())
	q := startInfer(t, reading(fifo)...)
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0) // blocks until infer opens it to read
	if err != nil {
		t.Fatal(err)
	}
	f.Write(data)
	f.Close()
	if code := q.wait(t, time.Minute); code != cli.ExitOK {
		t.Fatalf("FIFO: exit %d\n%s", code, q.stderr.String())
	}
	if acc := s.check(t, 1); acc.ok != 50 {
		t.Fatalf("FIFO: %d answers", acc.ok)
	}
	if !strings.Contains(q.stderr.String(), "read 50 records") {
		t.Errorf("FIFO: stderr:\n%s", q.stderr.String())
	}
}

// A FIFO nobody writes to: the run's reader says after a second what it
// waits for, and SIGTERM ends the wait at once, exit 130.
func TestSignalWhileOpeningFIFO(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{TimeScale: 2000, MaxRunning: 8}, 1, promptSet{n: 5})
	fifo := filepath.Join(s.dir, "nobody-writes.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFOs: %v", err)
	}
	args := s.args()
	for i, a := range args {
		if a == s.in {
			args[i] = fifo
		}
	}
	r := startInferRun(t, args)
	notice := "waiting for a writer to open the FIFO " + fifo
	waitFor(t, 30*time.Second, "the FIFO notice", func() bool { return strings.Contains(r.stderr.String(), notice) })
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t, 20*time.Second); code != cli.ExitInterrupted {
		t.Fatalf("exit %d, want 130\n%s", code, r.stderr.String())
	}
}
