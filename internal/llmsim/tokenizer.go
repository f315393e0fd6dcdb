package llmsim

import (
	"fmt"
	"strings"
)

// llmsim's tokenizers and chat templates, the server side of token ids.
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

// Special token ids (Qwen-family values).
const (
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

// tokenizer is how an endpoint turns texts and chat prompts into ids.
type tokenizer struct {
	template string // "": llmsim's four-byte pieces
}

func (e *Endpoint) tok() tokenizer { return tokenizer{template: e.f.cfg.ChatTemplate} }

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

// prompt is the ids of a request's prompt.
func (t tokenizer) prompt(p *Prompt) []int {
	switch {
	case len(p.Messages) > 0:
		return t.chat(p.Messages, p.history, true)
	case len(p.InputIDs) > 0:
		return p.InputIDs
	}
	return t.text(p.Text)
}

// promptTokens counts a request's prompt: PromptTokens without a
// template, the word tokenizer's count with one.
func (e *Endpoint) promptTokens(p *Prompt) int {
	t := e.tok()
	if t.template == "" {
		return PromptTokens(p)
	}
	return len(t.prompt(p))
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

// answerIDs are the ids of the first n generated tokens of the choice:
// one per token, the id of its text; a tool call's its calls'.
func (c *choiceState) answerIDs(n int) []int {
	if c.calls != nil {
		ids := appendToolCallIDs(nil, c.calls)
		return ids[:min(n, len(ids))]
	}
	ids := make([]int, 0, n)
	var buf []byte
	for k := 0; k < n; k++ {
		if k < c.reasoning {
			buf = c.appendReasoning(buf[:0], k, k+1)
		} else {
			buf = c.appendContent(buf[:0], k, k+1)
		}
		ids = append(ids, pieceID(string(buf)))
	}
	return ids
}
