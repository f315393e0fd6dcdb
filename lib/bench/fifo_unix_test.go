//go:build unix

package bench

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
)

// Sample prompts from a FIFO nobody writes to: the bench says after a
// second what it waits for, and SIGTERM ends the wait at once, exit 130.
func TestBenchSignalWhileOpeningFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "nobody-writes.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFOs: %v", err)
	}
	_, endpoints := simFleet(t, llmsim.Config{TimeScale: 50}, 1)
	p := testbin.Start(t, "infer", "bench", "-e", endpoints, "--concurrency", "1", "--duration", "5s", "--time-scale", "50", fifo)
	p.WaitFor(t, 30*time.Second, "waiting for a writer to open the FIFO "+fifo)
	p.Signal(t, syscall.SIGTERM)
	if r := p.Wait(t, 20*time.Second); r.Code != cli.ExitInterrupted {
		t.Fatalf("exit %d, want 130\n%s", r.Code, r.Stderr)
	}
}
