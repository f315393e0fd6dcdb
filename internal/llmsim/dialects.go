package llmsim

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/valyala/fasthttp"
)

// The flavours other than SGLang. Sources (each golden file names the
// exact one for its shape):
//   vLLM: vllm/entrypoints/openai/api_server.py, engine/protocol.py
//     (ErrorResponse, ModelCard, UsageInfo, StreamOptions), serving_chat.py.
//   llama.cpp: tools/server/README.md, server-task.cpp, server-common.cpp
//     (format_error_response), server-context.cpp.
//   Ollama v0.6.5: server/routes.go, openai/openai.go, api/types.go,
//     docs/api.md, docs/openai.md.
//   OpenAI: the API reference (platform.openai.com/docs/api-reference)
//     and its documented error objects.

var (
	ctJSONUTF8 = []byte("application/json; charset=utf-8")
	ctTextUTF8 = []byte("text/plain; charset=utf-8")
	ctSSEPlain = []byte("text/event-stream")
)

const (
	pathVersion       = "/version"
	pathTokenize      = "/tokenize"
	pathApplyTemplate = "/apply-template"
	pathDetokenize    = "/detokenize"
	pathSGLTokenize   = "/v1/tokenize"
	pathLlamaHealthV1 = "/v1/health"
	pathLlamaModels   = "/models"
	pathLlamaProps    = "/props"
	pathLlamaSlots    = "/slots"
	pathLlamaComplete = "/completion"
	pathLlamaCompls   = "/completions"
	pathLlamaChat     = "/chat/completions"
	pathOllamaRoot    = "/"
	pathOllamaVersion = "/api/version"
	pathOllamaTags    = "/api/tags"
	pathOllamaShow    = "/api/show"
)

// vllmVersion and the others are the releases the flavours report.
const (
	vllmVersion     = "0.19.0"
	vllmOldVersion  = "0.10.0"
	ollamaVersion   = "0.6.5"
	llamacppBuild   = "b6097-9515c613"
	openaiFinger    = "fp_3f58d112f7"
	ollamaFinger    = "fp_ollama"
	vllmNullExtras  = `,"service_tier":null,"system_fingerprint":null`
	vllmChatExtras  = vllmNullExtras + `,"prompt_logprobs":null,"kv_transfer_params":null`
	openaiNoKeyText = "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're accessing the API from your browser and are prompted for a username. You can obtain an API key from https://platform.openai.com/account/api-keys."
)

// vllmRelease is what differs between the vLLM releases imitated.
type vllmRelease struct {
	flavor  Flavor
	version string // what /version says
	// flatErrors: before 0.10.1 ErrorResponse was flat, with "object":
	// "error"; from 0.10.1 it is ErrorResponse{error: ErrorInfo}.
	flatErrors bool
	// modelParam is the param a model-not-found error names ("" null).
	modelParam string
	fitContext contextRule
	// reasoning names the message's thinking field: reasoning_content until
	// vLLM renamed it reasoning (PR #27752, late 2025, the old name kept
	// beside it for a while; PR #33402 dropped it).
	reasoning string
	// returnTokenIDs: return_token_ids exists (0.10.2 and later).
	returnTokenIDs bool
}

var (
	vllmCurrent = vllmRelease{flavor: FlavorVLLM, version: vllmVersion, modelParam: "model", fitContext: vllmContext, reasoning: "reasoning", returnTokenIDs: true}
	vllmOld     = vllmRelease{flavor: FlavorVLLM0100, version: vllmOldVersion, flatErrors: true, fitContext: vllm0100Context, reasoning: "reasoning_content"}
)

