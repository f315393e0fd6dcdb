package jsonl

import "bufio"

// An input that starts with "[" is a JSON array only when the whole input
// is one. JSON Lines whose lines are lists (xtuner's openai format: each
// line a list of messages) start the same way, but there the first line
// closes its list and more lines follow; a JSON array's first line either
// leaves it open (one element per line, pretty-printed) or is the whole
// input (json.dump without an indent).

// arrayLines reports whether an input that starts with "[" is JSON Lines:
// its first line holds one complete value and another line follows. It
// waits only for the bytes it needs, and looks no further than the read
// buffer (a first line longer than that is read as a JSON array).
func arrayLines(br *bufio.Reader) bool {
	for {
		b, _ := br.Peek(br.Buffered())
		if v := scanFirstLine(b); v != lineUndecided {
			return v == lineThenMore
		}
		if len(b) >= readBufferSize {
			return false
		}
		if _, err := br.Peek(len(b) + 1); err != nil {
			return false // the input ends with its first line: one array
		}
	}
}

type firstLine int

const (
	lineUndecided firstLine = iota
	lineThenMore            // a complete value on the first line, more lines after
	lineNot                 // anything else: a value across lines, or more on its line
)

// scanFirstLine follows the value that opens b (after white space) to its
// end.
func scanFirstLine(b []byte) firstLine {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	depth, inString := 0, false
	for ; i < len(b); i++ {
		c := b[i]
		switch {
		case inString:
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			case '\n':
				return lineNot
			}
			continue
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		case c == '\n':
			return lineNot
		}
		if depth == 0 {
			return afterFirstValue(b[i+1:])
		}
	}
	return lineUndecided
}

// afterFirstValue decides from what follows the first line's value.
func afterFirstValue(b []byte) firstLine {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	switch {
	case i == len(b):
		return lineUndecided
	case b[i] != '\n':
		return lineNot
	}
	for ; i < len(b); i++ {
		if !isSpace(b[i]) {
			return lineThenMore
		}
	}
	return lineUndecided
}
