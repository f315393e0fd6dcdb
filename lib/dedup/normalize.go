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

// kept[m][c] is whether mode m copies the ASCII byte c unchanged.
var kept = func() (t [4][utf8.RuneSelf]bool) {
	for c := range utf8.RuneSelf {
		r := rune(c)
		space, upper, punct := unicode.IsSpace(r), 'A' <= r && r <= 'Z', unicode.IsPunct(r)
		t[None][c] = true
		t[WS][c] = !space
		t[Lower][c] = !space && !upper
		t[Aggressive][c] = !space && !upper && !punct
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
	keep := &kept[m]
	start := len(dst)
	space := false // a run of white space is pending
	for i := 0; i < len(s); {
		// Copy the longest run of text that stays as it is in one go.
		j := i
		for j < len(s) {
			if c := s[j]; c < utf8.RuneSelf {
				if !keep[c] {
					break
				}
				j++
			} else if r, size := utf8.DecodeRuneInString(s[j:]); unchanged(m, r, size) {
				j += size
			} else {
				break
			}
		}
		if j > i {
			if space && len(dst) > start {
				dst = append(dst, ' ')
			}
			space = false
			dst = append(dst, s[i:j]...)
			if i = j; i == len(s) {
				break
			}
		}
		// s[i] changes: white space, a capital, punctuation.
		r, size := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(s[i:])
		}
		i += size
		switch {
		case unicode.IsSpace(r):
			space = true
			continue
		case m == Aggressive && unicode.IsPunct(r):
			continue
		}
		if space && len(dst) > start {
			dst = append(dst, ' ')
		}
		space = false
		dst = utf8.AppendRune(dst, unicode.ToLower(r)) // m >= Lower: only case is left to change
	}
	return dst, scratch
}

// unchanged reports whether mode m (other than None) keeps the non-ASCII
// rune r, of size bytes, as it is. CJK ideographs, the bulk of non-Latin
// text, have no case, white space or punctuation, so they skip the tables.
func unchanged(m Mode, r rune, size int) bool {
	switch {
	case r == utf8.RuneError && size == 1:
		return true // not UTF-8: copied as it is
	case cjkFirst <= r && r <= cjkLast:
		return true
	case unicode.IsSpace(r):
		return false
	case m == Aggressive && unicode.IsPunct(r):
		return false
	}
	return m == WS || unicode.ToLower(r) == r
}

// The CJK Unified Ideographs Extension A, Yijing and CJK Unified
// Ideographs blocks: caseless letters and symbols (a test checks it).
const cjkFirst, cjkLast = 0x3400, 0x9FFF
