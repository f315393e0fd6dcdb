package extract

import (
	"bytes"
	"unicode/utf8"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/record"
)

// Message contents travel through extract as JSON string tokens (quotes
// and escapes included), sliced straight out of the input line. Copying a
// token to the output costs one memmove, where decoding and re-encoding
// the text would cost two passes and an allocation for every string with
// an escape in it. Only the rare paths (content ids, joined content parts,
// invalid UTF-8) unescape.

// present reports whether a raw field was given a non-null value.
func present(raw []byte) bool { return record.Present(raw) }

func isString(raw []byte) bool { return len(raw) >= 2 && raw[0] == '"' }

// tokenText returns the text of a string token, unescaping into scratch
// only when the token has escapes. The result may alias tok or scratch.
func tokenText(scratch, tok []byte) []byte {
	body := tok[1 : len(tok)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return body
	}
	return json.AppendUnescape(scratch, tok, 0)
}

// blankToken reports whether a string token holds only white space
// (spaces, tabs, line breaks), escaped or not. It stops at the first
// other character, so it costs nothing on real text.
func blankToken(tok []byte) bool {
	body := tok[1 : len(tok)-1]
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case ' ', '\t', '\n', '\r':
		case '\\':
			if i+1 < len(body) {
				switch body[i+1] {
				case 'n', 't', 'r':
					i++
					continue
				}
			}
			return false
		default:
			return false
		}
	}
	return true
}

// tokenChars counts the characters (code points) of a string token's text
// without unescaping it: an escape sequence is one character, and a \u
// surrogate pair is one.
func tokenChars(tok []byte) int {
	body := tok[1 : len(tok)-1]
	n := 0
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == '\\' && i+1 < len(body):
			if body[i+1] == 'u' && i+5 < len(body) {
				// \uD800-\uDBFF followed by a low surrogate is one
				// character spelled as two escapes.
				if isHighSurrogate(body[i+2:i+6]) && i+11 < len(body) && body[i+6] == '\\' && body[i+7] == 'u' {
					i += 11
				} else {
					i += 5
				}
			} else {
				i++
			}
			n++
		case c&0xc0 != 0x80: // not a UTF-8 continuation byte
			n++
		}
	}
	return n
}

func isHighSurrogate(hex []byte) bool {
	return (hex[0] == 'd' || hex[0] == 'D') && (hex[1] == '8' || hex[1] == '9' ||
		hex[1] == 'a' || hex[1] == 'A' || hex[1] == 'b' || hex[1] == 'B')
}

// clean is cleanToken, sparing the check for a token of a line the
// scanner found valid UTF-8.
func (x *Extractor) clean(arena *[]byte, tok []byte) []byte {
	if within(tok, x.validLine) {
		return tok
	}
	return cleanToken(arena, tok)
}

// cleanToken returns tok if its bytes are valid UTF-8, otherwise the
// token re-encoded into arena with each invalid byte replaced by U+FFFD,
// so that no output line carries broken UTF-8.
func cleanToken(arena *[]byte, tok []byte) []byte {
	if utf8.Valid(tok) {
		return tok
	}
	text := json.AppendUnescape(nil, tok, 0)
	start := len(*arena)
	*arena = json.AppendEscape(*arena, string(text), 0)
	return (*arena)[start:]
}
