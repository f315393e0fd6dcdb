package extract

import (
	"fmt"
	"strings"

	"github.com/segmentio/encoding/json"
)

// Formats, as named by --format.
const (
	FormatAuto     = "auto"
	FormatShareGPT = "sharegpt"
	FormatOpenAI   = "openai"
	FormatAlpaca   = "alpaca"
	FormatMTBench  = "mt-bench"
	FormatPlain    = "plain"
	FormatBatch    = "batch"
)

// Formats lists the formats in detection order: the first whose field a
// record has decides how it is read. A batch request line is recognised
// by its custom_id and request body before anything else, then a conversation beats a bare
// instruction, which beats a bare prompt (so a record that carries both
// the full conversation and a copy of its first prompt, as UltraChat's
// do, is read as the conversation).
var Formats = []string{FormatBatch, FormatShareGPT, FormatOpenAI, FormatAlpaca, FormatMTBench, FormatPlain}

// fields is every top-level field any format reads, kept as raw JSON that
// aliases the input line. Only the fields of the format chosen for a record
// are looked at further, so an unexpected type in a field the record's
// format does not use cannot cause a reject.
type fields struct {
	ID           json.RawMessage `json:"id"`
	QuestionID   json.RawMessage `json:"question_id"`
	CustomID     json.RawMessage `json:"custom_id"`
	Conversation json.RawMessage `json:"conversations"`
	LMSYS        json.RawMessage `json:"conversation"` // LMSYS-Chat-1M's name for it
	Messages     json.RawMessage `json:"messages"`
	System       json.RawMessage `json:"system"`
	Tools        json.RawMessage `json:"tools"`
	Instruction  json.RawMessage `json:"instruction"`
	Input        json.RawMessage `json:"input"`
	History      json.RawMessage `json:"history"`
	Turns        json.RawMessage `json:"turns"`
	Category     json.RawMessage `json:"category"`
	Prompt       json.RawMessage `json:"prompt"`
	Question     json.RawMessage `json:"question"`
	Text         json.RawMessage `json:"text"`
	Body         json.RawMessage `json:"body"`
	Langdetect   json.RawMessage `json:"langdetect"`
}

// turn is one element of a conversation: ShareGPT's {from, value} or
// OpenAI's {role, content}; either spelling is accepted in either layout.
type turn struct {
	From      json.RawMessage `json:"from"`
	Value     json.RawMessage `json:"value"`
	Role      json.RawMessage `json:"role"`
	Content   json.RawMessage `json:"content"`
	Name      json.RawMessage `json:"name"`
	ToolCalls json.RawMessage `json:"tool_calls"`
}

// part is one element of an OpenAI content array; LLaMA-Factory spells
// the text field "value".
type part struct {
	Type  json.RawMessage `json:"type"`
	Text  json.RawMessage `json:"text"`
	Value json.RawMessage `json:"value"`
}

// batchBody is the request of an OpenAI batch input line.
type batchBody struct {
	Messages json.RawMessage `json:"messages"`
	Prompt   json.RawMessage `json:"prompt"`
	Tools    json.RawMessage `json:"tools"`
}

// Roles, normalised.
const (
	roleSystem    = "system"
	roleUser      = "user"
	roleAssistant = "assistant"
	roleTool      = "tool"
)

// roles maps every spelling of a speaker seen in chat datasets (lower
// case) to its chat role. function_call is the assistant calling a tool;
// observation is the tool's answer.
var roles = map[string]string{
	"system": roleSystem, "developer": roleSystem,
	"human": roleUser, "user": roleUser,
	"gpt": roleAssistant, "assistant": roleAssistant, "chatgpt": roleAssistant,
	"bard": roleAssistant, "bing": roleAssistant, "model": roleAssistant,
	"function_call": roleAssistant,
	"observation":   roleTool, "tool": roleTool, "function": roleTool,
}

// badRecord is a reason a record yields no prompt, with the detail shown
// to the user.
type badRecord struct {
	reason string
	detail string
}

func (b *badRecord) Error() string { return b.reason + ": " + b.detail }

func reject(reason, format string, args ...any) *badRecord {
	return &badRecord{reason: reason, detail: fmt.Sprintf(format, args...)}
}

// detect names the format of a record, or "" when none of the known
// fields is there.
func detect(f *fields) string {
	switch {
	case present(f.CustomID) && present(f.Body) && f.Body[0] == '{':
		return FormatBatch
	case present(f.Conversation) || present(f.LMSYS):
		return FormatShareGPT
	case present(f.Messages):
		return FormatOpenAI
	case present(f.Instruction):
		return FormatAlpaca
	case present(f.Turns):
		return FormatMTBench
	case present(f.Prompt) || present(f.Question) || present(f.Text):
		return FormatPlain
	}
	return ""
}

// layoutFields names the fields each format needs, for the reject detail
// of a record that has none of them.
var layoutFields = map[string]string{
	FormatBatch:    "body",
	FormatShareGPT: "conversations",
	FormatOpenAI:   "messages",
	FormatAlpaca:   "instruction",
	FormatMTBench:  "turns",
	FormatPlain:    "prompt, question or text",
}

