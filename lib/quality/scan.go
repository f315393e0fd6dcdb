package quality

import (
	"bytes"
	"encoding/binary"
	"math/bits"

	"github.com/segmentio/asm/ascii"

	"tokenmill/lib/record"
)

// Parse reads a generation record in one pass that both validates the
// line as JSON and notes where the fields the checks read are: a
// generation record is mostly answer text, so its bytes are read once to
// validate and locate it (many at a time inside strings: str), instead of
// once by a validator and again by a field scanner. The grammar is the
// one json.Valid accepts (RFC 8259, any byte but a control character
// inside strings, invalid UTF-8 included); keys match exactly, as the
// record contract spells them; the last of repeated keys wins.

// Field slots: the top-level fields, then those of output.
const (
	fOutput = iota
	fError
	fMessages
	fPrompt
	fTools
	oText
	oReasoning
	oFinish
	oToolCalls
	oMessages
	oTurns
	numFields
)

// Where object keys are looked up.
const (
	levelTop = iota
	levelOutput
	levelNone
)

// span is a field's raw value; for a string, whether it holds an escape
// and whether it may hold a byte above ASCII (false means it does not).
type span struct {
	raw           []byte
	escaped, high bool
}

// scanner is the state of one pass; reused from line to line.
type scanner struct {
	b     []byte
	depth int
	f     [numFields]span
	key   []byte // an escaped key, unescaped
}

// scan validates line and fills s.f; it reports whether line is valid.
func (s *scanner) scan(line []byte) bool {
	s.b, s.depth, s.f = line, 0, [numFields]span{}
	i := record.SkipSpace(line, 0)
	if i >= len(line) {
		return false
	}
	level := levelNone
	if line[i] == '{' {
		level = levelTop
	}
	end := s.value(i, level)
	s.b = nil
	return end >= 0 && record.SkipSpace(line, end) == len(line)
}

// value validates the value at b[i] and returns the index past it, or -1;
// an object's keys are looked up at level.
func (s *scanner) value(i, level int) int {
	b := s.b
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; c {
	case '{':
		return s.object(i, level)
	case '[':
		return s.array(i)
	case '"':
		end, _, _ := s.str(i)
		return end
	case 't':
		return record.ScanLiteral(b, i, "true")
	case 'f':
		return record.ScanLiteral(b, i, "false")
	case 'n':
		return record.ScanLiteral(b, i, "null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return record.ScanNumber(b, i)
		}
		return -1
	}
}

// array and object validate a nested value, as deep as a record may be.
func (s *scanner) array(i int) int {
	if s.depth++; s.depth > record.MaxDepth {
		return -1
	}
	end := s.elements(i)
	s.depth--
	return end
}

func (s *scanner) object(i, level int) int {
	if s.depth++; s.depth > record.MaxDepth {
		return -1
	}
	end := s.members(i, level)
	s.depth--
	return end
}

func (s *scanner) elements(i int) int {
	b := s.b
	i = record.SkipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1
	}
	for {
		if i = s.value(i, levelNone); i < 0 {
			return -1
		}
		if i = after(b, i, ']'); i < 0 || b[i-1] == ']' {
			return i
		}
	}
}

// after reads what follows a value of an array or object closed by end:
// a comma (it returns the index of the next value) or end (the index past
// it), or it returns -1.
func after(b []byte, i int, end byte) int {
	i = record.SkipSpace(b, i)
	switch {
	case i >= len(b):
		return -1
	case b[i] == ',':
		return record.SkipSpace(b, i+1)
	case b[i] == end:
		return i + 1
	}
	return -1
}

