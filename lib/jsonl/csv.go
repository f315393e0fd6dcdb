package jsonl

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/klauspost/compress/gzip"
	"github.com/segmentio/encoding/json"
)

// CSV and TSV: a header row naming the columns, then a row per record.
// extract reads them (each row becomes a JSON object of its columns, so the
// layouts' field rules apply to column names as they do to JSON fields);
// every other tool refuses them with ErrCSV rather than calling each line
// malformed JSON.

// CSVOptions let a Reader read CSV and TSV; without them (Options.CSV
// nil) a CSV input is an unreadable input, ErrCSV.
type CSVOptions struct {
	// Delimiter separates the fields; 0: a tab for a .tsv name, a comma
	// for .csv, and for an input whose name says neither, a tab if its
	// header has one, else a comma.
	Delimiter rune
}

// ReasonMalformedCSV is the reject reason of a CSV row that cannot be
// read: a field count unlike the header's, a stray quote.
const ReasonMalformedCSV = "malformed_csv"

// ErrCSV is what a tool that reads JSON Lines says of a CSV input.
var ErrCSV = errors.New("not JSON Lines: CSV is read by extract")

// csvHeadLimit is how much of an input is looked at to tell CSV: a header
// row is short.
const csvHeadLimit = 64 << 10

// csvKind says whether an input is CSV, and its delimiter, from its name
// (.csv, .tsv, compressed or not) and the start of its content head: a
// JSON value is never CSV whatever its name, and an input whose name says
// neither is CSV when its first line is a header, two or more short
// column names and nothing else.
func csvKind(name string, head []byte, delim rune) (rune, bool) {
	base := strings.ToLower(filepath.Base(name))
	for _, ext := range []string{".gz", ".zst", ".zstd"} {
		base = strings.TrimSuffix(base, ext)
	}
	if strings.HasSuffix(base, ".parquet") {
		return 0, false // the Parquet reader says what is wrong with it
	}
	head = bytes.TrimPrefix(head, utf8BOM)
	if trimmed := bytes.TrimLeft(head, " \t\r\n"); len(trimmed) == 0 || trimmed[0] == '{' || trimmed[0] == '[' {
		return 0, false
	}
	switch {
	case strings.HasSuffix(base, ".csv"):
		return orDefault(delim, ','), true
	case strings.HasSuffix(base, ".tsv"):
		return orDefault(delim, '\t'), true
	}
	line, _, complete := bytes.Cut(head, []byte("\n"))
	if !complete && len(head) >= csvHeadLimit {
		return 0, false
	}
	line = bytes.TrimSuffix(line, []byte("\r"))
	if delim == 0 {
		delim = ','
		if bytes.IndexByte(line, '\t') >= 0 {
			delim = '\t'
		}
	}
	return delim, isHeader(line, delim)
}

func orDefault(d, def rune) rune {
	if d == 0 {
		return def
	}
	return d
}

// isHeader reports whether line is a row of two or more column names:
// words of letters, digits, spaces, '_', '-' and '.'.
func isHeader(line []byte, delim rune) bool {
	if !utf8.Valid(line) {
		return false
	}
	cr := csv.NewReader(bytes.NewReader(line))
	cr.Comma = delim
	names, err := cr.Read()
	if err != nil || len(names) < 2 {
		return false
	}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" || len(n) > 64 {
			return false
		}
		for _, r := range n {
			if !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune(" _-.", r) {
				return false
			}
		}
	}
	return true
}

// sniffCSV reports whether the file r (named name) is CSV, looking past
// gzip or zstd compression at the start of its content.
func sniffCSV(name string, r io.Reader) bool {
	br := bufio.NewReaderSize(r, csvHeadLimit)
	var body io.Reader = br
	switch magic := peekMagic(br); {
	case bytes.HasPrefix(magic, magicGzip):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return false
		}
		defer zr.Close()
		body = zr
	case bytes.HasPrefix(magic, magicZstd):
		zr, err := newZstdReader(br)
		if err != nil {
			return false
		}
		defer zr.Close()
		body = zr
	}
	head := make([]byte, csvHeadLimit)
	n, _ := io.ReadFull(body, head)
	_, ok := csvKind(name, head[:n], 0)
	return ok
}

// peekLine returns the input's first line (or as much of it as the
// buffer holds) without consuming it, waiting only for the bytes it needs
// so that a slow pipe is not held up.
func peekLine(br *bufio.Reader) []byte {
	for {
		b, _ := br.Peek(br.Buffered())
		if bytes.IndexByte(b, '\n') >= 0 || len(b) >= csvHeadLimit {
			return b
		}
		if _, err := br.Peek(len(b) + 1); err != nil {
			b, _ = br.Peek(br.Buffered())
			return b
		}
	}
}

// csvSource reads the rows of a CSV input as JSON objects.
type csvSource struct {
	name    string
	cr      *csv.Reader
	closer  io.Closer
	count   *countReader
	header  []string // column names; "" for a column without one, left out
	started bool
	last    int64 // the line of the last row read
	buf     []byte
	stats   *Stats
	maxLine int
	// ended: a row ran past maxLine; the rest of the file is not read.
	ended bool
}

