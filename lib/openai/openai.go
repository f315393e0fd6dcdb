// Package openai holds the client side of the wire: the request and
// response shapes of the OpenAI-compatible chat and completions APIs as
// SGLang serves them, SGLang's native /generate, /v1/models,
// /get_server_info (or /server_info) and SGLang's error bodies.
//
// The shapes follow SGLang's documented protocol (entrypoints/openai/
// protocol.py, the native API docs) and OpenAI's API reference; golden
// JSON in testdata/openai pins them. The simulator writes its own types,
// so a misunderstanding of the protocol shows up as a failing test rather
// than cancelling out.
package openai

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/record"
)

// Paths of the endpoints infer talks to, relative to a server's base URL.
const (
	PathChat        = "/v1/chat/completions"
	PathCompletions = "/v1/completions"
	PathGenerate    = "/generate"
	PathModels      = "/v1/models"
	PathServerInfo  = "/get_server_info"
	// PathServerInfoNew is the name newer SGLang releases use.
	PathServerInfoNew = "/server_info"
	PathHealth        = "/health"
)

// Message is one chat turn of a request, as the record contract has it:
// a tool result answers the call named by ToolCallID; an assistant turn of
// the history carries its ToolCalls, and its ReasoningContent when the
// history is sent with it.
type Message = record.Message

// Sampling holds the sampling settings every API takes. Nil fields are
// left out so the server's own defaults (or the model's generation
// config) apply.
type Sampling struct {
	MaxTokens   *int     `json:"max_tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	Seed        *int64   `json:"seed,omitempty"`
	Stop        []string `json:"stop,omitempty"`
}

// ChatRequest is the body of POST /v1/chat/completions. Tools are in the
// OpenAI shape ({"type":"function","function":{...}}).
type ChatRequest struct {
	Model      string          `json:"model,omitempty"`
	Messages   []Message       `json:"messages"`
	Tools      json.RawMessage `json:"tools,omitempty"`
	ToolChoice json.RawMessage `json:"tool_choice,omitempty"`
	// ParallelToolCalls is the record's parallel_tool_calls, when it has one.
	ParallelToolCalls json.RawMessage `json:"parallel_tool_calls,omitempty"`
	Sampling
	Stream bool `json:"stream,omitempty"`
}

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	Model  string `json:"model,omitempty"`
	Prompt string `json:"prompt"`
	Sampling
	Stream bool `json:"stream,omitempty"`
}

// GenerateSampling is /generate's sampling_params. SGLang's native names
// differ from OpenAI's: max_new_tokens and sampling_seed.
type GenerateSampling struct {
	MaxNewTokens *int     `json:"max_new_tokens,omitempty"`
	Temperature  *float64 `json:"temperature,omitempty"`
	TopP         *float64 `json:"top_p,omitempty"`
	SamplingSeed *int64   `json:"sampling_seed,omitempty"`
	Stop         []string `json:"stop,omitempty"`
}

// GenerateRequest is the body of SGLang's native POST /generate.
type GenerateRequest struct {
	Text           string           `json:"text"`
	SamplingParams GenerateSampling `json:"sampling_params"`
	Stream         bool             `json:"stream,omitempty"`
}

// NativeSamplingName maps an OpenAI sampling parameter name to the name
// /generate's sampling_params uses for it; other names are the same.
func NativeSamplingName(openaiName string) string {
	switch openaiName {
	case "max_tokens", "max_completion_tokens":
		return "max_new_tokens"
	case "seed":
		return "sampling_seed"
	case "min_tokens":
		return "min_new_tokens"
	}
	return openaiName
}

// Usage is the token accounting of an OpenAI-style response.
type Usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
	ReasoningTokens     int                  `json:"reasoning_tokens,omitempty"`
}

// PromptTokensDetails carries cached_tokens (SGLang sends it with
// --enable-cache-report).
type PromptTokensDetails struct {
	CachedTokens *int `json:"cached_tokens"`
}

// cached is the cached prompt tokens the usage reports; nil when it does
// not say (most servers, unless told to).
func (u *Usage) cached() *int {
	if u == nil || u.PromptTokensDetails == nil {
		return nil
	}
	return u.PromptTokensDetails.CachedTokens
}

// Response is the body of a non-streaming chat or text completion: the
// same envelope around different choices.
type Response[C any] struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []C    `json:"choices"`
	Usage   *Usage `json:"usage"`
	// Timings is llama.cpp's: cache_n is the prompt tokens it found cached.
	Timings *struct {
		CacheN *int `json:"cache_n"`
	} `json:"timings,omitempty"`
}

// ChatResponse is the body of a non-streaming chat completion.
type ChatResponse = Response[ChatChoice]

// CompletionResponse is the body of a non-streaming text completion.
type CompletionResponse = Response[CompletionChoice]

// ChatChoice is one answer of a chat completion. Message is a pointer so
// that an answer without one (null, or left out) is told apart.
type ChatChoice struct {
	Index        int             `json:"index"`
	Message      *ChatMessage    `json:"message"`
	FinishReason *string         `json:"finish_reason"`
	MatchedStop  json.RawMessage `json:"matched_stop,omitempty"` // SGLang: token id or string
}

// ChatMessage is the assistant turn of a chat answer. ReasoningContent is
// set by SGLang, llama.cpp and vLLM before its rename when a reasoning
// parser splits out the thinking part; Reasoning is the name current vLLM
// gives it (chat_completion/protocol.py ChatMessage.reasoning: renamed in
// PR #27752, reasoning_content dropped in PR #33402, v0.19).
type ChatMessage struct {
	Role             string          `json:"role"`
	Content          *string         `json:"content"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	Reasoning        *string         `json:"reasoning,omitempty"`
	ToolCalls        json.RawMessage `json:"tool_calls,omitempty"`
}

