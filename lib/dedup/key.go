package dedup

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

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
	prompt  promptFields
	msgs    []record.Message
	key     []byte
	canon   []byte
	scratch []byte
}

// promptFields are the only fields the default key reads: decoding into a
// small struct skips the rest of the record without building it.
type promptFields struct {
	Messages []record.Message `json:"messages"`
	Prompt   *string          `json:"prompt"`
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

func (k *Keyer) promptKey(line []byte) ([]byte, error) {
	k.prompt.Messages = k.prompt.Messages[:0]
	k.prompt.Prompt = nil
	if err := record.Decode(line, &k.prompt); err != nil {
		return nil, decodeError(line, err)
	}
	p := record.Prompt{Messages: k.prompt.Messages, Prompt: k.prompt.Prompt}
	if !p.HasPrompt() {
		return nil, &KeyError{ReasonNoKey, "no messages or prompt"}
	}
	if k.mode != None {
		// Normalize each content, not the canonical form, whose length
		// prefixes must describe what follows them.
		k.msgs = append(k.msgs[:0], p.Messages...)
		k.canon = k.canon[:0]
		for i := range k.msgs {
			start := len(k.canon)
			k.canon, k.scratch = k.mode.Append(k.canon, k.msgs[i].Content, k.scratch)
			k.msgs[i].Content = string(k.canon[start:])
		}
		p.Messages = k.msgs
		if p.Prompt != nil && len(p.Messages) == 0 {
			k.canon, k.scratch = k.mode.Append(k.canon[:0], *p.Prompt, k.scratch)
			s := string(k.canon)
			p.Prompt = &s
		}
	}
	k.key = p.AppendCanonical(k.key[:0])
	return k.key, nil
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
