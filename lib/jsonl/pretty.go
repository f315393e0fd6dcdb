package jsonl

import (
	"bufio"
	"io"
)

// A file whose first line is a lone "{" is pretty-printed JSON: one object
// spread over many lines (json.dumps(indent=2), a saved API response), or
// several one after another (jq's output). JSON Lines cannot start that
// way, so such a file is read as a stream of objects, each compacted onto
// one line and numbered by the line it starts on, instead of as dozens of
// broken lines.

// valueSource reads pretty-printed JSON objects one after another.
type valueSource struct{ *arraySource }

func newValueSource(name string, br *bufio.Reader, closer io.Closer, maxLine int, stats *Stats) valueSource {
	s := newArraySource(name, br, closer, maxLine, stats)
	s.element, s.inside = "record", "a pretty-printed JSON object"
	return valueSource{s}
}

func (s valueSource) next() (RawLine, error) {
	c, err := s.skipSpace()
	if err == io.EOF {
		return RawLine{}, io.EOF
	}
	if err != nil {
		return RawLine{}, s.truncated(err)
	}
	if c != '{' {
		return RawLine{}, s.errorf("expected a JSON object, found %q: a file that starts with a pretty-printed object is read as objects one after another", c)
	}
	start := s.line
	if err := s.readValue(c); err != nil {
		return RawLine{}, err
	}
	return RawLine{Data: s.buf, File: s.name, Line: start}, nil
}

// startsPretty reports whether the first line that is not blank is a lone
// "{". Like firstNonSpace it waits only for the bytes it needs, and looks
// no further than the read buffer.
func startsPretty(br *bufio.Reader) bool {
	for {
		b, _ := br.Peek(br.Buffered())
		i := 0
		for i < len(b) && isSpace(b[i]) {
			i++
		}
		brace := i < len(b)
		if brace {
			if b[i] != '{' {
				return false
			}
			for i++; i < len(b); i++ {
				switch {
				case b[i] == '\n':
					return true
				case !isSpace(b[i]):
					return false
				}
			}
		}
		if len(b) >= readBufferSize {
			return false
		}
		if _, err := br.Peek(len(b) + 1); err != nil {
			// The input ends after a lone "{": read it, to report it
			// as a truncated object.
			return brace
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
