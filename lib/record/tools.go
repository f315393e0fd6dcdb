package record

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/segmentio/encoding/json"
)

// ErrBadTools marks a tools value that is not a list of tools.
var ErrBadTools = errors.New("tools is neither a list of tools nor a JSON string holding one")

// AppendCanonicalTools appends the canonical form of a record's "tools"
// value to dst and reports whether there were any tools. The value may be
// the list itself or a JSON string holding it (as ShareGPT and
// LLaMA-Factory datasets store it). Every empty spelling (absent, null,
// "", " [ ] ", [], {}) means no tools and appends nothing, so a record
// with empty tools is the same prompt as one without. Tools are put in the
// OpenAI chat shape, {"type":"function","function":{...}}: a bare function
// object (name, description, parameters) and the flat Responses API form
// ({"type":"function","name":...}) are wrapped, a single tool object (not in
// a list) is the list of that one tool, and parameters given as a JSON string
// holding the schema are read as the schema. The result is compact JSON
// with object keys sorted and numbers kept as written, so two spellings of
// the same tools give the same bytes.
func AppendCanonicalTools(dst, raw []byte) ([]byte, bool, error) {
	v, err := parseTools(raw)
	if err != nil || v == nil {
		return dst, false, err
	}
	out, err := json.Append(dst, v, json.SortMapKeys)
	if err != nil {
		return dst, false, fmt.Errorf("%w: %v", ErrBadTools, err)
	}
	return out, true, nil
}

// parseTools decodes a tools value into plain Go values in the OpenAI
// shape, or nil when it holds no tools.
func parseTools(raw []byte) (any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadTools, err)
		}
		if raw = []byte(strings.TrimSpace(s)); len(raw) == 0 || string(raw) == "null" {
			return nil, nil
		}
		if raw[0] != '[' && raw[0] != '{' {
			return nil, ErrBadTools
		}
	}
	var v any
	if rest, err := json.Parse(raw, &v, json.UseNumber); err != nil || len(bytes.TrimSpace(rest)) != 0 {
		return nil, ErrBadTools
	}
	switch t := v.(type) {
	case []any:
		if len(t) == 0 {
			return nil, nil
		}
		for i, tool := range t {
			t[i] = openAITool(tool)
		}
		return t, nil
	case map[string]any:
		// One tool on its own is the list of that one tool: the same
		// prompt, the same id and dedup key.
		if len(t) == 0 {
			return nil, nil
		}
		return []any{openAITool(t)}, nil
	}
	return nil, ErrBadTools
}

// openAITool wraps a function declared in another shape as an OpenAI chat
// tool; anything else (built-in tools, other shapes) is kept as it is.
func openAITool(tool any) any {
	m, ok := tool.(map[string]any)
	if !ok {
		return tool
	}
	if fn, wrapped := m["function"].(map[string]any); wrapped {
		parseParameters(fn)
		return m
	}
	if _, wrapped := m["function"]; wrapped {
		return m
	}
	if _, named := m["name"]; !named {
		return m
	}
	typ, typed := m["type"]
	switch {
	case !typed:
		parseParameters(m)
		return map[string]any{"type": "function", "function": m}
	case typ == "function":
		fn := make(map[string]any, len(m)-1)
		for k, v := range m {
			if k != "type" {
				fn[k] = v
			}
		}
		parseParameters(fn)
		return map[string]any{"type": "function", "function": fn}
	}
	return m
}

// AddressCalls gives every tool call of one answer an id of its own: a
// call that came without one gets call_<m>_<k> (m the answer's 1-based
// place in the conversation, k the call's), as extract names the calls of
// datasets without ids; and a call whose id repeats an earlier call's in
// the same answer (some servers give every call one id) is re-addressed
// the same way, so that each tool result pairs with one call. It returns
// how many calls it re-addressed (not counting those without an id).
func AddressCalls(calls []ToolCall, m int) (readdressed int) {
	if len(calls) == 0 {
		return 0
	}
	seen := make(map[string]bool, len(calls))
	for k := range calls {
		if calls[k].ID != "" && !seen[calls[k].ID] {
			seen[calls[k].ID] = true
			continue
		}
		if calls[k].ID != "" {
			readdressed++
		}
		id := "call_" + strconv.Itoa(m) + "_" + strconv.Itoa(k+1)
		for n := 2; seen[id]; n++ {
			id = "call_" + strconv.Itoa(m) + "_" + strconv.Itoa(k+1) + "_" + strconv.Itoa(n)
		}
		calls[k].ID = id
		seen[id] = true
	}
	return readdressed
}

// parseParameters reads a function's parameters given as a JSON string
// holding the schema (as Parquet exports often store it) as that schema,
// so the two spellings are one tool. A string that does not hold a JSON
// object is kept as it is.
func parseParameters(fn map[string]any) {
	s, ok := fn["parameters"].(string)
	if !ok {
		return
	}
	var schema any
	if rest, err := json.Parse([]byte(strings.TrimSpace(s)), &schema, json.UseNumber); err != nil || len(bytes.TrimSpace(rest)) != 0 {
		return
	}
	if obj, ok := schema.(map[string]any); ok {
		fn["parameters"] = obj
	}
}
