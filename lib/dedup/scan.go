package dedup

import (
	"unsafe"

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
	var id, msgs []byte
	for name, v, more := o.Next(); more; name, v, more = o.Next() {
		switch string(name) {
		case "id":
			if id != nil {
				return nil, false
			}
			id = v
		case "messages":
			if msgs != nil || v[0] != '[' {
				return nil, false
			}
			msgs = v
		case "prompt", "system", "tools":
			return nil, false
		}
	}
	if !o.Valid() || msgs == nil {
		return nil, false
	}
	k.prompt = rawPrompt{ID: id, Messages: k.prompt.Messages[:0]}
	k.msgs, k.text, k.canon = k.msgs[:0], k.text[:0], k.canon[:0]
	var a record.Array
	a.Walk(msgs)
	for m, more := a.Next(); more; m, more = a.Next() {
		msg, ok := k.scanMessage(m)
		if !ok {
			return nil, false
		}
		k.msgs = append(k.msgs, msg)
	}
	if !a.Valid() || len(k.msgs) == 0 {
		return nil, false
	}
	p := record.Prompt{Messages: k.msgs}
	var err error
	if k.key, err = p.AppendCanonicalStrict(k.key[:0]); err != nil {
		return nil, false
	}
	k.last = p // what Text gives --near, as the decoder's path leaves it
	return k.key, true
}

// scanMessage reads one message of plain role and string (or null)
// content, with no tool call or tool call id.
func (k *Keyer) scanMessage(m []byte) (record.Message, bool) {
	var o record.Object
	o.Walk(m)
	var role, content []byte
	for name, v, more := o.Next(); more; name, v, more = o.Next() {
		switch string(name) {
		case "role":
			if role != nil || !plainASCII(v) {
				return record.Message{}, false
			}
			role = v[1 : len(v)-1]
		case "content":
			if content != nil || v[0] != '"' && string(v) != "null" {
				return record.Message{}, false
			}
			content = v
		case "tool_calls", "tool_call_id":
			if string(v) != "null" {
				return record.Message{}, false
			}
		}
	}
	if !o.Valid() {
		return record.Message{}, false
	}
	text, ok := k.unquote(content)
	if !ok {
		return record.Message{}, false
	}
	return record.Message{Role: unsafe.String(unsafe.SliceData(role), len(role)), Content: text}, true
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
