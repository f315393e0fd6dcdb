package corpus

import (
	"unicode/utf8"
)

// AppendJSON appends r as one JSON line (without the newline) in the
// Infinity-Instruct 0625 JSONL layout.
func AppendJSON(dst []byte, r *Row) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, r.ID, r.ASCII)
	dst = appendTurns(dst, r.Conversations, r.ASCII)
	dst = append(dst, `,"label":`...)
	dst = appendLabel(dst, &r.Label, r.ASCII)
	dst = append(dst, `,"langdetect":`...)
	dst = appendString(dst, r.Langdetect, r.ASCII)
	dst = append(dst, `,"source":`...)
	dst = appendString(dst, r.Source, r.ASCII)
	return append(dst, '}')
}

// appendTurns writes turns as the "conversations" field, after a comma.
func appendTurns(dst []byte, turns []Turn, ascii bool) []byte {
	dst = append(dst, `,"conversations":[`...)
	for i, t := range turns {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"from":`...)
		dst = appendString(dst, t.From, ascii)
		dst = append(dst, `,"value":`...)
		dst = appendString(dst, t.Value, ascii)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// AppendPrompt appends the prompt record extract makes of r by default:
// its id and its first human turn as the user message. Later stages can so
// be exercised at scale without running extract.
func AppendPrompt(dst []byte, r *Row) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, r.ID, r.ASCII)
	dst = append(dst, `,"messages":[{"role":"user","content":`...)
	dst = appendString(dst, r.Conversations[0].Value, r.ASCII)
	return append(dst, `}]}`...)
}

func appendLabel(dst []byte, l *Label, ascii bool) []byte {
	dst = append(dst, `{"ability_en":`...)
	dst = appendStrings(dst, l.AbilityEn, ascii)
	dst = append(dst, `,"ability_zh":`...)
	dst = appendStrings(dst, l.AbilityZh, ascii)
	dst = append(dst, `,"cate_ability_en":`...)
	dst = appendStrings(dst, l.CateAbilityEn, ascii)
	dst = append(dst, `,"cate_ability_zh":`...)
	dst = appendStrings(dst, l.CateAbilityZh, ascii)
	return append(dst, '}')
}

func appendStrings(dst []byte, ss []string, ascii bool) []byte {
	dst = append(dst, '[')
	for i, s := range ss {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, s, ascii)
	}
	return append(dst, ']')
}

const hex = "0123456789abcdef"

// appendString writes s as a JSON string. With ascii, every non-ASCII
// character becomes a \u escape (a surrogate pair beyond the BMP) and '/'
// is written as "\/", as some encoders do; readers must undo both.
func appendString(dst []byte, s string, ascii bool) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf && (c != '/' || !ascii) {
			i++
			continue
		}
		if c >= utf8.RuneSelf && !ascii {
			i++
			continue
		}
		dst = append(dst, s[start:i]...)
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r >= 0x10000 {
				r -= 0x10000
				dst = appendU(dst, 0xD800+(r>>10))
				dst = appendU(dst, 0xDC00+(r&0x3FF))
			} else {
				dst = appendU(dst, r)
			}
			i += size
			start = i
			continue
		}
		switch c {
		case '"', '\\', '/':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = appendU(dst, rune(c))
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

func appendU(dst []byte, r rune) []byte {
	return append(dst, '\\', 'u', hex[r>>12&0xF], hex[r>>8&0xF], hex[r>>4&0xF], hex[r&0xF])
}
