package extract

import (
	"bytes"
	"math"
	"strconv"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/record"
)

// The layouts read on top of the main ones, and the spellings of one
// field that several datasets name differently.

// aliases puts the fields other datasets name differently where the
// formats read them: system_prompt (OpenOrca) and system_message in the
// system slot when system is absent or blank, legacy OpenAI functions as
// the tools, and the record's tool_choice and parallel_tool_calls (or the
// legacy function_call setting) aside for applyToolSettings.
func (x *Extractor) aliases() *badRecord {
	f := x.f
	if !present(f.System) || (isString(f.System) && blankToken(f.System)) {
		for _, alt := range [...]namedField{{"system_prompt", f.SystemPrompt}, {"system_message", f.SystemMessage}} {
			switch {
			case !present(alt.raw):
			case !isString(alt.raw):
				return reject(ReasonUnknownLayout, "%s is %s, not text", alt.name, kindOf(alt.raw))
			case !blankToken(alt.raw):
				f.System = alt.raw
			}
			if present(f.System) && !blankToken(f.System) {
				break
			}
		}
	}
	var bad *badRecord
	if f.Tools, bad = legacyTools("the record", f.Tools, f.Functions); bad != nil {
		return bad
	}
	x.settings = toolSettings{choice: f.ToolChoice, parallel: f.ParallelCalls, legacy: legacySetting(f.FunctionCall)}
	return nil
}

// legacyTools returns the tools of a record or request, which are its
// legacy functions when it has no tools; both is a bad_tools reject.
func legacyTools(whose string, tools, functions []byte) ([]byte, *badRecord) {
	if !present(functions) {
		return tools, nil
	}
	switch {
	case toolsGiven(tools) && toolsGiven(functions):
		return nil, reject(ReasonBadTools, "%s has both tools and functions (legacy function calling); only one can be the prompt's tools", whose)
	case toolsGiven(tools):
		return tools, nil
	}
	return functions, nil
}

// legacySetting is the legacy function_call request setting ("auto",
// "none" or {"name": ...}), or nil when the value is none of its kinds.
func legacySetting(raw []byte) []byte {
	if isString(raw) || (present(raw) && raw[0] == '{') {
		return raw
	}
	return nil
}

// toolsGiven reports whether a tools value holds tools (an unreadable one
// counts: it is rejected when read).
func toolsGiven(raw []byte) bool {
	if !present(raw) {
		return false
	}
	_, ok, err := record.AppendCanonicalTools(nil, raw)
	return ok || err != nil
}

// joinSystem makes the system turns that open a conversation one: a
// prompt has one system slot, and a developer turn followed by a system
// turn (or two system turns) would fill it twice. Their texts are joined
// by a blank line, in order.
func (x *Extractor) joinSystem() {
	for len(x.msgs) > 1 && x.msgs[0].role == roleSystem && x.msgs[1].role == roleSystem {
		x.texts = append(x.texts[:0], x.msgs[0].content, x.msgs[1].content)
		x.msgs[1].content = x.joinTokens(x.texts, "\n\n")
		x.msgs = append(x.msgs[:0], x.msgs[1:]...)
	}
}

// weight is an assistant turn's training weight as a JSON number: OpenAI's
// and ShareGPT's (axolotl) weight, LLaMA-Factory's loss_weight, or
// xtuner's loss (false is 0, true 1), in that order; nil if none. A
// weight is a finite number of at least 0.
func (x *Extractor) weight(t *turn) ([]byte, *badRecord) {
	switch {
	case present(t.Weight):
		return x.weightNumber("weight", t.Weight)
	case present(t.LossWeight):
		return x.weightNumber("loss_weight", t.LossWeight)
	case string(t.Loss) == "true":
		return []byte("1"), nil
	case string(t.Loss) == "false":
		return []byte("0"), nil
	case present(t.Loss):
		return nil, reject(ReasonBadWeight, "loss %s is not true or false", rawExcerpt(t.Loss))
	}
	return nil, nil
}

// weightNumber writes a weight in one spelling: 1.0 and 1 are both 1.
func (x *Extractor) weightNumber(name string, raw []byte) ([]byte, *badRecord) {
	w, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || raw[0] == '"' || math.IsInf(w, 0) || w < 0 {
		return nil, reject(ReasonBadWeight, "%s %s is not a number of at least 0", name, rawExcerpt(raw))
	}
	start := len(x.arena)
	x.arena = strconv.AppendFloat(x.arena, w, 'g', -1, 64)
	return x.arena[start:], nil
}

// readPairTurn reads a turn that is a question and its answer (Capybara's
// and xtuner's {input, output}, xtuner's with a system before them).
func (x *Extractor) readPairTurn(t *turn) *badRecord {
	for _, f := range [...]namedField{{"system", t.System}, {"input", t.Input}, {"output", t.Output}} {
		if present(f.raw) && !isString(f.raw) {
			return reject(ReasonUnknownLayout, "%s is %s, not text", f.name, kindOf(f.raw))
		}
	}
	if present(t.System) {
		x.addMessage(roleSystem, x.clean(&x.arena, t.System))
	}
	if present(t.Input) {
		x.addMessage(roleUser, x.clean(&x.arena, t.Input))
	}
	if present(t.Output) {
		x.addMessage(roleAssistant, x.clean(&x.arena, t.Output))
	}
	x.pending = x.pending[:0]
	return nil
}

