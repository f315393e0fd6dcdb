// Package jsonl is the streaming record I/O every stage stands on: a reader
// that turns files or stdin (JSONL, JSON arrays or Parquet, plain, gzip or
// zstd) into one stream of raw JSON records with file and line attached,
// a buffered writer whose errors are never lost, and the rejects file.
package jsonl

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"tokenmill/lib/record"
)

// RawLine is one record as read and not yet decoded: its raw JSON (a line
// of JSON Lines, an element of a JSON array, a Parquet or CSV row written
// as JSON) and where it was read. Data is valid only until the next call
// to Reader.Next (Reader.TakeLong keeps a long one).
type RawLine struct {
	Data []byte
	File string // "-" for stdin
	Line int64  // 1-based line (JSONL, JSON arrays) or row (Parquet)
	// Built is set when the reader wrote Data itself (a Parquet row): JSON
	// known valid, its strings valid UTF-8, which a reader of it need not
	// check again.
	Built bool
	// Offset is where Data starts in File when Seekable: File is a regular
	// file read as it is (not decompressed, not converted), so Data can be
	// read back from it later at [Offset, Offset+len(Data)) instead of
	// being held.
	Offset   int64
	Seekable bool
}

// MaxLine is the longest line any tokenmill tool reads or writes: 1 GiB,
// far above any answer a server can produce (a 128k-token context is well
// under 1 MiB of text). A longer input line is rejected with reason
// line_too_long without being held in memory; Writer refuses to write one.
const MaxLine = 1 << 30

// MaxDepth is how deeply a record may nest arrays and objects. A deeper one
// is rejected as malformed_json before any decoder sees it: decoders
// recurse, and a line of a million '[' would exhaust the stack.
const MaxDepth = record.MaxDepth

// keepLongBuffer is the largest line buffer kept for the next long line;
// a bigger one is let go once its line has been handed out.
const keepLongBuffer = 16 << 20

// Reasons for input errors, as counted in summaries and rejects files.
const (
	ReasonLineTooLong = "line_too_long"
	ReasonUnreadable  = "unreadable"
)

// InputError is a problem with the input itself rather than one record:
// an unreadable or truncated file, an over-long line. The Reader reports
// it and goes on with the next line or the next file.
type InputError struct {
	File   string
	Line   int64
	Reason string
	Err    error
	// Data is the offending line, when the problem is one record (too
	// deeply nested): a copy, which the error keeps.
	Data []byte
}

func (e *InputError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}

func (e *InputError) Unwrap() error { return e.Err }

// Logger is where jsonl tells a person what they should know while it
// reads and rejects: a tool's stderr, each line prefixed with the tool's
// name (*cli.Env is one). A nil Logger says nothing.
type Logger interface {
	Logf(format string, args ...any)
}

// Options tune a Reader.
type Options struct {
	MaxLine int // 0 means MaxLine; tests set less
	// LimitName names what set MaxLine in the message of a line over it
	// (e.g. "--max-prompt-bytes"); "" for the default.
	LimitName string
	// CSV, when set, reads CSV and TSV inputs (see csv.go); nil refuses them.
	CSV *CSVOptions
	// Columns, when set, names the top-level Parquet columns to read; the
	// others are left out of the records, their pages never decoded.
	Columns func(name string) bool
}

// LineTooLongError is a record Writer refuses: longer than MaxLine.
type LineTooLongError struct{ Len int }

func (e *LineTooLongError) Error() string {
	return fmt.Sprintf("record of %d bytes is longer than the line limit (%d bytes)", e.Len, writeLimit)
}

// Stats count what a Reader has seen.
type Stats struct {
	Records int64
	Blank   int64 // blank lines skipped
	Bytes   int64 // decompressed bytes read
	Files   int
}

// source yields the records of one input.
type source interface {
	next() (RawLine, error) // io.EOF at the end
	close() error
}

// Reader streams the records of several inputs in order.
type Reader struct {
	ctx   context.Context
	log   Logger
	names []string
	stdin io.Reader
	opts  Options
	cur   source
	idx   int
	Stats Stats
}

