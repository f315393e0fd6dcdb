package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"
	"github.com/zeebo/xxh3"
)

// Counting a request's prompt tokens with the server's own tokenizer, for
// fitting prompts to the context before they are sent. The servers that
// offer one, and what they take:
//
//	vLLM       POST /tokenize      {"model", "messages"} (chat template applied) or {"model", "prompt"} → count
//	SGLang     POST /v1/tokenize   {"model", "prompt"} → count; no messages
//	llama.cpp  POST /tokenize      {"content"} → tokens; messages through POST /apply-template first
//	Ollama, gateways: none.
//
// The first request to an endpoint finds which it is, and the answer is
// kept for that endpoint.

// ErrNoTokenizer is Tokenize's error when the server offers no tokenizer
// for the request (none at all, or none that applies a chat template).
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
	formVLLM   // /tokenize with model and prompt or messages
	formSGLang // /v1/tokenize with prompt
	formLlama  // /tokenize with content
)

// tokenizeRequest is the part of a generation request that is counted.
type tokenizeRequest struct {
	Model    string          `json:"model,omitempty"`
	Messages json.RawMessage `json:"messages,omitempty"`
	Prompt   json.RawMessage `json:"prompt,omitempty"`
	Text     json.RawMessage `json:"text,omitempty"` // SGLang's /generate
}

// Tokenize counts the prompt tokens of body, a generation request as it
// would be sent to ep (chat: its "messages"; completions: its "prompt";
// /generate: its "text"), with ep's own tokenizer: the number the server
// charges as prompt_tokens for it. ErrNoTokenizer when the server offers
// none for it; other errors when it could not be asked. With
// Config.TokenCache, a prompt counted once is not asked again.
func (p *Pool) Tokenize(ctx context.Context, ep *Endpoint, body []byte) (int, error) {
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
	var key uint64
	if c := p.cfg.TokenCache; c != nil {
		h := xxh3.New()
		h.WriteString(r.Model)
		h.Write([]byte{0})
		h.Write(r.Messages)
		h.Write([]byte{0})
		h.Write(r.Prompt)
		key = h.Sum64()
		if n, ok := c.Get(key); ok {
			return n, nil
		}
	}
	n, err := p.tokenize(ctx, ep, &r)
	if err == nil && p.cfg.TokenCache != nil {
		p.cfg.TokenCache.Put(key, n)
	}
	return n, err
}

func (p *Pool) tokenize(ctx context.Context, ep *Endpoint, r *tokenizeRequest) (int, error) {
	p.mu.Lock()
	form := ep.tokenizer
	p.mu.Unlock()
	if form == formUnknown {
		var err error
		if form, err = p.findTokenizer(ctx, ep, r); err != nil {
			return 0, err
		}
		p.mu.Lock()
		ep.tokenizer = form
		p.mu.Unlock()
	}
	chat := len(r.Messages) > 0
	switch form {
	case formVLLM:
		return p.countVLLM(ctx, ep, r)
	case formSGLang:
		if chat {
			return 0, ErrNoTokenizer
		}
		return p.countAt(ctx, ep, pathSGLangTokenize, map[string]any{"model": r.Model, "prompt": r.Prompt})
	case formLlama:
		text := r.Prompt
		if chat {
			var err error
			if text, err = p.llamaTemplate(ctx, ep, r.Messages); err != nil {
				return 0, err
			}
		}
		return p.countAt(ctx, ep, pathTokenize, map[string]any{"content": text})
	}
	return 0, ErrNoTokenizer
}

// Paths of the tokenizer routes.
const (
	pathTokenize       = "/tokenize"       // vLLM, llama.cpp
	pathSGLangTokenize = "/v1/tokenize"    // SGLang
	pathApplyTemplate  = "/apply-template" // llama.cpp
)

