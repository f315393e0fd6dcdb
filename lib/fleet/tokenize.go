package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"
	"github.com/zeebo/xxh3"
)

// Counting a request's prompt tokens with the server's own tokenizer, for
// fitting prompts to the context before they are sent. The servers that
// offer one, and what they take:
//
//	vLLM       POST /tokenize      {"model", "messages", "tools"} (chat template applied) or {"model", "prompt"} → count
//	SGLang     POST /v1/tokenize   {"model", "prompt"}, a text or a list of them → count (a list: one a text); no messages
//	llama.cpp  POST /tokenize      {"content", "add_special": true} → tokens, the begin-of-text token its
//	           vocabulary adds among them (its chat and completion routes add it); messages through
//	           POST /apply-template first, which takes the chat request's own body (tools and
//	           chat_template_kwargs too) and leaves that token out of its text
//	Ollama, gateways: none.
//
// The first request to an endpoint finds which it is, and the answer is
// kept for that endpoint. Where a server counts texts but applies no chat
// template (SGLang; llama.cpp without /apply-template), TokenizeTexts
// counts a chat prompt's texts, to which the caller adds the template's
// tokens.

// ErrNoTokenizer is Tokenize's error when the server offers no tokenizer
// for the request (none at all, or none that applies a chat template),
// and TokenizeTexts's when it offers none at all.
var ErrNoTokenizer = errors.New("the server offers no tokenizer for this request")

// TokenCache is where Tokenize keeps counts, so that a prompt is counted
// once: keyed by the model and the prompt (its messages or text), not the
// endpoint, since the endpoints of one model share its tokenizer. Get and
// Put are called from any goroutine. A map behind a mutex will do, or an
// LRU to bound its memory.
type TokenCache interface {
	Get(key uint64) (int, bool)
	Put(key uint64, tokens int)
}

// tokenizeForm is which tokenizer route an endpoint has.
type tokenizeForm int

const (
	formUnknown tokenizeForm = iota
	formNone
	formVLLM      // /tokenize with model and prompt or messages
	formSGLang    // /v1/tokenize with prompt
	formLlama     // /tokenize with content, messages through /apply-template
	formLlamaText // /tokenize with content; no /apply-template
)

// tokenizeRequest is the part of a generation request that is counted.
type tokenizeRequest struct {
	Model    string          `json:"model,omitempty"`
	Messages json.RawMessage `json:"messages,omitempty"`
	Tools    json.RawMessage `json:"tools,omitempty"`
	Kwargs   json.RawMessage `json:"chat_template_kwargs,omitempty"`
	Prompt   json.RawMessage `json:"prompt,omitempty"`
	Text     json.RawMessage `json:"text,omitempty"` // SGLang's /generate
}

// Tokenize counts the prompt tokens of body, a generation request as it
// would be sent to ep (chat: its "messages", "tools" and
// "chat_template_kwargs"; completions: its
// "prompt"; /generate: its "text"), with ep's own tokenizer: the number
// the server charges as prompt_tokens for it. ErrNoTokenizer when the
// server offers none for it; other errors when it could not be asked.
// With Config.TokenCache, a prompt counted once is not asked again.
func (p *Pool) Tokenize(ctx context.Context, ep *Endpoint, body []byte) (int, error) {
	return p.count(ctx, ep, body, false)
}

// TokenizeTexts counts the texts of body's prompt alone, with no chat
// template: each message's content and tool calls, and the tools (a
// completion's prompt is its one text). It serves the servers whose
// tokenizer applies no template, where Tokenize finds none for a chat
// request; the caller adds the template's tokens. ErrNoTokenizer when the
// server offers no tokenizer at all.
func (p *Pool) TokenizeTexts(ctx context.Context, ep *Endpoint, body []byte) (int, error) {
	return p.count(ctx, ep, body, true)
}