func newCSVSource(name string, br *bufio.Reader, closer io.Closer, delim rune, maxLine int, stats *Stats) *csvSource {
	count := &countReader{r: br, limit: int64(maxLine) + csvReadAhead}
	cr := csv.NewReader(count)
	cr.Comma = delim
	cr.ReuseRecord = true
	// TSV has no quoting of its own: a quote in a field is text.
	cr.LazyQuotes = delim == '\t'
	return &csvSource{name: name, cr: cr, closer: closer, count: count, stats: stats, maxLine: maxLine}
}

// csvReadAhead is what the CSV reader may have read past a row's end
// (its own buffer), allowed on top of the line limit.
const csvReadAhead = 64 << 10

// errRowTooLong is what countReader says once a row has taken more than
// its limit: the CSV reader holds a row whole, so it is stopped there.
var errRowTooLong = errors.New("row too long")

// countReader counts what the CSV reader reads, and refuses to read more
// than limit bytes for one row (from mark, set as each row starts).
type countReader struct {
	r           io.Reader
	n           int64
	mark, limit int64
}

func (c *countReader) Read(p []byte) (int, error) {
	if c.n-c.mark > c.limit {
		return 0, errRowTooLong
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (s *csvSource) next() (RawLine, error) {
	if s.ended {
		return RawLine{}, io.EOF
	}
	if !s.started {
		s.started = true
		if err := s.readHeader(); err != nil {
			return RawLine{}, err
		}
	}
	s.count.mark = s.count.n
	row, err := s.cr.Read()
	s.stats.Bytes = s.count.n
	var pe *csv.ParseError
	switch {
	case err == io.EOF:
		return RawLine{}, io.EOF
	case errors.Is(err, errRowTooLong):
		// A CSV row's end is only found by reading it whole (a quoted
		// field holds newlines), so the file ends here.
		s.ended = true
		return RawLine{}, &InputError{File: s.name, Line: s.last + 1, Reason: ReasonLineTooLong,
			Err: fmt.Errorf("a row longer than %d bytes: not held; the rest of the file is not read (a CSV row's end cannot be found without reading it)", s.maxLine)}
	case errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount):
		return RawLine{}, &InputError{File: s.name, Line: int64(pe.StartLine), Reason: ReasonMalformedCSV,
			Err: fmt.Errorf("%d fields where the header has %d", len(row), len(s.header))}
	case errors.As(err, &pe) && (errors.Is(pe.Err, csv.ErrQuote) || errors.Is(pe.Err, csv.ErrBareQuote)):
		return RawLine{}, &InputError{File: s.name, Line: int64(pe.StartLine), Reason: ReasonMalformedCSV, Err: errors.New(quoteProblem(pe.Err))}
	case err != nil:
		return RawLine{}, &InputError{File: s.name, Line: s.last + 1, Reason: ReasonUnreadable, Err: describeReadError(err)}
	}
	line, _ := s.cr.FieldPos(0)
	s.last = int64(line)
	s.buf = append(s.buf[:0], '{')
	for i, name := range s.header {
		if name == "" {
			continue
		}
		if len(s.buf) > 1 {
			s.buf = append(s.buf, ',')
		}
		s.buf = json.AppendEscape(s.buf, name, 0)
		s.buf = append(s.buf, ':')
		s.buf = json.AppendEscape(s.buf, row[i], 0)
	}
	s.buf = append(s.buf, '}')
	return RawLine{Data: s.buf, File: s.name, Line: int64(line)}, nil
}

// readHeader takes the column names from the first row.
func (s *csvSource) readHeader() error {
	s.cr.FieldsPerRecord = 0 // every row as long as the header
	s.count.mark = s.count.n
	names, err := s.cr.Read()
	if err == io.EOF {
		return io.EOF
	}
	if err != nil {
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			err = errors.New(quoteProblem(pe.Err))
		} else {
			err = describeReadError(err)
		}
		return &InputError{File: s.name, Line: 1, Reason: ReasonUnreadable, Err: fmt.Errorf("CSV header: %w", err)}
	}
	seen := map[string]bool{}
	s.header = make([]string, len(names))
	for i, n := range names {
		n = strings.TrimSpace(strings.TrimPrefix(n, "\ufeff"))
		if n != "" && seen[n] {
			return &InputError{File: s.name, Line: 1, Reason: ReasonUnreadable, Err: fmt.Errorf("CSV header: column %q appears twice", n)}
		}
		seen[n] = true
		s.header[i] = n
	}
	return nil
}

// quoteProblem says in words what a CSV reader's quote error means.
func quoteProblem(err error) string {
	if errors.Is(err, csv.ErrBareQuote) {
		return `a " inside a field that is not quoted (quote the field and double the ")`
	}
	if errors.Is(err, csv.ErrQuote) {
		return `a quoted field that is not closed, or a lone " inside one (double it)`
	}
	return err.Error()
}

func (s *csvSource) close() error { return s.closer.Close() }

func (o *CSVOptions) delimiter() rune {
	if o == nil {
		return 0
	}
	return o.Delimiter
}
