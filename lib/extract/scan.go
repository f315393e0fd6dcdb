package extract

import (
	"unsafe"

	asmutf8 "github.com/segmentio/asm/utf8"
	"github.com/segmentio/encoding/json"

	"tokenmill/lib/record"
)

// The hot path's JSON reading. A record is walked once (record.Walker),
// and the raw values of the fields extract reads are taken as they pass,
// with the line's UTF-8 checked on the way (which spares checking each
// token again). The walk is strict JSON and
// accepts only what the general decoder accepts, reading it the same way;
// whatever it is not sure of (an escaped or repeated key, a key that
// differs from a known one only in case, deep nesting, any syntax error)
// is handed to the general decoder, which gives the same result or the
// same reject as before, at its own speed.

// maxScanDepth is the nesting the walk follows; deeper goes to the decoder.
const maxScanDepth = 200

// scanner walks a record's JSON. Walking JSON the reader wrote (valid,
// valid UTF-8), it only looks for the quote that ends each string;
// walking any other, it checks the grammar, and notes a string with a
// byte above ASCII, whose UTF-8 validUTF8 then checks.
type scanner struct{ record.Walker }

func newScanner(built bool) scanner {
	return scanner{record.Walker{Trusted: built, NoteNonASCII: !built}}
}

// validUTF8 reports whether b, a record the scanner walked, is valid
// UTF-8: only a string may hold a byte above ASCII, so a line whose
// strings held none is, and any other is checked whole, vectorized.
func (s *scanner) validUTF8(b []byte) bool {
	return !s.SawNonASCII || asmutf8.Valid(b)
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

// lookup returns where the value of the quoted key goes (nil: nowhere),
// and false for a key the walk leaves to the decoder: escaped, or a known
// name in other case, which the decoder may match differently.
func (t *fieldTable) lookup(key []byte, kind record.StringKind) (*json.RawMessage, bool) {
	body := key[1 : len(key)-1]
	if p, ok := t.at[string(body)]; ok {
		return p, true
	}
	if kind != 0 {
		return nil, false
	}
	var buf [64]byte
	if len(body) <= len(buf) && t.folds[string(lowerASCII(buf[:0], body))] {
		return nil, false
	}
	return nil, true
}

// scanFields walks the object b into the raw fields of t (which start out
// nil), returning the index after it, or below 0 when the decoder must
// read it. A list under one of the names conversation lists go by is read
// as turns on the way, into *turns, and *list is set to it.
func (s *scanner) scanFields(b []byte, t *fieldTable, turns *[]turn, list *[]byte) int {
	o := s.Object(b, 0, maxScanDepth)
	for key, kind, at, ok := o.Member(); ok; key, kind, at, ok = o.Member() {
		p, ok := t.lookup(key, kind)
		if !ok || (p != nil && *p != nil) { // a key for the decoder, or a repeated one
			return -1
		}
		var end int
		if p != nil && turns != nil && *list == nil && at < len(b) && b[at] == '[' && turnListKey(key) {
			*turns = (*turns)[:0] // each turn is zeroed as it is added
			if end = s.turnList(b, at, o.Depth(), turns); end >= 0 {
				*list = b[at:end]
			}
		} else {
			end = o.ValueEnd(at)
		}
		if o.Resume(end); end >= 0 && p != nil {
			*p = b[at:end]
		}
	}
	if !o.Valid() {
		return -1
	}
	return o.End()
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
	return s.turnList(b, 0, maxScanDepth, turns) == len(b)
}

// turnList reads the list of turn objects at b[i], which may nest depth
// arrays and objects, into turns, returning the index after it, or below 0.
func (s *scanner) turnList(b []byte, i, depth int, turns *[]turn) int {
	a := s.Array(b, i, depth)
	for at, ok := a.Element(); ok; at, ok = a.Element() {
		if at >= len(b) || b[at] != '{' {
			return -1
		}
		*turns = append(*turns, turn{})
		t := &(*turns)[len(*turns)-1]
		o := s.Object(b, at, a.Depth())
		for key, kind, v, ok := o.Member(); ok; key, kind, v, ok = o.Member() {
			p, ok := turnField(t, key, kind)
			if !ok || (p != nil && *p != nil) {
				return -1
			}
			end := o.ValueEnd(v)
			if o.Resume(end); end >= 0 && p != nil {
				*p = b[v:end]
			}
		}
		if !o.Valid() {
			return -1
		}
		a.Resume(o.End())
	}
	if !a.Valid() {
		return -1
	}
	return a.End()
}

// turnField is fieldTable.lookup for a turn's fields.
func turnField(t *turn, key []byte, kind record.StringKind) (*json.RawMessage, bool) {
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
	if kind != 0 {
		return nil, false
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
