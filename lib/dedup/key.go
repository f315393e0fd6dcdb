package dedup

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// KeyPrompt is the --key value that names the canonical prompt.
const KeyPrompt = "prompt"

// Reject reasons of dedup's own.
const (
	ReasonNoKey     = "no_key"     // the record has no prompt, or not the --key field
	ReasonBadPrompt = "bad_prompt" // valid JSON whose messages or prompt have the wrong shape
)

// Keyer computes the dedup key of raw records. A Keyer is not safe for
// concurrent use; each worker has its own.
type Keyer struct {
	mode    Mode
	path    []string // nil: the canonical prompt
	prompt  rawPrompt
	msgs    []record.Message
	text    []byte // unescaped contents
	key     []byte
	canon   []byte
	scratch []byte
	nearBuf []byte
	last    record.Prompt // the prompt of the last key (--key prompt)
}

// rawPrompt holds the only fields the default key reads. The contents stay
// raw JSON: the parser validates them (and the whole record) without
// building strings, and record.AppendUnquoted decodes them in one pass.
type rawPrompt struct {
	ID       json.RawMessage `json:"id"`
	Messages []rawMessage    `json:"messages"`
	Prompt   json.RawMessage `json:"prompt"`
	System   json.RawMessage `json:"system"`
	Tools    json.RawMessage `json:"tools"`
}

type rawMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  json.RawMessage `json:"tool_calls"`
	ToolCallID json.RawMessage `json:"tool_call_id"`
}

// NewKeyer returns a Keyer for --key spec ("prompt", or a field path such
// as "id" or "meta.source") and normalization mode.
func NewKeyer(spec string, mode Mode) (*Keyer, error) {
	k := &Keyer{mode: mode}
	if spec != KeyPrompt {
		k.path = strings.Split(spec, ".")
		for _, p := range k.path {
			if p == "" {
				return nil, fmt.Errorf("--key %q: empty field name in the path", spec)
			}
		}
	}
	return k, nil
}

// KeyError says why a record has no key; Reason is its reject reason.
type KeyError struct {
	Reason string
	Detail string
}

func (e *KeyError) Error() string { return e.Reason + ": " + e.Detail }

// Key returns the normalized key of the record line. The result is valid
// until the next call.
func (k *Keyer) Key(line []byte) ([]byte, error) {
	if k.path == nil {
		return k.promptKey(line)
	}
	return k.fieldKey(line)
}

// ID returns the raw JSON id of the record line whose key was just taken,
// or nil when it has none (or a null one).
func (k *Keyer) ID(line []byte) []byte {
	id := k.prompt.ID
	if k.path != nil {
		id, _ = record.FieldValue(line, "id")
	}
	if string(id) == "null" {
		return nil
	}
	return id
}

func (k *Keyer) promptKey(line []byte) ([]byte, error) {
	if key, ok := k.scanPromptKey(line); ok {
		return key, nil
	}
	return k.decodePromptKey(line)
}

// decodePromptKey is promptKey through the full decoder: every record,
// and the reason for every one without a key.
func (k *Keyer) decodePromptKey(line []byte) ([]byte, error) {
	clear(k.prompt.Messages[:cap(k.prompt.Messages)]) // the decoder keeps fields a message leaves out
	k.prompt = rawPrompt{Messages: k.prompt.Messages[:0]}
	if err := record.Decode(line, &k.prompt); err != nil {
		return nil, decodeError(line, err)
	}
	// The strings below alias line, k.text and k.canon; they are dead once
	// AppendCanonical has copied them into the key, before any of those
	// buffers is written again.
	k.msgs = k.msgs[:0]
	k.text = k.text[:0]
	k.canon = k.canon[:0]
	if len(k.prompt.System) > 0 && string(k.prompt.System) != "null" {
		// A top-level system prompt takes the system slot by the rule
		// every stage follows (record.UsesSystem).
		system, ok := k.unquote(k.prompt.System)
		if !ok {
			return nil, &KeyError{ReasonBadPrompt, "system is not a string"}
		}
		first := ""
		if len(k.prompt.Messages) > 0 {
			first = k.prompt.Messages[0].Role
		}
		if first != "system" && !record.Blank(system) {
			k.msgs = append(k.msgs, record.Message{Role: "system", Content: system})
		}
	}
	for i := range k.prompt.Messages {
		m := &k.prompt.Messages[i]
		content, ok := k.unquote(m.Content)
		if !ok {
			return nil, &KeyError{ReasonBadPrompt, fmt.Sprintf("message %d: content is not a string", i+1)}
		}
		msg := record.Message{Role: m.Role, Content: content}
		if string(m.ToolCalls) != "null" {
			msg.ToolCalls = m.ToolCalls
		}
		if len(m.ToolCallID) > 0 && string(m.ToolCallID) != "null" {
			if m.ToolCallID[0] != '"' {
				return nil, &KeyError{ReasonBadPrompt, fmt.Sprintf("message %d: tool_call_id is not a string", i+1)}
			}
			start := len(k.text)
			k.text = record.AppendUnquoted(k.text, m.ToolCallID)
			msg.ToolCallID = unsafe.String(unsafe.SliceData(k.text[start:]), len(k.text)-start)
		}
		k.msgs = append(k.msgs, msg)
	}
	p := record.Prompt{Messages: k.msgs, Tools: k.prompt.Tools}
	if len(k.prompt.Messages) == 0 && len(k.prompt.Prompt) > 0 && string(k.prompt.Prompt) != "null" {
		text, ok := k.unquote(k.prompt.Prompt)
		if !ok {
			return nil, &KeyError{ReasonBadPrompt, "prompt is not a string"}
		}
		p.Messages, p.Prompt = nil, &text
	}
	if !p.HasPrompt() {
		return nil, &KeyError{ReasonNoKey, "no messages or prompt"}
	}
	var err error
	if k.key, err = p.AppendCanonicalStrict(k.key[:0]); err != nil {
		return nil, &KeyError{ReasonBadPrompt, err.Error()}
	}
	k.last = p
	return k.key, nil
}

