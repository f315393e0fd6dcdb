package record

import (
	"bytes"
	"encoding/binary"
)

// The scanner below is the fast path of the stages that read a few fields
// of a record and pass the line on byte for byte (dedup, shard, stats,
// merge). It checks the whole line against JSON's grammar in one pass,
// without building anything, and hands the caller the raw spans of the
// top-level members. Whatever it does not settle itself (an escaped key,
// deep nesting, anything malformed) it reports as not scanned, and the
// caller takes its full decoder, which gives the exact reason: so the fast
// path never accepts a line the decoder would refuse, and never has to
// word an error.

// scanDepth is how deep the scanner nests before it leaves a line to the
// full decoder (which checks MaxDepth).
const scanDepth = 64

// Object walks the members of one JSON object. With Scan it checks the
// whole object against JSON's grammar as it goes; with Walk it takes an
// object Scan has already checked (a value Scan handed out) and only
// splits it.
//
//	var o record.Object
//	o.Scan(line)
//	for key, value, ok := o.Next(); ok; key, value, ok = o.Next() { ... }
//	if !o.Valid() { ... the full decoder's path ... }
type Object struct {
	b       []byte
	i       int
	checked bool
	state   int8 // 0 first member next, 1 after a member, 2 done, -1 bad
}

// Scan starts walking b, one object with white space around it allowed,
// checking it whole.
func (o *Object) Scan(b []byte) { *o = Object{b: b, checked: true} }

// Walk starts walking obj, an object Scan already checked.
func (o *Object) Walk(obj []byte) { *o = Object{b: obj} }

// Next returns the next member: its key (the bytes between its quotes)
// and its raw value. ok is false at the end or at the first fault: then
// Valid tells which.
func (o *Object) Next() (key, value []byte, ok bool) {
	key, at, ok := o.NextKey()
	if !ok {
		return nil, nil, false
	}
	end := o.ValueEnd(at)
	o.Resume(end)
	if end < 0 {
		return nil, nil, false
	}
	return key, o.b[at:end], true
}

// NextKey is Next for a caller that reads one member's value itself, in
// the same pass that checks it: it returns the next key and where its
// value starts, and the caller then passes the index just past the value
// to Resume (-1 if it is not one), by ValueEnd or by a scanner of its own
// that checks what ValueEnd would.
func (o *Object) NextKey() (key []byte, at int, ok bool) {
	b, i := o.b, o.i
	switch o.state {
	case 0:
		i = SkipSpace(b, i)
		if i >= len(b) || b[i] != '{' {
			return o.bad()
		}
		i = SkipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			return o.end(i + 1)
		}
	case 1:
		i = SkipSpace(b, i)
		if i >= len(b) {
			return o.bad()
		}
		switch b[i] {
		case ',':
			i = SkipSpace(b, i+1)
		case '}':
			return o.end(i + 1)
		default:
			return o.bad()
		}
	case 3: // Resume was not called: the walk cannot go on
		o.state = -1
		return nil, 0, false
	default:
		return nil, 0, false
	}
	if i >= len(b) || b[i] != '"' {
		return o.bad()
	}
	end, plain := scanString(b, i)
	if end < 0 || !plain {
		return o.bad()
	}
	key = b[i+1 : end-1]
	i = SkipSpace(b, end)
	if i >= len(b) || b[i] != ':' {
		return o.bad()
	}
	o.state = 3 // the value's end is the caller's to give
	return key, SkipSpace(b, i+1), true
}

// ValueEnd returns the index just past the value at b[at] (checked with
// Scan, split with Walk), or -1 if there is none.
func (o *Object) ValueEnd(at int) int {
	if o.checked {
		return scanValue(o.b, at, 1)
	}
	if e, err := skipValue(o.b, at); err == nil {
		return e
	}
	return -1
}

// Resume goes on after the value NextKey left to the caller, which ends
// at end (-1: it was not a value, and the walk stops, not valid).
func (o *Object) Resume(end int) {
	if o.state != 3 {
		return
	}
	if end < 0 {
		o.state = -1
		return
	}
	o.i, o.state = end, 1
}

func (o *Object) bad() ([]byte, int, bool) {
	o.state = -1
	return nil, 0, false
}

func (o *Object) end(i int) ([]byte, int, bool) {
	o.state = 2
	if o.checked && SkipSpace(o.b, i) != len(o.b) {
		o.state = -1
	}
	return nil, 0, false
}

// ScanValue returns the index just past the JSON value at b[i], checked
// as Scan checks a member's value at the given depth (1 for a top-level
// member's value), or -1.
func ScanValue(b []byte, i, depth int) int { return scanValue(b, i, depth) }

// ScanString is scanString: the index past the string at b[i] == '"'
// and whether it holds no escape, or -1.
func ScanString(b []byte, i int) (int, bool) { return scanString(b, i) }

// Valid reports, once Next has returned false, whether the object was
// walked to its end: it is one object in JSON's grammar (with Scan) and
// no key held an escape. An escaped key, nesting past scanDepth and any
// fault leave it false, for the full decoder to settle.
func (o *Object) Valid() bool { return o.state == 2 }