// The names a server gives an answer's reasoning, as Completion's
// ReasoningField says which one it used.
const (
	FieldReasoningContent = "reasoning_content"
	FieldReasoning        = "reasoning"
)

// thinking is the message's reasoning and the field it came in:
// reasoning_content where set (a server that sends both, as vLLM did
// while it kept the old name, sends the same text), else reasoning.
func (m *ChatMessage) thinking() (text, field string) {
	if r := deref(m.ReasoningContent); r != "" {
		return r, FieldReasoningContent
	}
	if r := deref(m.Reasoning); r != "" {
		return r, FieldReasoning
	}
	return "", ""
}

// WireToolCall is one call of an answer's tool_calls as servers send it:
// SGLang adds the call's index, and arguments are JSON text (OpenAI,
// SGLang, vLLM) or, from some servers, the arguments object itself. In a
// stream's delta each piece carries the index of the call it extends.
type WireToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// CompletionChoice is one answer of a text completion.
type CompletionChoice struct {
	Index        int             `json:"index"`
	Text         string          `json:"text"`
	FinishReason *string         `json:"finish_reason"`
	MatchedStop  json.RawMessage `json:"matched_stop,omitempty"`
}

// GenerateResponse is the body of SGLang's native /generate for one prompt.
type GenerateResponse struct {
	Text      string       `json:"text"`
	OutputIDs []int        `json:"output_ids,omitempty"`
	MetaInfo  GenerateMeta `json:"meta_info"`
}

// GenerateMeta is /generate's meta_info.
type GenerateMeta struct {
	ID               string        `json:"id"`
	FinishReason     *NativeFinish `json:"finish_reason"`
	PromptTokens     int           `json:"prompt_tokens"`
	CompletionTokens int           `json:"completion_tokens"`
	CachedTokens     *int          `json:"cached_tokens"`
	E2ELatency       float64       `json:"e2e_latency"`
}

