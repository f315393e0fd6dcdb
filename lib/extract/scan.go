package extract

import (
	"bytes"
	"unicode/utf8"
	"unsafe"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// The hot path's JSON reading. A record is walked once, its string tokens
// skipped eight bytes at a time, and the raw values of the fields extract
// reads are taken as they pass, with the line's UTF-8 checked on the way
// (which spares checking each token again). The walk is strict JSON and
// accepts only what the general decoder accepts, reading it the same way;
// whatever it is not sure of (an escaped or repeated key, a key that
// differs from a known one only in case, deep nesting, any syntax error)
// is handed to the general decoder, which gives the same result or the
// same reject as before, at its own speed.

// maxScanDepth is the nesting the walk follows; deeper goes to the decoder.
const maxScanDepth = 200

// scanner walks JSON; badUTF8 is set when a string held invalid UTF-8.
// A built scanner walks JSON the reader wrote (valid, valid UTF-8): it
// only looks for the quote that ends each string.
type scanner struct {
	badUTF8 bool
	built   bool
}

// str returns the index after the string token that starts at b[i] (a
// quote), or -1 if it is not one. Runs of plain ASCII go eight bytes at a
// time, runs of other characters one character at a time.
func (s *scanner) str(b []byte, i int) int {
	i++
	if s.built {
		return builtStr(b, i)
	}
	for {
		i = jsonl.PlainRun(b, i)
		if i >= len(b) {
			return -1
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !record.IsHexDigit(b[i+2]) || !record.IsHexDigit(b[i+3]) || !record.IsHexDigit(b[i+4]) || !record.IsHexDigit(b[i+5]) {
					return -1
				}
				i += 6
			default:
				return -1
			}
		case c < 0x20:
			return -1
		case c < utf8.RuneSelf: // within the last seven bytes of b
			i++
		default:
			for i < len(b) && b[i] >= utf8.RuneSelf {
				// Most text past ASCII (CJK above all) is three-byte
				// characters that need no more than this check.
				if c := b[i]; c >= 0xe1 && c <= 0xef && c != 0xed && i+2 < len(b) && b[i+1]&0xc0 == 0x80 && b[i+2]&0xc0 == 0x80 {
					i += 3
					continue
				}
				n := runeLen(b, i)
				if n == 0 {
					s.badUTF8, n = true, 1
				}
				i += n
			}
		}
	}
}

// runeLen is the length of the valid UTF-8 sequence at b[i] (past ASCII),
// or 0: the two- and three-byte forms checked here, the rest by utf8.
func runeLen(b []byte, i int) int {
	switch c := b[i]; {
	case c < 0xc2:
		return 0
	case c < 0xe0:
		if i+1 < len(b) && b[i+1]&0xc0 == 0x80 {
			return 2
		}
		return 0
	case c < 0xf0:
		if i+2 >= len(b) || b[i+2]&0xc0 != 0x80 {
			return 0
		}
		lo, hi := byte(0x80), byte(0xbf)
		switch c {
		case 0xe0:
			lo = 0xa0 // no overlong forms
		case 0xed:
			hi = 0x9f // no surrogates
		}
		if c1 := b[i+1]; c1 < lo || c1 > hi {
			return 0
		}
		return 3
	}
	if r, n := utf8.DecodeRune(b[i:]); r != utf8.RuneError || n > 1 {
		return n
	}
	return 0
}

// builtStr returns the index after the valid string token whose text
// starts at b[i]: past the first quote not escaped.
func builtStr(b []byte, i int) int {
	start := i
	for {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return -1
		}
		j := i + q
		k := j
		for k > start && b[k-1] == '\\' {
			k--
		}
		if (j-k)%2 == 0 {
			return j + 1
		}
		i = j + 1
	}
}

// value returns the index after the JSON value at b[i], or -1.
func (s *scanner) value(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; c {
	case '"':
		return s.str(b, i)
	case '{':
		return s.object(b, i, depth, nil)
	case '[':
		return s.array(b, i, depth, nil)
	case 't':
		return record.ScanLiteral(b, i, "true")
	case 'f':
		return record.ScanLiteral(b, i, "false")
	case 'n':
		return record.ScanLiteral(b, i, "null")
	}
	return record.ScanNumber(b, i)
}

