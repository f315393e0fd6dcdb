package jsonl

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// arraySource streams the elements of a top-level JSON array one at a time,
// so a multi-gigabyte array file costs no more memory than its largest
// element. Elements come out compacted onto one line, ready to be written
// as JSONL; Line is the line on which the element starts.
type arraySource struct {
	name    string
	br      *bufio.Reader
	closer  io.Closer
	line    int64 // current line in the file, 1-based
	buf     []byte
	maxLine int
	stats   *Stats
	started bool
	ended   bool
	element string // what a value is called in errors: "array element", or "record"
	inside  string // what a truncated input ends inside
}

func newArraySource(name string, br *bufio.Reader, closer io.Closer, maxLine int, stats *Stats) *arraySource {
	return &arraySource{name: name, br: br, closer: closer, line: 1, maxLine: maxLine, stats: stats,
		element: "array element", inside: "the JSON array"}
}

func (s *arraySource) close() error { return s.closer.Close() }

func (s *arraySource) errorf(format string, args ...any) error {
	return &InputError{File: s.name, Line: s.line, Reason: ReasonUnreadable, Err: fmt.Errorf(format, args...)}
}

// readByte reads one byte, counting lines and bytes.
func (s *arraySource) readByte() (byte, error) {
	c, err := s.br.ReadByte()
	if err != nil {
		return 0, err
	}
	s.stats.Bytes++
	if c == '\n' {
		s.line++
	}
	return c, nil
}

func (s *arraySource) skipSpace() (byte, error) {
	for {
		c, err := s.readByte()
		if err != nil {
			return 0, err
		}
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return c, nil
		}
	}
}

func (s *arraySource) next() (RawLine, error) {
	if s.ended {
		return RawLine{}, io.EOF
	}
	c, err := s.skipSpace()
	if err != nil {
		return RawLine{}, s.truncated(err)
	}
	if !s.started {
		s.started = true
		if c != '[' {
			return RawLine{}, s.errorf("expected a JSON array")
		}
		if c, err = s.skipSpace(); err != nil {
			return RawLine{}, s.truncated(err)
		}
		if c == ']' {
			return RawLine{}, s.finish()
		}
	} else {
		switch c {
		case ']':
			return RawLine{}, s.finish()
		case ',':
			if c, err = s.skipSpace(); err != nil {
				return RawLine{}, s.truncated(err)
			}
		default:
			return RawLine{}, s.errorf("expected ',' or ']' between array elements, found %q", c)
		}
	}
	start := s.line
	if err := s.readValue(c); err != nil {
		return RawLine{}, err
	}
	return RawLine{Data: s.buf, File: s.name, Line: start}, nil
}

// readValue copies one JSON value starting with first into s.buf, dropping
// white space outside strings so the value fits on one line.
func (s *arraySource) readValue(first byte) error {
	s.buf = append(s.buf[:0], first)
	depth := 0
	switch first {
	case '{', '[':
		depth = 1
	case '"':
		if err := s.readString(); err != nil {
			return err
		}
		return nil
	}
	for {
		if len(s.buf) > s.maxLine {
			return s.errorf("%s longer than %d bytes", s.element, s.maxLine)
		}
		c, err := s.br.ReadByte()
		if err != nil {
			return s.truncated(err)
		}
		if depth == 0 && (c == ',' || c == ']' || c == ' ' || c == '\n' || c == '\t' || c == '\r') {
			s.br.UnreadByte() // a scalar ends here; next() reads the separator
			return nil
		}
		s.stats.Bytes++
		switch c {
		case '\n':
			s.line++
			continue
		case ' ', '\t', '\r':
			continue
		case '"':
			s.buf = append(s.buf, c)
			if err := s.readString(); err != nil {
				return err
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		}
		s.buf = append(s.buf, c)
		if depth == 0 && (c == '}' || c == ']') {
			return nil
		}
	}
}

// readString copies the rest of a string whose opening quote is in s.buf.
func (s *arraySource) readString() error {
	for {
		chunk, err := s.br.ReadSlice('"')
		s.stats.Bytes += int64(len(chunk))
		s.appendStringChunk(chunk)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return s.truncated(err)
		}
		if len(s.buf) > s.maxLine {
			return s.errorf("%s longer than %d bytes", s.element, s.maxLine)
		}
		// The quote ends the string unless an odd run of backslashes escapes it.
		n := 0
		for i := len(s.buf) - 2; i >= 0 && s.buf[i] == '\\'; i-- {
			n++
		}
		if n%2 == 0 {
			return nil
		}
	}
}

// appendStringChunk copies part of a string. A raw line break inside a
// string is invalid JSON that some writers produce; it is escaped (and
// counted as a line) so the element still fits on one output line.
func (s *arraySource) appendStringChunk(chunk []byte) {
	for {
		i := bytes.IndexAny(chunk, "\r\n")
		if i < 0 {
			s.buf = append(s.buf, chunk...)
			return
		}
		s.buf = append(s.buf, chunk[:i]...)
		if chunk[i] == '\n' {
			s.line++
			s.buf = append(s.buf, '\\', 'n')
		} else {
			s.buf = append(s.buf, '\\', 'r')
		}
		chunk = chunk[i+1:]
	}
}

func (s *arraySource) finish() error {
	s.ended = true
	if c, err := s.skipSpace(); err == nil {
		return s.errorf("unexpected %q after the end of the JSON array", c)
	} else if err != io.EOF {
		return s.truncated(err)
	}
	return io.EOF
}

// truncated turns an early end of input into an error naming the line.
func (s *arraySource) truncated(err error) error {
	if errors.Is(err, io.EOF) {
		err = fmt.Errorf("input ends inside %s (truncated file?)", s.inside)
	}
	return &InputError{File: s.name, Line: s.line, Reason: ReasonUnreadable, Err: describeReadError(err)}
}
