package fleet

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"
	"github.com/zeebo/xxh3"

	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// What produced an answer, and the ids it used (infer --token-ids).
//
// Each kind of server says what it is on a route of its own, asked in
// this order:
//
//	SGLang     GET /get_server_info (/server_info): "version", and the
//	           --chat-template argument under "chat_template" when given
//	llama.cpp  GET /props: "build_info", and the template's text under "chat_template"
//	vLLM       GET /version: "version" (the template is not exposed)
//	Ollama     GET /api/version: "version"
//	anything else is a gateway, which says nothing of itself.

// Server kinds.
const (
	KindSGLang   = "sglang"
	KindVLLM     = "vllm"
	KindLlamaCpp = "llamacpp"
	KindOllama   = "ollama"
	KindGateway  = "openai-compatible"
)

// Provenance asks ep what it is: the kind of server, its version and a
// hash of its chat template where it exposes one; model is the model the
// run's requests name. A server that answers none of the routes that name
// a kind is a gateway; one that could not be asked (no answer to a route:
// busy connections, a timeout) is not known, and the error says so, so
// that a moment's trouble is never taken for what the server is.
func (p *Pool) Provenance(ep *Endpoint, model string) (record.ServedBy, error) {
	sb := record.ServedBy{Model: model, Server: KindGateway}
	var unasked error
	get200 := func(ep *Endpoint, path string) ([]byte, bool) {
		status, body, err := p.get(ep, path)
		if err != nil && unasked == nil {
			unasked = fmt.Errorf("%s could not be asked what it is (%s: %v)", ep.Name(), path, err)
		}
		return body, err == nil && status == fasthttp.StatusOK
	}
	for _, path := range []string{openai.PathServerInfo, openai.PathServerInfoNew} {
		if body, ok := get200(ep, path); ok {
			var si struct {
				Version      *string `json:"version"`
				ChatTemplate *string `json:"chat_template"`
			}
			if json.Unmarshal(body, &si) == nil && si.Version != nil {
				sb.Server, sb.Version = KindSGLang, *si.Version
				if si.ChatTemplate != nil && *si.ChatTemplate != "" {
					sb.ChatTemplateHash, sb.ChatTemplateFrom = templateHash(*si.ChatTemplate), "chat_template, "+path
				}
				return sb, nil
			}
		}
	}
	if body, ok := get200(ep, pathProps); ok {
		var pr struct {
			BuildInfo    *string `json:"build_info"`
			ChatTemplate string  `json:"chat_template"`
			TotalSlots   *int    `json:"total_slots"`
		}
		if json.Unmarshal(body, &pr) == nil && (pr.BuildInfo != nil || pr.TotalSlots != nil) {
			sb.Server = KindLlamaCpp
			if pr.BuildInfo != nil {
				sb.Version = *pr.BuildInfo
			}
			if pr.ChatTemplate != "" {
				sb.ChatTemplateHash, sb.ChatTemplateFrom = templateHash(pr.ChatTemplate), "chat_template, "+pathProps
			}
			return sb, nil
		}
	}
	for _, route := range []struct{ path, kind string }{{pathVLLMVersion, KindVLLM}, {pathOllamaVersion, KindOllama}} {
		if body, ok := get200(ep, route.path); ok {
			var v struct {
				Version *string `json:"version"`
			}
			if json.Unmarshal(body, &v) == nil && v.Version != nil {
				sb.Server, sb.Version = route.kind, *v.Version
				return sb, nil
			}
		}
	}
	return sb, unasked
}

const pathOllamaVersion = "/api/version"

func templateHash(t string) string { return strconv.FormatUint(xxh3.HashString(t), 16) }

// TokenShape is where a server of provenance sb returns the ids of an
// answer of api a, or why it cannot.
func TokenShape(sb record.ServedBy, a openai.API) (openai.TokenShape, error) {
	switch sb.Server {
	case KindSGLang:
		return openai.ShapeSGLang, nil
	case KindVLLM:
		if a == openai.APIGenerate {
			break
		}
		if versionAtLeast(sb.Version, 0, 10, 2) {
			return openai.ShapeVLLM, nil
		}
		if a == openai.APIChat {
			return openai.ShapeVLLMLogprobs, nil
		}
		return openai.ShapeNone, fmt.Errorf("vLLM %s returns no token ids for --api %s (return_token_ids came with 0.10.2; --api chat reads them from its logprobs)", sb.Version, a)
	case KindLlamaCpp:
		if a != openai.APIGenerate {
			return openai.ShapeLlama, nil
		}
	case KindOllama:
		//lint:ignore ST1005 Ollama is the server's name
		return openai.ShapeNone, fmt.Errorf("Ollama %s returns no token ids: no route of its API answers the ids it generated", sb.Version)
	default:
		return openai.ShapeNone, errors.New("an OpenAI-compatible gateway returns no token ids (no prompt_token_ids, token_ids or logprobs token ids; a server that does says what it is on /get_server_info, /props or /version)")
	}
	return openai.ShapeNone, fmt.Errorf("%s has no --api %s", sb.Server, a)
}

