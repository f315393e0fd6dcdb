package llmsim

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	modeltok "tokenmill/lib/tokenizer"
)

// A model's own tokenizer and chat template (Config.Tokenizer, --tokenizer
// DIR): the endpoints render every chat prompt with the model's template
// and tokenize it with the model's tokenizer (lib/tokenizer), as vLLM and
// SGLang do, and answer in the model's tokens.
//
// What an answer says is still llmsim's choice (text.go: the digest, the
// words, the reasoning, the tool calls, the degenerate answers, all drawn
// as without a tokenizer); how the model writes it is the model's: a
// reasoning before the answer as <think>\n reasoning \n</think>\n\n (Qwen3's
// way, which DeepSeek-R1 shares), tool calls in the template's own markup.
// That text is encoded with the model's tokenizer and the i-th generated
// token is its i-th id; an answer that ends on its own ends with the
// end-of-turn id, which is generated and counted but not shown, as a
// server's token_ids include the EOS its text leaves out. max_tokens (and
// the context) cut the ids, and the text shown is what the ids kept
// decode to, never splitting a character between two streamed deltas.

// driftSystemPrompt is what --template-drift puts before a conversation
// that has no system turn; driftPrefix is the template text that does it,
// put in front of the model's own: a server started with another version
// of the template (one that adds a default system prompt, as Qwen2.5's
// did) renders every such prompt differently.
const (
	driftSystemPrompt = "You are a helpful assistant."
	driftPrefix       = `{%- if messages[0].role != 'system' %}{%- set messages = [{'role': 'system', 'content': '` + driftSystemPrompt + `'}] + messages %}{%- endif %}`
)

// The markup a model writes its reasoning in.
const (
	thinkBegin = "<think>\n"
	thinkEnd   = "\n</think>\n\n"
)

// modelTokenizer is a model's tokenizer and chat template as the
// endpoints use them.
type modelTokenizer struct {
	tok    *modeltok.Tokenizer
	source string // the template text the endpoints render with and report (driftPrefix in front with drift)
	eos    int    // the end-of-turn id an answer that ends on its own ends with
	calls  callStyle
	// thinks: the template writes reasoning in <think> blocks (Qwen3),
	// so a chat answer with thinking on opens with one, empty when the
	// model has nothing to think.
	thinks bool
	// rendersTools: the template prints a tool it is given, as llama.cpp
	// finds its chat_template_caps.supports_tools.
	rendersTools bool
	// opens is the ids of the template's generation prompt with thinking
	// on: a raw prompt that ends with them was rendered for the model to
	// answer, which then writes its think block as it would in a chat.
	opens []int
}

// loadedTokenizers holds the folders loaded in this process, by absolute
// path: a model's tokenizer is tens of megabytes, loaded once and shared
// by every endpoint and every fleet.
var loadedTokenizers = struct {
	sync.Mutex
	m map[string]*modeltok.Tokenizer
}{m: map[string]*modeltok.Tokenizer{}}

// loadTokenizer loads a model's folder, or finds it loaded. A folder
// without a chat template or an end-of-turn token is refused: every chat
// request is rendered with the one, every answer ends with the other.
func loadTokenizer(dir string) (*modeltok.Tokenizer, error) {
	key, err := filepath.Abs(dir)
	if err != nil {
		key = dir
	}
	loadedTokenizers.Lock()
	defer loadedTokenizers.Unlock()
	if t, ok := loadedTokenizers.m[key]; ok {
		return t, nil
	}
	t, err := modeltok.Load(dir)
	switch {
	case err != nil:
		return nil, err
	case t.TemplateSource() == "":
		return nil, fmt.Errorf("%s: no chat template (tokenizer_config.json chat_template, or chat_template.jinja), which every chat request is rendered with", dir)
	case len(t.EndOfTurn) == 0:
		return nil, fmt.Errorf("%s: no end-of-turn token (tokenizer_config.json eos_token, or generation_config.json eos_token_id), which every answer ends with", dir)
	}
	loadedTokenizers.m[key] = t
	return t, nil
}