// vllmDialect: vLLM's OpenAI server, at release r.
func vllmDialect(r vllmRelease) *dialect {
	health := get(func(e *Endpoint, ctx *fasthttp.RequestCtx) { e.health(ctx) })
	return &dialect{
		flavor: r.flavor,
		routes: map[string]route{
			pathChat: post(generation(apiChat)), pathCompletions: post(generation(apiCompletion)),
			pathHealth: health, pathModels: get(serveVLLMModels), pathMetrics: get(serveVLLMMetrics), pathTokenize: post(serveVLLMTokenize),
			pathDetokenize: post(serveVLLMDetokenize),
			pathVersion: get(func(e *Endpoint, ctx *fasthttp.RequestCtx) {
				jsonAnswer(ctx, 200, `{"version":"`+r.version+`"}`)
			}),
		},
		// api_server.py's API-key middleware guards only /v1 paths.
		open:     func(p string) bool { return !strings.HasPrefix(p, "/v1") },
		jsonOnly: true, holdWhileStarting: true, listenWhenReady: true, reasoning: r.reasoning, server: "uvicorn",
		checkRequest:        func(j *job) *apiError { return vllmMaxTokens(j, r) },
		completionMaxTokens: defaultCompletionMaxTokens, // completion/protocol.py CompletionRequest max_tokens = 16
		fitContext:          r.fitContext, busyMessage: msgQueueFull,
		tokenIDs: tokenStyle{chatPromptTop: r.returnTokenIDs, choiceIDs: r.returnTokenIDs, cmplChoice: r.returnTokenIDs, logprobIDs: true},
		modelNotFound: func(name string) *apiError { // serving_engine.py _check_model
			return &apiError{kind: errModel, status: fasthttp.StatusNotFound, msg: "The model `" + name + "` does not exist.", param: r.modelParam}
		},
		oai: &oaiStyle{
			messageExtra:  `,"refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[]`,
			reasoningNull: true, logprobs: true, stopReason: true,
			chatExtra: vllmChatExtras, cmplExtra: vllmNullExtras + `,"kv_transfer_params":null`,
			cmplChoiceExtra: `,"prompt_logprobs":null`,
			firstDelta:      `"role":"assistant","content":""`, lastDelta: `"content":""`,
			usage: usageVLLM, continuous: true, streamOptionsNeedStream: true, sse: ctSSE,
		},
		notFound: fastapiNotFound, notAllowed: fastapiNotAllowed, unauthorized: bareUnauthorized,
		errorBody: func(dst []byte, _ api, e *apiError) []byte {
			typ := map[errKind]string{errValidation: "BadRequestError", errInvalid: "BadRequestError", errContext: "BadRequestError",
				errModel: "NotFoundError", errBusy: "ServiceUnavailableError", errInternal: "InternalServerError"}[e.kind]
			if r.flatErrors {
				return appendErrorBody(dst, e.msg, typ, e.status)
			}
			dst = append(dst, `{"error":{"message":`...)
			dst = appendString(dst, e.msg)
			dst = append(dst, `,"type":`...)
			dst = appendString(dst, typ)
			dst = append(dst, `,"param":`...)
			dst = appendNullable(dst, e.param)
			dst = append(dst, `,"code":`...)
			dst = appendInt(dst, e.status)
			return append(dst, "}}"...)
		},
	}
}

// vllmMaxTokens is SamplingParams' check of max_tokens (sampling_params.py
// _verify_args): at least 1, else 400; since the validation errors of
// 0.11 (VLLMValidationError) the message names the parameter and value.
func vllmMaxTokens(j *job, r vllmRelease) *apiError {
	if !j.given || j.maxTokens >= 1 {
		return nil
	}
	msg := fmt.Sprintf("max_tokens must be at least 1, got %d.", j.maxTokens)
	if !r.flatErrors {
		msg += fmt.Sprintf(" (parameter=max_tokens, value=%d)", j.maxTokens)
	}
	return &apiError{kind: errInvalid, status: fasthttp.StatusBadRequest, msg: msg, param: "max_tokens"}
}

// llamacppMalformed is llama-server's answer to a body that is not JSON:
// nlohmann::json's parse_error, thrown by json::parse in the handler and
// rendered by the server's exception wrapper (ex_wrapper) as a 500
// server_error.
func llamacppMalformed(body []byte) *apiError {
	off := len(body)
	what := "end of input"
	var syn *stdjson.SyntaxError
	if err := stdjson.Unmarshal(body, new(any)); errors.As(err, &syn) && int(syn.Offset) <= len(body) && !strings.Contains(syn.Error(), "end of JSON") {
		off = max(int(syn.Offset), 1)
		what = fmt.Sprintf("'%c'", body[off-1])
	}
	line, col := 1, 1
	for _, c := range body[:min(off, len(body))] {
		if c == '\n' {
			line, col = line+1, 0
		}
		col++
	}
	if what == "end of input" {
		col = off + 1
	} else {
		col--
	}
	return &apiError{kind: errInternal, status: fasthttp.StatusInternalServerError,
		msg: fmt.Sprintf("[json.exception.parse_error.101] parse error at line %d, column %d: syntax error while parsing value - unexpected %s; expected '[', '{', or a literal", line, col, what)}
}

