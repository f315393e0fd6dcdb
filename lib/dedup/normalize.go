package dedup

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Mode is how a key is normalized before it is compared. Only the key is
// normalized: records are always written as they were read.
type Mode uint8

const (
	// None compares keys byte for byte.
	None Mode = iota
	// WS trims white space and collapses every run of it to one space.
	WS
	// Lower is WS plus Unicode lowercasing.
	Lower
	// Aggressive is Unicode NFKC, then Lower, with punctuation removed.
	Aggressive
)

var modeNames = [...]string{"none", "ws", "lower", "aggressive"}

func (m Mode) String() string { return modeNames[m] }

// ParseMode reads a --normalize value.
func ParseMode(s string) (Mode, error) {
	for i, n := range modeNames {
		if n == s {
			return Mode(i), nil
		}
	}
	return None, fmt.Errorf("unknown normalization %q (none, ws, lower, aggressive)", s)
}

// asciiClass tells, for each ASCII byte, what normalizing does with it.
const (
	classKeep  = iota
	classSpace // white space: collapses
	classUpper // A-Z
	classPunct // removed by Aggressive
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := range utf8.RuneSelf {
		switch r := rune(c); {
		case unicode.IsSpace(r):
			t[c] = classSpace
		case 'A' <= r && r <= 'Z':
			t[c] = classUpper
		case unicode.IsPunct(r):
			t[c] = classPunct
		}
	}
	return t
}()

// Append appends s normalized by m to dst. scratch is a buffer Aggressive
// may use for the NFKC form; the (possibly grown) scratch is returned.
//
// White space is Unicode White_Space (so a no-break space counts);
// punctuation is Unicode category P (so symbols such as $ + < = and emoji
// are kept). Bytes that are not valid UTF-8 are kept as they are.
func (m Mode) Append(dst []byte, s string, scratch []byte) ([]byte, []byte) {
	if m == None {
		return append(dst, s...), scratch
	}
	if m == Aggressive && !norm.NFKC.IsNormalString(s) {
		scratch = norm.NFKC.AppendString(scratch[:0], s)
		s = string(scratch) // the loop below reads s while dst grows
	}
	lower, dropPunct := m >= Lower, m == Aggressive
	start := len(dst)
	space := false // a run of white space is pending
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			switch asciiClass[c] {
			case classSpace:
				space = true
				continue
			case classPunct:
				if dropPunct {
					continue
				}
			case classUpper:
				if lower {
					c += 'a' - 'A'
				}
			}
			if space && len(dst) > start {
				dst = append(dst, ' ')
			}
			space = false
			dst = append(dst, c)
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			if space && len(dst) > start {
				dst = append(dst, ' ')
			}
			space = false
			dst = append(dst, c)
			i++
			continue
		}
		i += size
		switch {
		case unicode.IsSpace(r):
			space = true
			continue
		case dropPunct && unicode.IsPunct(r):
			continue
		}
		if space && len(dst) > start {
			dst = append(dst, ' ')
		}
		space = false
		if lower {
			r = unicode.ToLower(r)
		}
		dst = utf8.AppendRune(dst, r)
	}
	return dst, scratch
}