// newModelTokenizer is the tokenizer of Config.Tokenizer and
// Config.TemplateDrift.
func newModelTokenizer(dir string, drift bool) (*modelTokenizer, error) {
	t, err := loadTokenizer(dir)
	if err != nil {
		return nil, err
	}
	m := &modelTokenizer{tok: t, eos: t.EndOfTurn[0], calls: callStyleOf(t.TemplateSource()),
		thinks: strings.Contains(t.TemplateSource(), "<think>")}
	if drift {
		if m.tok, err = t.WithTemplate(driftPrefix + t.TemplateSource()); err != nil {
			return nil, fmt.Errorf("--template-drift: %w", err)
		}
	}
	m.source = m.tok.TemplateSource()
	m.rendersTools = rendersTools(m.tok)
	m.opens = generationPrompt(m.tok)
	return m, nil
}

// probeMessages is the conversation a template is rendered with to learn
// what it writes around one.
const probeMessages = `[{"role":"user","content":"Hey"}]`

// generationPrompt is the ids the template adds to open an answer (Qwen3's
// "<|im_start|>assistant\n"), none where it adds nothing.
func generationPrompt(t *modeltok.Tokenizer) []int {
	hey := modeltok.Request{Messages: []byte(probeMessages)}
	without, err := t.Render(hey)
	hey.AddGenerationPrompt = true
	with, err2 := t.Render(hey)
	if err != nil || err2 != nil || !strings.HasPrefix(with, without) || with == without {
		return nil
	}
	return t.Encode(with[len(without):])
}

// toolProbe is the tool llama.cpp renders a template with to find whether
// it supports tools (minja's chat_template caps: the tool's name in the
// text).
const (
	toolProbeName = "some_tool"
	toolProbe     = `[{"type":"function","function":{"name":"` + toolProbeName + `","description":"Some tool.","parameters":{"type":"object","properties":{"arg":{"type":"string","description":"Some argument."}},"required":["arg"]}}}]`
)

func rendersTools(t *modeltok.Tokenizer) bool {
	s, err := t.Render(modeltok.Request{Messages: []byte(probeMessages), Tools: []byte(toolProbe), AddGenerationPrompt: true})
	return err == nil && strings.Contains(s, toolProbeName)
}

// templateInput is a chat request as a model's template reads it, beside
// the texts Prompt.Messages flattened: the messages as sent (nil: not a
// conversation), the tools and the chat_template_kwargs, raw.
type templateInput struct {
	messages      []wireMessage
	tools, kwargs json.RawMessage
}

// conversationPrompt is the prompt of messages sent to a route that renders or
// tokenizes them (vLLM's /tokenize, llama.cpp's /apply-template).
func conversationPrompt(msgs []wireMessage, tools, kwargs json.RawMessage) (Prompt, error) {
	p := Prompt{Messages: make([]Message, len(msgs)), history: historyOf(msgs),
		template: templateInput{messages: msgs, tools: tools, kwargs: kwargs}}
	if p.template.messages == nil {
		p.template.messages = []wireMessage{}
	}
	for i, m := range msgs {
		text, err := contentText(m.Content)
		if err != nil {
			return p, err
		}
		p.Messages[i] = Message{Role: m.Role, Content: text}
	}
	return p, nil
}

// isChat: the prompt is a conversation (an empty one too, which a
// template may refuse).
func (p *Prompt) isChat() bool { return len(p.Messages) > 0 || p.template.messages != nil }

// keep is the prompt without the messages before from but the system
// ones (what Ollama keeps of a conversation too long for its context).
func (p *Prompt) keep(from int) *Prompt {
	out := &Prompt{template: templateInput{messages: []wireMessage{}, tools: p.template.tools, kwargs: p.template.kwargs}}
	for i, m := range p.Messages {
		if i < from && m.Role != "system" {
			continue
		}
		out.Messages = append(out.Messages, m)
		if i < len(p.template.messages) {
			out.template.messages = append(out.template.messages, p.template.messages[i])
		}
	}
	return out
}

// present: a raw JSON value was sent, and is not null.
func present(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && string(raw) != "null"
}

// render renders a conversation with the model's template (drifted with
// drift); a template that raises is a 400 with its message, as the
// servers answer it.
func (m *modelTokenizer) render(p *Prompt, generation bool) (string, error) {
	r := modeltok.Request{Messages: m.appendMessages(nil, p), AddGenerationPrompt: generation}
	if present(p.template.tools) {
		r.Tools = p.template.tools
	}
	if present(p.template.kwargs) {
		r.Kwargs = p.template.kwargs
	}
	s, err := m.tok.Render(r)
	if err != nil {
		return "", templateRefusal(err)
	}
	return s, nil
}