// llamacppDialect: llama-server. Errors are format_error_response's
// {"error": {"code", "message", "type"}}; every path but the public ones
// answers 503 "Loading model" until the model is loaded.
func llamacppDialect() *dialect {
	health := get(func(e *Endpoint, ctx *fasthttp.RequestCtx) { e.llamacppHealth(ctx) })
	models := get(serveLlamaModels)
	chat, cmpl, native := post(generation(apiChat)), post(generation(apiCompletion)), post(generation(apiNative))
	notFound := func(ctx *fasthttp.RequestCtx) {
		jsonAnswer(ctx, fasthttp.StatusNotFound, `{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}`)
	}
	public := map[string]bool{pathHealth: true, pathLlamaHealthV1: true, pathLlamaModels: true, pathModels: true, pathOllamaTags: true}
	return &dialect{
		flavor: FlavorLlamaCpp,
		routes: map[string]route{
			pathHealth: health, pathLlamaHealthV1: health,
			pathModels: models, pathLlamaModels: models,
			pathLlamaProps: get(serveLlamaProps), pathLlamaSlots: get(serveLlamaSlots), pathMetrics: get(serveLlamaMetrics),
			pathTokenize: post(serveLlamaTokenize), pathApplyTemplate: post(serveLlamaApplyTemplate), pathDetokenize: post(serveLlamaDetokenize),
			pathChat: chat, pathLlamaChat: chat, pathCompletions: cmpl,
			pathLlamaComplete: native, pathLlamaCompls: native,
		},
		open:     func(p string) bool { return public[p] },
		anyModel: true, reasoning: "reasoning_content", completionMaxTokens: -1,
		fitContext: llamacppContext, busyMessage: msgQueueFull, malformed: llamacppMalformed, tokenIDs: tokenStyle{nativeTokens: true},
		conn: llamacppConn,
		oai: &oaiStyle{
			fingerprint: `"` + llamacppBuild + `"`,
			firstDelta:  `"role":"assistant","content":null`, lastDelta: ``,
			usage: usagePlain, timings: true, sse: ctSSEPlain, json: ctJSONUTF8, cmplLogprobs: true,
		},
		notFound: notFound, notAllowed: notFound,
		unauthorized: func(ctx *fasthttp.RequestCtx) {
			jsonAnswer(ctx, fasthttp.StatusUnauthorized, `{"error":{"code":401,"message":"Invalid API Key","type":"authentication_error"}}`)
		},
		errorBody: func(dst []byte, _ api, e *apiError) []byte {
			typ := map[errKind]string{errValidation: "invalid_request_error", errInvalid: "invalid_request_error", errContext: "exceed_context_size_error",
				errModel: "not_found_error", errBusy: "unavailable_error", errInternal: "server_error", errLoading: "unavailable_error",
				errNotSupported: "not_supported_error"}[e.kind]
			dst = append(dst, `{"error":{"code":`...)
			dst = appendInt(dst, e.status)
			dst = append(dst, `,"message":`...)
			dst = appendString(dst, e.msg)
			dst = append(dst, `,"type":`...)
			dst = appendString(dst, typ)
			if e.kind == errContext {
				dst = append(dst, `,"n_prompt_tokens":`...)
				dst = appendInt(dst, e.promptTokens)
				dst = append(dst, `,"n_ctx":`...)
				dst = appendInt(dst, e.contextTokens)
			}
			return append(dst, "}}"...)
		},
	}
}

// ollamaDialect: Ollama v0.6.5. It has no /health: GET / says "Ollama is
// running". The OpenAI middleware renders a handler's error with the
// handler's status but type "api_error" (BaseWriter.writeError), its own
// validation errors as "invalid_request_error" (NewError).
func ollamaDialect() *dialect {
	notFound := func(ctx *fasthttp.RequestCtx) {
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetContentTypeBytes(ctTextUTF8)
		ctx.SetBodyString("404 page not found")
	}
	return &dialect{
		flavor: FlavorOllama,
		routes: map[string]route{
			pathOllamaRoot: get(func(e *Endpoint, ctx *fasthttp.RequestCtx) {
				ctx.SetContentTypeBytes(ctTextUTF8)
				ctx.SetBodyString("Ollama is running")
			}),
			pathOllamaVersion: get(func(e *Endpoint, ctx *fasthttp.RequestCtx) {
				ctx.SetContentTypeBytes(ctJSONUTF8)
				ctx.SetBodyString(`{"version":"` + ollamaVersion + `"}`)
			}),
			pathOllamaTags: get(serveOllamaTags), pathOllamaShow: post(serveOllamaShow),
			pathModels: get(serveOllamaModels),
			pathChat:   post(generation(apiChat)), pathCompletions: post(generation(apiCompletion)),
		},
		open: func(string) bool { return true }, noAPIKey: true, headIsGet: true, holdWhileStarting: true, completionMaxTokens: -1,
		noModel:   "model is required", // ChatHandler
		sameModel: ollamaSameModel,
		modelNotFound: func(name string) *apiError { // server/routes.go handleScheduleError
			return &apiError{kind: errModel, status: fasthttp.StatusNotFound, msg: fmt.Sprintf("model %q not found, try pulling it first", name)}
		},
		fitContext: ollamaContext, busyMessage: msgOllamaBusy, shortCallIDs: true,
		oai: &oaiStyle{
			shortID: true, fingerprint: `"` + ollamaFinger + `"`, roleInDeltas: true, wholeToolCalls: true,
			firstDelta: "", lastDelta: `"role":"assistant","content":""`,
			usage: usagePlain, sse: ctSSEPlain, json: ctJSONUTF8,
		},
		notFound: notFound, notAllowed: notFound, unauthorized: notFound,
		errorBody: func(dst []byte, _ api, e *apiError) []byte {
			typ := "api_error"
			if e.kind == errValidation {
				typ = "invalid_request_error"
			}
			return appendOpenAIError(dst, e.msg, typ, "", "")
		},
	}
}