func (s *scanner) members(i, level int) int {
	b := s.b
	i = record.SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return -1
		}
		keyEnd, keyEscaped, _ := s.str(i)
		if keyEnd < 0 {
			return -1
		}
		slot := -1
		if level != levelNone {
			slot = s.slot(b[i:keyEnd], keyEscaped, level)
		}
		i = record.SkipSpace(b, keyEnd)
		if i >= len(b) || b[i] != ':' {
			return -1
		}
		i = record.SkipSpace(b, i+1)
		if i >= len(b) {
			return -1
		}
		start, end := i, -1
		var sp span
		switch {
		case slot == fOutput:
			// A later output replaces an earlier one, fields and all.
			clear(s.f[oText:])
			if b[i] == '{' {
				end = s.object(i, levelOutput)
			} else {
				end = s.value(i, levelNone)
			}
		case b[i] == '"':
			end, sp.escaped, sp.high = s.str(i)
		default:
			end = s.value(i, levelNone)
		}
		if end < 0 {
			return -1
		}
		if slot >= 0 {
			sp.raw = b[start:end]
			s.f[slot] = sp
		}
		if i = after(b, end, '}'); i < 0 || b[i-1] == '}' {
			return i
		}
	}
}

// slot is the field slot of the quoted key at level, or -1.
func (s *scanner) slot(quoted []byte, escaped bool, level int) int {
	key := quoted[1 : len(quoted)-1]
	if escaped {
		var k string
		k, s.key = record.Unquote(quoted, s.key)
		key = []byte(k)
	}
	if level == levelTop {
		switch string(key) {
		case "output":
			return fOutput
		case "error":
			return fError
		case "messages":
			return fMessages
		case "prompt":
			return fPrompt
		case "tools":
			return fTools
		}
		return -1
	}
	switch string(key) {
	case "text":
		return oText
	case "reasoning":
		return oReasoning
	case "finish_reason":
		return oFinish
	case "tool_calls":
		return oToolCalls
	case "messages":
		return oMessages
	case "turns":
		return oTurns
	}
	return -1
}

const (
	ones  uint64 = 0x0101010101010101
	highs uint64 = 0x8080808080808080
)

// special marks, in the top bit of each byte, a quote, a backslash or a
// control character among the 8 bytes of x. A byte above a marked one may
// be marked wrongly, so only the lowest mark is to be trusted. (x^0x02 is
// below 0x21 exactly for the control characters and the quote.)
func special(x uint64) uint64 {
	y := x ^ (ones * 0x02)
	bs := x ^ (ones * '\\')
	return ((y-ones*0x21)&^y | (bs-ones)&^bs) & highs
}

// str validates the string starting at s.b[i] == '"' and returns the
// index past its closing quote (-1 if invalid), whether it holds an
// escape, and whether a byte above ASCII may be in it. The quotes and
// backslashes are found with bytes.IndexByte and the runs between them
// checked with asm's ValidPrint, both many bytes an instruction; only a
// run that is not all printable ASCII is looked at again, for a control
// character.
func (s *scanner) str(i int) (end int, escaped, high bool) {
	b := s.b
	j := i + 1
	// Most strings are short (keys, roles, finish reasons): their end is
	// found among the first 16 bytes, 8 at a time, without a call.
	var seen uint64 // the bytes looked at, or'ed together
	for k := 0; k < 2 && j+8 <= len(b); k++ {
		x := binary.LittleEndian.Uint64(b[j:])
		if m := special(x); m != 0 {
			if n := bits.TrailingZeros64(m) >> 3; b[j+n] == '"' {
				return j + n + 1, false, (seen|x&(1<<(8*n)-1))&highs != 0
			}
			break // an escape or a control character: the loop reads the word again
		}
		seen |= x
		j += 8
	}
	high = seen&highs != 0
	q := -1 // the next quote at or after j, once found
	for {
		if q < j {
			k := bytes.IndexByte(b[j:], '"')
			if k < 0 {
				return -1, false, false
			}
			q = j + k
		}
		e := q
		if k := bytes.IndexByte(b[j:q], '\\'); k >= 0 {
			e = j + k
		}
		if run := b[j:e]; !ascii.ValidPrint(run) {
			if record.HasControl(run) {
				return -1, false, false
			}
			high = true // or a DEL: true is always safe
		}
		if e == q {
			return q + 1, escaped, high
		}
		escaped = true // b[e+1] exists: the quote q is after e
		switch b[e+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			j = e + 2
		case 'u':
			if e+6 > len(b) || !record.IsHexDigit(b[e+2]) || !record.IsHexDigit(b[e+3]) || !record.IsHexDigit(b[e+4]) || !record.IsHexDigit(b[e+5]) {
				return -1, false, false
			}
			j = e + 6
		default:
			return -1, false, false
		}
	}
}
