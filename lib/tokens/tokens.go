// Package tokens counts a prompt's tokens, to fit its request into the
// model's context. A prompt's bytes bound its tokens (Bound), which
// settles most requests uncounted; any other is counted by a server's
// tokenizer where one offers it (fleet's Tokenize: vLLM and llama.cpp
// count the chat prompt itself; SGLang and llama.cpp without
// /apply-template count the texts, to which the chat template's tokens
// are added), else estimated from the prompt's bytes. The estimate is
// kept conservative, though no bound: its bytes per token are a low
// percentile of what the answered prompts measured (the server's
// prompt_tokens over their bytes), and before there are enough of them a
// low guess.
package tokens

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/fleet"
	"tokenmill/lib/openai"
	"tokenmill/lib/record"
	"tokenmill/lib/tokenizer"
)

const (
	// guessBytesPerToken is the estimate's bytes per token before the
	// counter has measured its own: fewer than any common tokenizer
	// averages on text (English runs about 4, Chinese about 3, code 3 to
	// 4), so the estimate is high.
	guessBytesPerToken = 2.5
	// TemplateGuess is the chat template's tokens per message (and for
	// the answer's turn) until measured: ChatML's are 4 or 5.
	TemplateGuess = 8
	// learnAfter is how many answered prompts the estimate waits for.
	learnAfter  = 20
	ratioWindow = 512
)

// Size is what the estimate reads of a prompt: the bytes of its texts
// (contents, tool calls, tools) and its messages.
type Size struct {
	Bytes, Msgs int
}

// SizeOf is the size of a prompt of msgs and tools.
func SizeOf(msgs []record.Message, tools []byte) Size {
	s := Size{Bytes: len(tools), Msgs: len(msgs)}
	for _, m := range msgs {
		s.Bytes += len(m.Content) + len(m.ToolCalls) + len(m.ReasoningContent)
	}
	return s
}

// Counter counts prompts' tokens; safe for concurrent use.
type Counter struct {
	pool  *fleet.Pool
	model func() string

	mu       sync.Mutex
	ratios   []float64 // bytes per token of answered prompts, the last ratioWindow
	next     int
	learned  int       // prompts learned from, all told
	scratch  []float64 // for the percentile, reused
	bpt      float64   // the estimate's bytes per token now
	template float64   // chat template tokens per message, measured (0: not yet)

	// local is --tokenizer: prompts counted with the model's own
	// template and tokenizer, none estimated.
	local *tokenizer.Tokenizer
}

// UseTokenizer makes the counter count every prompt with tok (nil: none).
func (c *Counter) UseTokenizer(tok *tokenizer.Tokenizer) { c.local = tok }

// countLocal counts a prompt with the local tokenizer, rendered as the
// server renders the chat request (tokenizer.ServerMessages, its tools
// and chat_template_kwargs); false when the template cannot render it
// (the server will say why). A begin-of-text token the vocabulary adds
// and the rendering does not start with is counted too: llama.cpp's chat
// route adds it (vLLM's and SGLang's do not: one token over there).
func (c *Counter) countLocal(p Prompt) (int, bool) {
	wire := make([]record.WireMessage, len(p.Msgs))
	for i, m := range p.Msgs {
		wire[i] = record.WireMessage{Role: m.Role, Content: m.Content, Name: m.Name, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID}
	}
	body, err := tokenizer.ServerMessages(wire)
	if err != nil {
		return 0, false
	}
	text, err := c.local.Render(tokenizer.Request{Messages: body, Tools: p.Tools, Kwargs: p.kwargs(), AddGenerationPrompt: true})
	if err != nil {
		return 0, false
	}
	ids := c.local.Encode(text)
	if bos := c.local.EncodeSpecial(""); len(bos) > 0 && (len(ids) < len(bos) || !slices.Equal(ids[:len(bos)], bos)) {
		return len(bos) + len(ids), true
	}
	return len(ids), true
}

// NewCounter is a counter asking pool's tokenizers, in requests naming
// the model model returns.
func NewCounter(pool *fleet.Pool, model func() string) *Counter {
	return &Counter{pool: pool, model: model, bpt: guessBytesPerToken}
}

// templateTokens is the chat template's share of a prompt of msgs
// messages, as measured so far.
func (c *Counter) templateTokens(msgs int) int {
	c.mu.Lock()
	tpl := c.template
	c.mu.Unlock()
	if tpl == 0 {
		tpl = TemplateGuess
	}
	return int(tpl*float64(msgs+1) + 0.999)
}

// Bound is a prompt's tokens at most, whatever the vocabulary: every
// token of a byte-level BPE, or of a SentencePiece vocabulary with byte
// fallback, holds a byte of the text at least, but for the word marker
// SentencePiece puts before each text (one a message) and the
// begin-of-text token (one); beside them the chat template's tokens, as
// estimated (a template's own long text, a default system prompt, is
// not bounded). A vocabulary of short tokens (1.6 bytes a token, where
// the estimate starts at 2.5) stays under it where the estimate does not.
func (c *Counter) Bound(s Size) int {
	return s.Bytes + s.Msgs + 1 + c.templateTokens(s.Msgs)
}

