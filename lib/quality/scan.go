package quality

import "tokenmill/lib/record"

// Parse reads a generation record in one pass that both validates the
// line as JSON and notes where the fields the checks read are: a
// generation record is mostly answer text, so its bytes are read once to
// validate and locate it (by record.Walker, many at a time inside
// strings), instead of once by a validator and again by a field scanner.
// The grammar is the one json.Valid accepts; keys match exactly, as the
// record contract spells them; the last of repeated keys wins.

// Field slots: the top-level fields, then those of output.
const (
	fOutput = iota
	fError
	fMessages
	fPrompt
	fTools
	oText
	oReasoning
	oFinish
	oToolCalls
	oMessages
	oTurns
	numFields
)

// Where object keys are looked up.
const (
	levelTop = iota
	levelOutput
)

// span is a field's raw value; for a string, whether it holds an escape
// and whether it may hold a byte above ASCII (false means it does not).
type span struct {
	raw           []byte
	escaped, high bool
}

// scanner is the state of one pass; reused from line to line.
type scanner struct {
	w   record.Walker
	f   [numFields]span
	key []byte // an escaped key, unescaped
}

// scan validates line and fills s.f; it reports whether line is valid.
func (s *scanner) scan(line []byte) bool {
	s.f = [numFields]span{}
	i := record.SkipSpace(line, 0)
	if i >= len(line) {
		return false
	}
	var end int
	if line[i] == '{' {
		end = s.object(line, i, record.MaxDepth, levelTop)
	} else {
		end = s.w.ValueEnd(line, i, record.MaxDepth)
	}
	return end >= 0 && record.SkipSpace(line, end) == len(line)
}

// object validates the object at b[i], which may nest depth arrays and
// objects, and returns the index past it, or below 0; its keys are looked
// up at level.
func (s *scanner) object(b []byte, i, depth, level int) int {
	o := s.w.Object(b, i, depth)
	for key, kind, at, ok := o.Member(); ok; key, kind, at, ok = o.Member() {
		slot := s.slot(key, kind, level)
		var sp span
		end := -1
		switch {
		case at >= len(b):
		case slot == fOutput:
			// A later output replaces an earlier one, fields and all.
			clear(s.f[oText:])
			if b[at] == '{' {
				end = s.object(b, at, o.Depth(), levelOutput)
			} else {
				end = o.ValueEnd(at)
			}
		case slot >= 0 && b[at] == '"':
			var k record.StringKind
			end, k = s.w.StringEnd(b, at)
			sp.escaped, sp.high = k&record.Escaped != 0, k&record.NonASCII != 0
		default:
			end = o.ValueEnd(at)
		}
		o.Resume(end)
		if slot >= 0 && end >= 0 {
			sp.raw = b[at:end]
			s.f[slot] = sp
		}
	}
	if !o.Valid() {
		return -1
	}
	return o.End()
}

// slot is the field slot of the quoted key at level, or -1.
func (s *scanner) slot(quoted []byte, kind record.StringKind, level int) int {
	key := quoted[1 : len(quoted)-1]
	if kind&record.Escaped != 0 {
		var k string
		k, s.key = record.Unquote(quoted, s.key)
		key = []byte(k)
	}
	if level == levelTop {
		switch string(key) {
		case "output":
			return fOutput
		case "error":
			return fError
		case "messages":
			return fMessages
		case "prompt":
			return fPrompt
		case "tools":
			return fTools
		}
		return -1
	}
	switch string(key) {
	case "text":
		return oText
	case "reasoning":
		return oReasoning
	case "finish_reason":
		return oFinish
	case "tool_calls":
		return oToolCalls
	case "messages":
		return oMessages
	case "turns":
		return oTurns
	}
	return -1
}

// Masks of word-at-a-time byte tests (loop.go).
const (
	ones  uint64 = 0x0101010101010101
	highs uint64 = 0x8080808080808080
)