// NewReader reads the named files in order; no names, or "-", read stdin.
// ctx ends a wait for a FIFO's writer (see Open): Next then returns ctx's
// cause, not an InputError. log, if not nil, says after a second what such
// a wait is for.
func NewReader(ctx context.Context, log Logger, names []string, stdin io.Reader, opts Options) *Reader {
	if len(names) == 0 {
		names = []string{"-"}
	}
	if opts.MaxLine <= 0 {
		opts.MaxLine = MaxLine
	}
	return &Reader{ctx: ctx, log: log, names: names, stdin: stdin, opts: opts}
}

// Next returns the next record, io.EOF after the last one, or an
// *InputError; after an InputError the caller may call Next again to go on.
func (r *Reader) Next() (RawLine, error) {
	for {
		if r.cur == nil {
			if r.idx >= len(r.names) {
				return RawLine{}, io.EOF
			}
			name := r.names[r.idx]
			r.idx++
			r.Stats.Files++
			src, err := openSource(name, r.stdin, r)
			if err != nil {
				if r.ctx.Err() != nil && errors.Is(err, context.Cause(r.ctx)) {
					return RawLine{}, err
				}
				return RawLine{}, &InputError{File: name, Reason: ReasonUnreadable, Err: err}
			}
			r.cur = src
		}
		rec, err := r.cur.next()
		if err == nil {
			r.Stats.Records++
			if err := record.CheckDepth(rec.Data); err != nil {
				data := r.TakeLong(rec)
				if data == nil {
					data = append([]byte(nil), rec.Data...)
				}
				return RawLine{}, &InputError{File: rec.File, Line: rec.Line, Reason: ReasonMalformedJSON, Err: err, Data: data}
			}
			return rec, nil
		}
		var ie *InputError
		if errors.As(err, &ie) && (ie.Reason == ReasonLineTooLong || ie.Reason == ReasonMalformedCSV) {
			return RawLine{}, err // the rest of the file is still readable
		}
		closeErr := r.cur.close()
		r.cur = nil
		if err == io.EOF {
			if closeErr != nil {
				return RawLine{}, &InputError{File: r.names[r.idx-1], Reason: ReasonUnreadable, Err: closeErr}
			}
			continue
		}
		if errors.As(err, &ie) {
			return RawLine{}, err
		}
		return RawLine{}, &InputError{File: r.names[r.idx-1], Reason: ReasonUnreadable, Err: err}
	}
}

// TakeLong hands over rec.Data (the record Next returned last) when it is
// a long line, assembled in a buffer of its own: the caller keeps it past
// the next call to Next, and the reader starts a new buffer, so a line of
// hundreds of megabytes is never held twice. For any other record it
// returns nil: the caller copies what it keeps, as usual.
func (r *Reader) TakeLong(rec RawLine) []byte {
	if ls, ok := r.cur.(*lineSource); ok && ls.long && len(rec.Data) > 0 && len(ls.buf) > 0 && &ls.buf[0] == &rec.Data[0] {
		ls.buf, ls.long = nil, false
		return rec.Data
	}
	return nil
}

// Close releases the current input.
func (r *Reader) Close() error {
	if r.cur == nil {
		return nil
	}
	err := r.cur.close()
	r.cur = nil
	return err
}

// lineSource reads JSON Lines.
type lineSource struct {
	name    string
	br      *bufio.Reader
	closer  io.Closer
	line    int64
	buf     []byte // assembles lines longer than the bufio buffer
	long    bool   // the last line returned is in buf
	maxLine int
	limit   string // what sets maxLine, for the message ("" for the default)
	stats   *Stats
	// spill assembles a line longer than spillAt (an unlinked temporary
	// file, made at the first such line): a line is not held in memory
	// until it is known to end within maxLine, so one far over the limit
	// is skipped with no more than the read buffer and spillAt held.
	spill   *os.File
	noSpill bool // the temporary file could not be made or written
	// file is the input when it is a regular file read as it is (not
	// decompressed): a long line's end is then found by reading ahead in
	// the file (pread), so nothing of it is held, nor spilled, before it
	// is known to fit.
	file *os.File
	pos  int64 // bytes of the input consumed before the next line
}

