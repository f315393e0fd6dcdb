package llmsim

import (
	"fmt"
	"net"
	"strings"

	"github.com/valyala/fasthttp"
)

// Flavor is the kind of server an endpoint imitates: its routes, response
// and error shapes, metrics and limits. One fleet may mix flavours.
type Flavor string

// The flavours. Each follows one documented release of its server; the
// golden files under testdata/llmsim/<flavour> name the source of every
// shape.
const (
	// FlavorSGLang is SGLang 0.5.x (the default).
	FlavorSGLang Flavor = "sglang"
	// FlavorVLLM is vLLM 0.10.1 and later: errors nested in {"error": {...}}.
	FlavorVLLM Flavor = "vllm"
	// FlavorVLLM0100 is vLLM 0.10.0 and before: flat {"object": "error", ...}
	// errors and the older context-length wording.
	FlavorVLLM0100 Flavor = "vllm-0.10.0"
	// FlavorLlamaCpp is llama.cpp's llama-server.
	FlavorLlamaCpp Flavor = "llamacpp"
	// FlavorOllama is Ollama 0.6.5 (its OpenAI-compatible and native API).
	FlavorOllama Flavor = "ollama"
	// FlavorOpenAI is an OpenAI-style gateway: only /v1/*, OpenAI's error
	// objects and stream options.
	FlavorOpenAI Flavor = "openai"
)

// Flavors lists every flavour, the default first.
var Flavors = []Flavor{FlavorSGLang, FlavorVLLM, FlavorVLLM0100, FlavorLlamaCpp, FlavorOllama, FlavorOpenAI}

// ParseFlavor checks a flavour name ("" is the default, sglang).
func ParseFlavor(s string) (Flavor, error) {
	if s == "" {
		return FlavorSGLang, nil
	}
	for _, f := range Flavors {
		if string(f) == s {
			return f, nil
		}
	}
	names := make([]string, len(Flavors))
	for i, f := range Flavors {
		names[i] = string(f)
	}
	return "", fmt.Errorf("flavor %q: want one of %s", s, strings.Join(names, ", "))
}

// errKind classifies what went wrong with a request, so each flavour can
// render it its own way.
type errKind int

const (
	errValidation   errKind = iota // the body does not parse or misses a field
	errInvalid                     // a well-formed request the server refuses
	errContext                     // the prompt (and max_tokens) do not fit the context
	errModel                       // no such model
	errBusy                        // the waiting queue is full
	errInternal                    // the fail fault
	errLoading                     // the model is still loading (llama.cpp)
	errNotSupported                // a route the server was not started with (llama.cpp's /metrics)
)

// apiError is an error answer before the flavour renders it.
type apiError struct {
	kind   errKind
	status int
	msg    string
	param  string // the offending parameter, "" for null
	code   string // OpenAI's string code (context_length_exceeded, model_not_found)
	// llama.cpp's exceed_context_size_error carries the numbers too.
	promptTokens, contextTokens int
}

func (e *apiError) Error() string { return e.msg }

func newAPIError(kind errKind, status int, format string, args ...any) *apiError {
	return &apiError{kind: kind, status: status, msg: fmt.Sprintf(format, args...)}
}

// route is one path of a flavour's HTTP API.
type route struct {
	method string // GET routes answer HEAD too
	serve  func(e *Endpoint, ctx *fasthttp.RequestCtx)
}

