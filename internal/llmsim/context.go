package llmsim

import (
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"
	"github.com/zeebo/xxh3"
)

// fitContext checks a flight's prompt against the context the way its
// flavour does, and returns the most tokens the answer may have. It may
// shorten the prompt (Ollama truncates instead of refusing).
func (e *Endpoint) fitContext(f *flight, j *job) (int, error) {
	return e.d.fitContext(f, j, e.f.cfg.ContextLength)
}

// contextRule is a flavour's check of a flight's prompt (f.prompt tokens)
// and the answer's max_tokens (j.maxTokens, < 0 when the request set
// none) against a context of ctxLen tokens: the most tokens the answer
// may have, or the flavour's refusal.
type contextRule func(f *flight, j *job, ctxLen int) (int, error)

func tooLong(format string, args ...any) *apiError {
	return &apiError{kind: errContext, status: fasthttp.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// roomLeft is what a prompt of p tokens leaves an answer of a context of
// ctxLen, one token at least, where the flavour checks no more (SGLang,
// llama.cpp).
func roomLeft(p, ctxLen int) int { return max(ctxLen-p-1, 1) }

// sglangContext: managers/tokenizer_manager.py _validate_one_request: refused,
// not truncated, unless --allow-auto-truncate (off by default).
func sglangContext(f *flight, j *job, ctxLen int) (int, error) {
	p, m := f.prompt, j.maxTokens
	if p >= ctxLen {
		return 0, tooLong("The input (%d tokens) is longer than the model's context length (%d tokens).", p, ctxLen)
	}
	if j.explicit && m < 0 {
		return 0, newAPIError(errInvalid, fasthttp.StatusBadRequest, "max_new_tokens must be at least 0, got %d.", m)
	}
	if j.explicit && p+m >= ctxLen {
		return 0, tooLong("Requested token count exceeds the model's maximum context length of %d tokens. "+
			"You requested a total of %d tokens: %d tokens from the input messages and %d tokens for the completion. "+
			"Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
			ctxLen, p+m, p, m)
	}
	return roomLeft(p, ctxLen), nil
}

// vllmContext: vllm/renderers/params.py: the prompt is tokenized to at
// most max_input_tokens+1 = max_model_len - max_tokens + 1 tokens, so the
// count it reports is a lower bound.
func vllmContext(f *flight, j *job, ctxLen int) (int, error) {
	p, out := f.prompt, max(j.maxTokens, 0)
	if out > ctxLen { // TokenizeParams.__post_init__, its wording as it is
		err := tooLong("max_tokens=%dcannot be greater than max_model_len=max_total_tokens=%d. Please request fewer output tokens.", out, ctxLen)
		err.param = "max_tokens"
		return 0, err
	}
	if maxIn := ctxLen - out; p > maxIn || out == 0 && p >= ctxLen {
		n := maxIn + 1
		err := tooLong("This model's maximum context length is %d tokens. However, you requested %d output tokens and your prompt contains at least %d input tokens, "+
			"for a total of at least %d tokens. Please reduce the length of the input prompt or the number of requested output tokens. (parameter=input_tokens, value=%d)",
			ctxLen, out, n, n+out, n)
		err.param = "input_tokens"
		return 0, err
	}
	return ctxLen - p, nil
}

// vllm0100Context: vllm/entrypoints/openai/serving_engine.py
// _validate_input (<= 0.10.0).
func vllm0100Context(f *flight, j *job, ctxLen int) (int, error) {
	p, m := f.prompt, j.maxTokens
	if m < 0 && p >= ctxLen {
		return 0, tooLong("This model's maximum context length is %d tokens. However, you requested %d tokens in the messages, Please reduce the length of the messages.", ctxLen, p)
	}
	if m >= 0 && p+m > ctxLen {
		return 0, tooLong("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). "+
			"Please reduce the length of the messages or completion.", ctxLen, p+m, p, m)
	}
	return ctxLen - p, nil
}

// llamacppContext: server-context.cpp: a prompt that fills the slot is
// refused; an answer stops (finish "length") when the slot's context is
// full.
func llamacppContext(f *flight, _ *job, ctxLen int) (int, error) {
	p := f.prompt
	if p >= ctxLen {
		err := tooLong("request (%d tokens) exceeds the available context size (%d tokens), try increasing it", p, ctxLen)
		err.promptTokens, err.contextTokens = p, ctxLen
		return 0, err
	}
	return roomLeft(p, ctxLen), nil
}

// ollamaContext: server/prompt.go chatPrompt drops the oldest messages
// that do not fit num_ctx (keeping system messages and the last one); the
// runner cuts what is still too long, and shifts the context while
// generating, so the answer is not cut by the context.
func ollamaContext(f *flight, j *job, ctxLen int) (int, error) {
	f.prompt = f.e.tok().ollamaTruncate(&j.prompt, f.prompt, ctxLen)
	return math.MaxInt32, nil
}

// openaiContext: the API reference's context_length_exceeded, on the
// messages.
func openaiContext(f *flight, j *job, ctxLen int) (int, error) {
	p, m := f.prompt, j.maxTokens
	if m >= 0 && p+m > ctxLen {
		err := tooLong("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). "+
			"Please reduce the length of the messages or completion.", ctxLen, p+m, p, m)
		err.param, err.code = "messages", "context_length_exceeded"
		return 0, err
	}
	if m < 0 && p > ctxLen {
		err := tooLong("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", ctxLen, p)
		err.param, err.code = "messages", "context_length_exceeded"
		return 0, err
	}
	return max(ctxLen-p, 1), nil
}

// ollamaTruncate is the prompt tokens Ollama keeps of p (n tokens) within
// num_ctx; tokensFrom counts the prompt kept when the messages before from
// (but the system ones) are dropped.
func ollamaTruncate(p *Prompt, n, numCtx int, tokensFrom func(from int) int) int {
	if n <= numCtx || len(p.Messages) < 2 {
		return min(n, numCtx)
	}
	last := len(p.Messages) - 1
	kept := last
	for i := last - 1; i >= 0; i-- {
		if tokensFrom(i) > numCtx {
			break
		}
		kept = i
	}
	return min(tokensFrom(kept), numCtx)
}

// chatTokens counts the system messages before from and every message from
// it on, with the answer turn, as PromptTokens does.
func chatTokens(msgs []Message, from int) int {
	n := chatTokensForGenerate
	for i, m := range msgs {
		if i >= from || m.Role == "system" {
			n += chatTokensPerMessage + TextTokens(m.Content)
		}
	}
	return n
}

// Tokenizing. llmsim's tokens are the bytesPerToken-byte pieces of the
// text that TextTokens counts, so a tokenize route counts exactly what a
// generation request is charged.

func textTokenIDs(s string) []int {
	ids := make([]int, 0, TextTokens(s))
	for i := 0; i < len(s); i += bytesPerToken {
		ids = append(ids, pieceID(s[i:min(i+bytesPerToken, len(s))]))
	}
	return ids
}

func pieceID(piece string) int { return 1000 + int(xxh3.HashString(piece)%150000) }

func appendIDs(dst []byte, ids []int) []byte {
	dst = append(dst, '[')
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendInt(dst, id)
	}
	return append(dst, ']')
}

// chatTokenIDs are the ids of a chat prompt: the template's markers
// (<|im_start|>, role, newline, <|im_end|>) around each message's pieces,
// then the answer turn, as PromptTokens counts them.
func chatTokenIDs(msgs []Message, generation bool) []int {
	var ids []int
	for _, m := range msgs {
		ids = append(ids, 151644, pieceID(m.Role), 198)
		ids = append(ids, textTokenIDs(m.Content)...)
		ids = append(ids, eosChat)
	}
	if generation {
		ids = append(ids, 151644, pieceID("assistant"), 198)
	}
	return ids
}

// tokenizeRequest is the body of vLLM's and SGLang's tokenize routes.
type tokenizeRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []wireMessage   `json:"messages"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	// AddSpecialTokens (default true for a prompt) puts the special tokens
	// a model's configuration asks for before it; Tools and
	// ChatTemplateKwargs reach a model's template.
	AddSpecialTokens   *bool           `json:"add_special_tokens"`
	Tools              json.RawMessage `json:"tools"`
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
}

func orTrue(b *bool) bool { return b == nil || *b }

// serveVLLMTokenize: POST /tokenize (vllm/entrypoints/openai/serving_tokenization.py,
// TokenizeCompletionRequest / TokenizeChatRequest): {count, max_model_len,
// tokens, token_strs}.
func serveVLLMTokenize(e *Endpoint, ctx *fasthttp.RequestCtx) {
	var r tokenizeRequest
	if err := decodeBody(ctx.PostBody(), &r); err != nil {
		e.fail(ctx, apiChat, &apiError{kind: errValidation, status: fasthttp.StatusBadRequest, msg: err.Error()})
		return
	}
	if r.Model != "" && !e.modelMatches(r.Model) {
		e.fail(ctx, apiChat, e.d.modelNotFound(r.Model))
		return
	}
	var ids []int
	if r.Messages != nil {
		p, err := conversationPrompt(r.Messages, r.Tools, r.ChatTemplateKwargs)
		if err != nil {
			e.fail(ctx, apiChat, &apiError{kind: errValidation, status: fasthttp.StatusBadRequest, msg: err.Error()})
			return
		}
		if ids, err = e.tok().chatIDs(&p, orTrue(r.AddGenerationPrompt)); err != nil {
			e.fail(ctx, apiChat, asAPIError(err))
			return
		}
	} else {
		var text string
		if err := json.Unmarshal(r.Prompt, &text); err != nil {
			e.fail(ctx, apiChat, &apiError{kind: errValidation, status: fasthttp.StatusBadRequest, msg: "prompt: Input should be a valid string"})
			return
		}
		ids = e.tok().encode(text, orTrue(r.AddSpecialTokens))
	}
	b := []byte(`{"count":`)
	b = appendInt(b, len(ids))
	b = append(b, `,"max_model_len":`...)
	b = appendInt(b, e.f.cfg.ContextLength)
	b = append(b, `,"tokens":`...)
	b = appendIDs(b, ids)
	answerJSON(ctx, ctJSON, append(b, `,"token_strs":null}`...))
}

// serveSGLangTokenize: POST /v1/tokenize (entrypoints/openai/serving_tokenize.py):
// {tokens, count, max_model_len}, a string prompt or a list of them;
// max_model_len is the tokenizer's model_max_length.
func serveSGLangTokenize(e *Endpoint, ctx *fasthttp.RequestCtx) {
	var r tokenizeRequest
	if err := decodeBody(ctx.PostBody(), &r); err != nil {
		e.fail(ctx, apiChat, &apiError{kind: errValidation, status: fasthttp.StatusBadRequest, msg: err.Error()})
		return
	}
	special := orTrue(r.AddSpecialTokens)
	b := []byte(`{"tokens":`)
	var one string
	var many []string
	switch {
	case json.Unmarshal(r.Prompt, &one) == nil:
		ids := e.tok().encode(one, special)
		b = appendIDs(b, ids)
		b = append(b, `,"count":`...)
		b = appendInt(b, len(ids))
	case json.Unmarshal(r.Prompt, &many) == nil:
		b = append(b, '[')
		counts := []byte{'['}
		for i, s := range many {
			if i > 0 {
				b, counts = append(b, ','), append(counts, ',')
			}
			ids := e.tok().encode(s, special)
			b = appendIDs(b, ids)
			counts = appendInt(counts, len(ids))
		}
		b = append(append(append(b, `],"count":`...), counts...), ']')
	default:
		e.fail(ctx, apiChat, newAPIError(errInvalid, fasthttp.StatusBadRequest, "Invalid prompt type: %s. Expected str or List[str].", "<class 'NoneType'>"))
		return
	}
	b = append(b, `,"max_model_len":`...)
	b = appendInt(b, e.trainedContext())
	answerJSON(ctx, ctJSON, append(b, '}'))
}

// serveLlamaTokenize: POST /tokenize (tools/server/README.md):
// {"tokens": [ids]}, or with with_pieces [{id, piece}] where a piece that
// is not valid UTF-8 is its list of bytes. add_special (default false)
// adds the begin-of-text token, parse_special (default true) reads the
// special tokens spelt out in the text.
func serveLlamaTokenize(e *Endpoint, ctx *fasthttp.RequestCtx) {
	var r struct {
		Content      *string `json:"content"`
		WithPieces   bool    `json:"with_pieces"`
		AddSpecial   bool    `json:"add_special"`
		ParseSpecial *bool   `json:"parse_special"`
	}
	if err := json.Unmarshal(ctx.PostBody(), &r); err != nil || r.Content == nil {
		e.fail(ctx, apiChat, newAPIError(errInvalid, fasthttp.StatusBadRequest, "\"content\" must be provided"))
		return
	}
	s, parse := *r.Content, orTrue(r.ParseSpecial)
	b := []byte(`{"tokens":`)
	if !r.WithPieces {
		ids, err := e.tok().llamaTokens(s, r.AddSpecial, parse)
		if err != nil {
			e.fail(ctx, apiChat, asAPIError(err))
			return
		}
		answerJSON(ctx, ctJSONUTF8, append(appendIDs(b, ids), '}'))
		return
	}
	ids, pieces, err := e.tok().llamaPieces(s, r.AddSpecial, parse)
	if err != nil {
		e.fail(ctx, apiChat, asAPIError(err))
		return
	}
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = appendInt(b, id)
		b = append(b, `,"piece":`...)
		b = appendPiece(b, pieces[i])
		b = append(b, '}')
	}
	answerJSON(ctx, ctJSONUTF8, append(b, "]}"...))
}

// appendPiece writes a token's text, or its list of bytes where they are
// not valid UTF-8 (a piece of a character).
func appendPiece(b, piece []byte) []byte {
	if utf8.Valid(piece) {
		return appendString(b, string(piece))
	}
	b = append(b, '[')
	for k, c := range piece {
		if k > 0 {
			b = append(b, ',')
		}
		b = appendInt(b, int(c))
	}
	return append(b, ']')
}

// detokenize reads the ids of a /detokenize body and decodes them, or
// answers why not: without a model's tokenizer the route is not there.
func detokenize(e *Endpoint, ctx *fasthttp.RequestCtx) (string, bool) {
	t := e.tok()
	if t.model == nil {
		e.d.notFound(ctx)
		return "", false
	}
	var r struct {
		Tokens []int `json:"tokens"`
	}
	if err := decodeBody(ctx.PostBody(), &r); err != nil {
		e.fail(ctx, apiChat, &apiError{kind: errValidation, status: fasthttp.StatusBadRequest, msg: err.Error()})
		return "", false
	}
	text, err := t.decode(r.Tokens)
	if err != nil {
		e.fail(ctx, apiChat, newAPIError(errInvalid, fasthttp.StatusBadRequest, "%s", err.Error()))
		return "", false
	}
	return text, true
}

// serveVLLMDetokenize: POST /detokenize (serving_tokenization.py,
// DetokenizeRequest): {"tokens": [ids]} → {"prompt": text}.
func serveVLLMDetokenize(e *Endpoint, ctx *fasthttp.RequestCtx) {
	if text, ok := detokenize(e, ctx); ok {
		answerJSON(ctx, ctJSON, append(appendString([]byte(`{"prompt":`), text), '}'))
	}
}

// serveLlamaDetokenize: POST /detokenize (tools/server/README.md):
// {"tokens": [ids]} → {"content": text}.
func serveLlamaDetokenize(e *Endpoint, ctx *fasthttp.RequestCtx) {
	if text, ok := detokenize(e, ctx); ok {
		answerJSON(ctx, ctJSONUTF8, append(appendString([]byte(`{"content":`), text), '}'))
	}
}
