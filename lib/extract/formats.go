package extract

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/record"
)

// The formats and the fields they read are the ground floor's
// (record.Fields), so that every stage reads a dataset's layout the same
// way; extract turns them into prompts.
const (
	FormatAuto       = record.FormatAuto
	FormatShareGPT   = record.FormatShareGPT
	FormatOpenAI     = record.FormatOpenAI
	FormatAlpaca     = record.FormatAlpaca
	FormatMTBench    = record.FormatMTBench
	FormatOAsst      = record.FormatOAsst
	FormatPlain      = record.FormatPlain
	FormatPreference = record.FormatPreference
	FormatBatch      = record.FormatBatch
)

// Formats lists the formats in detection order (see record.Formats).
var Formats = record.Formats

type (
	fields = record.Fields
	turn   = record.LayoutTurn
	part   = record.LayoutPart
)

// namedField is a field's value with its name, for reject details.
type namedField struct {
	name string
	raw  []byte
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
	"ipython": roleTool, // Llama 3.1's tool output
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

func detect(f *fields) string { return record.DetectLayout(f) }

// layoutFields names the fields each format needs, for the reject detail
// of a record that has none of them.
var layoutFields = map[string]string{
	FormatBatch:      "body",
	FormatShareGPT:   "conversations (conversation, or UltraChat's data)",
	FormatOpenAI:     "messages",
	FormatAlpaca:     "instruction",
	FormatMTBench:    "turns",
	FormatOAsst:      "prompt message tree, or message_id, role and text",
	FormatPlain:      "prompt, question, query, problem, toy_input or text",
	FormatPreference: "chosen and rejected (or chosen_messages and rejected_messages, or preferred_output and non_preferred_output)",
}

// read turns the record's fields into x.msgs (or x.completion) according
// to format.
func (x *Extractor) read(format string, f *fields) *badRecord {
	switch format {
	case FormatBatch:
		return x.readBatch(f)
	case FormatShareGPT:
		conv, name := f.Conversation, "conversations"
		if !present(conv) {
			conv, name = f.LMSYS, "conversation"
		}
		if !present(conv) {
			return x.readUltraChat(f)
		}
		return x.readConversation(name, conv, f.System, f.Tools)
	case FormatOpenAI:
		return x.readConversation("messages", f.Messages, f.System, f.Tools)
	case FormatAlpaca:
		return x.readAlpaca(f)
	case FormatMTBench:
		return x.readTurns(f.Turns)
	case FormatPlain:
		return x.readPlain(f)
	case FormatPreference:
		return x.readPreference(f)
	}
	return reject(ReasonUnknownLayout, "unknown format %q", format)
}

// readConversation reads a list of turns, with the top-level system
// prompt and tools if the record has them.
func (x *Extractor) readConversation(name string, conv, system, tools []byte) *badRecord {
	if bad := x.readTurnList(name, conv, 0); bad != nil {
		return bad
	}
	if bad := x.addSystem(system); bad != nil {
		return bad
	}
	return x.setTools(tools)
}

// readTurnList appends a list of turns to x.msgs. base is the number of
// turns the conversation has before the list, for the ids given to calls
// that have none (call_<turn>_<k>).
func (x *Extractor) readTurnList(name string, conv []byte, base int) *badRecord {
	if conv[0] != '[' {
		return reject(ReasonUnknownLayout, "%s is %s, not a list of turns", name, kindOf(conv))
	}
	var s scanner
	if sameBytes(conv, x.preList) {
		x.turns, x.preTurns, x.preList = x.preTurns, x.turns, nil // read with the record
	} else if x.turns = x.turns[:0]; !s.scanTurns(conv, &x.turns) {
		x.turns = emptied(x.turns)
		if _, err := json.Parse(conv, &x.turns, parseFlags); err != nil {
			return notAll(name, conv, '{', "a turn")
		}
	}
	if len(x.turns) == 0 {
		return reject(ReasonEmpty, "%s is empty", name)
	}
	x.pending = x.pending[:0]
	for i := range x.turns {
		t := &x.turns[i]
		if !present(t.Role) && !present(t.From) && (present(t.Input) || present(t.Output)) {
			if bad := x.readPairTurn(t); bad != nil {
				bad.detail = fmt.Sprintf("%s[%d]: %s", name, i, bad.detail)
				return bad
			}
			continue
		}
		if bad := x.readTurn(t, base+i+1); bad != nil {
			bad.detail = fmt.Sprintf("%s[%d]: %s", name, i, bad.detail)
			return bad
		}
	}
	return nil
}

// readTurn appends one turn; place is its 1-based place in the
// conversation.
func (x *Extractor) readTurn(t *turn, place int) *badRecord {
	who := t.Role
	if !present(who) {
		who = t.From
	}
	role, err := x.role(who)
	if err != nil {
		return reject(ReasonUnknownRole, "%v", err)
	}
	content := t.Content
	if !present(content) {
		content = t.Value
	}
	assistant := role == roleAssistant
	tok, bad := x.content(content, assistant)
	if bad != nil {
		return bad
	}
	m := message{role: role, content: tok}
	if isString(t.Name) {
		m.name = x.clean(&x.arena, t.Name)
	}
	if isString(t.ToolCallID) {
		m.toolCallID = x.clean(&x.arena, t.ToolCallID)
	}
	if assistant {
		if m.reasoning, bad = x.reasoning(t); bad != nil {
			return bad
		}
		if m.weight, bad = x.weight(t); bad != nil {
			return bad
		}
	}
	switch {
	case present(t.ToolCalls):
		if present(t.FunctionCall) {
			return reject(ReasonBadToolCalls, "the turn has both tool_calls and a function_call")
		}
		if m.toolCalls, bad = x.readToolCalls(place, t.ToolCalls); bad != nil {
			return bad
		}
	case present(t.FunctionCall):
		if m.toolCalls, bad = x.legacyCall(place, t.FunctionCall); bad != nil {
			return bad
		}
	case len(x.partCalls) > 0:
		m.toolCalls = x.callsFromParts(place, x.partCalls)
		if m.toolCalls == nil {
			return reject(ReasonBadToolCalls, "a tool_call part is not a call (JSON with a name and, if any, arguments that are an object)")
		}
	case isFunctionCall(who):
		if calls := x.callsFromText(place, tok); calls != nil {
			m.content, m.toolCalls = []byte(`""`), calls
		} else {
			x.pending = x.pending[:0]
		}
	case role == roleTool:
		x.answerCall(&m)
	default:
		x.pending = x.pending[:0]
	}
	if len(x.partReasoning) > 0 {
		m.reasoning = x.joinTokens(x.partReasoning, "\n")
	}
	x.add(m)
	return nil
}

// reasoning is an assistant turn's reasoning: reasoning_content, or else
// reasoning or thinking, as other datasets name it; nil if none. A flag
// (true, false) is not reasoning; a list or an object of it cannot be read.
func (x *Extractor) reasoning(t *turn) ([]byte, *badRecord) {
	for _, f := range [...]namedField{{"reasoning_content", t.Reasoning}, {"reasoning", t.ReasoningAlt}, {"thinking", t.Thinking}} {
		switch {
		case isString(f.raw):
			if !blankToken(f.raw) {
				return x.clean(&x.arena, f.raw), nil
			}
		case present(f.raw) && (f.raw[0] == '[' || f.raw[0] == '{'):
			return nil, reject(ReasonUnknownLayout, "%s is %s, not text", f.name, kindOf(f.raw))
		}
	}
	return nil, nil
}

// isFunctionCall tells ShareGPT's function_call speaker.
func isFunctionCall(who []byte) bool {
	return len(who) == len(`"function_call"`) && bytes.EqualFold(who, []byte(`"function_call"`))
}

// addSystem puts a top-level system prompt in the system slot, by the
// rule of record.UsesSystem: a conversation that starts with a system turn
// of its own keeps it, and the top-level one is not used.
func (x *Extractor) addSystem(raw []byte) *badRecord {
	if !present(raw) {
		return nil
	}
	if !isString(raw) {
		return reject(ReasonUnknownLayout, "system is not a string")
	}
	if blankToken(raw) || (len(x.msgs) > 0 && x.msgs[0].role == roleSystem) {
		return nil
	}
	x.msgs = append(x.msgs, message{})
	copy(x.msgs[1:], x.msgs)
	x.msgs[0] = message{role: roleSystem, content: x.clean(&x.arena, raw)}
	return nil
}

// setTools takes a record's tools in the OpenAI shape and canonical form
// (see record.AppendCanonicalTools), or none when they are empty in any
// spelling. Datasets repeat a few tool sets over and over, so canonical
// forms are kept by the bytes they were read from.
func (x *Extractor) setTools(raw []byte) *badRecord {
	if !present(raw) {
		return nil
	}
	canon, seen := x.toolsCache[string(raw)]
	if !seen {
		var ok bool
		var err error
		if canon, ok, err = record.AppendCanonicalTools(nil, raw); err != nil {
			return reject(ReasonBadTools, "tools is %s, neither a list of tools nor a JSON string holding one", kindOf(raw))
		}
		if !ok {
			canon = nil
		}
		if len(x.toolsCache) >= maxToolsCache {
			clear(x.toolsCache)
		}
		x.toolsCache[string(raw)] = canon
	}
	x.tools = canon
	return nil
}

// maxToolsCache bounds the canonical tools kept.
const maxToolsCache = 1024

// emptied returns s with no elements, its whole backing array zeroed: the
// decoder fills reused elements in place, so a field a record does not
// set would otherwise keep the previous record's value.
func emptied[T any](s []T) []T {
	clear(s[:cap(s)])
	return s[:0]
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
// null as "", and a list of parts joined by newlines (the way
// OpenAI-compatible servers join them), a bare string in the list being a
// text part. In an assistant turn, LLaMA-Factory v1's reasoning and
// tool_call parts are kept aside in x.partReasoning and x.partCalls.
func (x *Extractor) content(raw []byte, assistant bool) ([]byte, *badRecord) {
	x.partReasoning, x.partCalls = x.partReasoning[:0], x.partCalls[:0]
	switch {
	case isString(raw):
		return x.clean(&x.arena, raw), nil
	case !present(raw):
		return []byte(`""`), nil
	case raw[0] != '[':
		return nil, reject(ReasonUnknownLayout, "content is %s, neither text nor a list of parts", kindOf(raw))
	}
	x.rawParts = emptied(x.rawParts)
	if _, err := json.Parse(raw, &x.rawParts, parseFlags); err != nil {
		return nil, reject(ReasonUnknownLayout, "content is not a list of parts")
	}
	x.texts = x.texts[:0]
	for i, rp := range x.rawParts {
		if isString(rp) {
			x.texts = append(x.texts, rp)
			continue
		}
		if rp[0] != '{' {
			return nil, reject(ReasonUnknownLayout, "content part %d is %s, neither text nor a part", i, kindOf(rp))
		}
		var p part
		json.Parse(rp, &p, parseFlags) // an object: every field is raw
		kind := string(p.Type)
		switch {
		case !present(p.Type) || textPart[kind]:
		case mediaPart[kind]:
			return nil, reject(ReasonMultimodal, "content part %d is %s; only text prompts can be extracted", i, p.Type)
		case assistant && (kind == `"reasoning"` || kind == `"tool_call"`):
		default:
			return nil, reject(ReasonNonText, "content part %d has type %s; only text prompts can be extracted", i, rawExcerpt(p.Type))
		}
		tok := p.Text
		if !present(tok) {
			tok = p.Value
		}
		if !isString(tok) {
			return nil, reject(ReasonUnknownLayout, "content part %d has no text", i)
		}
		switch kind {
		case `"reasoning"`:
			x.partReasoning = append(x.partReasoning, tok)
		case `"tool_call"`:
			x.partCalls = append(x.partCalls, tok)
		default:
			x.texts = append(x.texts, tok)
		}
	}
	return x.joinTokens(x.texts, "\n"), nil
}

// textPart names the content part types that hold text: OpenAI's and
// LLaMA-Factory's text, and the Responses API's input and output text.
var textPart = map[string]bool{`"text"`: true, `"input_text"`: true, `"output_text"`: true}

// joinTokens returns the string tokens joined by sep as one token: "" for
// none, the token itself for one.
func (x *Extractor) joinTokens(toks [][]byte, sep string) []byte {
	switch len(toks) {
	case 0:
		return []byte(`""`)
	case 1:
		return x.clean(&x.arena, toks[0])
	}
	joined := x.scratch[:0]
	for i, tok := range toks {
		if i > 0 {
			joined = append(joined, sep...)
		}
		joined = append(joined, tokenText(nil, tok)...)
	}
	x.scratch = joined
	start := len(x.arena)
	x.arena = json.AppendEscape(x.arena, string(joined), 0)
	return x.arena[start:]
}

// readAlpaca builds system, history pairs and the prompt: the instruction,
// then its input and (Dolly's) context, each after a blank line, leaving
// out the blank ones.
func (x *Extractor) readAlpaca(f *fields) *badRecord {
	if bad := x.addSystem(f.System); bad != nil {
		return bad
	}
	if present(f.History) {
		var history [][]json.RawMessage
		if _, err := json.Parse(f.History, &history, parseFlags); err != nil {
			return reject(ReasonUnknownLayout, "history is not a list of [question, answer] pairs")
		}
		for i, pair := range history {
			if len(pair) == 0 || len(pair) > 2 || !isString(pair[0]) || (len(pair) == 2 && present(pair[1]) && !isString(pair[1])) {
				return reject(ReasonUnknownLayout, "history[%d] is not a [question, answer] pair of strings", i)
			}
			x.addMessage(roleUser, x.clean(&x.arena, pair[0]))
			if len(pair) == 2 && present(pair[1]) {
				x.addMessage(roleAssistant, x.clean(&x.arena, pair[1]))
			}
		}
	}
	x.texts = x.texts[:0]
	for _, c := range []struct {
		name string
		raw  []byte
	}{{"instruction", f.Instruction}, {"input", f.Input}, {"context", f.Context}} {
		switch {
		case !present(c.raw) && c.name != "instruction":
		case !isString(c.raw):
			return reject(ReasonUnknownLayout, "%s is not a string", c.name)
		case !blankToken(c.raw):
			x.texts = append(x.texts, c.raw)
		}
	}
	if len(x.texts) == 0 {
		x.texts = append(x.texts, f.Instruction) // blank: rejected as empty
	}
	x.addMessage(roleUser, x.joinTokens(x.texts, "\n\n"))
	// The answer, for the whole conversation (--turns all).
	for _, answer := range [][]byte{f.Output, f.Response} {
		if isString(answer) && !blankToken(answer) {
			x.addMessage(roleAssistant, x.clean(&x.arena, answer))
			break
		}
	}
	return nil
}

// readTurns reads MT-Bench's list of user questions. The dataset records
// no answers, so only the first turn makes a prompt on its own; later
// turns are rejected as unanswered_turn by the turn checks.
func (x *Extractor) readTurns(raw []byte) *badRecord {
	var turns []json.RawMessage
	if _, err := json.Parse(raw, &turns, parseFlags); err != nil {
		return reject(ReasonUnknownLayout, "turns is %s, not a list of strings", kindOf(raw))
	}
	if len(turns) == 0 {
		return reject(ReasonEmpty, "turns is empty")
	}
	for i, t := range turns {
		if !isString(t) {
			return reject(ReasonUnknownLayout, "turns[%d] is not a string", i)
		}
		x.addMessage(roleUser, x.clean(&x.arena, t))
	}
	return nil
}

// readPlain takes the first of the plain fields (see record.Fields.PlainFields) as one
// user turn, and its answer (OpenOrca's and MetaMath's response,
// NuminaMath's solution, xtuner's toy_output) for the whole conversation.
// A prompt that is a list of messages (as in preference datasets) is read
// as a conversation. A ToolBench query is not read: its api_list are
// RapidAPI endpoints, not chat tools.
func (x *Extractor) readPlain(f *fields) *badRecord {
	for _, c := range f.PlainFields() {
		switch {
		case !present(c.Raw):
			continue
		case c.Name == "query" && present(f.APIList):
			return reject(ReasonToolBenchQuery, "a ToolBench query (query and api_list) is not read: its APIs are RapidAPI endpoints, not chat tools, and without them the query asks for calls no model can make")
		case isString(c.Raw):
			x.addMessage(roleUser, x.clean(&x.arena, c.Raw))
			for _, answer := range f.PlainAnswers() {
				if isString(answer.Raw) && !blankToken(answer.Raw) {
					x.addMessage(roleAssistant, x.clean(&x.arena, answer.Raw))
					break
				}
			}
			if bad := x.addSystem(f.System); bad != nil {
				return bad
			}
			return x.setTools(f.Tools)
		case c.Raw[0] == '[':
			return x.readConversation(c.Name, c.Raw, f.System, f.Tools)
		default:
			return reject(ReasonUnknownLayout, "%s is %s, neither text nor a list of messages", c.Name, kindOf(c.Raw))
		}
	}
	return reject(ReasonUnknownLayout, "no prompt, question, query, problem, toy_input or text field")
}

// kindOf names the kind of a JSON value for a reject detail.
func kindOf(raw []byte) string {
	switch raw[0] {
	case '[':
		return "a list"
	case '{':
		return "an object"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// notAll is the reject of a list whose elements are not all of the kind
// want opens with ('{' or '"'): it names the first element that is not.
func notAll(name string, list []byte, want byte, what string) *badRecord {
	var elems []json.RawMessage
	if _, err := json.Parse(list, &elems, parseFlags); err == nil {
		for i, e := range elems {
			if e[0] != want {
				return reject(ReasonUnknownLayout, "%s[%d] is %s, not %s", name, i, kindOf(e), what)
			}
		}
	}
	return reject(ReasonUnknownLayout, "%s is not a list of %ss", name, strings.TrimPrefix(what, "a "))
}

// jsonProblem says what is wrong with text that is not JSON, in the
// decoder's words for the syntax, without its echo of the input or its Go
// types.
func jsonProblem(err error) string {
	s := strings.TrimPrefix(err.Error(), "json: ")
	if i := strings.Index(s, ": "); i >= 0 {
		s = s[:i]
	}
	if strings.Contains(s, "Go ") || strings.Contains(s, "unmarshal") || len(s) > 120 {
		return "not valid JSON"
	}
	return s
}