// Text returns the text --near compares for the record whose key was just
// taken: the parts of the key, normalized as it is, one after another on
// lines of their own (each message's role, content, tool calls and tool
// call id, or the completion prompt, then the tools); for a --key field,
// the field's text. The result is valid until the next call.
func (k *Keyer) Text() []byte {
	if k.path != nil {
		return k.key[1:] // after the type byte
	}
	b := k.nearBuf[:0]
	p := &k.last
	if p.Prompt != nil {
		b = append(append(b, *p.Prompt...), '\n')
	}
	for _, m := range p.Messages {
		b = append(append(b, m.Role...), '\n')
		b = append(append(b, m.Content...), '\n')
		if len(m.ToolCalls) > 0 {
			b = append(append(b, m.ToolCalls...), '\n')
		}
		if m.ToolCallID != "" {
			b = append(append(b, m.ToolCallID...), '\n')
		}
	}
	if len(p.Tools) > 0 && string(p.Tools) != "null" {
		b = append(append(b, p.Tools...), '\n')
	}
	k.nearBuf = b
	return b
}

// unquote returns the text of a raw JSON string (null is empty), normalized;
// invalid UTF-8 is U+FFFD, by record's one rule. Each content is
// normalized on its own, never the canonical form, whose length prefixes
// must describe what follows them.
func (k *Keyer) unquote(raw []byte) (string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", true
	}
	if raw[0] != '"' {
		return "", false
	}
	start := len(k.text)
	k.text = record.AppendUnquoted(k.text, raw)
	text := k.text[start:]
	if k.mode != None {
		start = len(k.canon)
		k.canon, k.scratch = k.mode.Append(k.canon, unsafe.String(unsafe.SliceData(text), len(text)), k.scratch)
		text = k.canon[start:]
	}
	return unsafe.String(unsafe.SliceData(text), len(text)), true
}

// fieldKey is the value at the --key path: a string's text, or for any
// other value its JSON re-encoded with sorted keys (so spacing and key
// order do not matter). A number and the string of its digits differ.
func (k *Keyer) fieldKey(line []byte) ([]byte, error) {
	if !json.Valid(line) {
		return nil, decodeError(line, errors.New("invalid JSON"))
	}
	value := bytes.TrimLeft(line, " \t\r\n")
	if value[0] != '{' {
		return nil, &KeyError{jsonl.ReasonNotObject, "the record is not a JSON object"}
	}
	for i, name := range k.path {
		v, err := record.FieldValue(value, name)
		if err != nil {
			return nil, &KeyError{ReasonNoKey, strings.Join(k.path[:i], ".") + " is not an object"}
		}
		if v == nil || string(v) == "null" {
			return nil, &KeyError{ReasonNoKey, "no field " + strings.Join(k.path, ".")}
		}
		value = v
	}
	var text []byte
	if len(k.path) == 1 && k.path[0] == "id" && value[0] != '"' {
		// An id is its text in every tool: 7 and "7" are one id.
		var id record.ID
		if err := id.UnmarshalJSON(value); err == nil {
			k.key, k.scratch = k.mode.Append(append(k.key[:0], 's'), id.Text, k.scratch)
			return k.key, nil
		}
	}
	switch value[0] {
	case '"':
		var s string
		if _, err := json.Parse(value, &s, json.ZeroCopy); err != nil {
			return nil, &KeyError{jsonl.ReasonMalformedJSON, err.Error()}
		}
		k.key, k.scratch = k.mode.Append(append(k.key[:0], 's'), s, k.scratch)
		return k.key, nil
	case '{', '[':
		var v any
		if _, err := json.Parse(value, &v, 0); err != nil {
			return nil, &KeyError{jsonl.ReasonMalformedJSON, err.Error()}
		}
		var err error
		if text, err = json.Append(k.canon[:0], v, json.SortMapKeys); err != nil {
			return nil, &KeyError{jsonl.ReasonMalformedJSON, err.Error()}
		}
		k.canon = text
	default:
		text = value
	}
	k.key, k.scratch = k.mode.Append(append(k.key[:0], 'j'), string(text), k.scratch)
	return k.key, nil
}

// decodeError classifies a record that did not decode.
func decodeError(line []byte, err error) error {
	trimmed := bytes.TrimLeft(line, " \t\r\n")
	switch {
	case !json.Valid(line):
		return &KeyError{jsonl.ReasonMalformedJSON, err.Error()}
	case len(trimmed) == 0 || trimmed[0] != '{':
		return &KeyError{jsonl.ReasonNotObject, "the record is not a JSON object"}
	}
	return &KeyError{ReasonBadPrompt, err.Error()}
}
