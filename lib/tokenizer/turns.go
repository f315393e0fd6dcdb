package tokenizer

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/record"
)

// Turn holds the ids of one generation event as the model's own template
// and tokenizer give them: the prompt the server rendered and tokenized,
// and the answer as the model wrote it, up to and including the
// end-of-turn token it ended with.
type Turn struct {
	PromptText string
	Prompt     []int
	// AnswerText is the template's text of the answer: what follows the
	// prompt once the answer is rendered after it, up to the end of turn.
	AnswerText string
	Answer     []int
	// ReasoningIDs is how many of Answer's first ids are the answer's
	// reasoning, its markers included (0 without reasoning).
	ReasoningIDs int
	// EndOfTurn tells an answer that ends with an end-of-turn id; false
	// for one cut at max_tokens (it has none), or where the template
	// writes none after an answer.
	EndOfTurn bool
}

// Why the ids of an event cannot be rebuilt.
var (
	// ErrAnswerSpan: the template renders the history otherwise once the
	// answer follows it, so the answer's span cannot be told apart.
	ErrAnswerSpan = errors.New("the chat template renders the conversation differently once the answer follows it: the answer's span is not the text after the prompt")
	// ErrAnswerDropped: the template leaves part of the answer out of its
	// rendering (DeepSeek-V3's drops the tool calls of an answer whose
	// content is not null): a row of it would not train on what the
	// model wrote.
	ErrAnswerDropped = errors.New("the chat template leaves part of the answer out")
)

// Finish reasons of an answer that ended with the model's end of turn.
func endedByModel(finish string) bool { return finish != "length" && finish != "abort" }

// Turn rebuilds the ids of one event: the prompt as vLLM and SGLang
// render it (ServerMessages, the template with add_generation_prompt,
// tokenized without added specials), and the answer as the difference
// between the template's rendering with the answer and without, cut after
// the first end-of-turn id (before it for an answer cut at max_tokens,
// which the model did not end). kwargs are used where the turn's record
// names none.
func (t *Tokenizer) Turn(turn record.ChatTurn, kwargs []byte) (Turn, error) {
	if turn.Kwargs != nil {
		kwargs = turn.Kwargs
	}
	var out Turn
	if turn.Prompt != nil {
		out.PromptText = *turn.Prompt
		out.Prompt = t.EncodeSpecial(out.PromptText)
		out.AnswerText = turn.Answer.Content
		out.Answer = t.Encode(out.AnswerText)
		if endedByModel(turn.Finish) && len(t.EndOfTurn) > 0 {
			out.Answer = append(out.Answer, t.EndOfTurn[0])
			out.EndOfTurn = true
		}
		return out, nil
	}
	history, err := ServerMessages(turn.Messages)
	if err != nil {
		return out, err
	}
	if out.PromptText, err = t.Render(Request{Messages: history, Tools: turn.Tools, AddGenerationPrompt: true, Kwargs: kwargs}); err != nil {
		return out, err
	}
	answerMsg := turn.Answer
	answerMsg.Role = "assistant"
	withAnswer, err := ServerMessages(append(turn.Messages[:len(turn.Messages):len(turn.Messages)], answerMsg))
	if err != nil {
		return out, err
	}
	full, err := t.Render(Request{Messages: withAnswer, Tools: turn.Tools, Kwargs: kwargs})
	if err != nil {
		return out, err
	}
	if !strings.HasPrefix(full, out.PromptText) {
		return out, ErrAnswerSpan
	}
	out.Prompt = t.Encode(out.PromptText)
	answer := full[len(out.PromptText):]
	if part := droppedPart(answer, turn.Answer); part != "" {
		return out, fmt.Errorf("%w: its %s", ErrAnswerDropped, part)
	}
	ids := t.Encode(answer)
	cut := len(ids)
	for i, id := range ids {
		if t.IsEndOfTurn(id) {
			cut = i
			if endedByModel(turn.Finish) {
				cut, out.EndOfTurn = i+1, true
			}
			break
		}
	}
	out.Answer = ids[:cut]
	out.AnswerText = string(t.DecodeBytes(out.Answer))
	out.ReasoningIDs = t.ReasoningIDs(out.Answer, answer, turn.Answer)
	return out, nil
}