// findTokenizer learns which tokenizer route ep has: vLLM's /tokenize
// answers a request with a model; llama.cpp's refuses it (400, it wants
// "content") and answers one with content; SGLang's is /v1/tokenize.
func (p *Pool) findTokenizer(ctx context.Context, ep *Endpoint, r *tokenizeRequest) (tokenizeForm, error) {
	probe := map[string]any{"model": r.Model, "prompt": ""}
	status, body, err := p.post(ctx, ep, pathTokenize, probe)
	if err != nil {
		return formUnknown, err
	}
	if status == fasthttp.StatusOK {
		if _, ok := tokenCount(body); ok {
			return formVLLM, nil
		}
	}
	if status != fasthttp.StatusNotFound && status != fasthttp.StatusMethodNotAllowed {
		if status, body, err = p.post(ctx, ep, pathTokenize, map[string]any{"content": ""}); err != nil {
			return formUnknown, err
		}
		if _, ok := tokenCount(body); status == fasthttp.StatusOK && ok {
			return formLlama, nil
		}
	}
	if status, body, err = p.post(ctx, ep, pathSGLangTokenize, probe); err != nil {
		return formUnknown, err
	}
	if _, ok := tokenCount(body); status == fasthttp.StatusOK && ok {
		return formSGLang, nil
	}
	return formNone, nil
}

// countVLLM asks vLLM's /tokenize: the chat template applied to messages,
// with the answer turn (add_generation_prompt), as a chat request is.
func (p *Pool) countVLLM(ctx context.Context, ep *Endpoint, r *tokenizeRequest) (int, error) {
	req := map[string]any{"model": r.Model}
	if len(r.Messages) > 0 {
		req["messages"], req["add_generation_prompt"] = r.Messages, true
	} else {
		req["prompt"] = r.Prompt
	}
	return p.countAt(ctx, ep, pathTokenize, req)
}

// llamaTemplate is llama.cpp's chat template applied to messages (its
// POST /apply-template); ErrNoTokenizer where the server has no such
// route.
func (p *Pool) llamaTemplate(ctx context.Context, ep *Endpoint, messages json.RawMessage) (json.RawMessage, error) {
	status, body, err := p.post(ctx, ep, pathApplyTemplate, map[string]any{"messages": messages})
	if err != nil {
		return nil, err
	}
	if status == fasthttp.StatusNotFound {
		return nil, ErrNoTokenizer
	}
	var out struct {
		Prompt json.RawMessage `json:"prompt"`
	}
	if status != fasthttp.StatusOK || json.Unmarshal(body, &out) != nil || len(out.Prompt) == 0 {
		return nil, fmt.Errorf("tokenize: %s%s: HTTP %d", ep.name, pathApplyTemplate, status)
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
		return 0, fmt.Errorf("tokenize: %s%s: %v", ep.name, path, ClassifyStatus(status, body))
	}
	n, ok := tokenCount(body)
	if !ok {
		return 0, fmt.Errorf("tokenize: %s%s: no count in the answer", ep.name, path)
	}
	return n, nil
}

// tokenCount reads {"count": N} (vLLM, SGLang) or {"tokens": [...]}
// (llama.cpp).
func tokenCount(body []byte) (int, bool) {
	var r struct {
		Count  *int              `json:"count"`
		Tokens []json.RawMessage `json:"tokens"`
	}
	if json.Unmarshal(body, &r) != nil {
		return 0, false
	}
	switch {
	case r.Count != nil && *r.Count >= 0:
		return *r.Count, true
	case r.Tokens != nil:
		return len(r.Tokens), true
	}
	return 0, false
}

// post sends a JSON control request, bounded by ctx's deadline as well as
// the control timeout.
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
		status, body, err := p.control(ep, fasthttp.MethodPost, path, b)
		done <- answer{status, body, err}
	}()
	select {
	case a := <-done:
		return a.status, a.body, a.err
	case <-ctx.Done():
		return 0, nil, context.Cause(ctx)
	}
}
