package infer

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/clock"
	"tokenmill/lib/record"
)

// lineWriter writes whole lines through a buffer and hands the buffer to
// the file only in whole lines, so a process killed at any moment leaves
// at most the lines it had not yet flushed missing, never half a line (a
// write(2) to a regular file is not torn by a signal; resume still repairs
// a partial tail, for power loss or a full disk). Safe for concurrent use.
type lineWriter struct {
	mu     sync.Mutex
	name   string
	w      io.Writer
	f      *os.File // nil for stdout
	buf    []byte
	err    error
	lines  int64
	opener func() (*os.File, error) // a file not yet open; nil once open
	// secrets are replaced by *** in every line: a server may echo the
	// run's credentials in an answer or an error (nil: none).
	secrets *cli.Secrets
}

const flushAt = 1 << 20

func newLineWriter(name string, w io.Writer, f *os.File) *lineWriter {
	return &lineWriter{name: name, w: w, f: f, buf: make([]byte, 0, flushAt+64<<10)}
}

// fileWriter is a writer named name whose file open opens only when it is
// first needed: by open, or when the first lines are flushed. Nothing is
// created or emptied before then.
func fileWriter(name string, open func() (*os.File, error)) *lineWriter {
	lw := newLineWriter(name, nil, nil)
	lw.opener = open
	return lw
}

// open opens the writer's file now, if it is not open yet.
func (lw *lineWriter) open() error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.openLocked()
}

func (lw *lineWriter) openLocked() error {
	if lw.err != nil || lw.opener == nil {
		return lw.err
	}
	f, err := lw.opener()
	lw.opener = nil
	if err != nil {
		lw.err = err
		return err
	}
	lw.f, lw.w = f, f
	return nil
}

// empty reports whether no line was ever written.
func (lw *lineWriter) empty() bool {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.lines == 0
}

// writeLine adds one line (without its newline).
func (lw *lineWriter) writeLine(line []byte) error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.err != nil {
		return lw.err
	}
	lw.buf = append(lw.buf, lw.secrets.Redact(line)...)
	lw.buf = append(lw.buf, '\n')
	lw.lines++
	if len(lw.buf) >= flushAt {
		return lw.flushLocked()
	}
	return nil
}

func (lw *lineWriter) flush() error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.flushLocked()
}

func (lw *lineWriter) flushLocked() error {
	if lw.err != nil || len(lw.buf) == 0 {
		return lw.err
	}
	if err := lw.openLocked(); err != nil {
		return err
	}
	if _, err := lw.w.Write(lw.buf); err != nil {
		lw.err = fmt.Errorf("writing %s: %w", lw.name, err)
		return lw.err
	}
	lw.buf = lw.buf[:0]
	return nil
}

// close flushes, syncs a file to disk and closes it.
func (lw *lineWriter) close() error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	err := lw.flushLocked()
	if lw.f != nil {
		// A FIFO or device cannot be synced (EINVAL): nothing to make durable.
		if serr := lw.f.Sync(); err == nil && serr != nil && !errors.Is(serr, os.ErrInvalid) && !errors.Is(serr, syscall.EINVAL) {
			err = serr
		}
		if cerr := lw.f.Close(); err == nil {
			err = cerr
		}
		lw.f = nil
	}
	if err != nil && lw.err == nil {
		lw.err = err
	}
	return lw.err
}

// flushEvery flushes the writers every interval until stop is closed, so
// that finished answers reach the file within a second whatever the rate.
func flushEvery(clk clock.Clock, interval time.Duration, stop <-chan struct{}, ws ...*lineWriter) {
	t := clk.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C():
			for _, w := range ws {
				if w != nil {
					w.flush()
				}
			}
		case <-stop:
			return
		}
	}
}

// DefaultErrorsPath derives the errors file from the output file:
// gen.jsonl -> gen.errors.jsonl.
func DefaultErrorsPath(output string) string {
	if toStdout(output) {
		return ""
	}
	ext := filepath.Ext(output)
	if ext != ".jsonl" && ext != ".json" && ext != ".ndjson" {
		return output + ".errors.jsonl"
	}
	return strings.TrimSuffix(output, ext) + ".errors" + ext
}

// stripOwnFields removes an "output" or "error" field a record already
// carries (it is being generated again), keeping every other byte. A
// record without them is returned unchanged.
func stripOwnFields(raw []byte) ([]byte, error) {
	has := false
	err := record.EachField(raw, func(key string, _ []byte) error {
		if key == "output" || key == "error" {
			has = true
		}
		return nil
	})
	if err != nil || !has {
		return raw, err
	}
	return record.WithoutFields(nil, raw, "output", "error")
}

// generationLine is the prompt record with its "output" field.
func generationLine(dst, prompt []byte, out *record.Output) ([]byte, error) {
	v, err := json.Marshal(out)
	if err != nil {
		return dst, err
	}
	return record.AppendField(dst, prompt, "output", v)
}

// conversationLine is the conversation record with its "output" field.
func conversationLine(dst, prompt []byte, out *record.ConversationOutput) ([]byte, error) {
	v, err := json.Marshal(out)
	if err != nil {
		return dst, err
	}
	return record.AppendField(dst, prompt, "output", v)
}

// errorLine is the prompt record with its "error" field.
func errorLine(dst, prompt []byte, e *record.Error) ([]byte, error) {
	v, err := json.Marshal(e)
	if err != nil {
		return dst, err
	}
	return record.AppendField(dst, prompt, "error", v)
}
