package jsonl

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

	"tokenmill/lib/cli"
)

// Appender is the file protocol of a run that can be resumed: the file is
// appended to in whole lines only, so a process killed at any moment
// leaves at most the lines it had not handed over missing, never half a
// line (a write(2) to a regular file is not torn by a signal), and
// RepairTail cuts the partial last line power loss or a full disk can
// still leave before the next run appends. Close makes the lines durable
// (fsync). infer's output, its errors file and the turn journal are each
// one Appender. Safe for concurrent use.
type Appender struct {
	mu     sync.Mutex
	name   string
	w      io.Writer
	f      *os.File // nil for a stream such as stdout
	buf    []byte
	err    error
	lines  int64
	opener func() (*os.File, error) // a file not yet open; nil once open
	// secrets are replaced by *** in every line: a server may echo the
	// run's credentials in an answer or an error (nil: none).
	secrets *cli.Secrets
}

// appendFlushAt is how much an Appender buffers before it writes.
const appendFlushAt = 1 << 20

// NewStreamAppender appends to w (stdout, say), named name in messages.
func NewStreamAppender(name string, w io.Writer) *Appender {
	return &Appender{name: name, w: w, buf: make([]byte, 0, appendFlushAt+64<<10)}
}

// NewAppender appends to the file open opens, only when it is first
// needed (Open, or the first lines flushed): nothing is created or
// emptied before then.
func NewAppender(name string, open func() (*os.File, error)) *Appender {
	a := NewStreamAppender(name, nil)
	a.opener = open
	return a
}

// Redact replaces the secrets in every line written from now on.
func (a *Appender) Redact(s *cli.Secrets) {
	a.mu.Lock()
	a.secrets = s
	a.mu.Unlock()
}

// Open opens the file now, if it is not open yet.
func (a *Appender) Open() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.openLocked()
}

func (a *Appender) openLocked() error {
	if a.err != nil || a.opener == nil {
		return a.err
	}
	f, err := a.opener()
	a.opener = nil
	if err != nil {
		a.err = err
		return err
	}
	a.f, a.w = f, f
	return nil
}

// IsOpen says whether the file is open: opened, and not closed yet.
func (a *Appender) IsOpen() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.f != nil
}

// Empty reports whether no line was ever written.
func (a *Appender) Empty() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lines == 0
}

// WriteLine adds one line (without its newline) to the buffer, which goes
// to the file once it holds a megabyte, or at Flush.
func (a *Appender) WriteLine(line []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.addLocked(line); err != nil {
		return err
	}
	if len(a.buf) >= appendFlushAt {
		return a.flushLocked()
	}
	return nil
}

// WriteLineNow adds one line and hands it, with any buffered before it, to
// the file before it returns: for a line that must be on file before the
// run goes on (a turn journaled before the next turn is asked).
func (a *Appender) WriteLineNow(line []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.addLocked(line); err != nil {
		return err
	}
	return a.flushLocked()
}

func (a *Appender) addLocked(line []byte) error {
	if a.err != nil {
		return a.err
	}
	a.buf = append(a.buf, a.secrets.Redact(line)...)
	a.buf = append(a.buf, '\n')
	a.lines++
	return nil
}

// Flush hands the buffered lines to the file.
func (a *Appender) Flush() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushLocked()
}

func (a *Appender) flushLocked() error {
	if a.err != nil || len(a.buf) == 0 {
		return a.err
	}
	if err := a.openLocked(); err != nil {
		return err
	}
	if _, err := a.w.Write(a.buf); err != nil {
		a.err = fmt.Errorf("writing %s: %w", a.name, err)
		return a.err
	}
	a.buf = a.buf[:0]
	return nil
}

// Close flushes, syncs a file to disk and closes it. The first error the
// Appender met is returned, by Close and by every write after it.
func (a *Appender) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.flushLocked()
	if a.f != nil {
		// A FIFO or device cannot be synced (EINVAL): nothing to make durable.
		if serr := a.f.Sync(); err == nil && serr != nil && !errors.Is(serr, os.ErrInvalid) && !errors.Is(serr, syscall.EINVAL) {
			err = serr
		}
		if cerr := a.f.Close(); err == nil {
			err = cerr
		}
		a.f = nil
	}
	if err != nil && a.err == nil {
		a.err = err
	}
	return a.err
}

// RepairTail truncates f after its last newline, removing the partial line
// an interrupted run left at the end, before lines are appended to it. It
// returns how many bytes it removed.
func RepairTail(f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	if size == 0 {
		return 0, nil
	}
	const chunk = 64 << 10
	buf := make([]byte, chunk)
	end := size
	for end > 0 {
		start := max(end-chunk, 0)
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && err != io.EOF {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			keep := start + int64(i) + 1
			if keep == size {
				return 0, nil
			}
			return size - keep, f.Truncate(keep)
		}
		end = start
	}
	return size, f.Truncate(0)
}

// RepairTailAt repairs the file at path (opened by open, O_RDWR) as
// RepairTail does. The error of a file that does not exist is open's, so
// errors.Is(err, os.ErrNotExist) tells it.
func RepairTailAt(path string, open func(path string) (*os.File, error)) (int64, error) {
	f, err := open(path)
	if err != nil {
		return 0, err
	}
	cut, err := RepairTail(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("repairing %s: %w", path, err)
	}
	return cut, nil
}