// dialect is everything a flavour does differently: a field for each
// difference between the servers imitated (routes, keys, models, errors,
// context, tool calls), so that one entry per flavour (dialects) says all
// of a server and the handlers ask it rather than the flavour's name.
type dialect struct {
	flavor Flavor
	routes map[string]route
	// open says which paths an API key does not guard.
	open func(path string) bool
	// noAPIKey servers check no key, whatever Config.APIKey says (Ollama).
	noAPIKey bool
	// guardsOptions: OPTIONS needs the key like any request (an OpenAI
	// gateway); the others let CORS preflights through.
	guardsOptions bool
	// putIsPost: POST routes take PUT as well (SGLang's generation
	// routes); headIsGet: GET routes answer HEAD too (Ollama).
	putIsPost, headIsGet bool
	// jsonOnly servers (FastAPI ones) 400 a body sent as anything but JSON.
	jsonOnly bool
	// holdWhileStarting: requests wait out the startup delay (the server
	// is not listening yet, or loads the model on demand); otherwise they
	// are answered 503 at once (llama.cpp).
	holdWhileStarting bool
	// listenWhenReady: the server opens its port only once it is ready,
	// so that a client is refused the connection while it starts (vLLM:
	// uvicorn starts after the engine).
	listenWhenReady bool
	// checkRequest is the flavour's own refusal of a parsed request (nil:
	// none).
	checkRequest func(j *job) *apiError
	// malformed renders a body that is not JSON (nil: SGLang's 400).
	malformed func(body []byte) *apiError
	// echoModel servers neither check a request's model name nor fill it
	// in: the answer echoes it, or "default" (SGLang).
	echoModel bool
	// anyModel servers answer whatever model a request names.
	anyModel bool
	// noModel is the 400 message for a request that names no model; ""
	// lets the served model stand in.
	noModel string
	// sameModel says whether a requested name is the served one; nil:
	// the same string.
	sameModel func(name, served string) bool
	// modelNotFound is the 404 for a model the server does not serve.
	modelNotFound func(name string) *apiError
	// fitContext is the flavour's context rule (context.go).
	fitContext contextRule
	// busyMessage is the 503 message for a request the waiting queue has
	// no room for; queueFullInStream: a streamed one gets 200 and the
	// error as an event (SGLang).
	busyMessage       string
	queueFullInStream bool
	// shortCallIDs: tool call ids are call_ and 8 characters (Ollama's
	// openai.go toolCallId).
	shortCallIDs bool
	// reasoning is the message field reasoning goes in; "" has none.
	reasoning string
	// hiddenReasoning: the model reasons but the API shows only the count
	// (OpenAI's completion_tokens_details.reasoning_tokens).
	hiddenReasoning bool
	// server is the Server header ("" none).
	server string
	// completionMaxTokens is /v1/completions' default max_tokens (-1: the context).
	completionMaxTokens int
	// oai renders OpenAI-compatible answers; nil for SGLang, whose own
	// writer is in respond.go.
	oai *oaiStyle
	// tokenIDs is where answers carry the token ids a request asks for
	// (tokenids.go); the zero value: nowhere.
	tokenIDs tokenStyle

	// conn is what the server does with a connection after an answer.
	conn connRule

	notFound     func(ctx *fasthttp.RequestCtx)
	notAllowed   func(ctx *fasthttp.RequestCtx)
	unauthorized func(ctx *fasthttp.RequestCtx)
	// errorBody appends the body of an error answer to a request of api a.
	errorBody func(dst []byte, a api, e *apiError) []byte
}

// connRule is what a flavour's server does with a connection after an
// answer. The zero value is fasthttp's, and uvicorn's and Go's servers'
// alike: the connection stays open until it has been idle for 5 s.
type connRule struct {
	// keepAlive is the Keep-Alive header of an answer whose connection
	// stays open ("" none).
	keepAlive string
	// maxRequests: the answer to a connection's maxRequests-th request
	// says Connection: close, and the connection closes (0: no limit).
	maxRequests uint64
	// closeAfterError: an answer of status 400 or more says Connection:
	// close, and the connection closes.
	closeAfterError bool
	// closeAfterStream: the connection closes right after a streamed
	// answer's last chunk, although the answer's head advertised
	// keep-alive and never said Connection: close. A client that sends its
	// next request on it finds it closed before any answer.
	closeAfterStream bool
}

// llamacppConn is cpp-httplib's, which llama-server runs on: a streamed
// answer's content provider returns false once done, which ends the
// connection's keep-alive loop (vendor/cpp-httplib write_content_chunked,
// process_server_socket_core), after the head said "Keep-Alive: timeout=5,
// max=100"; whole answers keep it.
var llamacppConn = connRule{keepAlive: "timeout=5, max=100", maxRequests: 100, closeAfterError: true, closeAfterStream: true}

// after applies the rule to the answer a handler has just set up.
func (r connRule) after(ctx *fasthttp.RequestCtx) {
	switch {
	case ctx.Hijacked(): // a fault writing the connection itself
		return
	case r.closeAfterError && ctx.Response.StatusCode() >= fasthttp.StatusBadRequest,
		r.maxRequests > 0 && ctx.ConnRequestNum() >= r.maxRequests:
		ctx.SetConnectionClose()
		return
	}
	if r.keepAlive != "" {
		ctx.Response.Header.Set("Keep-Alive", r.keepAlive)
	}
	if r.closeAfterStream && ctx.Response.IsBodyStream() {
		// fasthttp writes the whole answer, then hands the connection
		// over, and closes it once this returns.
		ctx.Hijack(func(net.Conn) {})
	}
}

