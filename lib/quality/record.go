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

func parseErr(reason, format string, args ...any) *ParseError {
	return &ParseError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// GenerationView is the view of a generation record the checks read: its
// answers, one for a single answer or one per regenerated assistant turn
// (output.turns), each with the user turn it answers. Its strings alias
// the line parsed and buffers of the view, so a view is valid until the
// next Parse or until the line's buffer is reused.
type GenerationView struct {
	Kind record.Kind
	// Conversation is true for a regenerated conversation (output.messages):
	// Answers[i] is then output.turns[i].
	Conversation bool
	Answers      []Answer
	// Output is the raw output value, as the line holds it.
	Output []byte
	tools  Tools

	scan                       scanner
	messages, prompt, toolsRaw []byte // raw top-level fields
	promptText                 string
	promptDone                 bool
	text, reasoning            []byte // unescaped output.text and output.reasoning
	out                        outputView
	calls                      []toolCallView
	args                       [][]ToolCall
}

type rawMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type outputView struct {
	Messages []messageView `json:"messages"`
	Turns    []turnView    `json:"turns"`
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
// and error records parse (Kind tells them apart) with no answers. Only
// the output is decoded, and of a single answer only its text, reasoning,
// finish_reason and tool_calls: generation records are mostly answer text,
// which is validated and located in one pass (scan.go) and unescaped once,
// without copying when it holds no escape. Field names match exactly, as
// the record contract spells them ("Output" is not "output"), the last of
// repeated ones winning.
func (r *GenerationView) Parse(line []byte) *ParseError {
	r.Kind, r.Conversation, r.Output, r.tools = record.KindPrompt, false, nil, nil
	r.Answers = r.Answers[:0]
	r.messages, r.prompt, r.toolsRaw, r.promptText, r.promptDone = nil, nil, nil, "", false
	if !r.scan.scan(line) {
		return parseErr(ReasonMalformedJSON, "not valid JSON")
	}
	if line[record.SkipSpace(line, 0)] != '{' {
		return parseErr(ReasonNotObject, "a record must be a JSON object")
	}
	f := &r.scan.f
	r.messages, r.prompt, r.toolsRaw = f[fMessages].raw, f[fPrompt].raw, f[fTools].raw
	switch {
	case !isNull(f[fOutput].raw):
		r.Kind = record.KindGeneration
	case !isNull(f[fError].raw):
		r.Kind = record.KindError
		return nil
	default:
		return nil
	}
	r.Output = f[fOutput].raw
	if r.Output[0] != '{' {
		return parseErr(ReasonBadOutput, "output must be an object, not %.20s", r.Output)
	}
	calls := 0
	if msgsRaw := f[oMessages].raw; !isNull(msgsRaw) && string(msgsRaw) != "[]" {
		if perr := r.parseConversation(msgsRaw, f[oTurns].raw); perr != nil {
			return perr
		}
		for _, a := range r.Answers {
			calls += len(a.ToolCalls)
		}
	} else {
		callsRaw := f[oToolCalls].raw
		if isNull(f[oText].raw) && isNull(callsRaw) {
			return parseErr(ReasonBadOutput, "output has neither text nor messages")
		}
		a := Answer{prompt: r}
		var perr *ParseError
		if a.Text, r.text, perr = stringField("output.text", &f[oText], r.text); perr != nil {
			return perr
		}
		if a.Reasoning, r.reasoning, perr = stringField("output.reasoning", &f[oReasoning], r.reasoning); perr != nil {
			return perr
		}
		if a.Finish, perr = finishField(&f[oFinish]); perr != nil {
			return perr
		}
		if !isNull(callsRaw) {
			r.calls = r.calls[:0]
			if err := record.Decode(callsRaw, &r.calls); err != nil {
				return parseErr(ReasonBadOutput, "output.tool_calls: %v", err)
			}
			a.ToolCalls = r.toolCalls(0, r.calls)
		}
		calls = len(a.ToolCalls)
		r.Answers = append(r.Answers, a)
	}
	if calls > 0 {
		var err error
		if r.tools, err = parseTools(r.toolsRaw); err != nil {
			return parseErr(ReasonBadOutput, "tools: %v", err)
		}
	}
	return nil
}

// parseConversation reads the regenerated turns of output.messages.
func (r *GenerationView) parseConversation(msgsRaw, turnsRaw []byte) *ParseError {
	r.Conversation = true
	clear(r.out.Messages[:cap(r.out.Messages)])
	clear(r.out.Turns[:cap(r.out.Turns)])
	r.out = outputView{Messages: r.out.Messages[:0], Turns: r.out.Turns[:0]}
	if err := record.Decode(msgsRaw, &r.out.Messages); err != nil {
		return parseErr(ReasonBadOutput, "output.messages: %v", err)
	}
	if !isNull(turnsRaw) {
		if err := record.Decode(turnsRaw, &r.out.Turns); err != nil {
			return parseErr(ReasonBadOutput, "output.turns: %v", err)
		}
	}
	o := &r.out
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
		r.Answers = append(r.Answers, a)
	}
	return nil
}

// stringField unescapes the JSON string sp (null or absent: ""), into buf
// when it holds escapes.
func stringField(name string, sp *span, buf []byte) (string, []byte, *ParseError) {
	if isNull(sp.raw) {
		return "", buf, nil
	}
	if sp.raw[0] != '"' {
		return "", buf, parseErr(ReasonBadOutput, "%s should be a string, not %.20s", name, sp.raw)
	}
	s, buf := record.UnquoteKnown(sp.raw, buf, sp.escaped, sp.high)
	return s, buf, nil
}

// finishField is output.finish_reason: one of a few short words, so the
// common ones are not allocated.
func finishField(sp *span) (string, *ParseError) {
	if isNull(sp.raw) {
		return "", nil
	}
	if sp.raw[0] != '"' {
		return "", parseErr(ReasonBadOutput, "output.finish_reason should be a string, not %.20s", sp.raw)
	}
	s, _ := record.UnquoteKnown(sp.raw, nil, sp.escaped, sp.high)
	for _, known := range [...]string{"stop", "length", "tool_calls", "abort", "content_filter"} {
		if s == known {
			return known, nil
		}
	}
	return strings.Clone(s), nil
}

// Tools is the set of functions the record offers (parsed only when some
// answer calls one).
func (r *GenerationView) Tools() Tools { return r.tools }

// toolCalls converts the calls of answer i, reusing r's buffers.
func (r *GenerationView) toolCalls(i int, calls []toolCallView) []ToolCall {
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
// completion prompt; decoded when first asked for.
func (r *GenerationView) lastUserTurn() string {
	if !r.promptDone {
		r.promptDone = true
		r.promptText = userTurn(r.messages, r.prompt)
	}
	return r.promptText
}

// userTurn is the text of the last user message of the raw messages, or
// the raw completion prompt.
func userTurn(messages, prompt []byte) string {
	var msgs []rawMessage
	if !isNull(messages) && record.Decode(messages, &msgs) == nil {
		for i := len(msgs) - 1; i >= 0; i-- {
			if msgs[i].Role == "user" {
				var s string
				if json.Unmarshal(msgs[i].Content, &s) != nil {
					return ""
				}
				return s
			}
		}
	}
	if len(prompt) > 0 && prompt[0] == '"' {
		s, _ := record.Unquote(prompt, nil)
		return strings.Clone(s)
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
	if err := record.Decode(raw, &list); err != nil {
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