// read turns the record's fields into x.msgs (or x.completion) according
// to format.
func (x *Extractor) read(format string, f *fields) *badRecord {
	switch format {
	case FormatBatch:
		return x.readBatch(f)
	case FormatShareGPT:
		conv := f.Conversation
		if !present(conv) {
			conv = f.LMSYS
		}
		return x.readConversation("conversations", conv, f.System, f.Tools)
	case FormatOpenAI:
		return x.readConversation("messages", f.Messages, f.System, f.Tools)
	case FormatAlpaca:
		return x.readAlpaca(f)
	case FormatMTBench:
		return x.readTurns(f.Turns)
	case FormatPlain:
		return x.readPlain(f)
	}
	return reject(ReasonUnknownLayout, "unknown format %q", format)
}

// readConversation reads a list of turns, after the top-level system
// prompt if there is one.
func (x *Extractor) readConversation(name string, conv, system, tools []byte) *badRecord {
	if bad := x.addSystem(system); bad != nil {
		return bad
	}
	if present(tools) && !emptyTools(tools) {
		x.tools = tools
	}
	x.turns = emptied(x.turns)
	if _, err := json.Parse(conv, &x.turns, parseFlags); err != nil {
		return reject(ReasonUnknownLayout, "%s is not a list of turns: %v", name, shortError(err))
	}
	if len(x.turns) == 0 {
		return reject(ReasonEmpty, "%s is empty", name)
	}
	for i := range x.turns {
		t := &x.turns[i]
		who := t.Role
		if !present(who) {
			who = t.From
		}
		role, err := x.role(who)
		if err != nil {
			return reject(ReasonUnknownRole, "%s[%d]: %v", name, i, err)
		}
		content := t.Content
		if !present(content) {
			content = t.Value
		}
		tok, bad := x.content(content)
		if bad != nil {
			bad.detail = fmt.Sprintf("%s[%d]: %s", name, i, bad.detail)
			return bad
		}
		m := message{role: role, content: tok}
		if present(t.ToolCalls) {
			m.toolCalls = t.ToolCalls
		}
		if isString(t.Name) {
			m.name = cleanToken(&x.arena, t.Name)
		}
		x.add(m)
	}
	return nil
}

// addSystem adds a top-level system prompt, if the record has one.
func (x *Extractor) addSystem(raw []byte) *badRecord {
	if !present(raw) {
		return nil
	}
	if !isString(raw) {
		return reject(ReasonUnknownLayout, "system is not a string")
	}
	x.addMessage(roleSystem, cleanToken(&x.arena, raw))
	return nil
}

// emptied returns s with no elements, its whole backing array zeroed: the
// decoder fills reused elements in place, so a field a record does not
// set would otherwise keep the previous record's value.
func emptied[T any](s []T) []T {
	clear(s[:cap(s)])
	return s[:0]
}

// emptyTools is true for the empty values datasets use for "no tools".
func emptyTools(raw []byte) bool {
	s := strings.TrimSpace(string(raw))
	return s == `""` || s == "[]" || s == `"[]"` || s == "{}"
}

// role normalises a speaker name.
func (x *Extractor) role(raw []byte) (string, error) {
	if !isString(raw) {
		if !present(raw) {
			return "", fmt.Errorf("no role")
		}
		return "", fmt.Errorf("role is not a string")
	}
	name := tokenText(x.scratch[:0], raw)
	if r, ok := roles[string(name)]; ok {
		return r, nil
	}
	if r, ok := roles[strings.ToLower(string(name))]; ok {
		return r, nil
	}
	return "", fmt.Errorf("unknown role %q", name)
}

// content returns a message content as one string token: a string as is,
// null as "", and an array of text parts joined by newlines (the way
// OpenAI-compatible servers join them).
func (x *Extractor) content(raw []byte) ([]byte, *badRecord) {
	switch {
	case isString(raw):
		return cleanToken(&x.arena, raw), nil
	case !present(raw):
		return []byte(`""`), nil
	case raw[0] != '[':
		return nil, reject(ReasonUnknownLayout, "content is neither text nor a list of parts")
	}
	x.parts = emptied(x.parts)
	if _, err := json.Parse(raw, &x.parts, parseFlags); err != nil {
		return nil, reject(ReasonUnknownLayout, "content parts: %v", shortError(err))
	}
	var texts [][]byte
	for i, p := range x.parts {
		if present(p.Type) && string(p.Type) != `"text"` {
			return nil, reject(ReasonNonText, "content part %d has type %s; only text prompts can be extracted", i, p.Type)
		}
		tok := p.Text
		if !present(tok) {
			tok = p.Value
		}
		if !isString(tok) {
			return nil, reject(ReasonUnknownLayout, "content part %d has no text", i)
		}
		texts = append(texts, tok)
	}
	switch len(texts) {
	case 0:
		return []byte(`""`), nil
	case 1:
		return cleanToken(&x.arena, texts[0]), nil
	}
	joined := x.scratch[:0]
	for i, tok := range texts {
		if i > 0 {
			joined = append(joined, '\n')
		}
		joined = append(joined, tokenText(nil, tok)...)
	}
	x.scratch = joined
	start := len(x.arena)
	x.arena = json.AppendEscape(x.arena, string(joined), 0)
	return x.arena[start:], nil
}

