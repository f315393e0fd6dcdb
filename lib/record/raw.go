package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/segmentio/encoding/json"
	"github.com/zeebo/xxh3"
)

// EachField calls fn with the raw key (unquoted) and raw value of every
// top-level field of the JSON object raw, in order. Its grammar is
// checked, but not the text of its string values (Walker.Trusted). It
// takes the Walker's steps itself, not an Object's, which cost a call and
// a stored state per member: a tenth more on merge's output objects.
func EachField(raw []byte, fn func(key string, value []byte) error) error {
	i := SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return ErrNotObject
	}
	if i = SkipSpace(raw, i+1); i < len(raw) && raw[i] == '}' {
		i++
	} else {
		for more := true; more; {
			quoted, kind, at := trusting.key(raw, i)
			end := trusting.ValueEnd(raw, at, MaxDepth-1)
			if end < 0 {
				return ErrMalformed
			}
			key := quoted[1 : len(quoted)-1]
			if kind&Escaped != 0 {
				key = json.Unescape(quoted)
			}
			if err := fn(string(key), raw[at:end]); err != nil {
				return err
			}
			i, more = next(raw, end, '}')
		}
	}
	if i < 0 || SkipSpace(raw, i) != len(raw) {
		return ErrMalformed
	}
	return nil
}

// ErrMalformed is an object EachField could not walk to its end.
var ErrMalformed = errors.New("malformed JSON object")

// WithoutFields appends raw to dst with the named top-level fields removed;
// every other field keeps its bytes and order.
func WithoutFields(dst, raw []byte, drop ...string) ([]byte, error) {
	start := len(dst)
	dst = append(dst, '{')
	err := EachField(raw, func(key string, value []byte) error {
		for _, d := range drop {
			if key == d {
				return nil
			}
		}
		if len(dst) > start+1 {
			dst = append(dst, ',')
		}
		dst = json.AppendEscape(dst, key, 0)
		dst = append(dst, ':')
		dst = append(dst, value...)
		return nil
	})
	if err != nil {
		return dst[:start], err
	}
	return append(dst, '}'), nil
}

// FieldValue returns the raw value of a top-level field, or nil if absent.
func FieldValue(raw []byte, name string) ([]byte, error) {
	var found []byte
	err := EachField(raw, func(key string, value []byte) error {
		if key == name {
			found = value
		}
		return nil
	})
	return found, err
}

// AppendCanonical appends the canonical form of a prompt: every role and
// content of its messages (with their tool calls and tool call ids), or
// its completion text, then its tools in canonical form, each
// length-prefixed so that no content can imitate a boundary. Two prompts
// are the same prompt exactly when their canonical forms are equal; ids and
// dedup keys are derived from it. A prompt without tools (or with an empty
// tools value) has the canonical form it had before tools counted, so the
// ids of such prompts did not change.
//
// A tools value that AppendCanonicalTools cannot read is taken byte for
// byte: the stages that write records (extract) reject such values first,
// and AppendCanonicalStrict refuses them.
func (p *Prompt) AppendCanonical(dst []byte) []byte {
	dst, _ = p.appendCanonical(dst)
	return dst
}

// AppendCanonicalStrict is AppendCanonical for a prompt whose tools must
// be readable: it returns an error wrapping ErrBadTools if they are not.
func (p *Prompt) AppendCanonicalStrict(dst []byte) ([]byte, error) {
	return p.appendCanonical(dst)
}

func (p *Prompt) appendCanonical(dst []byte) ([]byte, error) {
	if len(p.Messages) == 0 && p.Prompt != nil {
		dst = append(dst, 'P')
		dst = appendLenPrefixed(dst, *p.Prompt)
		return p.appendTools(dst)
	}
	for _, m := range p.Messages {
		dst = append(dst, 'M')
		dst = appendLenPrefixed(dst, m.Role)
		dst = appendLenPrefixed(dst, m.Content)
		if len(m.ToolCalls) > 0 {
			dst = append(dst, 'T')
			dst = appendLenPrefixed(dst, string(m.ToolCalls))
		}
		if m.ToolCallID != "" {
			dst = append(dst, 'C')
			dst = appendLenPrefixed(dst, m.ToolCallID)
		}
	}
	return p.appendTools(dst)
}

// appendTools appends 'U' and the length-prefixed canonical tools, if any.
func (p *Prompt) appendTools(dst []byte) ([]byte, error) {
	if len(p.Tools) == 0 {
		return dst, nil
	}
	tools, ok, err := AppendCanonicalTools(nil, p.Tools)
	if err != nil {
		tools, ok = p.Tools, true
	}
	if !ok {
		return dst, nil
	}
	dst = append(dst, 'U')
	dst = binary.AppendUvarint(dst, uint64(len(tools)))
	return append(dst, tools...), err
}

// UsesSystem reports whether a record's top-level system prompt takes the
// system slot of its messages. There is one slot: a conversation that
// starts with a system turn keeps that turn and the top-level system is
// not used (as LLaMA-Factory reads ShareGPT data); otherwise a top-level
// system with text goes before the first message. extract, dedup's key and
// merge's conversions all follow this rule.
func UsesSystem(system string, msgs []Message) bool {
	if Blank(system) {
		return false
	}
	return len(msgs) == 0 || msgs[0].Role != "system"
}

// Blank reports whether s holds nothing but spaces, tabs and line breaks,
// the white space a blank system prompt or id is made of.
func Blank(s string) bool {
	return strings.Trim(s, " \t\r\n") == ""
}

func appendLenPrefixed(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// HasPrompt reports whether p carries something to generate from.
func (p *Prompt) HasPrompt() bool {
	return len(p.Messages) > 0 || p.Prompt != nil
}

// ContentID is the id given to a record whose dataset has none: the 128-bit
// xxh3 hash of its canonical prompt in hex, stable across runs and machines
// and wide enough that 100M prompts do not collide.
func ContentID(canonical []byte) string {
	h := xxh3.Hash128(canonical).Bytes()
	const hexdigits = "0123456789abcdef"
	out := make([]byte, 32)
	for i := range h {
		out[2*i] = hexdigits[h[i]>>4]
		out[2*i+1] = hexdigits[h[i]&0xf]
	}
	return string(out)
}

// MaxDepth is how deeply a record may nest arrays and objects: far more
// than any dataset uses, and shallow enough that every decoder, all of
// which recurse, stays within a small stack.
const MaxDepth = 10000

var openArray, openObject = []byte("["), []byte("{")

// ErrTooDeep is a value nested past MaxDepth.
var ErrTooDeep = fmt.Errorf("nested deeper than %d arrays and objects", MaxDepth)

// CheckDepth refuses raw JSON nested deeper than MaxDepth; malformed input
// is left to the parser to describe. Nesting needs an opening bracket per
// level, so a line with no more than MaxDepth of them (every line under
// MaxDepth bytes, and nearly every other) is settled by counting them at
// memory speed; only the rest are counted in order, stepping over strings
// as a trusting Walker does. Counting needs no grammar, and a line with
// more brackets than the limit is made of small tokens, which a walk of
// the grammar would take at a fraction of the speed.
func CheckDepth(raw []byte) error {
	if len(raw) <= MaxDepth || bytes.Count(raw, openArray)+bytes.Count(raw, openObject) <= MaxDepth {
		return nil
	}
	depth := 0
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			end := closingQuote(raw, i+1)
			if end < 0 {
				return nil
			}
			i = end - 1
		case '[', '{':
			if depth++; depth > MaxDepth {
				return ErrTooDeep
			}
		case ']', '}':
			depth--
		}
	}
	return nil
}