// versionAtLeast compares a dotted release ("0.11.0", "0.10.2rc1") with
// major.minor.patch; an unreadable one is taken as current.
func versionAtLeast(v string, major, minor, patch int) bool {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	want := []int{major, minor, patch}
	for i := range want {
		if i >= len(parts) {
			return true
		}
		digits := parts[i]
		if k := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); k >= 0 {
			digits = digits[:k]
		}
		n, err := strconv.Atoi(digits)
		if err != nil {
			return true
		}
		if n != want[i] {
			return n > want[i]
		}
	}
	return true
}

// PromptIDs tokenizes the prompt of body, a generation request as it
// would be sent to ep, with ep's own tokenizer, for the servers whose
// answer does not carry the prompt's ids: vLLM before 0.10.2 (POST
// /tokenize with the messages, tools and chat_template_kwargs, the chat
// template applied as a chat request applies it), llama.cpp (POST
// /apply-template of the chat request's body itself, which its oaicompat
// parser reads as the chat route reads it, every field that renders
// included; then /tokenize with add_special and parse_special as its chat
// route tokenizes; a completion's text directly), SGLang's /generate
// (POST /v1/tokenize of its text). ErrNoTokenizer where the server cannot
// render the chat prompt (a llama.cpp without /apply-template); a refusal
// of the rendering is a *Failure.
func (p *Pool) PromptIDs(ctx context.Context, ep *Endpoint, s openai.TokenShape, body []byte) ([]int32, error) {
	var r struct {
		Model              string          `json:"model"`
		Messages           json.RawMessage `json:"messages"`
		Tools              json.RawMessage `json:"tools"`
		ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
		Prompt             json.RawMessage `json:"prompt"`
		Text               json.RawMessage `json:"text"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("token ids: the request body: %w", err)
	}
	chat := len(r.Messages) > 0
	switch {
	case s == openai.ShapeVLLMLogprobs && chat:
		req := map[string]any{"model": r.Model, "messages": r.Messages, "add_generation_prompt": true}
		if len(r.Tools) > 0 {
			req["tools"] = r.Tools
		}
		if len(r.ChatTemplateKwargs) > 0 {
			req["chat_template_kwargs"] = r.ChatTemplateKwargs
		}
		return p.tokensAt(ctx, ep, pathTokenize, req)
	case s == openai.ShapeLlama:
		text := r.Prompt
		if chat {
			var err error
			if text, err = p.llamaTemplate(ctx, ep, json.RawMessage(body)); err != nil {
				return nil, err
			}
		}
		return p.tokensAt(ctx, ep, pathTokenize, llamaTokenize(text))
	case s == openai.ShapeSGLang && len(r.Text) > 0:
		return p.tokensAt(ctx, ep, pathSGLangTokenize, map[string]any{"model": r.Model, "prompt": r.Text})
	}
	return nil, fmt.Errorf("token ids: %s: no tokenizer route for this request", ep.name)
}

// Retokenize is the ids ep's tokenizer gives a text alone, with no
// template or special tokens added: what stats --tokens compares with
// the ids an answer was generated as.
func (p *Pool) Retokenize(ctx context.Context, ep *Endpoint, kind, model, text string) ([]int32, error) {
	switch kind {
	case KindVLLM:
		return p.tokensAt(ctx, ep, pathTokenize, map[string]any{"model": model, "prompt": text, "add_special_tokens": false})
	case KindSGLang:
		return p.tokensAt(ctx, ep, pathSGLangTokenize, map[string]any{"model": model, "prompt": text, "add_special_tokens": false})
	case KindLlamaCpp:
		return p.tokensAt(ctx, ep, pathTokenize, map[string]any{"content": text, "add_special": false, "parse_special": false})
	}
	return nil, fmt.Errorf("%w (%s)", ErrNoTokenizer, kind)
}

// tokensAt posts req to path on ep and reads the tokens it answers.
func (p *Pool) tokensAt(ctx context.Context, ep *Endpoint, path string, req map[string]any) ([]int32, error) {
	status, body, err := p.post(ctx, ep, path, req)
	if err != nil {
		return nil, err
	}
	if status != fasthttp.StatusOK {
		return nil, fmt.Errorf("token ids: %s%s: %w", ep.name, path, ClassifyStatus(status, body))
	}
	var out struct {
		Tokens []int32 `json:"tokens"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("token ids: %s%s: malformed answer: %w", ep.name, path, err)
	}
	return out.Tokens, nil
}