// readAlpaca builds system, history pairs and the instruction (with its
// input after a blank line when there is one).
func (x *Extractor) readAlpaca(f *fields) *badRecord {
	if bad := x.addSystem(f.System); bad != nil {
		return bad
	}
	if present(f.History) {
		var history [][]json.RawMessage
		if _, err := json.Parse(f.History, &history, parseFlags); err != nil {
			return reject(ReasonUnknownLayout, "history is not a list of [question, answer] pairs: %v", shortError(err))
		}
		for i, pair := range history {
			if len(pair) == 0 || len(pair) > 2 || !isString(pair[0]) || (len(pair) == 2 && present(pair[1]) && !isString(pair[1])) {
				return reject(ReasonUnknownLayout, "history[%d] is not a [question, answer] pair of strings", i)
			}
			x.addMessage(roleUser, cleanToken(&x.arena, pair[0]))
			if len(pair) == 2 && present(pair[1]) {
				x.addMessage(roleAssistant, cleanToken(&x.arena, pair[1]))
			}
		}
	}
	if !isString(f.Instruction) {
		return reject(ReasonUnknownLayout, "instruction is not a string")
	}
	if present(f.Input) && !isString(f.Input) {
		return reject(ReasonUnknownLayout, "input is not a string")
	}
	if !present(f.Input) || blankToken(f.Input) {
		x.addMessage(roleUser, cleanToken(&x.arena, f.Instruction))
		return nil
	}
	if blankToken(f.Instruction) {
		x.addMessage(roleUser, cleanToken(&x.arena, f.Input))
		return nil
	}
	text := append(tokenText(x.scratch[:0], f.Instruction), "\n\n"...)
	text = append(text, tokenText(nil, f.Input)...)
	x.scratch = text
	start := len(x.arena)
	x.arena = json.AppendEscape(x.arena, string(text), 0)
	x.addMessage(roleUser, x.arena[start:])
	return nil
}

// readTurns reads MT-Bench's list of user questions. The dataset records
// no answers, so only the first turn makes a prompt on its own; later
// turns are rejected as unanswered_turn by the turn checks.
func (x *Extractor) readTurns(raw []byte) *badRecord {
	var turns []json.RawMessage
	if _, err := json.Parse(raw, &turns, parseFlags); err != nil {
		return reject(ReasonUnknownLayout, "turns is not a list of strings: %v", shortError(err))
	}
	if len(turns) == 0 {
		return reject(ReasonEmpty, "turns is empty")
	}
	for i, t := range turns {
		if !isString(t) {
			return reject(ReasonUnknownLayout, "turns[%d] is not a string", i)
		}
		x.addMessage(roleUser, cleanToken(&x.arena, t))
	}
	return nil
}

// readPlain takes the first of prompt, question and text as one user
// turn. A prompt that is a list of messages (as in preference datasets)
// is read as a conversation.
func (x *Extractor) readPlain(f *fields) *badRecord {
	for _, c := range []struct {
		name string
		raw  []byte
	}{{"prompt", f.Prompt}, {"question", f.Question}, {"text", f.Text}} {
		switch {
		case !present(c.raw):
			continue
		case isString(c.raw):
			if bad := x.addSystem(f.System); bad != nil {
				return bad
			}
			x.addMessage(roleUser, cleanToken(&x.arena, c.raw))
			return nil
		case c.raw[0] == '[':
			return x.readConversation(c.name, c.raw, f.System, f.Tools)
		default:
			return reject(ReasonUnknownLayout, "%s is neither text nor a list of messages", c.name)
		}
	}
	return reject(ReasonUnknownLayout, "no prompt, question or text field")
}

// readBatch reads an OpenAI batch input line: a chat request's messages,
// or a completion request's prompt, which stays a completion prompt.
func (x *Extractor) readBatch(f *fields) *badRecord {
	var body batchBody
	if _, err := json.Parse(f.Body, &body, parseFlags); err != nil {
		return reject(ReasonUnknownLayout, "body: %v", shortError(err))
	}
	switch {
	case present(body.Messages):
		return x.readConversation("body.messages", body.Messages, nil, body.Tools)
	case isString(body.Prompt):
		x.completion = cleanToken(&x.arena, body.Prompt)
		return nil
	case present(body.Prompt):
		return reject(ReasonUnknownLayout, "body.prompt is not a single string")
	}
	return reject(ReasonUnknownLayout, "body has neither messages nor prompt")
}

// shortError keeps a parse error's message to one short line.
func shortError(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "json: ")
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}
