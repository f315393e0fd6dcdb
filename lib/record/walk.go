package record

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// Walker is the one walk of JSON's grammar that every fast path reading
// records without decoding them takes (this package's Object and Array,
// extract's fields, quality's answers), so that they all accept the same
// text. It finds where each value ends, checking it as json.Valid does
// (RFC 8259; any byte but a control character inside strings, invalid
// UTF-8 included), and builds nothing. A walk that meets a fault, or
// nesting deeper than its caller allows, returns an index below 0; the
// caller then rejects the line, or hands it to a full decoder that words
// the reason.
//
// The zero Walker checks everything but UTF-8.
type Walker struct {
	// Trusted walks text known to be valid JSON (a reader built it, or a
	// checked walk handed it out): a string value is only searched for
	// its closing quote. Keys are checked all the same, for their kind.
	Trusted bool
	// NoteNonASCII has the walk set SawNonASCII when a string it checks
	// holds a byte above ASCII: a reader that needs valid UTF-8 then
	// checks only such lines. (The walk does not check UTF-8 itself: the
	// vectorized check is assembly, which escape analysis cannot see
	// through, and would move every Walker and Object to the heap.)
	NoteNonASCII bool
	SawNonASCII  bool
}

// checking and trusting are never written (neither notes non-ASCII), so
// any goroutine may walk with them.
var checking, trusting = Walker{}, Walker{Trusted: true}

// tooDeep is what a walk returns for nesting past the allowed depth; -1
// for any other fault.
const tooDeep = -2

// StringKind tells what a string literal holds, so that its reader can
// skip the work a plain one does not need (UnquoteKnown): a clear bit is
// a promise, a set one only a maybe.
type StringKind uint8

const (
	Escaped  StringKind = 1 << iota // a backslash escape
	NonASCII                        // a byte above ASCII
)

// StringEnd returns the index past the string literal at b[i] == '"' and
// what it holds, or -1: unterminated, a raw control character, or a bad
// escape.
func (w *Walker) StringEnd(b []byte, i int) (int, StringKind) {
	if w.Trusted {
		return closingQuote(b, i+1), Escaped | NonASCII
	}
	return w.checkString(b, i)
}

// ValueEnd returns the index past the JSON value at b[i], or below 0.
// depth is how many arrays and objects it may nest, itself included.
func (w *Walker) ValueEnd(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; c {
	case '"':
		if w.Trusted {
			return closingQuote(b, i+1)
		}
		end, _ := w.checkString(b, i)
		return end
	case '{':
		if depth <= 0 {
			return tooDeep
		}
		i = SkipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1
		}
		for more := true; more; {
			_, _, at := w.key(b, i)
			if i = w.ValueEnd(b, at, depth-1); i < 0 {
				return i
			}
			i, more = next(b, i, '}')
		}
		return i
	case '[':
		if depth <= 0 {
			return tooDeep
		}
		i = SkipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1
		}
		for more := true; more; {
			if i = w.ValueEnd(b, i, depth-1); i < 0 {
				return i
			}
			i, more = next(b, i, ']')
		}
		return i
	case 't':
		return ScanLiteral(b, i, "true")
	case 'f':
		return ScanLiteral(b, i, "false")
	case 'n':
		return ScanLiteral(b, i, "null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return ScanNumber(b, i)
		}
		return -1
	}
}

// key reads the member key at b[i] and the colon after it: the key with
// its quotes, what it holds, and where the member's value starts (its
// index at or past len(b) when there is no key: ValueEnd then fails).
func (w *Walker) key(b []byte, i int) (quoted []byte, kind StringKind, at int) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, len(b)
	}
	end, kind := w.checkString(b, i)
	if end < 0 {
		return nil, 0, len(b)
	}
	if at = SkipSpace(b, end); at >= len(b) || b[at] != ':' {
		return nil, 0, len(b)
	}
	return b[i:end], kind, SkipSpace(b, at+1)
}