// Estimate is the conservative guess of a prompt's tokens.
func (c *Counter) Estimate(s Size) int {
	c.mu.Lock()
	bpt := c.bpt
	c.mu.Unlock()
	return int(float64(s.Bytes)/bpt+0.999) + c.templateTokens(s.Msgs)
}

// Learn takes an answered prompt's size and the prompt_tokens the server
// charged for it.
func (c *Counter) Learn(s Size, promptTokens int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tpl := c.template
	if tpl == 0 {
		tpl = TemplateGuess
	}
	text := float64(promptTokens) - tpl*float64(s.Msgs+1)
	if s.Bytes < 64 || text <= 0 {
		return
	}
	r := float64(s.Bytes) / text
	if len(c.ratios) < ratioWindow {
		c.ratios = append(c.ratios, r)
	} else {
		c.ratios[c.next] = r
		c.next = (c.next + 1) % ratioWindow
	}
	// Every 8th prompt moves the percentile: every answer calls Learn,
	// and the window's percentile hardly moves with one prompt.
	c.learned++
	if n := len(c.ratios); n == learnAfter || n >= learnAfter && c.learned%8 == 0 {
		c.scratch = append(c.scratch[:0], c.ratios...)
		c.bpt = min(nth(c.scratch, n/20), 8) // the 5th percentile
	}
}

// nth is the k-th smallest of v (from 0), found by partitioning v in
// place: linear time where sorting the window on every update was most of
// a request's cost.
func nth(v []float64, k int) float64 {
	lo, hi := 0, len(v)-1
	for lo < hi {
		// The median of three as the pivot: the window is often sorted or
		// all one value.
		mid := lo + (hi-lo)/2
		if v[mid] < v[lo] {
			v[mid], v[lo] = v[lo], v[mid]
		}
		if v[hi] < v[lo] {
			v[hi], v[lo] = v[lo], v[hi]
		}
		if v[hi] < v[mid] {
			v[hi], v[mid] = v[mid], v[hi]
		}
		pivot := v[mid]
		i, j := lo, hi
		for i <= j {
			for v[i] < pivot {
				i++
			}
			for pivot < v[j] {
				j--
			}
			if i <= j {
				v[i], v[j] = v[j], v[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return v[k]
		}
	}
	return v[k]
}

// LearnTemplate takes the chat template's share of a prompt of msgs
// messages whose texts the tokenizer counted (textTokens): the most per
// message seen, and never less than TemplateGuess, so the count stays high
// whatever the texts' rounding.
func (c *Counter) LearnTemplate(msgs, textTokens, promptTokens int) {
	per := float64(promptTokens-textTokens) / float64(msgs+1)
	c.mu.Lock()
	if per > max(c.template, TemplateGuess) {
		c.template = per
	}
	c.mu.Unlock()
}

// Count asks a ready endpoint's tokenizer for the prompt's tokens, and
// the texts' alone where only they were counted (0 where the tokenizer
// counted the chat prompt itself); false when no endpoint offers one (or
// they failed).
func (c *Counter) Count(msgs []record.Message, tools []byte) (n int, textTokens int, ok bool) {
	return c.count(Prompt{Msgs: msgs, Tools: tools})
}

func (c *Counter) count(p Prompt) (n int, textTokens int, ok bool) {
	if c.pool == nil {
		return 0, 0, false
	}
	msgs := p.Msgs
	wire := make([]openai.Message, len(msgs))
	for i, m := range msgs {
		wire[i] = openai.Message{Role: m.Role, Content: m.Content, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID}
	}
	body, err := json.Marshal(struct {
		Model    string           `json:"model,omitempty"`
		Messages []openai.Message `json:"messages"`
		Tools    json.RawMessage  `json:"tools,omitempty"`
		Kwargs   json.RawMessage  `json:"chat_template_kwargs,omitempty"`
	}{c.model(), wire, p.Tools, p.kwargs()})
	if err != nil {
		return 0, 0, false
	}
	ctx := context.Background() // each request is bounded by the pool's control timeout
	for _, ep := range c.pool.Endpoints() {
		if !c.pool.Keep(ep) {
			continue
		}
		n, err := c.pool.Tokenize(ctx, ep, body)
		if err == nil {
			return n, 0, true
		}
		if !errors.Is(err, fleet.ErrNoTokenizer) {
			continue
		}
		if text, err := c.pool.TokenizeTexts(ctx, ep, body); err == nil {
			return text + c.templateTokens(len(msgs)), text, true
		}
	}
	return 0, 0, false
}