// NativeFinish is SGLang's structured finish reason: {"type": "stop",
// "matched": ...}, {"type": "length", "length": n}, or {"type": "abort",
// "message": ..., "status_code": ...}.
type NativeFinish struct {
	Type       string          `json:"type"`
	Matched    json.RawMessage `json:"matched,omitempty"`
	Length     int             `json:"length,omitempty"`
	Message    string          `json:"message,omitempty"`
	StatusCode int             `json:"status_code,omitempty"`
	ErrType    string          `json:"err_type,omitempty"`
}

// ServerInfo is the part of SGLang's /get_server_info infer reads: the
// server arguments flattened at the top level, the scheduler's limits and
// one internal state per data-parallel rank.
type ServerInfo struct {
	ModelPath          string          `json:"model_path"`
	ServedModelName    string          `json:"served_model_name"`
	MaxRunningRequests *int            `json:"max_running_requests"`
	ContextLength      *int            `json:"context_length"`
	MaxTotalNumTokens  int             `json:"max_total_num_tokens"`
	DPSize             int             `json:"dp_size"`
	InternalStates     []InternalState `json:"internal_states"`
	Version            string          `json:"version"`
}

// InternalState is one data-parallel rank's state in /get_server_info.
type InternalState struct {
	MaxRunningRequests          int `json:"max_running_requests"`
	EffectiveMaxRunningRequests int `json:"effective_max_running_requests_per_dp"`
}

// Slots is the number of requests the server runs at once: its
// max_running_requests, or the sum over data-parallel ranks when only the
// internal states carry it. Zero when the server does not say.
func (s *ServerInfo) Slots() int {
	if s.MaxRunningRequests != nil && *s.MaxRunningRequests > 0 {
		return *s.MaxRunningRequests
	}
	total := 0
	for _, st := range s.InternalStates {
		switch {
		case st.MaxRunningRequests > 0:
			total += st.MaxRunningRequests
		case st.EffectiveMaxRunningRequests > 0:
			total += st.EffectiveMaxRunningRequests
		}
	}
	return total
}

// Completion is one answer in the form every API is reduced to.
type Completion struct {
	Text      string
	Reasoning string
	// ReasoningField is the field the reasoning came in (FieldReasoning or
	// FieldReasoningContent; "" without reasoning).
	ReasoningField string
	// ToolCalls are the calls a chat answer makes, in the OpenAI shape.
	ToolCalls        []record.ToolCall
	FinishReason     string // as the server said: stop, length, abort, tool_calls, ...
	PromptTokens     int
	CompletionTokens int
	CachedTokens     *int // nil: the server did not report it
	Model            string
	// AbortStatus is the HTTP status an aborted /generate carried, if any.
	AbortStatus  int
	AbortMessage string
}

// ErrNoChoices is returned for a response without any answer in it.
var ErrNoChoices = errors.New("response has no choices")

// ErrNotAnswer is returned for a 200 response whose first choice is not an
// answer: a null choice, a null or missing message, null content with
// neither tool calls nor reasoning, or no finish_reason. A server in
// trouble sends these; the request is worth trying again elsewhere.
var ErrNotAnswer = errors.New("response is not an answer")

// ParseChat reads a chat completion body.
func ParseChat(body []byte) (Completion, error) {
	return parseFirst(body, chatAnswer, func(ch *ChatChoice) *string { return ch.FinishReason })
}

// chatAnswer is the answer of a chat choice.
func chatAnswer(ch *ChatChoice) (Completion, error) {
	m := ch.Message
	if m == nil {
		return Completion{}, fmt.Errorf("%w: the choice has no message", ErrNotAnswer)
	}
	calls, err := ToolCalls(m.ToolCalls)
	if err != nil {
		return Completion{}, err
	}
	reasoning, field := m.thinking()
	if m.Content == nil && len(calls) == 0 && reasoning == "" {
		return Completion{}, fmt.Errorf("%w: null content and no tool calls", ErrNotAnswer)
	}
	return Completion{Text: deref(m.Content), Reasoning: reasoning, ReasoningField: field, ToolCalls: calls}, nil
}

