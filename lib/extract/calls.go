package extract

import (
	"bytes"
	"strconv"

	"github.com/segmentio/encoding/json"
)

// Tool calls are written in the OpenAI chat shape whatever the dataset's:
//
//	{"role":"assistant","content":"","tool_calls":[{"id":"call_4_1","type":"function",
//	  "function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]}
//	{"role":"tool","tool_call_id":"call_4_1","content":"{\"temp_c\": 18}"}
//
// A ShareGPT function_call turn (glaive, LLaMA-Factory) holds a call, or a
// list of parallel calls, as JSON text {"name", "arguments"}; a
// LLaMA-Factory v1 assistant turn holds them as tool_call content parts.
// Neither has ids, so each call gets call_<turn>_<k>: the 1-based place of
// its turn in the conversation and of the call in the turn. The tool turns
// (observation, tool) that follow, in order, answer those calls and get
// their ids. arguments is a JSON string, the arguments object compacted
// with its keys in the order written. A function_call turn whose text is
// not a call stays an assistant turn with that text.

// toolCall is a call as ShareGPT and LLaMA-Factory write it.
type toolCall struct {
	Name      json.RawMessage `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// callsFromText reads a function_call turn's text (a string token) as one
// call or a list of them, and returns the tool_calls JSON, or nil if the
// text is not calls.
func (x *Extractor) callsFromText(turn int, tok []byte) []byte {
	text := bytes.TrimSpace(tokenText(nil, tok))
	if len(text) == 0 {
		return nil
	}
	x.callVals = x.callVals[:0]
	switch text[0] {
	case '{':
		x.callVals = append(x.callVals, text)
	case '[':
		var list []json.RawMessage
		if _, err := json.Parse(text, &list, parseFlags); err != nil || len(list) == 0 {
			return nil
		}
		for _, v := range list {
			x.callVals = append(x.callVals, v)
		}
	default:
		return nil
	}
	return x.buildCalls(turn, x.callVals)
}

// callsFromParts reads tool_call content parts (string tokens holding a
// call as JSON text).
func (x *Extractor) callsFromParts(turn int, toks [][]byte) []byte {
	vals := make([][]byte, len(toks))
	for i, tok := range toks {
		vals[i] = tokenText(nil, tok)
	}
	return x.buildCalls(turn, vals)
}

// buildCalls writes the calls (JSON objects) as OpenAI tool_calls in the
// arena, and queues their ids for the tool turns that answer them; nil if
// one of them is not a call.
func (x *Extractor) buildCalls(turn int, vals [][]byte) []byte {
	start := len(x.arena)
	x.arena = append(x.arena, '[')
	x.pending = x.pending[:0]
	for k, v := range vals {
		var c toolCall
		if _, err := json.Parse(v, &c, parseFlags); err != nil || !isString(c.Name) {
			x.arena = x.arena[:start]
			x.pending = x.pending[:0]
			return nil
		}
		args, ok := x.argumentsToken(c.Arguments)
		if !ok {
			x.arena = x.arena[:start]
			x.pending = x.pending[:0]
			return nil
		}
		id := "call_" + strconv.Itoa(turn) + "_" + strconv.Itoa(k+1)
		if k > 0 {
			x.arena = append(x.arena, ',')
		}
		idStart := len(x.arena) + len(`{"id":`)
		x.arena = x.appendCall(x.arena, []byte(`"`+id+`"`), cleanToken(&x.scratchArena, c.Name), args)
		x.pending = append(x.pending, x.arena[idStart:idStart+len(id)+2])
	}
	x.arena = append(x.arena, ']')
	return x.arena[start:]
}

// argumentsToken returns a call's arguments as a JSON string token: a
// string as it is, an object or list as its compact JSON text, none as
// "{}".
func (x *Extractor) argumentsToken(raw []byte) ([]byte, bool) {
	switch {
	case !present(raw):
		return []byte(`"{}"`), true
	case isString(raw):
		return cleanToken(&x.scratchArena, raw), true
	case raw[0] != '{' && raw[0] != '[':
		return nil, false
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, false
	}
	start := len(x.scratchArena)
	x.scratchArena = json.AppendEscape(x.scratchArena, compact.String(), 0)
	return x.scratchArena[start:], true
}

// appendCall appends one OpenAI tool call; id, name and arguments are
// JSON string tokens.
func (x *Extractor) appendCall(dst, id, name, arguments []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"type":"function","function":{"name":`...)
	dst = append(dst, name...)
	dst = append(dst, `,"arguments":`...)
	dst = append(dst, arguments...)
	return append(dst, "}}"...)
}

// answerCall gives a tool turn without a tool_call_id the id of the next
// call of the turn before it that has no answer yet.
func (x *Extractor) answerCall(m *message) {
	if m.toolCallID == nil && len(x.pending) > 0 {
		m.toolCallID = x.pending[0]
		x.pending = x.pending[1:]
	}
}