// templateRefusal is a rendering error as an answer: 400, and the
// template's own message when it raised.
func templateRefusal(err error) *apiError {
	msg := err.Error()
	var te *modeltok.TemplateError
	if errors.As(err, &te) {
		msg = te.Message
	}
	return &apiError{kind: errInvalid, status: fasthttp.StatusBadRequest, msg: msg}
}

// appendMessages writes the conversation as the template reads it, the
// way vLLM and SGLang hand a request's messages over: content flattened to
// its text ("" for none), tool calls with their arguments parsed where
// they are JSON text (so that the template's tojson prints them), and
// reasoning_content, tool_call_id and name as sent.
func (m *modelTokenizer) appendMessages(dst []byte, p *Prompt) []byte {
	dst = append(dst, '[')
	for i, msg := range p.Messages {
		if i > 0 {
			dst = append(dst, ',')
		}
		var w *wireMessage
		if i < len(p.template.messages) {
			w = &p.template.messages[i]
		}
		dst = appendTemplateMessage(dst, msg, w)
	}
	return append(dst, ']')
}

func appendTemplateMessage(dst []byte, msg Message, w *wireMessage) []byte {
	dst = append(dst, `{"role":`...)
	dst = appendString(dst, msg.Role)
	dst = append(dst, `,"content":`...)
	dst = appendString(dst, msg.Content)
	if w == nil {
		return append(dst, '}')
	}
	if w.ReasoningContent != nil {
		dst = append(dst, `,"reasoning_content":`...)
		dst = appendString(dst, *w.ReasoningContent)
	}
	if len(w.ToolCalls) > 0 {
		dst = append(dst, `,"tool_calls":[`...)
		for i, c := range w.ToolCalls {
			if i > 0 {
				dst = append(dst, ',')
			}
			typ := c.Type
			if typ == "" {
				typ = "function"
			}
			dst = append(dst, `{"id":`...)
			dst = appendString(dst, c.ID)
			dst = append(dst, `,"type":`...)
			dst = appendString(dst, typ)
			dst = append(dst, `,"function":{"name":`...)
			dst = appendString(dst, c.Function.Name)
			dst = append(dst, `,"arguments":`...)
			dst = append(dst, templateArguments(c.Function.Arguments)...)
			dst = append(dst, "}}"...)
		}
		dst = append(dst, ']')
	}
	if w.ToolCallID != nil {
		dst = append(dst, `,"tool_call_id":`...)
		dst = appendString(dst, *w.ToolCallID)
	}
	if w.Name != nil {
		dst = append(dst, `,"name":`...)
		dst = appendString(dst, *w.Name)
	}
	return append(dst, '}')
}

// templateArguments are a tool call's arguments as the servers give them
// to a template: an object, sent as JSON text (vLLM and SGLang json.loads
// it) or as one, its keys in their order; anything else becomes {}, as
// vLLM coerces it.
func templateArguments(raw json.RawMessage) []byte {
	v := bytes.TrimSpace(raw)
	var s string
	if len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &s) == nil {
		v = bytes.TrimSpace([]byte(s))
	}
	if len(v) == 0 || v[0] != '{' || !json.Valid(v) {
		return []byte("{}")
	}
	return v
}

// prompt is the ids of a request's prompt: a conversation rendered and
// tokenized as a chat prompt is (add_special_tokens false: the template
// writes its own begin-of-text token), a text with the special tokens the
// configuration adds, token ids as sent.
func (m *modelTokenizer) prompt(p *Prompt) ([]int, error) {
	switch {
	case p.isChat():
		s, err := m.render(p, true)
		if err != nil {
			return nil, err
		}
		return m.tok.Encode(s), nil
	case len(p.InputIDs) > 0:
		return p.InputIDs, nil
	}
	return m.tok.EncodeSpecial(p.Text), nil
}

// llamaChat is the ids llama.cpp's chat route runs for a conversation:
// rendered, the begin-of-text token the vocabulary adds taken off the
// text where the template printed it, then tokenized as /tokenize with
// add_special does (that token first).
func (m *modelTokenizer) llamaChat(p *Prompt) ([]int, error) {
	s, err := m.render(p, true)
	if err != nil {
		return nil, err
	}
	return m.llamaTokens(m.withoutBOS(s), true, true)
}

// withoutBOS is a rendered prompt without the begin-of-text token's text
// it starts with, where the vocabulary adds that token itself (llama.cpp
// takes it off, so that it is not there twice).
func (m *modelTokenizer) withoutBOS(s string) string {
	bos := m.tok.EncodeSpecial("")
	if len(bos) == 0 {
		return s
	}
	return strings.TrimPrefix(s, string(m.tok.DecodeBytes(bos[:1])))
}