func (p *Pool) count(ctx context.Context, ep *Endpoint, body []byte, texts bool) (int, error) {
	var r tokenizeRequest
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, fmt.Errorf("tokenize: the request body: %w", err)
	}
	if len(r.Prompt) == 0 {
		r.Prompt = r.Text
	}
	if len(r.Messages) == 0 && len(r.Prompt) == 0 {
		return 0, errors.New("tokenize: the request has neither messages nor a prompt")
	}
	if own := p.ModelOf(ep); own != "" && r.Model != own && p.servesAnother(r.Model) {
		r.Model = own // the endpoint's own name for the run's model
	}
	var key uint64
	if c := p.cfg.TokenCache; c != nil {
		h := xxh3.New()
		if texts {
			h.Write([]byte{1})
		}
		h.WriteString(r.Model)
		for _, part := range [][]byte{r.Messages, r.Tools, r.Kwargs, r.Prompt} {
			h.Write([]byte{0})
			h.Write(part)
		}
		key = h.Sum64()
		if n, ok := c.Get(key); ok {
			return n, nil
		}
	}
	form, err := p.tokenizerOf(ctx, ep, &r)
	var n int
	switch {
	case err != nil:
	case texts:
		n, err = p.countTexts(ctx, ep, form, &r)
	default:
		n, err = p.tokenize(ctx, ep, form, &r)
	}
	if err == nil && p.cfg.TokenCache != nil {
		p.cfg.TokenCache.Put(key, n)
	}
	return n, err
}

// tokenizerOf is ep's tokenizer route, found by the first request.
func (p *Pool) tokenizerOf(ctx context.Context, ep *Endpoint, r *tokenizeRequest) (tokenizeForm, error) {
	p.mu.Lock()
	form := ep.tokenizer
	p.mu.Unlock()
	if form != formUnknown {
		return form, nil
	}
	form, err := p.findTokenizer(ctx, ep, r)
	if err != nil {
		return form, err
	}
	p.setTokenizer(ep, form)
	return form, nil
}

func (p *Pool) setTokenizer(ep *Endpoint, form tokenizeForm) {
	p.mu.Lock()
	ep.tokenizer = form
	p.mu.Unlock()
}

// tokenize counts r's prompt as the server charges it.
func (p *Pool) tokenize(ctx context.Context, ep *Endpoint, form tokenizeForm, r *tokenizeRequest) (int, error) {
	chat := len(r.Messages) > 0
	switch form {
	case formVLLM:
		return p.countVLLM(ctx, ep, r)
	case formSGLang:
		if chat {
			return 0, ErrNoTokenizer
		}
		return p.countAt(ctx, ep, pathSGLangTokenize, map[string]any{"model": r.Model, "prompt": r.Prompt})
	case formLlama, formLlamaText:
		text := r.Prompt
		if chat {
			if form == formLlamaText {
				return 0, ErrNoTokenizer
			}
			var err error
			if text, err = p.llamaTemplate(ctx, ep, r.renderBody()); err != nil {
				return 0, err
			}
		}
		return p.countAt(ctx, ep, pathTokenize, llamaTokenize(text))
	}
	return 0, ErrNoTokenizer
}

// countTexts counts r's texts, each alone where the server takes a list
// of them (SGLang), else joined by newlines.
func (p *Pool) countTexts(ctx context.Context, ep *Endpoint, form tokenizeForm, r *tokenizeRequest) (int, error) {
	if form == formNone {
		return 0, ErrNoTokenizer
	}
	texts, err := promptTexts(r)
	if err != nil {
		return 0, err
	}
	switch form {
	case formSGLang:
		return p.countAt(ctx, ep, pathSGLangTokenize, map[string]any{"model": r.Model, "prompt": texts})
	case formVLLM:
		return p.countAt(ctx, ep, pathTokenize, map[string]any{"model": r.Model, "prompt": strings.Join(texts, "\n")})
	}
	return p.countAt(ctx, ep, pathTokenize, llamaTokenize(strings.Join(texts, "\n")))
}

