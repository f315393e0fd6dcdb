package jsonl

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"

	asmutf8 "github.com/segmentio/asm/utf8"
)

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// appendEscaped writes s as a JSON string token, byte for byte what
// json.AppendEscape(dst, s, 0) writes (quote, backslash and control
// characters escaped, invalid UTF-8 as \ufffd, U+2028 and U+2029
// escaped), but passing runs of plain ASCII eight bytes at a time and
// three-byte characters without decoding them, which is most of the text
// of a dataset's Parquet columns.
func appendEscaped(dst, s []byte) []byte {
	if asmutf8.Valid(s) {
		return appendEscapedValid(dst, s)
	}
	dst = append(dst, '"')
	i, j := 0, 0 // s[i:j] is plain, not yet written
	for j < len(s) {
		j = PlainRun(s, j)
		if j >= len(s) {
			break
		}
		c := s[j]
		switch {
		case c >= utf8.RuneSelf:
			// Runs of three-byte characters (CJK text), but U+2028 and
			// U+2029 (E2 80 A8/A9), passed without decoding them.
			if k := threeByteRun(s, j); k > j {
				j = k
				continue
			}
			r, size := utf8.DecodeRune(s[j:])
			switch {
			case r == utf8.RuneError && size == 1:
				dst = append(append(dst, s[i:j]...), `\ufffd`...)
				i = j + size
			case r == '\u2028' || r == '\u2029':
				dst = append(append(dst, s[i:j]...), `\u202`...)
				dst = append(dst, hexDigits[r&0xf])
				i = j + size
			}
			j += size
		case c == '"' || c == '\\':
			dst = append(append(dst, s[i:j]...), '\\', c)
			j++
			i = j
		case c < 0x20:
			dst = appendControl(append(dst, s[i:j]...), c)
			j++
			i = j
		default: // plain, within the last seven bytes
			j++
		}
	}
	dst = append(dst, s[i:]...)
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

// appendEscapedValid is appendEscaped for valid UTF-8 (checked first, many
// bytes at a time): past ASCII only U+2028 and U+2029 need escaping, so
// text of any script goes eight bytes at a time, stopping only at a quote,
// a backslash, a control character or an E2 byte (which leads those two).
func appendEscapedValid(dst, s []byte) []byte {
	dst = append(dst, '"')
	i, j := 0, 0 // s[i:j] is plain, not yet written
	for j < len(s) {
		for j+8 <= len(s) {
			if m := escapeFlags(binary.LittleEndian.Uint64(s[j:])); m != 0 {
				j += bits.TrailingZeros64(m) / 8
				break
			}
			j += 8
		}
		if j >= len(s) {
			break
		}
		switch c := s[j]; {
		case c == '"' || c == '\\':
			dst = append(append(dst, s[i:j]...), '\\', c)
			j++
			i = j
		case c < 0x20:
			dst = appendControl(append(dst, s[i:j]...), c)
			j++
			i = j
		case c == 0xe2 && j+2 < len(s) && s[j+1] == 0x80 && (s[j+2] == 0xa8 || s[j+2] == 0xa9):
			dst = append(append(dst, s[i:j]...), `\u202`...)
			dst = append(dst, hexDigits[s[j+2]-0xa0])
			j += 3
			i = j
		default: // plain: an E2 of another character, a false flag, or a tail byte
			j++
		}
	}
	dst = append(dst, s[i:]...)
	return append(dst, '"')
}

// escapeFlags flags the bytes of w that stop appendEscapedValid: the
// lowest flag is the first such byte (a false flag from a borrow only ever
// sits above a true one).
func escapeFlags(w uint64) uint64 {
	return zeroByte(w^(lsb*'"')) | zeroByte(w^(lsb*'\\')) | ((w - lsb*0x20) & ^w & msb) | zeroByte(w^(lsb*0xe2))
}

// appendControl writes the escape of control character c.
func appendControl(dst []byte, c byte) []byte {
	switch c {
	case '\b':
		return append(dst, `\b`...)
	case '\f':
		return append(dst, `\f`...)
	case '\n':
		return append(dst, `\n`...)
	case '\r':
		return append(dst, `\r`...)
	case '\t':
		return append(dst, `\t`...)
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
}

// threeByteRun returns where the run of valid three-byte characters of s
// from j ends: those led by E1-EF but ED (whose surrogates are invalid) and
// E2 (U+2028 and U+2029 are escaped).
func threeByteRun(s []byte, j int) int {
	for j+2 < len(s) {
		c := s[j]
		if c < 0xe1 || c > 0xef || c == 0xed || c == 0xe2 || s[j+1]&0xc0 != 0x80 || s[j+2]&0xc0 != 0x80 {
			break
		}
		j += 3
	}
	return j
}

// PlainRun returns where the run of plain bytes of b from i ends, going
// eight bytes at a time: at the first quote, backslash, control
// character or byte past ASCII, or where fewer than eight bytes are left
// (which the caller reads one by one).
func PlainRun(b []byte, i int) int {
	for i+8 <= len(b) {
		w := binary.LittleEndian.Uint64(b[i:])
		// The lowest flagged byte is the first: a false flag from a
		// borrow only ever sits above a true one.
		if m := zeroByte(w^(lsb*'"')) | zeroByte(w^(lsb*'\\')) | ((w - lsb*0x20) & ^w & msb) | w&msb; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
		i += 8
	}
	return i
}

// zeroByte is non-zero when some byte of w is zero.
func zeroByte(w uint64) uint64 { return (w - lsb) & ^w & msb }
