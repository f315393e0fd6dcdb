package jsonl

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

const writeBufferSize = 1 << 20

// WriterOptions choose how Create opens a file.
type WriterOptions struct {
	// Atomic writes to a temporary file beside the target and renames it
	// into place on Close, so a killed run never leaves a short file that
	// looks complete.
	Atomic bool
	// Append adds to an existing file instead of refusing to overwrite it.
	Append bool
	// Overwrite replaces an existing file (otherwise Create refuses).
	Overwrite bool
}

// Writer writes one record per line through a buffer. It is safe for
// concurrent use. Every error is kept and returned by Close, so a full disk
// or a closed pipe cannot go unnoticed before the exit code is chosen.
type Writer struct {
	mu      sync.Mutex
	bw      *bufio.Writer
	closers []io.Closer // innermost (compressor) first
	file    *os.File
	tmp     string // Atomic: the temporary name
	path    string
	err     error
	lines   int64
}

// NewWriter writes to w (typically stdout) with no compression.
func NewWriter(w io.Writer) *Writer {
	return &Writer{bw: bufio.NewWriterSize(w, writeBufferSize), path: "-"}
}

// Create opens path for writing records; "" or "-" mean stdout. A name
// ending in .gz or .zst is compressed accordingly.
func Create(path string, stdout io.Writer, opts WriterOptions) (*Writer, error) {
	if path == "" || path == "-" {
		return NewWriter(stdout), nil
	}
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	flags := os.O_WRONLY | os.O_CREATE
	target := path
	// A device or pipe (-o /dev/null, a FIFO) is written in place: renaming
	// a temporary file over it would replace it with a plain file.
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() && !st.IsDir() {
		opts = WriterOptions{Overwrite: true}
	}
	switch {
	case opts.Append:
		flags |= os.O_APPEND
	case opts.Atomic:
		if !opts.Overwrite {
			if _, err := os.Stat(path); err == nil {
				return nil, fmt.Errorf("%s already exists (remove it, or choose another name)", path)
			}
		}
		target = fmt.Sprintf("%s.tmp-%d", path, os.Getpid())
		flags |= os.O_TRUNC
	case opts.Overwrite:
		flags |= os.O_TRUNC
	default:
		flags |= os.O_EXCL
	}
	f, err := os.OpenFile(target, flags, 0o644)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("%s already exists (remove it, or choose another name)", path)
		}
		return nil, err
	}
	w := &Writer{file: f, path: path}
	if opts.Atomic {
		w.tmp = target
	}
	var out io.Writer = f
	switch {
	case strings.HasSuffix(path, ".gz"):
		zw, _ := gzip.NewWriterLevel(f, gzip.DefaultCompression)
		w.closers = append(w.closers, zw)
		out = zw
	case strings.HasSuffix(path, ".zst"):
		zw, err := zstd.NewWriter(f, zstd.WithEncoderConcurrency(1))
		if err != nil {
			f.Close()
			return nil, err
		}
		w.closers = append(w.closers, zw)
		out = zw
	}
	w.bw = bufio.NewWriterSize(out, writeBufferSize)
	return w, nil
}

// Path is the name the writer was created with ("-" for stdout).
func (w *Writer) Path() string { return w.path }

// Lines is the number of records written so far.
func (w *Writer) Lines() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lines
}

// Write writes one record followed by a newline. The record must not
// contain a newline of its own.
func (w *Writer) Write(record []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if _, err := w.bw.Write(record); err != nil {
		w.err = err
		return err
	}
	if err := w.bw.WriteByte('\n'); err != nil {
		w.err = err
		return err
	}
	w.lines++
	return nil
}

// WriteRaw writes p as it is, without a newline: for a file that is not
// JSON Lines (merge's Parquet output) but is written and put in place the
// same way.
func (w *Writer) WriteRaw(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.bw.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}

// Flush pushes buffered records to the file (and through the compressor,
// for compressed output) so that they survive a kill of this process.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked()
}

func (w *Writer) flushLocked() error {
	if w.err != nil {
		return w.err
	}
	if err := w.bw.Flush(); err != nil {
		w.err = err
		return err
	}
	for _, c := range w.closers {
		if f, ok := c.(interface{ Flush() error }); ok {
			if err := f.Flush(); err != nil {
				w.err = err
				return err
			}
		}
	}
	return nil
}

// Sync flushes and asks the OS to put the file on disk.
func (w *Writer) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.flushLocked(); err != nil {
		return err
	}
	if w.file != nil {
		return w.file.Sync()
	}
	return nil
}

// Close flushes, finishes compression, closes the file and, for an atomic
// writer, renames it into place. The first error of the writer's life is
// returned.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.flushLocked()
	for _, c := range w.closers {
		if cerr := c.Close(); err == nil {
			err = cerr
		}
	}
	w.closers = nil
	if w.file != nil {
		if w.tmp != "" && err == nil {
			err = w.file.Sync()
		}
		if cerr := w.file.Close(); err == nil {
			err = cerr
		}
		w.file = nil
		if w.tmp != "" {
			if err == nil {
				err = os.Rename(w.tmp, w.path)
			} else {
				os.Remove(w.tmp)
			}
		}
	}
	if err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

// Abort closes an atomic writer without putting its file in place (for a
// run that failed or was interrupted: the target is left as it was).
func (w *Writer) Abort() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.closers {
		c.Close()
	}
	w.closers = nil
	if w.file != nil {
		w.file.Close()
		w.file = nil
		if w.tmp != "" {
			os.Remove(w.tmp)
		}
	}
}
