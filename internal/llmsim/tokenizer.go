package llmsim

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// llmsim's tokenizers and chat templates, the server side of token ids.
//
// With Config.Tokenizer the endpoints use a model's own tokenizer and chat
// template (realtok.go), and every method of tokenizer below hands over to
// it. Otherwise they use llmsim's own, described here.
//
// Every answer is generated one token at a time (text.go: the digest, then
// " word" or " word." per token), and each generated token has one id, the
// id of its text (pieceID), whatever tokenizer the endpoint has. What the
// tokenizer decides is how a text sent to the endpoint becomes ids: a
// prompt, a conversation's history, or a text sent to /tokenize.
//
// Without Config.ChatTemplate the tokenizer is llmsim's original one: a
// text is cut into pieces of four bytes (context.go textTokenIDs), and a
// chat prompt gets the template's markers around each message's pieces, as
// PromptTokens counts them. An answer's text never cuts back into the ids
// it was generated as.
//
// With a ChatTemplate ("chatml" or "qwen3") the tokenizer is a word
// tokenizer with merges, written so that an answer's text re-tokenizes to
// the ids generated (wordIDs): a word and the space before it are one
// token, and so is a word with the full stop after it, except for the
// words of DriftWords, which have no such merge: " however." was generated
// as one token but re-tokenizes as " however" and ".", two. That is the
// drift real BPE tokenizers show (a non-canonical split the model chose),
// on a few answers, so tests can show it. The template renders each
// message as <|im_start|>role\n, its ids, <|im_end|>; an assistant turn's
// ids are its reasoning_content's and its content's (no markers between
// them), or its tool calls' (toolCallIDs); then the generation prompt.
// "chatml" renders every reasoning_content it is sent; "qwen3" drops the
// reasoning of the assistant turns before the last user turn, as Qwen3's
// template does, so that a conversation's later prompts do not begin with
// the ids of its earlier answers.

// Special token ids (Qwen-family values; the begin-of-text token, which
// Qwen's vocabulary has none of, SentencePiece's <s>).
const (
	idBOS           = 1
	idIMStart       = 151644
	idIMEnd         = eosChat
	idEndOfText     = eosText
	idNewline       = 198
	idToolCallOpen  = 151657
	idToolCallClose = 151658
	idToolCallSep   = 151659
)

// specials are the special tokens a text may spell out (llama.cpp's
// parse_special): /tokenize of a rendered template gives their ids.
var specials = []struct {
	text string
	id   int
}{
	{"<|im_start|>", idIMStart}, {"<|im_end|>", idIMEnd}, {"<|endoftext|>", idEndOfText},
	{"<tool_call>", idToolCallOpen}, {"</tool_call>", idToolCallClose},
}

// Chat templates.
const (
	templateChatML = "chatml"
	templateQwen3  = "qwen3"
)

// ChatTemplates are the names Config.ChatTemplate takes.
var ChatTemplates = []string{templateChatML, templateQwen3}

// templateTexts are what the servers that expose their template say it
// is (llama.cpp's /props chat_template), one per name.
var templateTexts = map[string]string{
	"":             `{%- for message in messages %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}`,
	templateChatML: `{%- for message in messages %}{{- '<|im_start|>' + message.role + '\n' }}{%- if message.reasoning_content %}{{- message.reasoning_content }}{%- endif %}{{- message.content + '<|im_end|>' + '\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}`,
	templateQwen3:  `{%- set ns = namespace(last_query=messages|length - 1) %}{%- for message in messages[::-1] %}{%- if message.role == 'user' and ns.last_query == messages|length - 1 %}{%- set ns.last_query = messages|length - 1 - loop.index0 %}{%- endif %}{%- endfor %}{%- for message in messages %}{{- '<|im_start|>' + message.role + '\n' }}{%- if message.role == 'assistant' and loop.index0 > ns.last_query and message.reasoning_content %}{{- message.reasoning_content }}{%- endif %}{{- message.content + '<|im_end|>' + '\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}`,
}

func checkChatTemplate(name string) error {
	if _, ok := templateTexts[name]; !ok {
		return fmt.Errorf("chat-template %q: want one of %s", name, strings.Join(ChatTemplates, ", "))
	}
	return nil
}

