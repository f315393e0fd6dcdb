package jsonl

import (
	"bufio"
	"io"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

const writeBufferSize = 1 << 20

// writeLimit is MaxLine; tests lower it rather than write a gigabyte.
var writeLimit = MaxLine

// WriterOptions choose how Create treats an existing file.
type WriterOptions struct {
	// Force replaces an existing file; without it Create refuses one (a
	// usage error, exit 2). Tools apply the rule up front with CheckPaths.
	Force bool
	// Flag names the output in messages, e.g. "--dups" (default "-o").
	Flag string
}

// Writer writes one record per line through a buffer. It is safe for
// concurrent use. Every error is kept and returned by Close, so a full disk
// or a closed pipe cannot go unnoticed before the exit code is chosen.
// A named file goes through File: it appears whole on Close, or not at all.
type Writer struct {
	mu      sync.Mutex
	bw      *bufio.Writer
	closers []io.Closer // innermost (compressor) first
	file    *File
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
	if opts.Flag == "" {
		opts.Flag = "-o"
	}
	if !opts.Force {
		if err := refuseExisting(opts.Flag, path); err != nil {
			return nil, err
		}
	}
	f, err := CreateFile(path, CreateFileOptions{Replace: opts.Force})
	if err != nil {
		return nil, err
	}
	w := &Writer{file: f, path: path}
	var out io.Writer = f
	switch {
	case strings.HasSuffix(path, ".gz"):
		zw, _ := gzip.NewWriterLevel(f, gzip.DefaultCompression)
		w.closers = append(w.closers, zw)
		out = zw
	case strings.HasSuffix(path, ".zst"):
		zw, err := zstd.NewWriter(f, zstd.WithEncoderConcurrency(1))
		if err != nil {
			f.Abort()
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
	if len(record) > writeLimit {
		return &LineTooLongError{Len: len(record)}
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

// Raw is the writer as an io.Writer of WriteRaw: for a library that
// writes a whole file through one (a picture, a Parquet file).
func (w *Writer) Raw() io.Writer { return rawWriter{w} }

type rawWriter struct{ w *Writer }

func (r rawWriter) Write(p []byte) (int, error) { return r.w.WriteRaw(p) }

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

// Close flushes, finishes compression and puts a named file in place.
// The first error of the writer's life is returned; after an error the
// target is left as it was.
func (w *Writer) Close() error {
	if err := w.Finish(); err != nil {
		return err
	}
	return w.Commit()
}

// Finish flushes, finishes compression and closes a named file without
// putting it in place yet (Commit does), so that several outputs can all
// be complete before the first appears. After an error the file is gone.
func (w *Writer) Finish() error {
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
		if err == nil {
			err = w.file.Finish()
		} else {
			w.file.Abort()
		}
		if err != nil {
			w.file = nil
		}
	}
	if err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

// Commit puts a finished named file in place (nothing for stdout).
func (w *Writer) Commit() error {
	return commitFinished([]*Writer{w}, w.Finish())
}

// commitFinished puts the files of finished writers in place together,
// or drops every one when first, an error met finishing them, is set.
func commitFinished(ws []*Writer, first error) error {
	var files []*File
	for _, w := range ws {
		w.mu.Lock()
		if w.file != nil {
			if first == nil {
				files = append(files, w.file)
			} else {
				w.file.Abort()
			}
			w.file = nil
		}
		w.mu.Unlock()
	}
	if first != nil {
		return first
	}
	err := CommitAll(files)
	for _, w := range ws {
		w.mu.Lock()
		if err != nil && w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
	}
	return err
}

// Abort closes the writer without putting its file in place (for a run
// that failed or was interrupted: the target is left as it was).
func (w *Writer) Abort() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.closers {
		c.Close()
	}
	w.closers = nil
	if w.file != nil {
		w.file.Abort()
		w.file = nil
	}
}