// next reads what follows a member or element ending at b[i], in a
// container that close ends: a comma (more, and the index of the next
// one), close (the index past it), or anything else (-1).
func next(b []byte, i int, close byte) (int, bool) {
	if i = SkipSpace(b, i); i < len(b) {
		switch b[i] {
		case ',':
			return SkipSpace(b, i+1), true
		case close:
			return i + 1, false
		}
	}
	return -1, false
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
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

// checkString is StringEnd checking the string. Most strings are short
// (keys, roles, finish reasons): their end is found among the first 16
// bytes, 8 at a time, without a call. Past them the quotes and
// backslashes are found with bytes.IndexByte, many bytes an instruction,
// and once the closing quote is found the whole text is read once more,
// eight bytes at a time, for control characters and bytes above ASCII.
// An escape is printable ASCII, so the text is checked whole, escapes
// and all.
func (w *Walker) checkString(b []byte, i int) (int, StringKind) {
	j := i + 1
	var seen uint64 // the bytes looked at, or'ed together
	for k := 0; k < 2 && j+8 <= len(b); k++ {
		x := binary.LittleEndian.Uint64(b[j:])
		if m := special(x); m != 0 {
			n := bits.TrailingZeros64(m) >> 3
			if b[j+n] != '"' {
				break // an escape or a control character: the loop reads the word again
			}
			if (seen|x&(1<<(8*n)-1))&highs == 0 {
				return j + n + 1, 0
			}
			w.noteNonASCII()
			return j + n + 1, NonASCII
		}
		seen |= x
		j += 8
	}
	var kind StringKind
	q := -1 // the next quote at or after j, once found
	for {
		if q < j {
			k := bytes.IndexByte(b[j:], '"')
			if k < 0 {
				return -1, 0
			}
			q = j + k
		}
		e := bytes.IndexByte(b[j:q], '\\')
		if e < 0 {
			break
		}
		e += j
		kind = Escaped // b[e+1] exists: the quote q is after e
		switch b[e+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			j = e + 2
		case 'u':
			if e+6 > len(b) || !IsHexDigit(b[e+2]) || !IsHexDigit(b[e+3]) || !IsHexDigit(b[e+4]) || !IsHexDigit(b[e+5]) {
				return -1, 0
			}
			j = e + 6
		default:
			return -1, 0
		}
	}
	text := b[i+1 : q]
	switch textKind(text) {
	case control:
		return -1, 0
	case high:
		kind |= NonASCII
		w.noteNonASCII()
	}
	return q + 1, kind
}

// noteNonASCII sets SawNonASCII if the walk notes it.
func (w *Walker) noteNonASCII() {
	if w.NoteNonASCII {
		w.SawNonASCII = true
	}
}

// closingQuote returns the index past the first quote at or after b[i]
// that no backslash escapes, or -1: the end of a string of valid JSON,
// whose text starts at b[i], found without looking at the text between.
func closingQuote(b []byte, i int) int {
	start := i
	for {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return -1
		}
		j := i + q
		k := j
		for k > start && b[k-1] == '\\' {
			k--
		}
		if (j-k)%2 == 0 {
			return j + 1
		}
		i = j + 1
	}
}

// What textKind finds in a string's text.
const (
	plain   = iota // printable ASCII (and DEL) only
	high           // a byte above ASCII, no control character
	control        // a control character, which JSON holds only escaped
)

// textKind reads s eight bytes at a time: (x - 0x20 each) borrows into a
// byte's top bit only where that byte is below 0x20 (or a byte below it
// was), and &^ x leaves out the bytes whose own top bit was set.
func textKind(s []byte) int {
	var or uint64
	i := 0
	for ; i+32 <= len(s); i += 32 {
		w := s[i : i+32 : i+32]
		a := binary.LittleEndian.Uint64(w[0:])
		b := binary.LittleEndian.Uint64(w[8:])
		c := binary.LittleEndian.Uint64(w[16:])
		d := binary.LittleEndian.Uint64(w[24:])
		if ((a-ones*0x20)&^a|(b-ones*0x20)&^b|(c-ones*0x20)&^c|(d-ones*0x20)&^d)&highs != 0 {
			return control
		}
		or |= a | b | c | d
	}
	for ; i+8 <= len(s); i += 8 {
		x := binary.LittleEndian.Uint64(s[i:])
		if (x-ones*0x20)&^x&highs != 0 {
			return control
		}
		or |= x
	}
	for ; i < len(s); i++ {
		if s[i] < 0x20 {
			return control
		}
		or |= uint64(s[i])
	}
	if or&highs != 0 {
		return high
	}
	return plain
}