// llamaTokenize is llama.cpp's /tokenize request for a prompt's text
// (rendered, or a completion's) tokenized as its generation routes do:
// with the special tokens its vocabulary adds (add_special, off by
// default: a begin-of-text token missed is a count one short) and those
// the text spells read as such (parse_special).
func llamaTokenize(text any) map[string]any {
	return map[string]any{"content": text, "add_special": true, "parse_special": true}
}

// renderBody is what llama.cpp's /apply-template is sent to render r's
// chat prompt as a chat request would be: the messages, tools and
// chat_template_kwargs, with the answer's turn.
func (r *tokenizeRequest) renderBody() map[string]any {
	body := map[string]any{"messages": r.Messages, "add_generation_prompt": true}
	if len(r.Tools) > 0 {
		body["tools"] = r.Tools
	}
	if len(r.Kwargs) > 0 {
		body["chat_template_kwargs"] = r.Kwargs
	}
	return body
}

// promptTexts are the texts of r's prompt: each message's content (a
// string, or the text of its parts) and tool calls, and the tools; or
// the prompt.
func promptTexts(r *tokenizeRequest) ([]string, error) {
	if len(r.Messages) == 0 {
		var text string
		if err := json.Unmarshal(r.Prompt, &text); err != nil {
			return nil, fmt.Errorf("tokenize: the prompt is not a text: %w", err)
		}
		return []string{text}, nil
	}
	var msgs []struct {
		Content   json.RawMessage `json:"content"`
		ToolCalls json.RawMessage `json:"tool_calls"`
	}
	if err := json.Unmarshal(r.Messages, &msgs); err != nil {
		return nil, fmt.Errorf("tokenize: the messages: %w", err)
	}
	texts := make([]string, 0, len(msgs)+1)
	for _, m := range msgs {
		texts = append(texts, contentText(m.Content)+string(m.ToolCalls))
	}
	if len(r.Tools) > 0 {
		texts = append(texts, string(r.Tools))
	}
	return texts, nil
}

// contentText is a message's content as text: a string, or the texts of
// its parts.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, part := range parts {
		b.WriteString(part.Text)
	}
	return b.String()
}

// Paths of the tokenizer routes.
const (
	pathTokenize       = "/tokenize"       // vLLM, llama.cpp
	pathSGLangTokenize = "/v1/tokenize"    // SGLang
	pathApplyTemplate  = "/apply-template" // llama.cpp
)

// findTokenizer learns which tokenizer route ep has: vLLM's /tokenize
// answers a request with a model with a count of its own; llama.cpp's
// refuses it (400, it wants "content"), or answers only tokens, and
// answers one with content; SGLang's is /v1/tokenize.
func (p *Pool) findTokenizer(ctx context.Context, ep *Endpoint, r *tokenizeRequest) (tokenizeForm, error) {
	probe := map[string]any{"model": r.Model, "prompt": ""}
	status, body, err := p.post(ctx, ep, pathTokenize, probe)
	if err != nil {
		return formUnknown, err
	}
	if status == fasthttp.StatusOK {
		if _, counted, err := parseTokenize(body); err == nil && counted {
			return formVLLM, nil
		}
	}
	if status != fasthttp.StatusNotFound && status != fasthttp.StatusMethodNotAllowed {
		if status, body, err = p.post(ctx, ep, pathTokenize, map[string]any{"content": ""}); err != nil {
			return formUnknown, err
		}
		if _, _, err := parseTokenize(body); status == fasthttp.StatusOK && err == nil {
			return formLlama, nil
		}
	}
	if status, body, err = p.post(ctx, ep, pathSGLangTokenize, probe); err != nil {
		return formUnknown, err
	}
	if _, counted, err := parseTokenize(body); status == fasthttp.StatusOK && err == nil && counted {
		return formSGLang, nil
	}
	return formNone, nil
}