// llamaTokens is llama.cpp's tokenizing of a /tokenize text: the
// begin-of-text token the configuration asks for first with addSpecial;
// with parseSpecial the special tokens spelt out in the text read as
// such. Without it llama.cpp reads a control token's text (<|im_end|>) as
// plain text, which lib/tokenizer cannot do (it matches every added
// token): such a text is refused, any other is exact.
func (m *modelTokenizer) llamaTokens(s string, addSpecial, parseSpecial bool) ([]int, error) {
	var ids []int
	if addSpecial {
		ids = m.tok.EncodeSpecial("")
	}
	if !parseSpecial {
		return append(ids, m.tok.EncodePlain(s)...), nil
	}
	return m.tok.AppendEncode(ids, s), nil
}

// callStyle is how a model writes tool calls, known by its template's
// markup.
type callStyle int

const (
	// callsHermes: <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>,
	// a newline between calls (Qwen, Hermes and the templates after them).
	callsHermes callStyle = iota
	// callsDeepSeek: DeepSeek-V3's <｜tool▁calls▁begin｜> markup, each
	// call's arguments in a fenced JSON block.
	callsDeepSeek
)

const deepseekCallsBegin = "<｜tool▁calls▁begin｜>"

func callStyleOf(template string) callStyle {
	if strings.Contains(template, deepseekCallsBegin) {
		return callsDeepSeek
	}
	return callsHermes
}

// appendCalls writes tool calls as the model writes them.
func (s callStyle) appendCalls(dst []byte, calls []toolCall) []byte {
	if s == callsDeepSeek {
		dst = append(dst, deepseekCallsBegin...)
		for i, c := range calls {
			if i > 0 {
				dst = append(dst, '\n')
			}
			dst = append(dst, "<｜tool▁call▁begin｜>function<｜tool▁sep｜>"...)
			dst = append(dst, c.name...)
			dst = append(dst, "\n```json\n"...)
			dst = append(dst, c.args...)
			dst = append(dst, "\n```<｜tool▁call▁end｜>"...)
		}
		return append(dst, "<｜tool▁calls▁end｜>"...)
	}
	for i, c := range calls {
		if i > 0 {
			dst = append(dst, '\n')
		}
		dst = append(dst, "<tool_call>\n{\"name\": \""...)
		dst = append(dst, c.name...)
		dst = append(dst, "\", \"arguments\": "...)
		dst = append(dst, c.args...)
		dst = append(dst, "}\n</tool_call>"...)
	}
	return dst
}

// callTokens is what tool calls cost: their ids and the end of the turn.
func (m *modelTokenizer) callTokens(calls []toolCall) int {
	return len(m.tok.Encode(string(m.calls.appendCalls(nil, calls)))) + 1
}

// modelAnswer is a choice's answer in the model's tokens.
type modelAnswer struct {
	text string // what the model writes, reasoning markup included, the end-of-turn not
	// ids are text's ids, then the end-of-turn id when the answer ends on
	// its own, cut at the choice's limit.
	ids []int
	// offs[i] is how many bytes of text the first i ids decode to, for
	// the ids of text (not the end-of-turn).
	offs []int
	// The reasoning a reasoning parser takes out is text[rStart:rEnd]
	// (none: both 0); the content is text[cStart:].
	rStart, rEnd, cStart int
}

// answer writes choice c's answer in the model's tokens, from the words
// planned for it (newFlight): its Target becomes its ids, its End length
// when they do not fit its limit, its reasoning the ids that write the
// reasoning.
func (m *modelTokenizer) answer(c *choiceState) {
	a := &modelAnswer{}
	b := m.answerText(c, a)
	ids := m.tok.Encode(string(b))
	written := len(ids)
	if c.End == finishStop || c.End == finishToolCalls {
		ids = append(ids, m.eos)
	}
	if len(ids) > c.limit {
		ids, c.End = ids[:c.limit], finishLength
	}
	a.text, a.ids = string(b), ids
	a.offs = m.offsets(ids[:min(written, len(ids))], len(a.text))
	c.Target = len(ids)
	if a.rEnd > 0 {
		c.reasoning = a.through(a.rEnd)
	}
	c.model = a
}