// openaiDialect: an OpenAI-style gateway. Only /v1/chat/completions,
// /v1/completions and /v1/models exist; any other path is 404 "Invalid
// URL"; every path needs the key when one is set.
func openaiDialect() *dialect {
	notFound := func(ctx *fasthttp.RequestCtx) {
		msg := "Invalid URL (" + string(ctx.Method()) + " " + string(ctx.Path()) + ")"
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetContentTypeBytes(ctJSON)
		ctx.SetBody(appendOpenAIError(nil, msg, "invalid_request_error", "", ""))
	}
	return &dialect{
		flavor: FlavorOpenAI,
		routes: map[string]route{
			pathChat: post(generation(apiChat)), pathCompletions: post(generation(apiCompletion)),
			pathModels: get(serveOpenAIModels),
		},
		open: func(string) bool { return false }, guardsOptions: true, holdWhileStarting: true, hiddenReasoning: true,
		completionMaxTokens: defaultCompletionMaxTokens,
		noModel:             "you must provide a model parameter",
		modelNotFound: func(name string) *apiError {
			return &apiError{kind: errModel, status: fasthttp.StatusNotFound,
				msg: "The model `" + name + "` does not exist or you do not have access to it.", code: "model_not_found"}
		},
		fitContext: openaiContext, busyMessage: msgQueueFull,
		oai: &oaiStyle{
			fingerprint: `"` + openaiFinger + `"`, logprobs: true,
			messageExtra: `,"refusal":null,"annotations":[]`,
			chatExtra:    `,"service_tier":"default"`, chunkExtra: `,"service_tier":"default"`,
			firstDelta: `"role":"assistant","content":"","refusal":null`, lastDelta: ``,
			usage: usageOpenAI, usageNulls: true, strictStreamOptions: true, sse: ctSSE, cmplLogprobs: true,
		},
		notFound: notFound, notAllowed: notFound,
		unauthorized: func(ctx *fasthttp.RequestCtx) {
			msg, code := openaiNoKeyText, ""
			if h := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization); len(h) > 0 {
				key := string(bytes.TrimPrefix(h, []byte("Bearer ")))
				msg, code = "Incorrect API key provided: "+maskKey(key)+". You can find your API key at https://platform.openai.com/account/api-keys.", "invalid_api_key"
			}
			ctx.SetStatusCode(fasthttp.StatusUnauthorized)
			ctx.SetContentTypeBytes(ctJSON)
			ctx.SetBody(appendOpenAIError(nil, msg, "invalid_request_error", "", code))
		},
		errorBody: func(dst []byte, _ api, e *apiError) []byte {
			typ := "invalid_request_error"
			switch e.kind {
			case errInternal, errBusy:
				typ = "server_error"
			}
			return appendOpenAIError(dst, e.msg, typ, e.param, e.code)
		},
	}
}

// ollamaSameModel: Ollama's names are case-blind, and ":latest" when
// they carry no tag.
func ollamaSameModel(name, served string) bool {
	return strings.EqualFold(ollamaTagged(name), ollamaTagged(served))
}

func ollamaTagged(name string) string {
	if strings.Contains(name, ":") {
		return name
	}
	return name + ":latest"
}

// maskKey shows a key the way OpenAI's 401 does: its first and last four
// characters.
func maskKey(k string) string {
	if len(k) <= 8 {
		return strings.Repeat("*", len(k))
	}
	return k[:3] + strings.Repeat("*", min(len(k)-7, 32)) + k[len(k)-4:]
}

// appendOpenAIError is OpenAI's error object {"error": {message, type,
// param, code}}, param and code null when empty.
func appendOpenAIError(dst []byte, msg, typ, param, code string) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = appendString(dst, msg)
	dst = append(dst, `,"type":`...)
	dst = appendString(dst, typ)
	dst = append(dst, `,"param":`...)
	dst = appendNullable(dst, param)
	dst = append(dst, `,"code":`...)
	dst = appendNullable(dst, code)
	return append(dst, "}}"...)
}

func appendNullable(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, "null"...)
	}
	return appendString(dst, s)
}