// DriftWords are the words of the answers' vocabulary whose full stop has
// no merge in the word tokenizer: an answer that wrote one of them with a
// full stop after it re-tokenizes to other ids than it was generated as.
var DriftWords = []string{"however", "therefore", "although", "problem", "language"}

var driftWord = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range DriftWords {
		m[w] = true
	}
	return m
}()

// byteID is the id of a piece of one byte: a newline is the template's.
func byteID(b byte) int {
	if b == '\n' {
		return idNewline
	}
	return pieceID(string([]byte{b}))
}

// special is the special token s starts with, if any.
func special(s string) (int, int, bool) {
	if len(s) == 0 || s[0] != '<' {
		return 0, 0, false
	}
	for _, sp := range specials {
		if strings.HasPrefix(s, sp.text) {
			return sp.id, len(sp.text), true
		}
	}
	return 0, 0, false
}

// wordIDs is the word tokenizer: special tokens; a word (a run of bytes
// but space, newline and full stop, with the one space before it) as one
// token, and its full stop with it unless the word is a drift word; any
// other byte alone.
func wordIDs(dst []int, s string) []int {
	for i := 0; i < len(s); {
		if id, n, ok := special(s[i:]); ok {
			dst = append(dst, id)
			i += n
			continue
		}
		j := i
		if s[j] == ' ' {
			j++
		}
		start := j
		for j < len(s) && s[j] != ' ' && s[j] != '\n' && s[j] != '.' {
			if _, _, ok := special(s[j:]); ok {
				break
			}
			j++
		}
		if j == start {
			dst = append(dst, byteID(s[i]))
			i++
			continue
		}
		if j < len(s) && s[j] == '.' && !driftWord[s[start:j]] {
			j++
		}
		dst = append(dst, pieceID(s[i:j]))
		i = j
	}
	return dst
}

// tokenizer is how an endpoint turns texts and chat prompts into ids, and
// its answers into text and ids.
type tokenizer struct {
	template string          // llmsim's own: "" four-byte pieces, else a ChatTemplate name
	model    *modelTokenizer // a model's own (Config.Tokenizer); nil: llmsim's
	// llama: llama.cpp's way of tokenizing a rendered chat prompt, as it
	// tokenizes a text (add_special: the begin-of-text token its
	// vocabulary adds, the one the template printed taken off the text
	// first; common/chat.cpp, server-common.cpp tokenize_input_prompts).
	llama bool
	// bos: llmsim's own vocabulary has a begin-of-text token, which
	// llama.cpp adds (Config.LlamaBOS).
	bos bool
	// noTools: the template renders no tools (Config.LlamaNoTools, or a
	// model's that prints none), and llama.cpp leaves them out of the
	// prompt: the model never sees them.
	noTools bool
}

func (e *Endpoint) tok() tokenizer {
	cfg, m := &e.f.cfg, e.f.model
	llama := e.d.flavor == FlavorLlamaCpp
	return tokenizer{template: cfg.ChatTemplate, model: m, llama: llama, bos: llama && cfg.LlamaBOS && m == nil,
		noTools: llama && (cfg.LlamaNoTools || m != nil && !m.rendersTools)}
}

// withBOS puts llmsim's begin-of-text token before ids where the
// vocabulary has one.
func (t tokenizer) withBOS(ids []int) []int {
	if !t.bos {
		return ids
	}
	return append([]int{idBOS}, ids...)
}

// rendered is p as the endpoint's template reads it: without tools where
// it renders none.
func (t tokenizer) rendered(p *Prompt) *Prompt {
	if !t.noTools || !present(p.template.tools) {
		return p
	}
	q := *p
	q.template.tools = nil
	return &q
}

// supportsTools is what llama.cpp's /props says of the template
// (chat_template_caps.supports_tools): llmsim's own are taken to render
// tools, a model's does where it prints a tool it is given.
func (t tokenizer) supportsTools() bool { return !t.noTools }

// text is the ids of a text.
func (t tokenizer) text(s string) []int {
	if t.template == "" {
		return textTokenIDs(s)
	}
	return wordIDs(nil, s)
}