// answerText is the text of choice c's planned words as the model writes
// it, and where its parts lie.
func (m *modelTokenizer) answerText(c *choiceState, a *modelAnswer) []byte {
	var b []byte
	if m.emptyThink(c) {
		// A hybrid thinking model (Qwen3) thinking with nothing to think
		// still writes its think block; a reasoning parser takes it out of
		// a chat answer's content (an empty reasoning), a server without
		// one, or a raw prompt's answer, leaves it.
		b = append(append(b, thinkBegin...), thinkEnd...)
		if c.f.job.api == apiChat && c.f.e.parsesReasoning() {
			a.cStart = len(b)
		}
	}
	switch {
	case c.calls != nil:
		b = m.calls.appendCalls(b, c.calls)
		a.cStart = len(b) // the calls are the message, not its content
	case c.reasoning > 0:
		b = append(b, thinkBegin...)
		a.rStart = len(b)
		b = c.appendReasoning(b, 0, c.Target)
		a.rEnd = len(b)
		if c.Target > c.reasoning { // the model got past its thinking
			b = append(b, thinkEnd...)
		}
		a.cStart = len(b)
		b = c.appendContent(b, 0, c.Target)
	default:
		b = c.appendContent(b, 0, c.Target)
	}
	return b
}

// emptyThink tells an answer with no reasoning of its own that the model
// opens with an empty think block: its template writes one (Qwen3's marks
// every last answer so), and thinking is on. A chat request turns it off
// in its kwargs; a raw prompt (a client's own rendering, as sent to
// llama.cpp's /completion) is open to thinking when it ends with the
// generation prompt alone: with thinking off the template puts the empty
// block there, and the model writes the answer alone.
func (m *modelTokenizer) emptyThink(c *choiceState) bool {
	if !m.thinks || c.reasoning != 0 || c.inline != 0 {
		return false
	}
	if c.f.job.api == apiChat {
		return !c.thinkOff
	}
	ids := c.f.inputIDs
	return len(m.opens) > 0 && len(ids) >= len(m.opens) && slices.Equal(ids[len(ids)-len(m.opens):], m.opens)
}

// offsets are the bytes of a text of size bytes the first i of its ids
// decode to: piece by piece where the decoder joins the pieces' bytes
// (byte-level BPE), prefix by prefix where it does not.
func (m *modelTokenizer) offsets(ids []int, size int) []int {
	offs := make([]int, len(ids)+1)
	one := []int{0}
	for i, id := range ids {
		one[0] = id
		offs[i+1] = offs[i] + len(m.tok.DecodeBytes(one))
	}
	if offs[len(ids)] != len(m.tok.DecodeBytes(ids)) {
		for i := range ids {
			offs[i+1] = len(m.tok.DecodeBytes(ids[:i+1]))
		}
	}
	for i := range offs {
		offs[i] = min(offs[i], size)
	}
	return offs
}

// through is how many ids it takes to write the text up to byte end.
func (a *modelAnswer) through(end int) int {
	for i, o := range a.offs {
		if o >= end {
			return i
		}
	}
	return len(a.ids)
}

// cut is the bytes of text the first n ids show: what they decode to,
// less a character they have not finished (the next id completes it).
func (a *modelAnswer) cut(n int) int {
	k := a.offs[min(max(n, 0), len(a.offs)-1)]
	for i := k - 1; i >= 0 && i >= k-utf8.UTFMax; i-- {
		if utf8.RuneStart(a.text[i]) {
			if !utf8.FullRuneInString(a.text[i:k]) {
				return i
			}
			break
		}
	}
	return k
}

// appendContent appends the content that ids [from, to) show; the first
// reasoning ids write the reasoning and its markup, so the content of any
// range from there starts where the markup ends.
func (a *modelAnswer) appendContent(dst []byte, from, to, reasoning int) []byte {
	lo := a.cStart
	if from > reasoning {
		lo = max(lo, a.cut(from))
	}
	if hi := a.cut(to); hi > lo {
		dst = append(dst, a.text[lo:hi]...)
	}
	return dst
}

// appendReasoning appends the reasoning that ids [from, to) show.
func (a *modelAnswer) appendReasoning(dst []byte, from, to, reasoning int) []byte {
	lo, hi := max(a.cut(from), a.rStart), min(a.cut(min(to, reasoning)), a.rEnd)
	if hi > lo {
		dst = append(dst, a.text[lo:hi]...)
	}
	return dst
}

// answerIDs are the first n ids of the answer.
func (a *modelAnswer) answerIDs(n int) []int { return a.ids[:min(max(n, 0), len(a.ids))] }
