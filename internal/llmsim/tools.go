package llmsim

import (
	"bytes"
	"slices"
	"strconv"

	"github.com/segmentio/encoding/json"
)

// Tool calls. A chat request that carries tools is answered, with
// probability Config.ToolCallRate (drawn from the prompt and the seed), by
// an assistant message calling one of them (two at
// Config.ParallelToolCallRate), with arguments built from the function's
// parameters schema and finish_reason "tool_calls". The call's JSON is
// what the model writes: its tokens take decoding time like any answer's.

const finishToolCalls = "tool_calls"

// wireTool is one entry of a request's tools (OpenAI's shape).
type wireTool struct {
	Type     string `json:"type"`
	Function struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// toolCall is one call of an answer.
type toolCall struct {
	id, name, args string
}

// planToolCalls decides whether choice c of the flight calls tools, and
// which, deterministically from the flight's sample hash (the prompt, and
// the request's seed when it samples) and the seed.
func (e *Endpoint) planToolCalls(f *flight, c *choiceState, tools []wireTool, limit int) {
	cfg := &e.f.cfg
	if len(tools) == 0 || cfg.ToolCallRate <= 0 || e.tok().noTools {
		return // the model never saw tools its template left out
	}
	h := mix64(f.sample ^ mix64(cfg.Seed+0x7f4a7c159e3779b9) ^ uint64(c.index)*0x9e3779b97f4a7c15)
	if unitFloat(h) > cfg.ToolCallRate {
		return
	}
	n := 1
	if len(tools) > 0 && unitFloat(mix64(h+1)) <= cfg.ParallelToolCallRate {
		n = 2
	}
	var calls []toolCall
	for k := 0; k < n; k++ {
		r := mix64(h + uint64(k)*0x632be59bd9b4e019 + 2)
		t := tools[r%uint64(len(tools))]
		args := string(appendSchemaValue(nil, t.Function.Parameters, mix64(r), 0, true))
		id := "call_" + f.digest + strconv.FormatUint(r%0x10000, 16)
		if e.d.shortCallIDs {
			id = "call_" + f.digest[:8]
		}
		calls = append(calls, toolCall{id: id, name: t.Function.Name, args: args})
	}
	// <tool_call>{"name": ..., "arguments": ...}</tool_call>, as the model writes it
	need := e.tok().callTokens(calls)
	if need+1 > limit {
		return // no room for the call and the end of turn after it: the model answers in text
	}
	c.calls, c.Target, c.End, c.reasoning = calls, need, finishToolCalls, 0
}

// appendSchemaValue appends a JSON value that fits a JSON schema: each
// property of an object (the required ones always, others half the time),
// enum members, and plain values by type.
func appendSchemaValue(dst []byte, schema json.RawMessage, r uint64, depth int, top bool) []byte {
	var s struct {
		Type       json.RawMessage            `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
		Items      json.RawMessage            `json:"items"`
		Enum       []json.RawMessage          `json:"enum"`
	}
	if len(bytes.TrimSpace(schema)) > 0 {
		_ = json.Unmarshal(schema, &s)
	}
	if len(s.Enum) > 0 {
		return append(dst, bytes.TrimSpace(s.Enum[r%uint64(len(s.Enum))])...)
	}
	typ := ""
	_ = json.Unmarshal(s.Type, &typ)
	if typ == "" {
		var types []string
		if json.Unmarshal(s.Type, &types) == nil && len(types) > 0 {
			typ = types[0]
		}
	}
	if typ == "" && (s.Properties != nil || top) {
		typ = "object"
	}
	switch {
	case typ == "object" && depth < 4:
		keys := make([]string, 0, len(s.Properties))
		for k := range s.Properties {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		first := true
		for i, k := range keys {
			kr := mix64(r + uint64(i) + 1)
			if !slices.Contains(s.Required, k) && kr&1 == 0 {
				continue
			}
			if !first {
				dst = append(dst, ", "...)
			}
			first = false
			dst = appendString(dst, k)
			dst = append(dst, ": "...)
			dst = appendSchemaValue(dst, s.Properties[k], mix64(kr), depth+1, false)
		}
		return append(dst, '}')
	case typ == "array" && depth < 4:
		dst = append(dst, '[')
		dst = appendSchemaValue(dst, s.Items, mix64(r), depth+1, false)
		return append(dst, ']')
	case typ == "integer":
		return strconv.AppendUint(dst, r%100, 10)
	case typ == "number":
		return strconv.AppendFloat(dst, float64(r%10000)/100, 'f', -1, 64)
	case typ == "boolean":
		return strconv.AppendBool(dst, r&1 == 1)
	case typ == "null":
		return append(dst, "null"...)
	}
	return appendString(dst, vocabulary[r%uint64(len(vocabulary))]+" "+vocabulary[(r>>20)%uint64(len(vocabulary))])
}

// callChars is how much of the calls' arguments the first n tokens wrote:
// the arguments grow evenly over the answer's tokens.
func (c *choiceState) callChars(n int) int {
	total := 0
	for _, t := range c.calls {
		total += len(t.args)
	}
	if n >= c.Target {
		return total
	}
	return total * n / max(c.Target, 1)
}

// appendToolCalls writes a message's tool_calls array (withIndex: SGLang
// and Ollama number them).
func (c *choiceState) appendToolCalls(dst []byte, withIndex bool) []byte {
	dst = append(dst, '[')
	for i, t := range c.calls {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"id":`...)
		dst = appendString(dst, t.id)
		if withIndex {
			dst = append(dst, `,"index":`...)
			dst = appendInt(dst, i)
		}
		dst = append(dst, `,"type":"function","function":{"name":`...)
		dst = appendString(dst, t.name)
		dst = append(dst, `,"arguments":`...)
		dst = appendString(dst, t.args)
		dst = append(dst, "}}"...)
	}
	return append(dst, ']')
}

// toolDeltas calls emit with the delta fields for what tokens [from, to)
// of the calls wrote, in OpenAI's streaming shape: a call opens with its
// index, id, type, name and empty arguments, then its arguments follow in
// pieces under its index.
func (c *choiceState) toolDeltas(from, to int, emit func(delta []byte)) {
	lo, hi := c.callChars(from), c.callChars(to)
	start := 0
	for i, t := range c.calls {
		end := start + len(t.args)
		// The call opens in the event that first gets past its start (or the
		// last one): an earlier event reached at most its start.
		if lo <= start && (hi > start || to >= c.Target) {
			d := []byte(`"tool_calls":[{"index":`)
			d = appendInt(d, i)
			d = append(d, `,"id":`...)
			d = appendString(d, t.id)
			d = append(d, `,"type":"function","function":{"name":`...)
			d = appendString(d, t.name)
			emit(append(d, `,"arguments":""}}]`...))
		}
		if a, b := max(lo, start), min(hi, end); b > a {
			d := []byte(`"tool_calls":[{"index":`)
			d = appendInt(d, i)
			d = append(d, `,"function":{"arguments":`...)
			d = appendString(d, t.args[a-start:b-start])
			emit(append(d, "}}]"...))
		}
		start = end
	}
}