// spillAt is the most of one line assembled in memory before the rest
// goes to the spill file: the read buffer's size.
var spillAt = readBufferSize

func (s *lineSource) next() (RawLine, error) {
	for {
		before := s.stats.Bytes
		data, err := s.readLine()
		at := s.pos
		// Every byte a line takes, its ending or a skipped over-long line
		// included, is counted in stats.Bytes as it is read.
		s.pos += s.stats.Bytes - before
		if err != nil {
			return RawLine{}, err
		}
		s.line++
		if isBlank(data) {
			s.stats.Blank++
			continue
		}
		return RawLine{Data: data, File: s.name, Line: s.line, Offset: at, Seekable: s.file != nil}, nil
	}
}

// readLine returns the next line without its line ending. A last line with
// no newline is still returned; a line over maxLine is skipped and reported.
func (s *lineSource) readLine() ([]byte, error) {
	if s.long && cap(s.buf) > keepLongBuffer {
		s.buf = nil
	}
	s.long = false
	data, err := s.br.ReadSlice('\n')
	s.stats.Bytes += int64(len(data))
	if err == nil {
		return trimEOL(data), nil
	}
	if err == bufio.ErrBufferFull {
		return s.readLongLine(data)
	}
	if err == io.EOF && len(data) > 0 {
		return trimEOL(data), nil
	}
	if err != io.EOF {
		return nil, s.fail(err)
	}
	return nil, io.EOF
}

func (s *lineSource) readLongLine(first []byte) ([]byte, error) {
	if s.file != nil {
		if data, ok, err := s.readLongLineAhead(first); ok {
			return data, err
		}
	}
	// Straight from the read buffer to the spill file: nothing of a long
	// line is held beside the read buffer until it is known to fit.
	s.buf = s.buf[:0]
	var spilled int64 // bytes of the line in the spill file
	if len(first) >= spillAt && s.startSpill() && s.spillWrite(first) {
		spilled = int64(len(first))
	} else {
		s.buf = append(s.buf, first...)
	}
	for {
		data, err := s.br.ReadSlice('\n')
		s.stats.Bytes += int64(len(data))
		if int64(len(s.buf))+spilled+int64(len(data)) > int64(s.maxLine)+2 {
			s.buf = s.buf[:0]
			return nil, s.skipLongLine(err)
		}
		if spilled == 0 && len(s.buf)+len(data) > spillAt && s.startSpill() {
			if s.spillWrite(s.buf) {
				spilled, s.buf = int64(len(s.buf)), s.buf[:0]
			}
		}
		if spilled > 0 {
			if s.spillWrite(data) {
				spilled += int64(len(data))
			} else {
				// The disk is full, say: the line goes on in memory.
				n := spilled
				spilled = 0
				if uerr := s.unspill(n, data); uerr != nil {
					return nil, s.fail(uerr)
				}
			}
		} else {
			s.buf = append(s.buf, data...)
		}
		switch err {
		case nil, io.EOF:
			if spilled > 0 {
				if rerr := s.unspill(spilled, nil); rerr != nil {
					return nil, s.fail(rerr)
				}
			}
			s.long = true
			return trimEOL(s.buf), nil
		case bufio.ErrBufferFull:
			continue
		default:
			return nil, s.fail(err)
		}
	}
}

// scanChunk is what readLongLineAhead reads at a time.
const scanChunk = 64 << 10

