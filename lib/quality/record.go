package quality

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/record"
)

// Reasons a line is not a generation record whose answers can be checked.
const (
	ReasonMalformedJSON   = "malformed_json"
	ReasonNotObject       = "not_an_object"
	ReasonNotAGeneration  = "not_a_generation" // a prompt record: nothing to check
	ReasonBadOutput       = "bad_output"       // output of the wrong shape
	ReasonUnknownTurnRole = "bad_turn"         // a turn that is not an assistant message
)

// ParseError is why a line cannot be checked, with its reject reason.
type ParseError struct {
	Reason string
	Err    error
}

func (e *ParseError) Error() string { return e.Reason + ": " + e.Err.Error() }

func parseErr(reason, format string, args ...any) *ParseError {
	return &ParseError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// Record is the view of a generation record the checks read: its answers,
// one for a single answer or one per regenerated assistant turn
// (output.turns), each with the user turn it answers. Its strings alias
// the line parsed, so a Record is valid until the line's buffer is reused.
type Record struct {
	Kind record.Kind
	// Conversation is true for a regenerated conversation (output.messages):
	// Answers[i] is then output.turns[i].
	Conversation bool
	Answers      []Answer
	// Output is the raw output value, as the line holds it.
	Output []byte
	tools  Tools

	top  topView
	out  outputView
	args [][]ToolCall
}

type topView struct {
	Messages []rawMessage    `json:"messages"`
	Prompt   *string         `json:"prompt"`
	Tools    json.RawMessage `json:"tools"`
	Output   json.RawMessage `json:"output"`
	Error    json.RawMessage `json:"error"`
}

type rawMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type outputView struct {
	Text         *string        `json:"text"`
	Reasoning    string         `json:"reasoning"`
	FinishReason string         `json:"finish_reason"`
	ToolCalls    []toolCallView `json:"tool_calls"`
	Messages     []messageView  `json:"messages"`
	Turns        []turnView     `json:"turns"`
}

type messageView struct {
	Role             string         `json:"role"`
	Content          *string        `json:"content"`
	ReasoningContent string         `json:"reasoning_content"`
	ToolCalls        []toolCallView `json:"tool_calls"`
}

type toolCallView struct {
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type turnView struct {
	Message      *int   `json:"message"`
	FinishReason string `json:"finish_reason"`
}

// Parse reads line into r. The whole line is validated as JSON; prompt
// and error records parse (Kind tells them apart) with no answers.
func (r *Record) Parse(line []byte) *ParseError {
	r.Kind, r.Conversation, r.Output, r.tools = record.KindPrompt, false, nil, nil
	r.Answers = r.Answers[:0]
	clear(r.top.Messages[:cap(r.top.Messages)])
	r.top = topView{Messages: r.top.Messages[:0]}
	if err := record.Decode(line, &r.top); err != nil {
		if !json.Valid(line) {
			return parseErr(ReasonMalformedJSON, "%v", err)
		}
		if b := bytes.TrimLeft(line, " \t\r\n"); len(b) == 0 || b[0] != '{' {
			return parseErr(ReasonNotObject, "a record must be a JSON object")
		}
		return parseErr(ReasonBadOutput, "%v", err)
	}
	switch {
	case !isNull(r.top.Output):
		r.Kind = record.KindGeneration
	case !isNull(r.top.Error):
		r.Kind = record.KindError
		return nil
	default:
		return nil
	}
	r.Output = r.top.Output
	if r.Output[0] != '{' {
		return parseErr(ReasonBadOutput, "output must be an object, not %.20s", r.Output)
	}
	clear(r.out.Messages[:cap(r.out.Messages)])
	clear(r.out.Turns[:cap(r.out.Turns)])
	r.out = outputView{Messages: r.out.Messages[:0], Turns: r.out.Turns[:0], ToolCalls: r.out.ToolCalls[:0]}
	if err := record.Decode(r.Output, &r.out); err != nil {
		return parseErr(ReasonBadOutput, "output: %v", err)
	}
	o := &r.out
	calls := 0
	if len(o.Messages) > 0 {
		r.Conversation = true
		for i, t := range o.Turns {
			if t.Message == nil || *t.Message < 0 || *t.Message >= len(o.Messages) {
				return parseErr(ReasonBadOutput, "output.turns[%d].message is not an index into output.messages", i)
			}
			m := &o.Messages[*t.Message]
			if m.Role != "assistant" {
				return parseErr(ReasonUnknownTurnRole, "output.turns[%d] points at a %q message, not an assistant one", i, m.Role)
			}
			a := Answer{Reasoning: m.ReasoningContent, Finish: t.FinishReason, ToolCalls: r.toolCalls(len(r.Answers), m.ToolCalls)}
			if m.Content != nil {
				a.Text = *m.Content
			}
			for j := *t.Message - 1; j >= 0; j-- {
				if u := &o.Messages[j]; u.Role == "user" && u.Content != nil {
					a.Prompt = *u.Content
					break
				}
			}
			calls += len(a.ToolCalls)
			r.Answers = append(r.Answers, a)
		}
	} else {
		if o.Text == nil && len(o.ToolCalls) == 0 {
			return parseErr(ReasonBadOutput, "output has neither text nor messages")
		}
		a := Answer{Reasoning: o.Reasoning, Finish: o.FinishReason, ToolCalls: r.toolCalls(0, o.ToolCalls), Prompt: r.lastUserTurn()}
		if o.Text != nil {
			a.Text = *o.Text
		}
		calls = len(a.ToolCalls)
		r.Answers = append(r.Answers, a)
	}
	if calls > 0 {
		var err error
		if r.tools, err = parseTools(r.top.Tools); err != nil {
			return parseErr(ReasonBadOutput, "tools: %v", err)
		}
	}
	return nil
}

// Tools is the set of functions the record offers (parsed only when some
// answer calls one).
func (r *Record) Tools() Tools { return r.tools }

// toolCalls converts the calls of answer i, reusing r's buffers.
func (r *Record) toolCalls(i int, calls []toolCallView) []ToolCall {
	if len(calls) == 0 {
		return nil
	}
	for len(r.args) <= i {
		r.args = append(r.args, nil)
	}
	out := r.args[i][:0]
	for _, c := range calls {
		out = append(out, ToolCall{Name: c.Function.Name, Arguments: c.Function.Arguments})
	}
	r.args[i] = out
	return out
}

// lastUserTurn is the text of the prompt's last user message, or its
// completion prompt.
func (r *Record) lastUserTurn() string {
	for i := len(r.top.Messages) - 1; i >= 0; i-- {
		m := &r.top.Messages[i]
		if m.Role != "user" {
			continue
		}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			return s
		}
		return ""
	}
	if r.top.Prompt != nil {
		return *r.top.Prompt
	}
	return ""
}

// parseTools reads the names of "tools": OpenAI's [{"type": "function",
// "function": {"name": ...}}], the bare [{"name": ...}] of ShareGPT-style
// datasets, or either written as a JSON string (glaive).
func parseTools(raw []byte) (Tools, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		raw = []byte(strings.TrimSpace(s))
		if len(raw) == 0 {
			return nil, nil
		}
	}
	var list []struct {
		Name     string `json:"name"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, errors.New("not a list of functions")
	}
	tools := Tools{}
	for _, t := range list {
		name := t.Function.Name
		if name == "" {
			name = t.Name
		}
		if name != "" {
			tools[strings.Clone(name)] = struct{}{}
		}
	}
	return tools, nil
}

func isNull(v []byte) bool { return len(v) == 0 || string(v) == "null" }