// object returns the index after the object at b[i], or -1. field,
// when not nil, reads each value (at b[v]) itself, given its key's token,
// and returns the index after it or -1, which ends the walk.
func (s *scanner) object(b []byte, i, depth int, field func(key []byte, b []byte, v int) int) int {
	if depth == 0 {
		return -1
	}
	i = record.SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return -1
		}
		k := i
		if i = s.str(b, i); i < 0 {
			return -1
		}
		key := b[k:i]
		if i = record.SkipSpace(b, i); i >= len(b) || b[i] != ':' {
			return -1
		}
		v := record.SkipSpace(b, i+1)
		if field != nil {
			i = field(key, b, v)
		} else {
			i = s.value(b, v, depth-1)
		}
		if i < 0 {
			return -1
		}
		var done bool
		if i, done = after(b, i, '}'); done {
			return i
		}
	}
}

// after reads what follows a member at b[i]: the close of its container
// (done, and the index after it), a comma (the index of the next member),
// or anything else (done, -1).
func after(b []byte, i int, close byte) (int, bool) {
	if i = record.SkipSpace(b, i); i < len(b) {
		switch b[i] {
		case close:
			return i + 1, true
		case ',':
			return record.SkipSpace(b, i+1), false
		}
	}
	return -1, true
}

// array is object for arrays: elem reads each element (at b[v]).
func (s *scanner) array(b []byte, i, depth int, elem func(b []byte, v int) int) int {
	if depth == 0 {
		return -1
	}
	i = record.SkipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1
	}
	for {
		if elem != nil {
			i = elem(b, i)
		} else {
			i = s.value(b, i, depth-1)
		}
		if i < 0 {
			return -1
		}
		var done bool
		if i, done = after(b, i, ']'); done {
			return i
		}
	}
}

// fieldTable finds the raw field a key's value goes to.
type fieldTable struct {
	at    map[string]*json.RawMessage // by exact name
	folds map[string]bool             // every name in lower case
}

func newFieldTable(at map[string]*json.RawMessage) fieldTable {
	t := fieldTable{at: at, folds: map[string]bool{}}
	for name := range at {
		t.folds[string(lowerASCII(nil, []byte(name)))] = true
	}
	return t
}