// Array walks the elements of an array Scan already checked.
type Array struct {
	b     []byte
	i     int
	state int8
}

// Walk starts walking arr.
func (a *Array) Walk(arr []byte) { *a = Array{b: arr} }

// Next returns the next raw element; ok is false at the end, or if arr
// is not an array (then Valid is false).
func (a *Array) Next() (value []byte, ok bool) {
	b, i := a.b, a.i
	switch a.state {
	case 0:
		if len(b) < 2 || b[0] != '[' {
			a.state = -1
			return nil, false
		}
		i = SkipSpace(b, 1)
		if b[i] == ']' {
			a.state = 2
			return nil, false
		}
	case 1:
		i = SkipSpace(b, i)
		if b[i] == ']' {
			a.state = 2
			return nil, false
		}
		i = SkipSpace(b, i+1)
	default:
		return nil, false
	}
	end, err := skipValue(b, i)
	if err != nil {
		a.state = -1
		return nil, false
	}
	a.i, a.state = end, 1
	return b[i:end], true
}

// Valid reports whether the walk reached the array's end.
func (a *Array) Valid() bool { return a.state == 2 }

// scanValue returns the index just past the JSON value at b[i], or -1 if
// there is none there (or it nests past scanDepth).
func scanValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; c {
	case '"':
		end, _ := scanString(b, i)
		return end
	case '{':
		if depth >= scanDepth {
			return -1
		}
		i = SkipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return -1
			}
			if i, _ = scanString(b, i); i < 0 {
				return -1
			}
			i = SkipSpace(b, i)
			if i >= len(b) || b[i] != ':' {
				return -1
			}
			if i = scanValue(b, SkipSpace(b, i+1), depth+1); i < 0 {
				return -1
			}
			i = SkipSpace(b, i)
			if i >= len(b) {
				return -1
			}
			if b[i] == '}' {
				return i + 1
			}
			if b[i] != ',' {
				return -1
			}
			i = SkipSpace(b, i+1)
		}
	case '[':
		if depth >= scanDepth {
			return -1
		}
		i = SkipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1
		}
		for {
			if i = scanValue(b, i, depth+1); i < 0 {
				return -1
			}
			i = SkipSpace(b, i)
			if i >= len(b) {
				return -1
			}
			if b[i] == ']' {
				return i + 1
			}
			if b[i] != ',' {
				return -1
			}
			i = SkipSpace(b, i+1)
		}
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

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// HasControl reports whether s holds a byte below 0x20 (which a JSON
// string may not hold raw).
func HasControl(s []byte) bool { return hasControl(s) }

// hasControl reports whether s holds a byte below 0x20, eight bytes at a
// time: (x - 0x20 each) borrows into a byte's top bit only where that byte
// is below 0x20 (or a byte below it was), and &^ x leaves out the bytes
// whose own top bit was set.
func hasControl(s []byte) bool {
	i := 0
	for ; i+32 <= len(s); i += 32 {
		w := s[i : i+32 : i+32]
		a := binary.LittleEndian.Uint64(w[0:])
		b := binary.LittleEndian.Uint64(w[8:])
		c := binary.LittleEndian.Uint64(w[16:])
		d := binary.LittleEndian.Uint64(w[24:])
		if ((a-ones*0x20)&^a|(b-ones*0x20)&^b|(c-ones*0x20)&^c|(d-ones*0x20)&^d)&highs != 0 {
			return true
		}
	}
	for ; i+8 <= len(s); i += 8 {
		if x := binary.LittleEndian.Uint64(s[i:]); (x-ones*0x20)&^x&highs != 0 {
			return true
		}
	}
	for ; i < len(s); i++ {
		if s[i] < 0x20 {
			return true
		}
	}
	return false
}

// scanString returns the index past the string at b[i] == '"' and whether
// it holds no escape, or -1: unterminated, a raw control character, or a
// bad escape. Bytes of 0x80 and above are taken as they are: the stages
// read invalid UTF-8 as U+FFFD. Quotes and backslashes are found with
// bytes.IndexByte, which reads many bytes an instruction; the runs between
// them are checked for control characters eight bytes at a time.
func scanString(b []byte, i int) (int, bool) {
	plain := true
	j := i + 1
	q := -1 // the next quote at or after j, once found
	for {
		if q < j {
			k := bytes.IndexByte(b[j:], '"')
			if k < 0 {
				return -1, false
			}
			q = j + k
		}
		e := bytes.IndexByte(b[j:q], '\\')
		if e < 0 {
			// No byte of an escape is a control character, so the body
			// is checked for them once, whatever its escapes.
			if hasControl(b[i+1 : q]) {
				return -1, false
			}
			return q + 1, plain
		}
		e += j
		plain = false
		if e+1 >= len(b) {
			return -1, false
		}
		switch b[e+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			j = e + 2
		case 'u':
			if e+6 > len(b) || !IsHexDigit(b[e+2]) || !IsHexDigit(b[e+3]) || !IsHexDigit(b[e+4]) || !IsHexDigit(b[e+5]) {
				return -1, false
			}
			j = e + 6
		default:
			return -1, false
		}
	}
}
