package record

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/segmentio/encoding/json"
)

// ChatTurn is one generation event of a generation record told as the chat
// request infer sent for it and the answer that came back: what a local
// chat template renders to rebuild the ids the server used (token rows for
// answers of servers that return none, and the parity check of those
// that do).
type ChatTurn struct {
	// Messages are the request's turns as infer sends them: the system
	// slot filled (UsesSystem), an earlier answer's reasoning left out
	// (infer sends it back only with --history-reasoning), no weights.
	Messages []WireMessage
	// Prompt is a completion request's text (then Messages is empty).
	Prompt *string
	// Tools are the tools sent, in the canonical OpenAI shape infer sends.
	Tools json.RawMessage
	// Kwargs is the chat_template_kwargs the record's own settings sent
	// (its "params" over its mixture arm's), nil where it says none.
	Kwargs json.RawMessage
	// Answer is the assistant's answer: content, reasoning_content (its
	// separated reasoning) and tool calls.
	Answer WireMessage
	Finish string
	// Server is the ids the server reported (infer --token-ids), nil if
	// none were recorded.
	Server *TokenIDs
}

// WireMessage is a chat turn as a request carries it.
type WireMessage struct {
	Role             string          `json:"role"`
	Content          string          `json:"content"`
	Name             string          `json:"name,omitempty"`
	ToolCalls        json.RawMessage `json:"tool_calls,omitempty"`
	ToolCallID       string          `json:"tool_call_id,omitempty"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
}

// chatGeneration is the part of a generation record its chat turns are
// read from.
type chatGeneration struct {
	Messages []Message       `json:"messages"`
	Prompt   *string         `json:"prompt"`
	System   string          `json:"system"`
	Tools    json.RawMessage `json:"tools"`
	Params   json.RawMessage `json:"params"`
	Output   struct {
		Text         string          `json:"text"`
		Reasoning    string          `json:"reasoning"`
		ToolCalls    json.RawMessage `json:"tool_calls"`
		FinishReason string          `json:"finish_reason"`
		ArmParams    json.RawMessage `json:"arm_params"`
		TokenIDs
		Messages []Message `json:"messages"`
		Turns    []struct {
			Message      int    `json:"message"`
			FinishReason string `json:"finish_reason"`
			TokenIDs
		} `json:"turns"`
	} `json:"output"`
}

// ErrNotGeneration is a record with no answer to make turns of.
var ErrNotGeneration = errors.New("not a generation record: no output")

// ChatTurns reads a generation record's events: its answer (one turn), or
// each regenerated turn of a conversation (conversation true), in order.
func ChatTurns(raw []byte) (turns []ChatTurn, conversation bool, err error) {
	var g chatGeneration
	if err := Decode(raw, &g); err != nil {
		return nil, false, err
	}
	if !bytes.Contains(raw, []byte(`"output"`)) {
		return nil, false, ErrNotGeneration
	}
	o := &g.Output
	var tools json.RawMessage
	if len(g.Tools) > 0 {
		t, ok, err := AppendCanonicalTools(nil, g.Tools)
		if err != nil {
			return nil, false, fmt.Errorf("tools: %w", err)
		}
		if ok {
			tools = t
		}
	}
	kwargs, err := templateKwargs(o.ArmParams, g.Params)
	if err != nil {
		return nil, false, err
	}
	if len(o.Turns) == 0 {
		t := ChatTurn{Tools: tools, Kwargs: kwargs, Finish: o.FinishReason,
			Answer: WireMessage{Role: "assistant", Content: o.Text, ReasoningContent: o.Reasoning, ToolCalls: nonNullRaw(o.ToolCalls)}}
		switch {
		case len(g.Messages) > 0:
			t.Messages = wireMessages(g.Messages, g.System)
		case g.Prompt != nil:
			t.Prompt = g.Prompt
		default:
			return nil, false, errors.New("no messages or prompt the answer answers")
		}
		if len(o.PromptTokenIDs) > 0 {
			ids := o.TokenIDs
			t.Server = &ids
		}
		return []ChatTurn{t}, false, nil
	}
	for k, tu := range o.Turns {
		if tu.Message < 0 || tu.Message >= len(o.Messages) || o.Messages[tu.Message].Role != "assistant" {
			return nil, true, fmt.Errorf("output.turns[%d].message %d is not an assistant turn of output.messages", k, tu.Message)
		}
		a := o.Messages[tu.Message]
		t := ChatTurn{Messages: wireMessages(o.Messages[:tu.Message], g.System), Tools: tools, Kwargs: kwargs, Finish: tu.FinishReason,
			Answer: WireMessage{Role: "assistant", Content: a.Content, ReasoningContent: a.ReasoningContent, ToolCalls: nonNullRaw(a.ToolCalls)}}
		if len(tu.PromptTokenIDs) > 0 {
			ids := tu.TokenIDs
			t.Server = &ids
		}
		turns = append(turns, t)
	}
	return turns, true, nil
}

// wireMessages are msgs as a chat request sends them (openai's
// ChatMessages and request building: the one system slot, no weights, no
// reasoning of earlier answers).
func wireMessages(msgs []Message, system string) []WireMessage {
	out := make([]WireMessage, 0, len(msgs)+1)
	if UsesSystem(system, msgs) {
		out = append(out, WireMessage{Role: "system", Content: system})
	}
	for _, m := range msgs {
		out = append(out, WireMessage{Role: m.Role, Content: m.Content, Name: m.Name, ToolCalls: nonNullRaw(m.ToolCalls), ToolCallID: m.ToolCallID})
	}
	return out
}

func nonNullRaw(raw json.RawMessage) json.RawMessage {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return nil
	}
	return raw
}

// templateKwargs is the chat_template_kwargs a record's request sent: its
// params' over its arm's (a later layer replaces the field whole, as
// request building merges them).
func templateKwargs(layers ...json.RawMessage) (json.RawMessage, error) {
	var kwargs json.RawMessage
	for _, l := range layers {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		v, err := FieldValue(l, "chat_template_kwargs")
		if err != nil {
			return nil, fmt.Errorf("params: %w", err)
		}
		if v != nil {
			kwargs = nonNullRaw(v)
		}
	}
	return kwargs, nil
}
