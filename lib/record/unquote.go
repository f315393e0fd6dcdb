package record

import (
	"bytes"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/segmentio/asm/ascii"
	asmutf8 "github.com/segmentio/asm/utf8"
)

// The one decoder of raw JSON strings, for the stages that read a record's
// text without a full decode (dedup's key, quality's answers): a string
// literal as the record holds it becomes its text in one pass, without a
// copy when there is nothing to decode.
//
// Its UTF-8 rule is every decoder's in the project (encoding/json's and
// segmentio's): each byte of invalid UTF-8 becomes U+FFFD, and so does an
// unpaired surrogate escape (\ud800). The text is therefore always valid
// UTF-8, and two strings that differ only in their invalid bytes have the
// same text, as they would for any stage that decodes them and for the
// server that is sent them.
//
// The literal is expected to be valid JSON (the caller's parser checked
// it); anything else decodes to some text without a panic or a read out of
// bounds.

// AppendUnquoted appends the text of the JSON string literal q (its quotes
// included) to dst.
func AppendUnquoted(dst, q []byte) []byte {
	start := len(dst)
	dst = appendUnescaped(dst, literalBody(q))
	if text := dst[start:]; !valid(text) {
		dst = appendValid(dst[:start], bytes.Clone(text))
	}
	return dst
}

// Unquote returns the text of the JSON string literal q. Without an escape
// or an invalid byte the text aliases q; otherwise it is written into buf
// (returned for reuse) and aliases buf. Either way it is valid until the
// bytes it aliases are written again.
func Unquote(q, buf []byte) (string, []byte) {
	return UnquoteKnown(q, buf, bytes.IndexByte(q, '\\') >= 0, !ascii.Valid(q))
}

// UnquoteKnown is Unquote for a caller whose scanner has already learnt
// two things about q: whether it holds an escape, and whether it may hold
// a byte above ASCII (false means it holds none, so its text is valid
// UTF-8 as it stands). Passing true for either is always safe.
func UnquoteKnown(q, buf []byte, escaped, nonASCII bool) (string, []byte) {
	s := literalBody(q)
	if !escaped {
		if !nonASCII || valid(s) {
			return unsafe.String(unsafe.SliceData(s), len(s)), buf
		}
		buf = appendValid(buf[:0], s)
		return unsafe.String(unsafe.SliceData(buf), len(buf)), buf
	}
	// The text is never longer than its literal: made once at that size,
	// a long one is not grown to twice it.
	buf = appendUnescaped(slices.Grow(buf[:0], len(s)), s)
	if nonASCII && !valid(buf) {
		buf = appendValid(nil, buf)
	}
	return unsafe.String(unsafe.SliceData(buf), len(buf)), buf
}

// valid is utf8.Valid, vectorized (AVX2 where the CPU has it): on text
// of other scripts than Latin, utf8.Valid's loop of a rune at a time
// costs several times the scan that found the string
// (TestValidIsUTF8Valid keeps the two the same).
func valid(text []byte) bool { return asmutf8.Valid(text) }

// literalBody is q without its quotes.
func literalBody(q []byte) []byte {
	if len(q) < 2 {
		return nil
	}
	return q[1 : len(q)-1]
}

// appendUnescaped appends s, the inside of a string literal, with its
// escapes decoded; other bytes are copied as they are. A run of escapes
// ("\n\n") is decoded in one go. A malformed escape (which valid JSON never
// holds) is dropped or copied, never read past.
func appendUnescaped(dst, s []byte) []byte {
	for {
		i := bytes.IndexByte(s, '\\')
		if i < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		for s = s[i:]; len(s) > 0 && s[0] == '\\'; {
			if len(s) < 2 {
				return dst
			}
			c := s[1]
			s = s[2:]
			switch c {
			case 'u':
				if len(s) < 4 {
					return dst
				}
				r := hex4(s)
				s = s[4:]
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if len(s) >= 6 && s[0] == '\\' && s[1] == 'u' {
						r2 = hex4(s[2:])
					}
					// A pair decodes to a rune above U+FFFF, never to U+FFFD.
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r, s = d, s[6:]
					} else {
						r = utf8.RuneError
					}
				}
				dst = utf8.AppendRune(dst, r)
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			default: // '"', '\\', '/'
				dst = append(dst, c)
			}
		}
	}
}

// appendValid appends s with each byte of invalid UTF-8 replaced by
// U+FFFD, as encoding/json decodes it. Checking the decoded text rather
// than the literal gives the same result: an escape decodes to whole
// runes, which can neither complete nor break a sequence around them.
func appendValid(dst, s []byte) []byte {
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		if r == utf8.RuneError && n == 1 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		} else {
			dst = append(dst, s[:n]...)
		}
		s = s[n:]
	}
	return dst
}

// hex4 is the value of the four hex digits at the start of h (anything
// else gives some value: valid JSON holds only hex digits there).
func hex4(h []byte) rune {
	var r rune
	for _, c := range h[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c >= 'a':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
