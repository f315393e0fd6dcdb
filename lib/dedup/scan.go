package dedup

import (
	"unicode/utf8"
	"unsafe"

	"github.com/segmentio/asm/ascii"

	"tokenmill/lib/record"
)

// scanPromptKey is promptKey's fast path for the common record: an id and
// messages of plain roles and string contents, nothing else the key reads.
// It checks the line with record.Object instead of decoding it, and builds
// the same record.Prompt the decoder's path builds, so the key is the
// same. ok is false for anything else (tools, a system prompt, a
// completion prompt, tool calls, an escaped role, a repeated field, a line
// that is not valid JSON), which promptKey then decodes in full; the state
// of k is then to be reset by that path.
func (k *Keyer) scanPromptKey(line []byte) (key []byte, ok bool) {
	var o record.Object
	o.Scan(line)
	k.prompt = rawPrompt{Messages: k.prompt.Messages[:0]}
	k.msgs, k.text, k.canon = k.msgs[:0], k.text[:0], k.canon[:0]
	var id []byte
	seenMsgs := false
	for name, at, more := o.NextKey(); more; name, at, more = o.NextKey() {
		var end int
		switch string(name) {
		case "id":
			if id != nil {
				return nil, false
			}
			end = o.ValueEnd(at)
			if end >= 0 {
				id = line[at:end]
			}
		case "messages":
			// Checked, split and read in one pass: each content is scanned
			// once, and one without an escape is its own text.
			if seenMsgs {
				return nil, false
			}
			seenMsgs = true
			if end, ok = k.scanMessages(line, at); !ok {
				return nil, false
			}
		case "prompt", "system", "tools":
			return nil, false
		default:
			end = o.ValueEnd(at)
		}
		o.Resume(end)
	}
	if !o.Valid() || len(k.msgs) == 0 {
		return nil, false
	}
	k.prompt.ID = id
	p := record.Prompt{Messages: k.msgs}
	var err error
	if k.key, err = p.AppendCanonicalStrict(k.key[:0]); err != nil {
		return nil, false
	}
	k.last = p // what Text gives --near, as the decoder's path leaves it
	return k.key, true
}

// scanMessages checks the messages array at line[i] as record.Object's
// Scan checks a member's value, and reads its messages into k.msgs as it
// goes. It returns the index past the array; ok is false for anything
// scanMessage refuses and for any fault, a line left to the decoder.
func (k *Keyer) scanMessages(line []byte, i int) (end int, ok bool) {
	if i >= len(line) || line[i] != '[' {
		return 0, false
	}
	i = record.SkipSpace(line, i+1)
	if i < len(line) && line[i] == ']' {
		return 0, false // no message: the decoder says why
	}
	for {
		if i >= len(line) || line[i] != '{' {
			return 0, false
		}
		var msg record.Message
		if i, msg, ok = k.scanMessage(line, i); !ok {
			return 0, false
		}
		k.msgs = append(k.msgs, msg)
		i = record.SkipSpace(line, i)
		if i >= len(line) {
			return 0, false
		}
		switch line[i] {
		case ']':
			return i + 1, true
		case ',':
			i = record.SkipSpace(line, i+1)
		default:
			return 0, false
		}
	}
}

// scanMessage reads the message object at line[i] (an element of messages,
// at depth 2), checking it as Scan would: plain role and string (or null)
// content, no tool call or tool call id. It returns the index past it.
func (k *Keyer) scanMessage(line []byte, i int) (int, record.Message, bool) {
	var role, content []byte
	plain := false
	i = record.SkipSpace(line, i+1)
	if i < len(line) && line[i] == '}' {
		i++
	} else {
		for {
			if i >= len(line) || line[i] != '"' {
				return 0, record.Message{}, false
			}
			kend, kplain := record.ScanString(line, i)
			if kend < 0 || !kplain {
				return 0, record.Message{}, false
			}
			name := line[i+1 : kend-1]
			i = record.SkipSpace(line, kend)
			if i >= len(line) || line[i] != ':' {
				return 0, record.Message{}, false
			}
			i = record.SkipSpace(line, i+1)
			var vend int
			switch string(name) {
			case "role":
				if role != nil || i >= len(line) || line[i] != '"' {
					return 0, record.Message{}, false
				}
				vend, _ = record.ScanString(line, i)
				if vend < 0 || !plainASCII(line[i:vend]) {
					return 0, record.Message{}, false
				}
				role = line[i+1 : vend-1]
			case "content":
				if content != nil || i >= len(line) {
					return 0, record.Message{}, false
				}
				switch line[i] {
				case '"':
					vend, plain = record.ScanString(line, i)
				case 'n':
					vend = record.ScanLiteral(line, i, "null")
				default:
					return 0, record.Message{}, false
				}
				if vend < 0 {
					return 0, record.Message{}, false
				}
				content = line[i:vend]
			case "tool_calls", "tool_call_id":
				if vend = record.ScanLiteral(line, i, "null"); vend < 0 {
					return 0, record.Message{}, false
				}
			default:
				if vend = record.ScanValue(line, i, 3); vend < 0 {
					return 0, record.Message{}, false
				}
			}
			i = record.SkipSpace(line, vend)
			if i >= len(line) {
				return 0, record.Message{}, false
			}
			if line[i] == '}' {
				i++
				break
			}
			if line[i] != ',' {
				return 0, record.Message{}, false
			}
			i = record.SkipSpace(line, i+1)
		}
	}
	var text string
	if plain && k.mode == None {
		// No escape: the text is the literal's body, when it is valid
		// UTF-8 (else the decoder's replacements are made below).
		if body := content[1 : len(content)-1]; ascii.Valid(body) || utf8.Valid(body) {
			text = unsafe.String(unsafe.SliceData(body), len(body))
			content = nil
		}
	}
	if content != nil {
		var ok bool
		if text, ok = k.unquote(content); !ok {
			return 0, record.Message{}, false
		}
	}
	return i, record.Message{Role: unsafe.String(unsafe.SliceData(role), len(role)), Content: text}, true
}

// plainASCII tells a JSON string literal of printable ASCII without an
// escape: its text is its bytes.
func plainASCII(v []byte) bool {
	if len(v) < 2 || v[0] != '"' {
		return false
	}
	for _, c := range v[1 : len(v)-1] {
		if c < 0x20 || c >= 0x80 || c == '\\' {
			return false
		}
	}
	return true
}
