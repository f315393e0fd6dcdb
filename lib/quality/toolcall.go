package quality

import (
	"bytes"
	"fmt"

	"github.com/segmentio/encoding/json"
)

// ToolCall is one regenerated tool call: the function's name and its
// arguments as raw JSON (a string holding JSON, as OpenAI sends them, or
// the object itself, as some servers do).
type ToolCall struct {
	Name      string
	Arguments []byte
}

// Tools is the set of function names a record offers in "tools". Nil
// means the record lists none.
type Tools map[string]struct{}

// ToolCallProblem reports the first regenerated call whose arguments are
// not a JSON object, or that names a function not in tools.
func ToolCallProblem(calls []ToolCall, tools Tools) (detail string, bad bool) {
	for i, c := range calls {
		if _, ok := tools[c.Name]; !ok {
			return fmt.Sprintf("call %d names %q, which is not among the record's %d tools", i, c.Name, len(tools)), true
		}
		if err := argumentsObject(c.Arguments); err != nil {
			return fmt.Sprintf("call %d (%s): arguments %v", i, c.Name, err), true
		}
	}
	return "", false
}

// argumentsObject checks that raw is a JSON object, or a JSON string
// holding one.
func argumentsObject(raw []byte) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("are not a valid JSON string: %v", err)
		}
		raw = bytes.TrimSpace([]byte(s))
	}
	if len(raw) == 0 || raw[0] != '{' {
		return fmt.Errorf("are not a JSON object: %.40q", raw)
	}
	if !json.Valid(raw) {
		return fmt.Errorf("are not valid JSON: %.40q", raw)
	}
	return nil
}
