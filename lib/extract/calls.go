package extract

import (
	"bytes"
	"fmt"
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
// LLaMA-Factory v1 assistant turn holds them as tool_call content parts;
// a legacy OpenAI message holds one as its function_call. None has an id,
// nor has an OpenAI call that leaves it out, so each such call gets
// call_<turn>_<k>: the 1-based place of its turn in the conversation and
// of the call in the turn. The tool turns (observation, tool, function)
// that follow without a tool_call_id, in order, answer those calls and get
// their ids. arguments is a JSON string: one given as a string is kept as
// written, an object is compacted with its keys in the order written. A
// function_call turn whose text is not a call stays an assistant turn with
// that text; any other call that is not one (no function name, arguments
// that are not an object, two calls of a turn with one id) is a
// bad_tool_calls reject, never passed on.

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
		if _, err := json.Parse(v, &c, parseFlags); err != nil || !isString(c.Name) || blankToken(c.Name) {
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
		x.arena = x.appendCall(x.arena, []byte(`"`+id+`"`), x.clean(&x.scratchArena, c.Name), args)
		x.pending = append(x.pending, x.arena[idStart:idStart+len(id)+2])
	}
	x.arena = append(x.arena, ']')
	return x.arena[start:]
}

// argumentsToken returns a call's arguments as a JSON string token: a
// string holding a JSON object as it is (a blank one, and none, as "{}"),
// an object as its compact JSON text. Anything else is not arguments.
func (x *Extractor) argumentsToken(raw []byte) ([]byte, bool) {
	switch {
	case !present(raw):
		return []byte(`"{}"`), true
	case isString(raw):
		text := bytes.TrimSpace(tokenText(x.scratch[:0], raw))
		if len(text) == 0 {
			return []byte(`"{}"`), true
		}
		if text[0] != '{' || !json.Valid(text) {
			return nil, false
		}
		return x.clean(&x.scratchArena, raw), true
	case raw[0] != '{':
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

// openAICall is a tool call as the OpenAI chat shape has it.
type openAICall struct {
	ID       json.RawMessage `json:"id"`
	Type     json.RawMessage `json:"type"`
	Function json.RawMessage `json:"function"`
}

// readToolCalls checks an OpenAI turn's tool_calls and writes them in the
// arena in the canonical shape: none for an empty list, an id made for a
// call that has none (queued for the tool turns that follow), arguments
// as a JSON string.
func (x *Extractor) readToolCalls(turn int, raw []byte) ([]byte, *badRecord) {
	if raw[0] != '[' {
		return nil, reject(ReasonBadToolCalls, "tool_calls is %s, not a list of calls", kindOf(raw))
	}
	var list []json.RawMessage
	if _, err := json.Parse(raw, &list, parseFlags); err != nil {
		return nil, reject(ReasonBadToolCalls, "tool_calls is not a list of calls")
	}
	if len(list) == 0 {
		x.pending = x.pending[:0]
		return nil, nil
	}
	start := len(x.arena)
	x.arena = append(x.arena, '[')
	x.pending = x.pending[:0]
	var ids []string
	for k, v := range list {
		fail := func(format string, args ...any) ([]byte, *badRecord) {
			x.arena = x.arena[:start]
			x.pending = x.pending[:0]
			return nil, reject(ReasonBadToolCalls, "tool_calls[%d] %s", k, fmt.Sprintf(format, args...))
		}
		if v[0] != '{' {
			return fail("is %s, not a call", kindOf(v))
		}
		var c openAICall
		json.Parse(v, &c, parseFlags) // an object: every field is raw
		if present(c.Type) && string(c.Type) != `"function"` {
			return fail("has type %s; only function calls are read", rawExcerpt(c.Type))
		}
		if !present(c.Function) || c.Function[0] != '{' {
			return fail("has no function object")
		}
		var fn toolCall
		json.Parse(c.Function, &fn, parseFlags)
		if !isString(fn.Name) || blankToken(fn.Name) {
			return fail("has no function name")
		}
		args, ok := x.argumentsToken(fn.Arguments)
		if !ok {
			return fail("has arguments that are neither a JSON object nor a string holding one")
		}
		var id []byte
		switch {
		case isString(c.ID) && !blankToken(c.ID):
			id = x.clean(&x.scratchArena, c.ID)
			text := string(tokenText(nil, id))
			for _, seen := range ids {
				if seen == text {
					return fail("has the id %s of an earlier call of the turn", rawExcerpt(id))
				}
			}
			ids = append(ids, text)
		case present(c.ID) && !isString(c.ID):
			return fail("has an id that is not a string")
		}
		if k > 0 {
			x.arena = append(x.arena, ',')
		}
		if id == nil {
			made := `"call_` + strconv.Itoa(turn) + "_" + strconv.Itoa(k+1) + `"`
			idStart := len(x.arena) + len(`{"id":`)
			x.arena = x.appendCall(x.arena, []byte(made), x.clean(&x.scratchArena, fn.Name), args)
			x.pending = append(x.pending, x.arena[idStart:idStart+len(made)])
			continue
		}
		x.arena = x.appendCall(x.arena, id, x.clean(&x.scratchArena, fn.Name), args)
	}
	x.arena = append(x.arena, ']')
	return x.arena[start:], nil
}

// legacyCall reads a legacy OpenAI message's function_call ({"name",
// "arguments"}) as its one tool call, id call_<turn>_1.
func (x *Extractor) legacyCall(turn int, raw []byte) ([]byte, *badRecord) {
	if raw[0] != '{' {
		return nil, reject(ReasonBadToolCalls, "function_call is %s, not a call", kindOf(raw))
	}
	calls := x.buildCalls(turn, [][]byte{raw})
	if calls == nil {
		return nil, reject(ReasonBadToolCalls, "function_call is not a call (a name and, if any, arguments that are an object)")
	}
	return calls, nil
}

// toolSettings are a record's tool_choice and parallel_tool_calls as given
// (a batch request's, an OpenAI preference input's, or the top level's);
// legacy is the legacy function_call request setting, read as tool_choice.
type toolSettings struct {
	choice, parallel, legacy []byte
}

// toolChoices are the tool_choice strings the OpenAI API takes.
var toolChoices = map[string]bool{`"auto"`: true, `"none"`: true, `"required"`: true}

// applyToolSettings checks the record's tool_choice and
// parallel_tool_calls and keeps them for the output; without tools they
// mean nothing and are left out unread.
func (x *Extractor) applyToolSettings() *badRecord {
	st := &x.settings
	if x.tools == nil {
		return nil
	}
	choice := st.choice
	if !present(choice) && present(st.legacy) {
		// function_call: "auto", "none", or {"name": ...}.
		choice = st.legacy
		if choice[0] == '{' {
			var fn struct {
				Name json.RawMessage `json:"name"`
			}
			json.Parse(choice, &fn, parseFlags)
			if !isString(fn.Name) || blankToken(fn.Name) {
				return reject(ReasonBadTools, "function_call names no function")
			}
			start := len(x.arena)
			x.arena = append(x.arena, `{"type":"function","function":{"name":`...)
			x.arena = append(x.arena, x.clean(&x.scratchArena, fn.Name)...)
			x.arena = append(x.arena, "}}"...)
			choice = x.arena[start:]
		}
	}
	switch {
	case !present(choice):
	case isString(choice) && toolChoices[string(choice)]:
		x.toolChoice = choice
	case choice[0] == '{' && nonEmpty(choice):
		var compact bytes.Buffer
		json.Compact(&compact, choice)
		start := len(x.arena)
		x.arena = append(x.arena, bytes.ToValidUTF8(compact.Bytes(), []byte("\uFFFD"))...)
		x.toolChoice = x.arena[start:]
	default:
		return reject(ReasonBadTools, "tool_choice %s is neither auto, none, required nor a tool", rawExcerpt(choice))
	}
	switch p := st.parallel; {
	case !present(p):
	case string(p) == "true" || string(p) == "false":
		x.parallel = p
	default:
		return reject(ReasonBadTools, "parallel_tool_calls %s is not true or false", rawExcerpt(p))
	}
	return nil
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
