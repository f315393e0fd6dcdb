//go:build unix

package forecast

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A pipe is not counted: opening it to count would drain the records the
// run is to read (and block until a writer comes).
func TestCountInputLinesLeavesPipesAlone(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	done := make(chan int64, 1)
	go func() { done <- CountInputLines(context.Background(), []string{fifo}) }()
	select {
	case got := <-done:
		if got != -1 {
			t.Errorf("a FIFO counted %d lines, want -1", got)
		}
	case <-time.After(10 * time.Second):
		// Unblock the open so the goroutine ends, then fail.
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		t.Fatal("counting a FIFO blocked: it was opened")
	}
}