// special is the ids of a text whose special tokens are spelt out (a
// rendered template sent to llama.cpp's /tokenize): without a template,
// four-byte pieces between them, and after <|im_start|> the role and its
// newline as chat counts them, so that a rendered prompt tokenizes to the
// ids its chat request is charged.
func (t tokenizer) special(s string) []int {
	if t.template != "" {
		return wordIDs(nil, s)
	}
	var ids []int
	for len(s) > 0 {
		if n := len(ids); n > 0 && ids[n-1] == idIMStart {
			if k := strings.IndexByte(s, '\n'); k >= 0 {
				if _, _, sp := special(s[:k]); !sp && !strings.Contains(s[:k], "<|") {
					ids = append(ids, pieceID(s[:k]), idNewline)
					s = s[k+1:]
					continue
				}
			}
		}
		k := len(s)
		for i := 0; i < len(s); i++ {
			if _, _, ok := special(s[i:]); ok {
				k = i
				break
			}
		}
		ids = append(ids, textTokenIDs(s[:k])...)
		s = s[k:]
		if id, n, ok := special(s); ok {
			ids = append(ids, id)
			s = s[n:]
		}
	}
	return ids
}

// turnExtra is what a history's message has beside its text.
type turnExtra struct {
	reasoning string
	calls     []toolCall
}

// chat is the ids of a chat prompt, history holding the extras of its
// messages (nil, or shorter: none), with the answer turn's opening when
// generation is set.
func (t tokenizer) chat(msgs []Message, history []turnExtra, generation bool) []int {
	if t.template == "" {
		return chatTokenIDs(msgs, generation)
	}
	lastUser := -1
	for i, m := range msgs {
		if m.Role == "user" {
			lastUser = i
		}
	}
	var ids []int
	for i, m := range msgs {
		var x turnExtra
		if i < len(history) {
			x = history[i]
		}
		ids = append(ids, idIMStart, pieceID(m.Role), idNewline)
		if m.Role == "assistant" && x.reasoning != "" && (t.template == templateChatML || i > lastUser) {
			ids = wordIDs(ids, x.reasoning)
		}
		if len(x.calls) > 0 {
			ids = appendToolCallIDs(ids, x.calls)
		} else {
			ids = wordIDs(ids, m.Content)
		}
		ids = append(ids, idIMEnd)
	}
	if generation {
		ids = append(ids, idIMStart, pieceID("assistant"), idNewline)
	}
	return ids
}

// render is the chat prompt as the template's text (llama.cpp's
// /apply-template), with no newline after <|im_end|> (llmsim's markers
// are the four chat counts): what special tokenizes to chat's ids.
func (t tokenizer) render(msgs []Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>")
	}
	b.WriteString("<|im_start|>assistant\n")
	return b.String()
}

// prompt is the ids of a request's prompt; only a model's template
// refuses one (an *apiError). Token ids are run as sent; llama.cpp puts
// the begin-of-text token before a text or a rendered chat prompt.
func (t tokenizer) prompt(p *Prompt) ([]int, error) {
	p = t.rendered(p)
	if t.model != nil {
		if t.llama && p.isChat() {
			return t.model.llamaChat(p)
		}
		return t.model.prompt(p)
	}
	switch {
	case len(p.Messages) > 0:
		return t.withBOS(t.chat(p.Messages, p.history, true)), nil
	case len(p.InputIDs) > 0:
		return p.InputIDs, nil
	}
	return t.withBOS(t.text(p.Text)), nil
}

// count is a request's prompt tokens, with its ids where counting them
// took the ids (nil: prompt makes them when they are asked for):
// PromptTokens without a template (and the begin-of-text token), else
// the ids' count.
func (t tokenizer) count(p *Prompt) (int, []int, error) {
	if t.template == "" && t.model == nil {
		n := PromptTokens(p)
		if t.bos && len(p.InputIDs) == 0 {
			n++
		}
		return n, nil, nil
	}
	ids, err := t.prompt(p)
	return len(ids), ids, err
}

// encode is the ids of a text sent to a tokenize route; addSpecial adds
// the special tokens a model's configuration puts before a text (its
// begin-of-text token; llmsim's own have none).
func (t tokenizer) encode(s string, addSpecial bool) []int {
	switch {
	case t.model == nil:
		return t.text(s)
	case addSpecial:
		return t.model.tok.EncodeSpecial(s)
	}
	return t.model.tok.Encode(s)
}

