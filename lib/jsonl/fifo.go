package jsonl

import (
	"context"
	"os"
	"time"
)

// fifoWaitNotice is how long an open may wait for a FIFO's writer before
// the user is told why nothing happens.
const fifoWaitNotice = time.Second

// Open opens an input for reading. Opening a FIFO blocks until something
// opens it for writing; here that wait ends as soon as ctx does (SIGINT,
// SIGTERM), with ctx's cause, and after a second logf (if not nil) says
// what the tool is waiting for. Anything else opens as os.Open would.
func Open(ctx context.Context, name string, logf func(format string, args ...any)) (*os.File, error) {
	st, err := os.Stat(name)
	if ctx == nil || err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		return os.Open(name)
	}
	type opened struct {
		f   *os.File
		err error
	}
	done := make(chan opened) // unbuffered: a late open sees it was abandoned
	abandoned := make(chan struct{})
	go func() {
		f, err := os.Open(name)
		select {
		case done <- opened{f, err}:
		case <-abandoned:
			if f != nil {
				f.Close()
			}
		}
	}()
	notice := time.NewTimer(fifoWaitNotice)
	defer notice.Stop()
	for {
		select {
		case o := <-done:
			return o.f, o.err
		case <-notice.C:
			if logf != nil {
				logf("waiting for a writer to open the FIFO %s", name)
			}
		case <-ctx.Done():
			close(abandoned)
			return nil, context.Cause(ctx)
		}
	}
}
