package jsonl

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
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
			dst = append(dst, s[i:j]...)
			switch c {
			case '\b':
				dst = append(dst, `\b`...)
			case '\f':
				dst = append(dst, `\f`...)
			case '\n':
				dst = append(dst, `\n`...)
			case '\r':
				dst = append(dst, `\r`...)
			case '\t':
				dst = append(dst, `\t`...)
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
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