// readUltraChat reads UltraChat's data: texts that alternate between the
// user and the assistant, the user first.
func (x *Extractor) readUltraChat(f *fields) *badRecord {
	var texts []json.RawMessage
	if _, err := json.Parse(f.Data, &texts, parseFlags); err != nil {
		return reject(ReasonUnknownLayout, "data is not a list of texts")
	}
	if len(texts) == 0 {
		return reject(ReasonEmpty, "data is empty")
	}
	for i, t := range texts {
		if !isString(t) {
			return reject(ReasonUnknownLayout, "data[%d] is %s, not text (UltraChat's data alternates user and assistant texts)", i, kindOf(t))
		}
		role := roleUser
		if i%2 == 1 {
			role = roleAssistant
		}
		x.addMessage(role, x.clean(&x.arena, t))
	}
	if bad := x.addSystem(f.System); bad != nil {
		return bad
	}
	return x.setTools(f.Tools)
}

// openAIInput is the input of an OpenAI preference fine-tuning record.
type openAIInput struct {
	Messages      json.RawMessage `json:"messages"`
	Tools         json.RawMessage `json:"tools"`
	Functions     json.RawMessage `json:"functions"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	ParallelCalls json.RawMessage `json:"parallel_tool_calls"`
}

// readOpenAIPreference reads OpenAI's preference fine-tuning format:
// input.messages (with input.tools) is the prompt, preferred_output and
// non_preferred_output two lists of assistant turns that answer it. The
// whole conversation (--turns all) ends with the preferred one.
func (x *Extractor) readOpenAIPreference(f *fields) *badRecord {
	if !present(f.Input) || f.Input[0] != '{' {
		return reject(ReasonUnknownLayout, "preferred_output and non_preferred_output without an input object holding the messages")
	}
	var in openAIInput
	json.Parse(f.Input, &in, parseFlags) // an object: every field is raw
	if !present(in.Messages) {
		return reject(ReasonUnknownLayout, "input has no messages")
	}
	if bad := x.readTurnList("input.messages", in.Messages, 0); bad != nil {
		return bad
	}
	n := len(x.msgs)
	if bad := x.readAnswerList("preferred_output", f.Preferred, n); bad != nil {
		return bad
	}
	kept := len(x.msgs)
	if bad := x.readAnswerList("non_preferred_output", f.NonPreferred, n); bad != nil {
		return bad
	}
	x.msgs = x.msgs[:kept]
	if bad := x.addSystem(f.System); bad != nil {
		return bad
	}
	tools, bad := legacyTools("input", in.Tools, in.Functions)
	if bad != nil {
		return bad
	}
	if !present(tools) {
		tools = f.Tools
	}
	for _, s := range []struct {
		dst *[]byte
		raw []byte
	}{{&x.settings.choice, in.ToolChoice}, {&x.settings.parallel, in.ParallelCalls}} {
		if present(s.raw) {
			*s.dst = s.raw
		}
	}
	return x.setTools(tools)
}

// readAnswerList appends a list of turns that answers the conversation so
// far: assistant turns and tool results, no question.
func (x *Extractor) readAnswerList(name string, raw []byte, base int) *badRecord {
	start := len(x.msgs)
	if bad := x.readTurnList(name, raw, base); bad != nil {
		return bad
	}
	answered := false
	for _, m := range x.msgs[start:] {
		switch m.role {
		case roleAssistant:
			answered = true
		case roleTool:
		default:
			return reject(ReasonUnknownLayout, "%s has a %s turn; it holds the answer only", name, m.role)
		}
	}
	if !answered {
		return reject(ReasonUnknownLayout, "%s has no assistant turn", name)
	}
	return nil
}

// addChosen ends a conversation read through prompt, instruction,
// conversations or messages with a preference pair's chosen answer (--turns
// all), when what was read ends with a question: the chosen side as text
// (TRL), one turn (LLaMA-Factory's ShareGPT pairs: {from, value}), or a
// list of turns (TRL's conversational pairs), of which the answer is what
// follows its last question, so a side that repeats the prompt adds only
// its answer.
func (x *Extractor) addChosen(chosen []byte) *badRecord {
	if len(x.msgs) == 0 || x.msgs[len(x.msgs)-1].role != roleUser {
		return nil
	}
	switch chosen[0] {
	case '"':
		if blankToken(chosen) {
			return reject(ReasonEmpty, "the chosen answer has no text")
		}
		x.addMessage(roleAssistant, x.clean(&x.arena, chosen))
		return nil
	case '{':
		start := len(x.arena)
		x.arena = append(append(append(x.arena, '['), chosen...), ']')
		chosen = x.arena[start:]
	case '[':
	default:
		return reject(ReasonUnknownLayout, "chosen is %s, neither text, a turn nor a list of turns", kindOf(chosen))
	}
	start := len(x.msgs)
	if bad := x.readTurnList("chosen", chosen, start); bad != nil {
		return bad
	}
	cut := start
	for i := start; i < len(x.msgs); i++ {
		if r := x.msgs[i].role; r != roleAssistant && r != roleTool {
			cut = i + 1
		}
	}
	x.msgs = append(x.msgs[:start], x.msgs[cut:]...)
	if len(x.msgs) == start || x.msgs[start].role != roleAssistant {
		return reject(ReasonUnknownLayout, "chosen has no assistant answer after its last question")
	}
	return nil
}

// nonEmpty is false for an absent, null or empty value ("", [], {}).
func nonEmpty(raw []byte) bool {
	if !present(raw) {
		return false
	}
	switch raw[0] {
	case '"':
		return !blankToken(raw)
	case '[', '{':
		inner := bytes.TrimSpace(raw[1 : len(raw)-1])
		return len(inner) > 0
	}
	return false
}