// chatIDs is the ids of a conversation sent to vLLM's /tokenize, with the
// answer turn's opening when generation is set.
func (t tokenizer) chatIDs(p *Prompt, generation bool) ([]int, error) {
	if t.model == nil {
		return t.chat(p.Messages, p.history, generation), nil
	}
	s, err := t.model.render(p, generation)
	if err != nil {
		return nil, err
	}
	return t.model.tok.Encode(s), nil
}

// renderChat is a conversation as its template's text (llama.cpp's
// /apply-template: without the begin-of-text token its chat route adds,
// tools left out where the template renders none).
func (t tokenizer) renderChat(p *Prompt, generation bool) (string, error) {
	p = t.rendered(p)
	if t.model == nil {
		return t.render(p.Messages), nil
	}
	s, err := t.model.render(p, generation)
	if err == nil && t.llama {
		s = t.model.withoutBOS(s)
	}
	return s, err
}

// llamaTokens is the ids of a text sent to llama.cpp's /tokenize, its
// special tokens spelt out read as such (parse_special) and the
// begin-of-text token the vocabulary has added (add_special): llmsim's
// own read them always.
func (t tokenizer) llamaTokens(s string, addSpecial, parseSpecial bool) ([]int, error) {
	if t.model == nil {
		if addSpecial {
			return t.withBOS(t.special(s)), nil
		}
		return t.special(s), nil
	}
	return t.model.llamaTokens(s, addSpecial, parseSpecial)
}

// llamaPieces is llama.cpp's /tokenize with_pieces: each id and the bytes
// it stands for (llmsim's own: the four-byte pieces).
func (t tokenizer) llamaPieces(s string, addSpecial, parseSpecial bool) ([]int, [][]byte, error) {
	if t.model != nil {
		ids, err := t.model.llamaTokens(s, addSpecial, parseSpecial)
		pieces := make([][]byte, len(ids))
		for i, id := range ids {
			pieces[i] = t.model.tok.DecodeBytes([]int{id})
		}
		return ids, pieces, err
	}
	var ids []int
	var pieces [][]byte
	if addSpecial && t.bos {
		ids, pieces = append(ids, idBOS), append(pieces, []byte("<s>"))
	}
	for i := 0; i < len(s); i += bytesPerToken {
		piece := s[i:min(i+bytesPerToken, len(s))]
		ids = append(ids, pieceID(piece))
		pieces = append(pieces, []byte(piece))
	}
	return ids, pieces, nil
}

// decode is the text of ids (/detokenize): only a model's tokenizer can
// say (llmsim's own ids are hashes of their texts).
func (t tokenizer) decode(ids []int) (string, error) {
	if t.model == nil {
		return "", errNoDecode
	}
	for _, id := range ids {
		if id < 0 || id >= t.model.tok.VocabSize() {
			return "", fmt.Errorf("token id %d is out of vocabulary (%d tokens)", id, t.model.tok.VocabSize())
		}
	}
	return t.model.tok.Decode(ids), nil
}

var errNoDecode = errors.New("llmsim's own token ids are hashes of their texts and decode to nothing: start llmsim with --tokenizer to decode ids")

// templateText is the template the endpoint says it renders with, where
// its flavour says (llama.cpp's /props): false for llmsim's default,
// which the flavour writes itself.
func (t tokenizer) templateText() (string, bool) {
	switch {
	case t.model != nil:
		return t.model.source, true
	case t.template != "":
		return templateTexts[t.template], true
	}
	return "", false
}

// templateArg is what SGLang's server info says of its template (the
// --chat-template it was given): a model's template's text, llmsim's
// template's name, or none (false).
func (t tokenizer) templateArg() (string, bool) {
	if t.model != nil {
		return t.model.source, true
	}
	return t.template, t.template != ""
}

// stopID is the id an answer that ends on its own stops on: the model's
// end-of-turn, else llmsim's for the kind of answer (own).
func (t tokenizer) stopID(own int) int {
	if t.model != nil {
		return t.model.eos
	}
	return own
}