// readLongLineAhead reads a long line of a regular file: its end is found
// by reading ahead with ReadAt, and then the line is read into a buffer
// of its size, or skipped by seeking past it. ok is false when the file
// cannot be read that way (the caller assembles the line as for a pipe).
func (s *lineSource) readLongLineAhead(first []byte) (data []byte, ok bool, err error) {
	pos, err := s.file.Seek(0, io.SeekCurrent)
	if err != nil {
		s.file = nil
		return nil, false, nil
	}
	pos -= int64(s.br.Buffered())
	scratch := make([]byte, scanChunk)
	var rest int64 // bytes of the line after first, its newline included
	for {
		k, rerr := s.file.ReadAt(scratch, pos+rest)
		if i := bytes.IndexByte(scratch[:k], '\n'); i >= 0 {
			rest += int64(i + 1)
			break
		}
		rest += int64(k)
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, true, s.fail(rerr)
		}
	}
	s.stats.Bytes += rest
	if int64(len(first))+rest > int64(s.maxLine)+2 {
		if _, err := s.file.Seek(pos+rest, io.SeekStart); err != nil {
			return nil, true, s.fail(err)
		}
		s.br.Reset(s.file)
		return nil, true, s.skipLongLine(nil)
	}
	n := len(first) + int(rest)
	if cap(s.buf) >= n {
		s.buf = s.buf[:n]
	} else {
		s.buf = make([]byte, n)
	}
	copy(s.buf, first)
	if _, err := io.ReadFull(s.br, s.buf[len(first):]); err != nil {
		return nil, true, s.fail(err)
	}
	s.long = true
	return trimEOL(s.buf), true, nil
}

// startSpill readies the spill file; false when there is none (the line
// is then assembled in memory, as it always could be).
func (s *lineSource) startSpill() bool {
	if s.noSpill {
		return false
	}
	if s.spill == nil {
		f, err := os.CreateTemp("", "tokenmill-line-*")
		if err != nil {
			s.noSpill = true
			return false
		}
		os.Remove(f.Name()) // the open descriptor keeps it until closed
		s.spill = f
	}
	if err := s.spill.Truncate(0); err != nil {
		s.noSpill = true
		return false
	}
	_, err := s.spill.Seek(0, io.SeekStart)
	s.noSpill = err != nil
	return err == nil
}

func (s *lineSource) spillWrite(p []byte) bool {
	if _, err := s.spill.Write(p); err != nil {
		s.noSpill = true
		return false
	}
	return true
}

var errSpillRead = errors.New("reading back a long line from its temporary file")

// unspill reads the n bytes of the line in the spill file back into a
// buffer of their size, followed by rest: the line is then in memory
// once, as the caller gets it.
func (s *lineSource) unspill(n int64, rest []byte) error {
	buf := make([]byte, n, n+int64(len(rest)))
	if _, err := s.spill.ReadAt(buf, 0); err != nil {
		s.noSpill = true
		return fmt.Errorf("%w: %v", errSpillRead, err)
	}
	s.buf = append(buf, rest...)
	s.spill.Truncate(0)
	return nil
}

// skipLongLine discards the rest of an over-long line and reports it.
func (s *lineSource) skipLongLine(err error) error {
	s.buf = s.buf[:0]
	for err == bufio.ErrBufferFull {
		var data []byte
		data, err = s.br.ReadSlice('\n')
		s.stats.Bytes += int64(len(data))
	}
	s.line++
	if err != nil && err != io.EOF {
		return s.fail(err)
	}
	if s.spill != nil {
		s.spill.Truncate(0)
	}
	limit := ""
	if s.limit != "" {
		limit = " (" + s.limit + ")"
	}
	return &InputError{File: s.name, Line: s.line, Reason: ReasonLineTooLong,
		Err: fmt.Errorf("line longer than %d bytes%s: skipped without being held", s.maxLine, limit)}
}

func (s *lineSource) fail(err error) error {
	return &InputError{File: s.name, Line: s.line + 1, Reason: ReasonUnreadable, Err: describeReadError(err)}
}

func (s *lineSource) close() error {
	if s.spill != nil {
		s.spill.Close()
		s.spill = nil
	}
	return s.closer.Close()
}

func trimEOL(b []byte) []byte {
	n := len(b)
	if n > 0 && b[n-1] == '\n' {
		n--
		if n > 0 && b[n-1] == '\r' {
			n--
		}
	} else if n > 0 && b[n-1] == '\r' {
		n--
	}
	return b[:n]
}

func isBlank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}

// describeReadError names the usual cause of a failed decompression.
func describeReadError(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("input ends early (truncated or partly written file?): %w", err)
	}
	return zstdError(err)
}

// logf is the Logger's Logf, or nil when there is none.
func (r *Reader) logf() func(format string, args ...any) {
	if r.log == nil {
		return nil
	}
	return r.log.Logf
}