// ParseCompletion reads a text completion body.
func ParseCompletion(body []byte) (Completion, error) {
	return parseFirst(body, func(ch *CompletionChoice) (Completion, error) {
		return Completion{Text: ch.Text}, nil
	}, func(ch *CompletionChoice) *string { return ch.FinishReason })
}

// parseFirst reads a response and reduces its first choice with first;
// finish is the choice's finish_reason, which an answer must have.
func parseFirst[C any](body []byte, first func(*C) (Completion, error), finish func(*C) *string) (Completion, error) {
	var r Response[*C]
	if err := decode(body, &r); err != nil {
		return Completion{}, err
	}
	return firstOf(&r, first, finish)
}

// firstOf reduces a response read to its first choice (see parseFirst).
func firstOf[C any](r *Response[*C], first func(*C) (Completion, error), finish func(*C) *string) (Completion, error) {
	if len(r.Choices) == 0 {
		return Completion{}, ErrNoChoices
	}
	ch := r.Choices[0]
	if ch == nil {
		return Completion{}, fmt.Errorf("%w: the choice is null", ErrNotAnswer)
	}
	c, err := first(ch)
	if err != nil {
		return Completion{}, err
	}
	f := finish(ch)
	if f == nil || *f == "" {
		return Completion{}, fmt.Errorf("%w: no finish_reason", ErrNotAnswer)
	}
	c.FinishReason = *f
	c.Model = r.Model
	if r.Usage != nil {
		c.PromptTokens, c.CompletionTokens, c.CachedTokens = r.Usage.PromptTokens, r.Usage.CompletionTokens, r.Usage.cached()
	}
	if c.CachedTokens == nil && r.Timings != nil {
		c.CachedTokens = r.Timings.CacheN
	}
	return c, c.check()
}

// check refuses an answer whose values no server that works gives: a
// negative token count, or a tool call whose arguments are not a JSON
// object (extract refuses the same in a dataset, bad_tool_calls). Such an
// answer is malformed: retried, then filed, never written as good.
func (c *Completion) check() error {
	if c.PromptTokens < 0 || c.CompletionTokens < 0 || c.CachedTokens != nil && *c.CachedTokens < 0 {
		return fmt.Errorf("%w: a negative token count in its usage", ErrNotAnswer)
	}
	for _, call := range c.ToolCalls {
		args := bytes.TrimSpace([]byte(call.Function.Arguments))
		if len(args) == 0 || args[0] != '{' || !json.Valid(args) {
			return fmt.Errorf("%w: the arguments of its call of %s are not a JSON object", ErrNotAnswer, call.Function.Name)
		}
	}
	return nil
}

// ParseGenerate reads a native /generate body for one prompt.
func ParseGenerate(body []byte) (Completion, error) {
	var r GenerateResponse
	if err := decode(body, &r); err != nil {
		return Completion{}, err
	}
	m := r.MetaInfo
	c := Completion{Text: r.Text, PromptTokens: m.PromptTokens, CompletionTokens: m.CompletionTokens, CachedTokens: m.CachedTokens}
	f := m.FinishReason
	if f == nil || f.Type == "" {
		return Completion{}, fmt.Errorf("%w: no finish_reason in meta_info", ErrNotAnswer)
	}
	c.FinishReason = f.Type
	if f.Type == "abort" {
		c.AbortStatus, c.AbortMessage = f.StatusCode, f.Message
	}
	return c, c.check()
}

// ParseServerInfo reads a /get_server_info body.
func ParseServerInfo(body []byte) (ServerInfo, error) {
	var s ServerInfo
	err := decode(body, &s)
	return s, err
}