func lowerASCII(dst, s []byte) []byte {
	for _, c := range s {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// Reads reports whether a top-level field of this name can change what
// the Extractor makes of a record: one it reads (or one differing only in
// case, which the decoder may match); a Parquet reader leaves the other
// columns unread.
func (x *Extractor) Reads(name string) bool {
	if _, ok := x.table.at[name]; ok {
		return true
	}
	return x.table.folds[string(lowerASCII(nil, []byte(name)))]
}

// lookup returns where key's value goes (nil: nowhere), and false for a
// key the walk leaves to the decoder: escaped, or a known name in other
// case, which the decoder may match differently.
func (t *fieldTable) lookup(key []byte) (*json.RawMessage, bool) {
	body := key[1 : len(key)-1]
	if p, ok := t.at[string(body)]; ok {
		return p, true
	}
	for _, c := range body {
		if c == '\\' || c >= utf8.RuneSelf {
			return nil, false
		}
	}
	var buf [64]byte
	if len(body) <= len(buf) && t.folds[string(lowerASCII(buf[:0], body))] {
		return nil, false
	}
	return nil, true
}

// scanFields walks the object b into the raw fields of t (which start out
// nil), returning the index after it, or -1 when the decoder must read it.
// A list under one of the names conversation lists go by is read as turns
// on the way, into *turns, and *list is set to it.
func (s *scanner) scanFields(b []byte, t *fieldTable, turns *[]turn, list *[]byte) int {
	return s.object(b, 0, maxScanDepth, func(key []byte, b []byte, v int) int {
		p, ok := t.lookup(key)
		if !ok || (p != nil && *p != nil) { // a key for the decoder, or a repeated one
			return -1
		}
		var end int
		if p != nil && turns != nil && *list == nil && v < len(b) && b[v] == '[' && turnListKey(key) {
			*turns = (*turns)[:0] // each turn is zeroed as it is added
			if end = s.turnList(b, v, turns); end >= 0 {
				*list = b[v:end]
			}
		} else {
			end = s.value(b, v, maxScanDepth-1)
		}
		if end >= 0 && p != nil {
			*p = b[v:end]
		}
		return end
	})
}

// turnListKey names the fields whose lists are read as turns as they pass.
func turnListKey(key []byte) bool {
	switch string(key) {
	case `"conversations"`, `"messages"`:
		return true
	}
	return false
}

// scanTurns walks a list of turn objects into turns, or returns false for
// the decoder to read it.
func (s *scanner) scanTurns(b []byte, turns *[]turn) bool {
	return s.turnList(b, 0, turns) == len(b)
}

// turnList reads the list of turn objects at b[i] into turns, returning
// the index after it, or -1.
func (s *scanner) turnList(b []byte, i int, turns *[]turn) int {
	return s.array(b, i, maxScanDepth, func(b []byte, v int) int {
		if v >= len(b) || b[v] != '{' {
			return -1
		}
		*turns = append(*turns, turn{})
		t := &(*turns)[len(*turns)-1]
		return s.object(b, v, maxScanDepth-1, func(key []byte, b []byte, v int) int {
			p, ok := turnField(t, key)
			if !ok || (p != nil && *p != nil) {
				return -1
			}
			end := s.value(b, v, maxScanDepth-2)
			if end >= 0 && p != nil {
				*p = b[v:end]
			}
			return end
		})
	})
}

// turnField is fieldTable.lookup for a turn's fields.
func turnField(t *turn, key []byte) (*json.RawMessage, bool) {
	body := key[1 : len(key)-1]
	switch string(body) {
	case "from":
		return &t.From, true
	case "value":
		return &t.Value, true
	case "role":
		return &t.Role, true
	case "content":
		return &t.Content, true
	case "name":
		return &t.Name, true
	case "tool_calls":
		return &t.ToolCalls, true
	case "function_call":
		return &t.FunctionCall, true
	case "tool_call_id":
		return &t.ToolCallID, true
	case "reasoning_content":
		return &t.Reasoning, true
	case "reasoning":
		return &t.ReasoningAlt, true
	case "thinking":
		return &t.Thinking, true
	case "weight":
		return &t.Weight, true
	case "loss_weight":
		return &t.LossWeight, true
	case "loss":
		return &t.Loss, true
	case "input":
		return &t.Input, true
	case "output":
		return &t.Output, true
	case "system":
		return &t.System, true
	}
	for _, c := range body {
		if c == '\\' || c >= utf8.RuneSelf {
			return nil, false
		}
	}
	var buf [64]byte
	if len(body) <= len(buf) && turnFolds[string(lowerASCII(buf[:0], body))] {
		return nil, false
	}
	return nil, true
}

// turnFolds are turn's field names, for keys that differ only in case.
var turnFolds = map[string]bool{"from": true, "value": true, "role": true, "content": true, "name": true,
	"tool_calls": true, "function_call": true, "tool_call_id": true, "reasoning_content": true, "reasoning": true,
	"thinking": true, "weight": true, "loss_weight": true, "loss": true, "input": true, "output": true, "system": true}

// within reports whether tok lies inside line's memory.
func within(tok, line []byte) bool {
	if len(line) == 0 || len(tok) == 0 {
		return false
	}
	t, l := uintptr(unsafe.Pointer(unsafe.SliceData(tok))), uintptr(unsafe.Pointer(unsafe.SliceData(line)))
	return t >= l && t+uintptr(len(tok)) <= l+uintptr(len(line))
}

// sameBytes reports whether a and b are the same bytes in memory.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && len(a) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b)
}