// droppedPart names the part of answer a the template's text of it
// lacks ("" when each is there): its reasoning, its content (either as
// the template trims them, their first characters) or a tool call's name.
func droppedPart(text string, a record.WireMessage) string {
	content := a.Content
	if i := strings.LastIndex(content, "</think>"); i >= 0 {
		content = content[i+len("</think>"):] // a template takes inline reasoning out
	}
	for _, p := range []struct{ name, s string }{{"reasoning", a.ReasoningContent}, {"content", content}} {
		s := strings.TrimSpace(p.s)
		if s != "" && !strings.Contains(text, s[:min(len(s), 64)]) {
			return p.name
		}
	}
	var calls []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(a.ToolCalls, &calls) == nil {
		for _, c := range calls {
			if !strings.Contains(text, c.Function.Name) {
				return "tool calls"
			}
		}
	}
	return ""
}

// ReasoningIDs counts the answer's ids before its content starts, when
// it has reasoning: the reasoning and the markers the template puts around
// it. The content starts at its first characters (leading white space
// aside), or at the first tool call's name (its line), or, with neither,
// at the end of turn.
func (t *Tokenizer) ReasoningIDs(ids []int, text string, a record.WireMessage) int {
	r := strings.Trim(a.ReasoningContent, "\n")
	if r == "" {
		return 0
	}
	at := strings.LastIndex(text, r)
	if at < 0 {
		return 0
	}
	after := at + len(r)
	start := len(text)
	if c := strings.TrimLeft(a.Content, " \t\r\n"); c != "" {
		if i := strings.Index(text[after:], c[:min(len(c), 64)]); i >= 0 {
			start = after + i
		}
	} else if name := firstCallName(a.ToolCalls); name != "" {
		if i := strings.Index(text[after:], name); i >= 0 {
			start = after + strings.LastIndexByte(text[after:after+i], '\n') + 1
		}
	}
	n, end := 0, 0
	for _, id := range ids {
		end += len(t.tokenBytes(id))
		if end > start {
			break
		}
		n++
	}
	return n
}

// firstCallName is the function name of the first of calls ("" if none).
func firstCallName(calls json.RawMessage) string {
	var cs []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(calls, &cs) != nil || len(cs) == 0 {
		return ""
	}
	return cs[0].Function.Name
}

// tokenBytes is the bytes one id stands for.
func (t *Tokenizer) tokenBytes(id int) []byte { return t.DecodeBytes([]int{id}) }

// ServerMessages are msgs as vLLM and SGLang hand them to a chat template
// (vLLM's parse_chat_messages and _postprocess_messages, SGLang's
// _apply_jinja_template): each tool call's arguments, sent as JSON text
// in the OpenAI shape, parsed into an object, so that a template's
// `arguments | tojson` prints it again (arguments that are not a JSON
// object become {}, as vLLM coerces them); an empty tool_calls list
// dropped.
func ServerMessages(msgs []record.WireMessage) ([]byte, error) {
	out := make([]record.WireMessage, len(msgs))
	for i, m := range msgs {
		out[i] = m
		if len(m.ToolCalls) > 0 {
			calls, err := parsedArguments(m.ToolCalls)
			if err != nil {
				return nil, fmt.Errorf("messages[%d].tool_calls: %w", i, err)
			}
			out[i].ToolCalls = calls
		}
	}
	return json.Marshal(out)
}

// parsedArguments rewrites a tool_calls list with each call's function
// arguments as a JSON object instead of its text, every other field kept
// as it was, in its order.
func parsedArguments(raw json.RawMessage) (json.RawMessage, error) {
	var calls []json.RawMessage
	if err := json.Unmarshal(raw, &calls); err != nil {
		return nil, err
	}
	if len(calls) == 0 {
		return nil, nil
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, call := range calls {
		if i > 0 {
			b.WriteByte(',')
		}
		rewritten, err := rewriteField(call, "function", func(fn []byte) ([]byte, error) {
			return rewriteField(fn, "arguments", argumentsObject)
		})
		if err != nil {
			return nil, err
		}
		b.Write(rewritten)
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}

// argumentsObject is the object a call's arguments stand for.
func argumentsObject(v []byte) ([]byte, error) {
	v = bytes.TrimSpace(v)
	if len(v) > 0 && v[0] == '"' {
		var text string
		if err := json.Unmarshal(v, &text); err != nil {
			return nil, err
		}
		v = bytes.TrimSpace([]byte(text))
	}
	if len(v) == 0 || v[0] != '{' || !json.Valid(v) {
		return []byte("{}"), nil
	}
	return v, nil
}

// rewriteField returns obj with the value of its member name replaced by
// what fn makes of it (obj as it is where it has no such member).
func rewriteField(obj []byte, name string, fn func([]byte) ([]byte, error)) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	err := record.EachField(obj, func(key string, value []byte) error {
		if key == name {
			v, err := fn(value)
			if err != nil {
				return err
			}
			value = v
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		k, _ := json.Marshal(key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(value)
		return nil
	})
	if err != nil {
		return nil, err
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