// countVLLM asks vLLM's /tokenize: the chat template applied to messages,
// tools and chat_template_kwargs, with the answer turn
// (add_generation_prompt), as a chat request is.
func (p *Pool) countVLLM(ctx context.Context, ep *Endpoint, r *tokenizeRequest) (int, error) {
	req := map[string]any{"model": r.Model}
	if len(r.Messages) > 0 {
		req = r.renderBody()
		req["model"] = r.Model
	} else {
		req["prompt"] = r.Prompt
	}
	return p.countAt(ctx, ep, pathTokenize, req)
}

// llamaTemplate is llama.cpp's chat template applied to a chat request
// (its POST /apply-template, which reads the body as its chat route
// does: req is that body, or what of it renders); ErrNoTokenizer where
// the server has no such route, which is then not asked again. A refusal
// is a *Failure, as the chat route would have refused the request.
func (p *Pool) llamaTemplate(ctx context.Context, ep *Endpoint, req any) (json.RawMessage, error) {
	status, body, err := p.post(ctx, ep, pathApplyTemplate, req)
	if err != nil {
		return nil, err
	}
	if status == fasthttp.StatusNotFound {
		p.setTokenizer(ep, formLlamaText)
		return nil, ErrNoTokenizer
	}
	if status != fasthttp.StatusOK {
		return nil, fmt.Errorf("tokenize: %s%s: %w", ep.name, pathApplyTemplate, ClassifyStatus(status, body))
	}
	var out struct {
		Prompt json.RawMessage `json:"prompt"`
	}
	if json.Unmarshal(body, &out) != nil || len(out.Prompt) == 0 || out.Prompt[0] != '"' {
		return nil, fmt.Errorf("tokenize: %s%s: malformed answer: no prompt text", ep.name, pathApplyTemplate)
	}
	return out.Prompt, nil
}

// countAt posts req to path on ep and reads the count.
func (p *Pool) countAt(ctx context.Context, ep *Endpoint, path string, req map[string]any) (int, error) {
	status, body, err := p.post(ctx, ep, path, req)
	if err != nil {
		return 0, err
	}
	if status != fasthttp.StatusOK {
		return 0, fmt.Errorf("tokenize: %s%s: %w", ep.name, path, ClassifyStatus(status, body))
	}
	n, _, err := parseTokenize(body)
	if err != nil {
		return 0, fmt.Errorf("tokenize: %s%s: %w", ep.name, path, err)
	}
	return n, nil
}

// parseTokenize reads a tokenize answer: the tokens counted (summed over
// texts when several were sent), and whether the server gave a count of
// its own ("count": vLLM and SGLang, a list of them for a list of texts)
// or only the tokens (llama.cpp).
func parseTokenize(body []byte) (n int, counted bool, err error) {
	var r struct {
		Count  json.RawMessage   `json:"count"`
		Tokens []json.RawMessage `json:"tokens"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, false, fmt.Errorf("malformed answer: %w", err)
	}
	var one int
	var many []int
	switch {
	case len(r.Count) > 0 && string(r.Count) != "null" && json.Unmarshal(r.Count, &one) == nil && one >= 0:
		return one, true, nil
	case json.Unmarshal(r.Count, &many) == nil && len(many) > 0:
		for _, k := range many {
			if k < 0 {
				return 0, false, errors.New("a negative count in the answer")
			}
			n += k
		}
		return n, true, nil
	case r.Tokens == nil:
		return 0, false, errors.New("no count in the answer")
	}
	return len(r.Tokens), false, nil
}

// post sends a JSON tokenize request, bounded by ctx's deadline as well
// as the control timeout.
func (p *Pool) post(ctx context.Context, ep *Endpoint, path string, v any) (int, []byte, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return 0, nil, err
	}
	type answer struct {
		status int
		body   []byte
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		status, body, err := p.controlOn(ep.tok, ep, fasthttp.MethodPost, path, b)
		done <- answer{status, body, err}
	}()
	select {
	case a := <-done:
		return a.status, a.body, a.err
	case <-ctx.Done():
		return 0, nil, context.Cause(ctx)
	}
}
