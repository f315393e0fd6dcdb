package jsonl

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// EndEmpty gives a reader waiting on a FIFO the end of an empty stream,
// and with no reader there returns at once, the FIFO left as it is.
func TestEndEmpty(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "errors.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	EndEmpty("--errors", fifo) // no reader: nothing waits, nothing happens
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO is gone or replaced: %v %v", st, err)
	}
	got := make(chan string, 1)
	go func() {
		f, err := os.Open(fifo) // waits for a writer
		if err != nil {
			got <- err.Error()
			return
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- "read " + string(b)
	}()
	// The reader may not be waiting yet: each call that finds none does
	// nothing, so it is called again until the reader has its end.
	deadline := time.After(20 * time.Second)
	for {
		EndEmpty("--errors", fifo)
		select {
		case b := <-got:
			if b != "read " {
				t.Fatalf("the reader got %q, want the end of an empty stream", b)
			}
			return
		case <-deadline:
			t.Fatal("the FIFO's reader got no end of file within 20s")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
