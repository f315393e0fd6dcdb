package merge

import (
	"bytes"
	"slices"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/record"
)

// Training formats written by --to.
const (
	toGeneration    = "generation"
	toMessages      = "messages"
	toShareGPT      = "sharegpt"
	toConversations = "conversations"
)

// trainMessage is a chat turn of the messages and conversations formats.
// The reasoning of an answer goes in reasoning_content, the field
// Qwen3-style chat templates and OpenAI-compatible servers use for it.
// Weight is the dataset's weight of an assistant turn kept as it was
// (weight 0: context, not trained on), in OpenAI's fine-tuning spelling.
type trainMessage struct {
	Role             string          `json:"role"`
	Content          string          `json:"content"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
	Name             string          `json:"name,omitempty"`
	ToolCalls        json.RawMessage `json:"tool_calls,omitempty"`
	ToolCallID       string          `json:"tool_call_id,omitempty"`
	Weight           *float64        `json:"weight,omitempty"`
	// own marks an answer of the model's own (the single answer, a
	// regenerated turn): the turns --for trains on. Not written.
	own bool
}

// The training records' id is the record's id as a string whatever its
// JSON type (MT-Bench's question_id 81 is "81"), so that the column has
// one type in every row, as Arrow (Hugging Face datasets' JSON loader)
// needs: a file mixing integer and string ids does not load.
type messagesRecord struct {
	ID       string          `json:"id"`
	Sample   int             `json:"sample,omitempty"`
	Messages []trainMessage  `json:"messages"`
	Tools    json.RawMessage `json:"tools,omitempty"`
	Arm      string          `json:"arm,omitempty"` // infer --mix's arm (arm.go)
}

// conversationsRecord is the layout SpecForge and vLLM speculators train
// on: OpenAI chat turns under "conversations", with reasoning_content,
// tool_calls and tool_call_id on the turns and the tools beside them, as
// SpecForge's specforge/utils.py (safe_conversations_generator) and
// specforge/data/parse.py (ThinkingParser's keys) and speculators'
// src/speculators/data_generation/preprocessing.py (_normalize_conversation,
// the "tools" column) read them.
type conversationsRecord struct {
	ID            string          `json:"id"`
	Sample        int             `json:"sample,omitempty"`
	Conversations []trainMessage  `json:"conversations"`
	Tools         json.RawMessage `json:"tools,omitempty"`
	Arm           string          `json:"arm,omitempty"`
}

// shareGPTTurn is a ShareGPT turn; Weight is a turn's weight as axolotl
// reads it.
type shareGPTTurn struct {
	From   string   `json:"from"`
	Value  string   `json:"value"`
	Weight *float64 `json:"weight,omitempty"`
}

type shareGPTRecord struct {
	ID            string         `json:"id"`
	Sample        int            `json:"sample,omitempty"`
	Conversations []shareGPTTurn `json:"conversations"`
	// Tools is the tools' JSON text, as glaive and LLaMA-Factory's
	// ShareGPT datasets hold them.
	Tools string `json:"tools,omitempty"`
	Arm   string `json:"arm,omitempty"`
}

// shareGPTFrom names chat roles the ShareGPT way; other roles keep their
// name.
var shareGPTFrom = map[string]string{
	"system":    "system",
	"user":      "human",
	"assistant": "gpt",
	"tool":      "observation",
}

// generation is the part of a generation record a conversion reads.
type generation struct {
	ID       record.ID        `json:"id"`
	Messages []record.Message `json:"messages"`
	Prompt   *string          `json:"prompt"`
	System   json.RawMessage  `json:"system"`
	Tools    json.RawMessage  `json:"tools"`
	Output   struct {
		Text      string          `json:"text"`
		Reasoning string          `json:"reasoning"`
		ToolCalls json.RawMessage `json:"tool_calls"`
		Sample    int             `json:"sample"`
		// A regenerated conversation, and the places of its regenerated
		// turns in it.
		Messages  []convMessage     `json:"messages"`
		Turns     []regeneratedTurn `json:"turns"`
		Truncated *convTruncation   `json:"truncated"`
		// The sampling mixture's arm and its settings (infer --mix).
		Arm       string          `json:"arm"`
		ArmParams json.RawMessage `json:"arm_params"`
	} `json:"output"`
}

// regeneratedTurn is where a regenerated turn is in output.messages.
type regeneratedTurn struct {
	Message int `json:"message"`
}

// convMessage is a message of a regenerated conversation.
type convMessage struct {
	Role             string          `json:"role"`
	Content          string          `json:"content"`
	ReasoningContent string          `json:"reasoning_content"`
	Name             string          `json:"name"`
	ToolCalls        json.RawMessage `json:"tool_calls"`
	ToolCallID       string          `json:"tool_call_id"`
	Weight           *float64        `json:"weight"`
}

// converter turns a generation record into a training record: the prompt
// with the answer appended as the assistant turn, or the regenerated
// conversation.
type converter struct {
	to            string
	withReasoning bool
	keepTruncated bool   // a tool-truncated conversation is written whole, not cut
	softSwitch    bool   // --soft-switch (arm.go)
	trainer       string // --for (trainer.go)
	gen           generation
	msgs          []trainMessage
	turns         []shareGPTTurn
	think         []byte
	tools         []byte
	out           []byte
}

// convert returns the training record of a generation record, valid
// until the next call, or why the record cannot be one: the record is
// decoded, its turns laid out (the prompt's with the answer after them, or
// the regenerated conversation), its tools put in canonical form, and the
// whole written in the --to format.
func (c *converter) convert(data []byte) ([]byte, *rejection) {
	if rej := c.decode(data); rej != nil {
		return nil, rej
	}
	if rej := c.layOut(); rej != nil {
		return nil, rej
	}
	var err error
	if c.tools, _, err = record.AppendCanonicalTools(c.tools[:0], c.gen.Tools); err != nil {
		return nil, reject(ReasonBadRecord, "%v", err)
	}
	return c.encode()
}

// decode reads data into c.gen, reusing its lists, and refuses a record
// with nothing to put an answer after.
func (c *converter) decode(data []byte) *rejection {
	clear(c.gen.Messages[:cap(c.gen.Messages)])
	clear(c.gen.Output.Messages[:cap(c.gen.Output.Messages)])
	msgs, convMsgs, turns := c.gen.Messages[:0], c.gen.Output.Messages[:0], c.gen.Output.Turns[:0]
	c.gen = generation{Messages: msgs}
	c.gen.Output.Messages, c.gen.Output.Turns = convMsgs, turns
	if err := record.Decode(data, &c.gen); err != nil {
		return reject(ReasonBadRecord, "%v", err)
	}
	if g := &c.gen; !g.isConversation() && len(g.Messages) == 0 && g.Prompt == nil {
		return reject(ReasonNoPrompt, "no messages or prompt to put the answer after")
	}
	return nil
}

// isConversation tells a regenerated conversation from a single answer.
func (g *generation) isConversation() bool { return len(g.Output.Messages) > 0 }

// layOut fills c.msgs with the training record's turns: a regenerated
// conversation's, or the prompt's followed by the answer; a top-level
// system prompt takes the system slot of chat turns.
func (c *converter) layOut() *rejection {
	g := &c.gen
	c.msgs = c.msgs[:0]
	switch {
	case g.isConversation():
		if rej := c.conversationTurns(); rej != nil {
			return rej
		}
	case len(g.Messages) == 0:
		c.msgs = append(c.msgs, trainMessage{Role: "user", Content: *g.Prompt})
	default:
		for _, m := range g.Messages {
			c.msgs = append(c.msgs, trainMessage{Role: m.Role, Content: m.Content, Name: m.Name, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Weight: m.Weight})
		}
	}
	if g.isConversation() || len(g.Messages) > 0 {
		if rej := c.systemSlot(); rej != nil {
			return rej
		}
	}
	if !g.isConversation() {
		c.msgs = append(c.msgs, c.answer())
	}
	if c.softSwitch {
		c.msgs = withSoftSwitch(c.msgs, g.Output.ArmParams)
	}
	return nil
}

// conversationTurns lays out a regenerated conversation, which replaces
// the prompt's, up to its last regenerated turn (a truncated one stops
// there); one that a tool call nobody answered ended, up to its last
// complete exchange unless --keep-truncated.
func (c *converter) conversationTurns() *rejection {
	msgs := c.gen.Output.Messages
	last := -1
	for _, t := range c.keptTurns() {
		last = max(last, t.Message)
	}
	if last < 0 || last >= len(msgs) {
		return reject(ReasonBadRecord, "output.turns lists no regenerated message")
	}
	for _, m := range msgs[:last+1] {
		tm := trainMessage{Role: m.Role, Content: m.Content, Name: m.Name, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Weight: m.Weight}
		if c.withReasoning && m.Role == "assistant" {
			tm.ReasoningContent = m.ReasoningContent
		}
		c.msgs = append(c.msgs, tm)
	}
	for _, t := range c.keptTurns() {
		if t.Message >= 0 && t.Message < len(c.msgs) && c.msgs[t.Message].Role == "assistant" {
			c.msgs[t.Message].own = true
		}
	}
	return nil
}

// keptTurns are the regenerated turns the training record keeps: all of
// them, or for a conversation a tool call nobody answered ended (unless
// --keep-truncated), those up to its last complete exchange.
func (c *converter) keptTurns() []regeneratedTurn {
	out := &c.gen.Output
	turns := out.Turns
	if tr := out.Truncated; tr == nil || !isToolTruncation(tr.Reason) || c.keepTruncated {
		return turns
	}
	return turns[:completeTurns(len(turns), func(i int) int {
		if m := turns[i].Message; m >= 0 && m < len(out.Messages) && makesCalls(out.Messages[m].ToolCalls) {
			return 1
		}
		return 0
	})]
}

// answer is a single answer's assistant turn.
func (c *converter) answer() trainMessage {
	out := &c.gen.Output
	answer := trainMessage{Role: "assistant", Content: out.Text, own: true}
	if !isNull(out.ToolCalls) && string(out.ToolCalls) != "[]" {
		answer.ToolCalls = out.ToolCalls
	}
	if c.withReasoning {
		answer.ReasoningContent = out.Reasoning
	}
	return answer
}

// encode writes the laid-out turns and tools in the --to format.
func (c *converter) encode() ([]byte, *rejection) {
	g := &c.gen
	sample := g.Output.Sample
	var err error
	if c.trainer != "" {
		return c.encodeFor()
	}
	if c.to != toShareGPT {
		if rej := c.oneShapeCalls(); rej != nil {
			return nil, rej
		}
	}
	switch c.to {
	case toMessages:
		c.out, err = json.Append(c.out[:0], messagesRecord{ID: g.ID.Text, Sample: sample, Messages: c.msgs, Tools: c.tools, Arm: g.Output.Arm}, 0)
	case toConversations:
		c.out, err = json.Append(c.out[:0], conversationsRecord{ID: g.ID.Text, Sample: sample, Conversations: c.msgs, Tools: c.tools, Arm: g.Output.Arm}, 0)
	default:
		if rej := c.shareGPTTurns(); rej != nil {
			return nil, rej
		}
		c.out, err = json.Append(c.out[:0], shareGPTRecord{ID: g.ID.Text, Sample: sample, Conversations: c.turns, Tools: string(c.tools), Arm: g.Output.Arm}, 0)
	}
	return c.out, encodeRejection(err)
}

// shareGPTTurns fills c.turns with c.msgs as ShareGPT turns: roles named
// its way, reasoning in a <think> block, and an assistant turn's tool
// calls as a function_call turn after its text (if any).
func (c *converter) shareGPTTurns() *rejection {
	c.turns = c.turns[:0]
	for _, m := range c.msgs {
		from, ok := shareGPTFrom[m.Role]
		if !ok {
			from = m.Role
		}
		if m.Role != "assistant" || len(m.ToolCalls) == 0 || string(m.ToolCalls) == "null" {
			c.turns = append(c.turns, shareGPTTurn{From: from, Value: c.withThink(m), Weight: m.Weight})
			continue
		}
		call, err := shareGPTCall(m.ToolCalls)
		if err != nil {
			return reject(ReasonBadRecord, "tool_calls: %v", err)
		}
		if text := c.withThink(m); text != "" {
			c.turns = append(c.turns, shareGPTTurn{From: from, Value: text, Weight: m.Weight})
		}
		c.turns = append(c.turns, shareGPTTurn{From: "function_call", Value: call, Weight: m.Weight})
	}
	return nil
}

// oneShapeCalls writes the turns' tool calls in the one OpenAI shape
// whatever the record held ({id, type, function: {name, arguments}}, the
// arguments as JSON text), so that the field has one type in every row.
func (c *converter) oneShapeCalls() *rejection {
	for i := range c.msgs {
		m := &c.msgs[i]
		if !makesCalls(m.ToolCalls) {
			continue
		}
		calls, err := openAICalls(m.ToolCalls)
		if err == nil {
			m.ToolCalls, err = json.Marshal(calls)
		}
		if err != nil {
			return reject(ReasonBadRecord, "message %d: tool_calls: %v", i, err)
		}
	}
	return nil
}

// makesCalls tells a message's tool_calls value that holds a call: not
// absent, null or an empty list.
func makesCalls(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return false
	}
	return raw[0] != '[' || len(bytes.TrimSpace(raw[1:])) == 0 || bytes.TrimSpace(raw[1:])[0] != ']'
}

// systemSlot puts a top-level system prompt first by the rule every stage
// follows (record.UsesSystem): unless the conversation starts with a
// system turn of its own.
func (c *converter) systemSlot() *rejection {
	if len(c.gen.System) == 0 || string(c.gen.System) == "null" {
		return nil
	}
	var system string
	if err := json.Unmarshal(c.gen.System, &system); err != nil {
		return reject(ReasonBadRecord, "system is not a string")
	}
	var first []record.Message
	if len(c.msgs) > 0 {
		first = []record.Message{{Role: c.msgs[0].Role}}
	}
	if record.UsesSystem(system, first) {
		c.msgs = slices.Insert(c.msgs, 0, trainMessage{Role: "system", Content: system})
	}
	return nil
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
