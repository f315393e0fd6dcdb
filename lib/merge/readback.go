package merge

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/zeebo/xxh3"
)

// A record read from a regular file (not stdin, a pipe, a FIFO or a
// compressed file) is not held while merging: its entry keeps where the
// record is (file, offset, length) and the hash of its bytes, and the
// winner is read back from the file when it is written. Memory then holds
// keys, not records, and nothing is spilled for want of room for them.
// A file changed in place since it was read is refused, record by record,
// by the hash: what is written is always the bytes that were ranked.

// afterReading, when set (by tests), runs once every input is read and
// before anything is written: the moment a file may change under merge.
var afterReading func()

// readBackWindow is how much of a file one read fetches ahead when the
// records are wanted in file order, as they mostly are.
const readBackWindow = 1 << 20

// source is an input file records are read back from.
type source struct {
	name string
	f    *os.File
	end  int64  // where the last record read from it ends
	buf  []byte // a window of the file, from offset at (lent by windows)
	at   int64
	used int64 // when the window was last read, on windows' clock
	wins *windows
}

// windows lends read-back windows to sources: at most maxWindows at
// once, the one used longest ago taken back for the next, so that a merge
// of a thousand files holds a few windows, not a thousand.
type windows struct {
	owners []*source
	clock  int64
}

const maxWindows = 8

// lend gives s a window.
func (w *windows) lend(s *source) {
	if len(w.owners) < maxWindows {
		s.buf = make([]byte, readBackWindow)
		w.owners = append(w.owners, s)
		return
	}
	oldest := 0
	for i, o := range w.owners {
		if o.used < w.owners[oldest].used {
			oldest = i
		}
	}
	o := w.owners[oldest]
	s.buf, o.buf, o.at = o.buf[:cap(o.buf)], nil, 0
	w.owners[oldest] = s
}

// errChanged is a file changed in place between reading and writing.
var errChanged = errors.New("changed while merging")

// sourceOf is the index+1 of the named input among the files records are
// read back from, opened when first met; 0 when it cannot be opened (its
// records are then held).
func (m *merger) sourceOf(name string) int32 {
	if i, ok := m.sourceIndex[name]; ok {
		return i
	}
	var i int32
	if f, err := os.Open(name); err == nil {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			m.sources = append(m.sources, &source{name: name, f: f, wins: &m.windows})
			i = int32(len(m.sources))
		} else {
			f.Close()
		}
	}
	if m.sourceIndex == nil {
		m.sourceIndex = map[string]int32{}
	}
	m.sourceIndex[name] = i
	return i
}

// address makes e point at a record of a seekable input instead of
// holding it, and reports whether it could.
func (m *merger) address(e *entry, name string, off int64, data []byte, sum uint64) bool {
	if len(data) > maxAddressed {
		return false
	}
	src := m.sourceOf(name)
	if src == 0 {
		return false
	}
	s := m.sources[src-1]
	s.end = max(s.end, off+int64(len(data)))
	e.src, e.off, e.size, e.sum = src, off, uint32(len(data)), sum
	return true
}

// maxAddressed is the longest record an entry can point at.
const maxAddressed = 1<<32 - 1

// checkSources refuses, before anything is written, a file now shorter
// than what was read of it.
func (m *merger) checkSources() error {
	for _, s := range m.sources {
		st, err := s.f.Stat()
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		if st.Size() < s.end {
			return fmt.Errorf("%s %w: it is now %d bytes, %d were read; merge it again", s.name, errChanged, st.Size(), s.end)
		}
	}
	return nil
}

// closeSources lets the files go.
func (m *merger) closeSources() {
	for _, s := range m.sources {
		s.f.Close()
	}
	m.sources, m.sourceIndex = nil, nil
}

// recordOf is e's record: held, or read back and checked. The bytes of a
// read-back record are valid until the next call.
func (m *merger) recordOf(e *entry) ([]byte, error) {
	if e.src == 0 {
		return e.data, nil
	}
	s := m.sources[e.src-1]
	b, err := s.read(e.off, int(e.size))
	if err != nil {
		return nil, fmt.Errorf("%s: reading back the record at byte %d: %w", s.name, e.off, err)
	}
	if xxh3.Hash(b) != e.sum {
		return nil, fmt.Errorf("%s %w: the record at byte %d is no longer what was read; merge it again", s.name, errChanged, e.off)
	}
	return b, nil
}

// read returns the n bytes at off, from the window when they are in it.
// Reading on past the window fetches a new window there; a jump elsewhere
// (--sort) reads only the record.
func (s *source) read(off int64, n int) ([]byte, error) {
	s.wins.clock++
	s.used = s.wins.clock
	if off >= s.at && off+int64(n) <= s.at+int64(len(s.buf)) {
		return s.buf[off-s.at:][:n], nil
	}
	size := n
	if ahead := off >= s.at && off <= s.at+int64(len(s.buf))+readBackWindow; ahead && n < readBackWindow {
		size = readBackWindow
	}
	if size > readBackWindow {
		// A long record is read into a buffer of its own, let go after it.
		b := make([]byte, n)
		if _, err := s.f.ReadAt(b, off); err != nil {
			return nil, shortRead(err)
		}
		return b, nil
	}
	if cap(s.buf) < readBackWindow {
		s.wins.lend(s)
	}
	k, err := s.f.ReadAt(s.buf[:size], off)
	s.buf, s.at = s.buf[:k], off
	if k < n {
		s.buf = s.buf[:0]
		return nil, shortRead(err)
	}
	return s.buf[:n], nil
}

func shortRead(err error) error {
	if err == io.EOF || err == nil {
		return fmt.Errorf("%w: the file is shorter than when it was read", errChanged)
	}
	return err
}
