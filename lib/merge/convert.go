package merge

import (
	"github.com/segmentio/encoding/json"

	"tokenmill/lib/record"
)

// Training formats written by --to.
const (
	toGeneration = "generation"
	toMessages   = "messages"
	toShareGPT   = "sharegpt"
)

// trainMessage is a chat turn of the messages format. The reasoning of an
// answer goes in reasoning_content, the field Qwen3-style chat templates
// and OpenAI-compatible servers use for it.
type trainMessage struct {
	Role             string          `json:"role"`
	Content          string          `json:"content"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
	Name             string          `json:"name,omitempty"`
	ToolCalls        json.RawMessage `json:"tool_calls,omitempty"`
	ToolCallID       string          `json:"tool_call_id,omitempty"`
}

type messagesRecord struct {
	ID       record.ID      `json:"id"`
	Sample   int            `json:"sample,omitempty"`
	Messages []trainMessage `json:"messages"`
}

type shareGPTTurn struct {
	From  string `json:"from"`
	Value string `json:"value"`
}

type shareGPTRecord struct {
	ID            record.ID      `json:"id"`
	Sample        int            `json:"sample,omitempty"`
	Conversations []shareGPTTurn `json:"conversations"`
}

// shareGPTFrom names chat roles the ShareGPT way; other roles keep their
// name.
var shareGPTFrom = map[string]string{
	"system":    "system",
	"user":      "human",
	"assistant": "gpt",
	"tool":      "observation",
}

// generation is the part of a generation record a conversion reads: the
// record, and a top-level system prompt if it has one.
type generation struct {
	record.Generation
	System json.RawMessage `json:"system"`
}

// converter turns a generation record into a training record: the prompt
// with the answer appended as the assistant turn.
type converter struct {
	to            string
	withReasoning bool
	gen           generation
	msgs          []trainMessage
	turns         []shareGPTTurn
	think         []byte
	out           []byte
}

// convert returns the training record of a generation record, valid
// until the next call, or why the record cannot be one.
func (c *converter) convert(data []byte) ([]byte, *rejection) {
	c.gen = generation{}
	if err := record.Decode(data, &c.gen); err != nil {
		return nil, reject(ReasonBadRecord, "%v", err)
	}
	if !c.gen.HasPrompt() {
		return nil, reject(ReasonNoPrompt, "no messages or prompt to put the answer after")
	}
	g := &c.gen.Generation
	c.msgs = c.msgs[:0]
	if len(g.Messages) == 0 && g.Prompt.Prompt != nil {
		c.msgs = append(c.msgs, trainMessage{Role: "user", Content: *g.Prompt.Prompt})
	} else if len(c.gen.System) > 0 && string(c.gen.System) != "null" {
		// A top-level system prompt takes the system slot by the rule
		// every stage follows.
		var system string
		if err := json.Unmarshal(c.gen.System, &system); err != nil {
			return nil, reject(ReasonBadRecord, "system is not a string")
		}
		if record.UsesSystem(system, g.Messages) {
			c.msgs = append(c.msgs, trainMessage{Role: "system", Content: system})
		}
	}
	for _, m := range g.Messages {
		c.msgs = append(c.msgs, trainMessage{Role: m.Role, Content: m.Content, Name: m.Name, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID})
	}
	answer := trainMessage{Role: "assistant", Content: g.Output.Text}
	if c.withReasoning {
		answer.ReasoningContent = g.Output.Reasoning
	}
	sample := g.SampleIndex()
	var err error
	if c.to == toMessages {
		c.msgs = append(c.msgs, answer)
		c.out, err = json.Append(c.out[:0], messagesRecord{ID: g.ID, Sample: sample, Messages: c.msgs}, 0)
		return c.out, encodeRejection(err)
	}
	c.turns = c.turns[:0]
	for _, m := range c.msgs {
		from, ok := shareGPTFrom[m.Role]
		if !ok {
			from = m.Role
		}
		if m.Role == "assistant" && len(m.ToolCalls) > 0 {
			call, err := shareGPTCall(m.ToolCalls)
			if err != nil {
				return nil, reject(ReasonBadRecord, "tool_calls: %v", err)
			}
			if m.Content != "" {
				c.turns = append(c.turns, shareGPTTurn{From: from, Value: m.Content})
			}
			c.turns = append(c.turns, shareGPTTurn{From: "function_call", Value: call})
			continue
		}
		c.turns = append(c.turns, shareGPTTurn{From: from, Value: m.Content})
	}
	c.turns = append(c.turns, shareGPTTurn{From: "gpt", Value: c.withThink(answer)})
	c.out, err = json.Append(c.out[:0], shareGPTRecord{ID: g.ID, Sample: sample, Conversations: c.turns}, 0)
	return c.out, encodeRejection(err)
}

// encodeRejection reports a record whose parts do not encode back (an
// invalid tool_calls value, say).
func encodeRejection(err error) *rejection {
	if err != nil {
		return reject(ReasonBadRecord, "%v", err)
	}
	return nil
}

// withThink puts the reasoning before the answer in a <think> block, as
// reasoning models write it, since a ShareGPT turn has only one text.
func (c *converter) withThink(m trainMessage) string {
	if m.ReasoningContent == "" {
		return m.Content
	}
	c.think = append(c.think[:0], "<think>\n"...)
	c.think = append(c.think, m.ReasoningContent...)
	c.think = append(c.think, "\n</think>\n\n"...)
	c.think = append(c.think, m.Content...)
	return string(c.think)
}

// openAICall is a tool call in the OpenAI chat shape.
type openAICall struct {
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// shareGPTCall writes OpenAI tool calls the way ShareGPT tool-calling data
// (glaive, LLaMA-Factory) holds them in a function_call turn: one
// {"name", "arguments"} object, or a list of them for parallel calls, with
// the arguments as JSON rather than a string of it when they are JSON.
func shareGPTCall(raw json.RawMessage) (string, error) {
	var calls []openAICall
	if err := json.Unmarshal(raw, &calls); err != nil {
		return "", err
	}
	type call struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	out := make([]call, len(calls))
	for i, c := range calls {
		args := json.RawMessage(c.Function.Arguments)
		if !json.Valid(args) {
			args, _ = json.Marshal(c.Function.Arguments)
		}
		out[i] = call{c.Function.Name, args}
	}
	var b []byte
	var err error
	if len(out) == 1 {
		b, err = json.Marshal(out[0])
	} else {
		b, err = json.Marshal(out)
	}
	return string(b), err
}