var dialects = map[Flavor]*dialect{}

func init() {
	for _, d := range []*dialect{sglangDialect(), vllmDialect(vllmCurrent), vllmDialect(vllmOld), llamacppDialect(), ollamaDialect(), openaiDialect()} {
		dialects[d.flavor] = d
	}
}

func dialectOf(f Flavor) *dialect {
	if d, ok := dialects[f]; ok {
		return d
	}
	return dialects[FlavorSGLang]
}

func generation(a api) func(e *Endpoint, ctx *fasthttp.RequestCtx) {
	return func(e *Endpoint, ctx *fasthttp.RequestCtx) { e.generate(ctx, a) }
}

func get(serve func(e *Endpoint, ctx *fasthttp.RequestCtx)) route  { return route{"GET", serve} }
func post(serve func(e *Endpoint, ctx *fasthttp.RequestCtx)) route { return route{"POST", serve} }

func jsonAnswer(ctx *fasthttp.RequestCtx, status int, body string) {
	ctx.SetStatusCode(status)
	ctx.SetContentTypeBytes(ctJSON)
	ctx.SetBodyString(body)
}

// FastAPI's answers for a path or method it has no route for (SGLang, vLLM).
func fastapiNotFound(ctx *fasthttp.RequestCtx) {
	jsonAnswer(ctx, fasthttp.StatusNotFound, `{"detail":"Not Found"}`)
}

func fastapiNotAllowed(ctx *fasthttp.RequestCtx) {
	jsonAnswer(ctx, fasthttp.StatusMethodNotAllowed, `{"detail":"Method Not Allowed"}`)
}

// SGLang's and vLLM's --api-key middleware answer.
func bareUnauthorized(ctx *fasthttp.RequestCtx) {
	jsonAnswer(ctx, fasthttp.StatusUnauthorized, `{"error":"Unauthorized"}`)
}

// sglangDialect: python/sglang/srt/entrypoints/http_server.py.
func sglangDialect() *dialect {
	info := get(func(e *Endpoint, ctx *fasthttp.RequestCtx) { e.info(ctx, unsafeString(ctx.Path())) })
	health := get(func(e *Endpoint, ctx *fasthttp.RequestCtx) { e.health(ctx) })
	return &dialect{
		flavor: FlavorSGLang,
		routes: map[string]route{
			pathChat: post(generation(apiChat)), pathCompletions: post(generation(apiCompletion)), pathGenerate: post(generation(apiGenerate)),
			pathHealth: health, pathHealthGen: health,
			pathModels: info, pathServerInfo: info, pathServerInfoNew: info, pathModelInfo: info, pathLoad: info, pathMetrics: info,
			pathSGLTokenize: post(serveSGLangTokenize), pathDecoded: info,
		},
		// utils/auth.py: OPTIONS, /health* and /metrics* are open.
		open: func(p string) bool {
			return strings.HasPrefix(p, pathHealth) || strings.HasPrefix(p, pathMetrics)
		},
		putIsPost: true, jsonOnly: true, holdWhileStarting: true, echoModel: true, anyModel: true, reasoning: "reasoning_content", server: "uvicorn",
		completionMaxTokens: defaultCompletionMaxTokens, fitContext: sglangContext,
		busyMessage: msgQueueFull, queueFullInStream: true,
		tokenIDs: tokenStyle{choiceIDs: true, choicePrompt: true, cmplChoice: true},
		notFound: fastapiNotFound, notAllowed: fastapiNotAllowed, unauthorized: bareUnauthorized,
		errorBody: sglangErrorBody,
	}
}

// sglangErrorBody renders an error the way SGLang's handlers do: the
// OpenAI endpoints with the flat error object (serving_base.py
// create_error_response), /generate's own 400s as {"error": {"message"}}.
func sglangErrorBody(dst []byte, a api, e *apiError) []byte {
	if a == apiGenerate && e.status == fasthttp.StatusBadRequest {
		return appendNativeError(dst, e.msg)
	}
	typ := map[errKind]string{errValidation: "Bad Request", errInvalid: "BadRequestError", errContext: "BadRequestError",
		errModel: "NotFoundError", errBusy: "503", errInternal: "InternalServerError"}[e.kind]
	return appendErrorBody(dst, e.msg, typ, e.status)
}