// callTokens is how many tokens tool calls take to write: exactly with a
// model's tokenizer, else the estimate of appendToolCallIDs.
func (t tokenizer) callTokens(calls []toolCall) int {
	if t.model != nil {
		return t.model.callTokens(calls)
	}
	n := 0
	for _, c := range calls {
		n += 6 + TextTokens(c.name) + TextTokens(c.args)
	}
	return n
}

// answer turns a choice's planned words into its answer: with a model's
// tokenizer, the model's text and ids (realtok.go); llmsim's own make
// both from the words as they are asked for.
func (t tokenizer) answer(c *choiceState) {
	if t.model != nil {
		t.model.answer(c)
	}
}

// continued is the ids of a prompt followed by an answer (the history of
// a conversation's next turn, which the prefix cache keeps).
func (t tokenizer) continued(p *Prompt, ids []int, c *choiceState) []int {
	if t.model != nil {
		return append(ids[:len(ids):len(ids)], c.answerIDs(c.Target)...)
	}
	text := string(c.appendContent(nil, 0, c.Target))
	if len(p.Messages) > 0 {
		return t.withBOS(t.chat(append(p.Messages[:len(p.Messages):len(p.Messages)], Message{Role: "assistant", Content: text}), p.history, false))
	}
	return append(ids[:len(ids):len(ids)], t.text(text)...)
}

// ollamaTruncate is the prompt tokens Ollama keeps of p (n tokens) within
// numCtx: by llmsim's estimate, or rendering what it keeps with a model's
// template.
func (t tokenizer) ollamaTruncate(p *Prompt, n, numCtx int) int {
	if t.model == nil {
		return ollamaTruncate(p, PromptTokens(p), numCtx, func(from int) int { return chatTokens(p.Messages, from) })
	}
	return ollamaTruncate(p, n, numCtx, func(from int) int {
		ids, err := t.model.prompt(p.keep(from))
		if err != nil {
			return math.MaxInt
		}
		return len(ids)
	})
}

// appendToolCallIDs are the ids of tool calls as the model writes them:
// <tool_call>, newline, the name's pieces, two separators, the arguments'
// pieces, newline, </tool_call>: the 6 + name + arguments tokens a call
// costs (tools.go).
func appendToolCallIDs(ids []int, calls []toolCall) []int {
	for _, c := range calls {
		ids = append(ids, idToolCallOpen, idNewline)
		ids = append(ids, textTokenIDs(c.name)...)
		ids = append(ids, idToolCallSep, idToolCallSep)
		ids = append(ids, textTokenIDs(c.args)...)
		ids = append(ids, idNewline, idToolCallClose)
	}
	return ids
}

// endOfTurn makes an answer that ends on its own end with the end-of-turn
// id, one more token than its text, as a real model's does (a model's
// tokenizer's answers have theirs already, realtok.go); one whose text
// fills its limit has no room for it and is cut there (length).
func (c *choiceState) endOfTurn(a api, limit int) {
	if c.End != finishStop && c.End != finishToolCalls {
		return
	}
	if c.Target+1 > limit {
		c.End = finishLength
		return
	}
	c.eos = eosText
	if a == apiChat {
		c.eos = eosChat
	}
	c.Target++
}

// text is how many of the answer's tokens write text: all but its
// end-of-turn id.
func (c *choiceState) textTokens() int {
	if c.eos != 0 {
		return c.Target - 1
	}
	return c.Target
}

// answerIDs are the ids of the first n generated tokens of the choice:
// one per token, the id of its text; a tool call's its calls'; a model's
// answer's its own (realtok.go).
func (c *choiceState) answerIDs(n int) []int {
	if c.model != nil {
		return c.model.answerIDs(n)
	}
	if c.calls != nil {
		ids := appendToolCallIDs(nil, c.calls)
		if c.eos != 0 {
			ids = append(ids, c.eos)
		}
		return ids[:min(n, len(ids))]
	}
	ids := make([]int, 0, n)
	var buf []byte
	for k := 0; k < n; k++ {
		if c.eos != 0 && k == c.Target-1 {
			ids = append(ids, c.eos)
			break
		}
		if k < c.reasoning {
			buf = c.appendReasoning(buf[:0], k, k+1)
		} else {
			buf = c.appendContent(buf[:0], k, k+1)
		}
		ids = append(ids, pieceID(string(buf)))
	}
	return ids
}