// ErrorResponse is SGLang's error body on the OpenAI-compatible routes: a
// flat object. OpenAI itself (and vLLM) nest the same fields under
// "error", and SGLang's native routes send {"error": {"message": ...}}.
type ErrorResponse struct {
	Object  string          `json:"object"`
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Param   *string         `json:"param"`
	Code    json.RawMessage `json:"code"`
}

type nestedError struct {
	Error json.RawMessage `json:"error"`
	// FastAPI's own validation and HTTP errors.
	Detail json.RawMessage `json:"detail"`
}

// maxErrorText bounds how much of an unrecognised error body is kept.
const maxErrorText = 512

// ErrorMessage extracts the human message from an error body, whichever
// of the known shapes it has; otherwise the body's text, trimmed and
// bounded. It never fails.
func ErrorMessage(body []byte) string {
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '{' {
		var flat ErrorResponse
		if decoded(body, &flat) && flat.Message != "" {
			return bounded(flat.Message)
		}
		var n nestedError
		if decoded(body, &n) {
			if msg := messageOf(n.Error); msg != "" {
				return msg
			}
			if msg := messageOf(n.Detail); msg != "" {
				return msg
			}
		}
	}
	return bounded(strings.TrimSpace(string(body)))
}

// messageOf reads a message from a value that is a string, an object with
// "message" (or "msg"), or a list of such objects.
func messageOf(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return bounded(s)
		}
	case '{':
		var o struct {
			Message string `json:"message"`
			Msg     string `json:"msg"`
		}
		if json.Unmarshal(raw, &o) == nil {
			if o.Message != "" {
				return bounded(o.Message)
			}
			return bounded(o.Msg)
		}
	case '[':
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) == nil {
			parts := make([]string, 0, len(list))
			for _, item := range list {
				if m := messageOf(item); m != "" {
					parts = append(parts, m)
				}
			}
			return bounded(strings.Join(parts, "; "))
		}
	}
	return bounded(string(raw))
}

func bounded(s string) string {
	if len(s) <= maxErrorText {
		return s
	}
	cut := maxErrorText
	for cut > 0 && (s[cut]&0xC0) == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return s[:cut] + "..."
}

// ToolCalls reads an answer's tool_calls (absent or null: none) into the
// OpenAI shape: the type defaults to "function", arguments given as an
// object become its compact JSON text, and a call without an id is left
// for the caller to name.
func ToolCalls(raw json.RawMessage) ([]record.ToolCall, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var wire []WireToolCall
	if err := json.Unmarshal(raw, &wire); err != nil {
		return nil, fmt.Errorf("malformed tool_calls: %w", err)
	}
	calls := make([]record.ToolCall, 0, len(wire))
	for _, w := range wire {
		args, err := ArgumentsText(w.Function.Arguments)
		if err != nil {
			return nil, err
		}
		if w.Function.Name == "" {
			return nil, fmt.Errorf("%w: a tool call without a function name", ErrNotAnswer)
		}
		typ := w.Type
		if typ == "" {
			typ = "function"
		}
		calls = append(calls, record.ToolCall{ID: w.ID, Type: typ, Function: record.FunctionCall{Name: w.Function.Name, Arguments: args}})
	}
	return calls, nil
}

// ArgumentsText is a call's arguments as JSON text: a JSON string is
// unquoted, an object (or any other value) is compacted; none is "{}".
func ArgumentsText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "{}", nil
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("malformed tool call arguments: %w", err)
		}
		return s, nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return "", fmt.Errorf("malformed tool call arguments: %w", err)
	}
	return b.String(), nil
}

func decode(body []byte, v any) error {
	if err := record.CheckDepth(body); err != nil {
		// A decoder recurses: a body nested a million deep would exhaust
		// the stack, which no recover catches.
		return fmt.Errorf("malformed response body: %w", err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("malformed response body: %w", err)
	}
	return nil
}

// decoded tells whether body decodes into v, nested no deeper than a
// record may be (decode's rule).
func decoded(body []byte, v any) bool { return decode(body, v) == nil }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
