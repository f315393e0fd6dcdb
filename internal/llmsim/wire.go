package llmsim

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/segmentio/encoding/json"
)

// Request bodies, as SGLang's pydantic models accept them
// (entrypoints/openai/protocol.py: ChatCompletionRequest, CompletionRequest;
// managers/io_struct.py: GenerateReqInput). Fields the simulator has no use
// for (temperature, top_p, stop, ...) are accepted and ignored, as unknown
// fields are by SGLang.

type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []wireMessage   `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       json.RawMessage `json:"stream_options"`
	Rid                 json.RawMessage `json:"rid"`
	Tools               wireTools       `json:"tools"`
	Seed                *int64          `json:"seed"`
	Temperature         *float64        `json:"temperature"`
	// ChatTemplateKwargs and ReasoningEffort turn thinking on or off
	// (thinking.go).
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
	ReasoningEffort    *string         `json:"reasoning_effort"`
	wireTokenFlags
}

type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// The history's reasoning and tool calls, which a chat template
	// renders (tokenizer.go), and what a model's own template reads of a
	// tool turn (realtok.go).
	ReasoningContent *string        `json:"reasoning_content"`
	ToolCalls        []wireHistCall `json:"tool_calls"`
	ToolCallID       *string        `json:"tool_call_id"`
	Name             *string        `json:"name"`
}

// wireTools are a request's tools, decoded and as sent: a model's own
// chat template renders them as the request wrote them (realtok.go).
type wireTools struct {
	list []wireTool
	raw  json.RawMessage
}

func (w *wireTools) UnmarshalJSON(b []byte) error {
	w.raw = append(w.raw[:0], b...)
	return json.Unmarshal(b, &w.list)
}

// streamOptions are the stream_options a request sent: the two keys the
// simulator acts on, and the first other key (OpenAI rejects it).
type streamOptions struct {
	present, includeUsage, continuous bool
	unknown                           string
}

func parseStreamOptions(raw json.RawMessage) (streamOptions, error) {
	var o streamOptions
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return o, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return o, validationError("model_attributes_type", "'stream_options'", "Input should be a valid dictionary or object to extract fields from")
	}
	o.present = true
	for k, v := range m {
		on := string(bytes.TrimSpace(v)) == "true"
		switch k {
		case "include_usage":
			o.includeUsage = on
		case "continuous_usage_stats":
			o.continuous = on
			if o.unknown == "" || k < o.unknown {
				o.unknown = k
			}
		default:
			if o.unknown == "" || k < o.unknown {
				o.unknown = k
			}
		}
	}
	return o, nil
}

type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens"`
	N             *int            `json:"n"`
	Stream        bool            `json:"stream"`
	StreamOptions json.RawMessage `json:"stream_options"`
	Seed          *int64          `json:"seed"`
	Temperature   *float64        `json:"temperature"`
	wireTokenFlags
}

type generateRequest struct {
	Text           json.RawMessage `json:"text"`
	InputIDs       json.RawMessage `json:"input_ids"`
	SamplingParams *samplingParams `json:"sampling_params"`
	Stream         bool            `json:"stream"`
}

type samplingParams struct {
	MaxNewTokens *int     `json:"max_new_tokens"`
	SamplingSeed *int64   `json:"sampling_seed"`
	Temperature  *float64 `json:"temperature"`
}

// Defaults SGLang applies when the request names no length: the OpenAI
// completions API defaults max_tokens to 16 (CompletionRequest), /generate's
// SamplingParams default max_new_tokens to 128, and chat leaves it open
// (the scheduler caps it at the context).
const (
	defaultCompletionMaxTokens = 16
	defaultGenerateMaxNew      = 128
	maxChoices                 = 128
)

// job is what a parsed generation request asks for.
type job struct {
	api       api
	prompt    Prompt
	model     string
	maxTokens int  // -1: no limit but the context
	explicit  bool // the length is checked against the context
	given     bool // the request set the length itself
	n         int
	stream    bool
	opts      streamOptions
	usage     bool // stream_options.include_usage
	// continuous is stream_options.continuous_usage_stats (vLLM).
	continuous bool
	// requested is the model the request named ("" none).
	requested string
	tools     []wireTool
	// seed and temperature are the request's sampling settings (nil: not
	// sent), which pick its answer (sampling.go).
	seed        *int64
	temperature *float64
	// ids are the token ids the request asks for (tokenids.go).
	ids wireTokenFlags
	// think is what a chat request said of thinking (thinking.go).
	think thinkRequest
}

type api int

const (
	apiChat api = iota
	apiCompletion
	apiGenerate
	apiNative // llama.cpp's /completion
)

// requestError is a malformed request: SGLang answers 400 with the
// validation error in the message.
type requestError struct{ msg string }

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{msg: fmt.Sprintf(format, args...)}
}

// validationError renders a message the way FastAPI's RequestValidationError
// stringifies pydantic errors, which is what SGLang puts in the 400 body.
func validationError(typ, loc, msg string) error {
	return badRequest("[{'type': '%s', 'loc': ('body', %s), 'msg': '%s'}]", typ, loc, msg)
}

func decodeBody(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return validationError("missing", "", "Field required")
	}
	if err := json.Unmarshal(body, v); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return badRequest("[{'type': 'json_invalid', 'loc': ('body', %d), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': '%s'}}]", syn.Offset, syn.Error())
		}
		return badRequest("[{'type': 'model_attributes_type', 'loc': ('body',), 'msg': 'Input should be a valid dictionary or object to extract fields from: %s'}]", err.Error())
	}
	return nil
}

var chatRoles = map[string]bool{"system": true, "user": true, "assistant": true, "tool": true, "function": true, "developer": true}

// parseChat reads a /v1/chat/completions body.
func parseChat(body []byte) (*job, error) {
	var r chatRequest
	if err := decodeBody(body, &r); err != nil {
		return nil, err
	}
	if r.Messages == nil {
		return nil, validationError("missing", "'messages'", "Field required")
	}
	j := &job{api: apiChat, model: modelOrDefault(r.Model), requested: r.Model, maxTokens: -1, n: 1, stream: r.Stream, tools: r.Tools.list,
		seed: r.Seed, temperature: r.Temperature}
	j.prompt.Messages = make([]Message, len(r.Messages))
	for i, m := range r.Messages {
		if !chatRoles[m.Role] {
			return nil, validationError("value_error", fmt.Sprintf("'messages', %d, 'role'", i), "Value error, 'role' must be one of 'system', 'user', 'assistant', 'tool', 'function', 'developer' (case-insensitive).")
		}
		text, err := contentText(m.Content)
		if err != nil {
			return nil, validationError("string_type", fmt.Sprintf("'messages', %d, 'content'", i), err.Error())
		}
		j.prompt.Messages[i] = Message{Role: m.Role, Content: text}
	}
	j.prompt.history = historyOf(r.Messages)
	j.prompt.template = templateInput{messages: r.Messages, tools: r.Tools.raw, kwargs: r.ChatTemplateKwargs}
	j.ids = r.wireTokenFlags
	var err error
	if j.think, err = parseThinking(r.ChatTemplateKwargs, r.ReasoningEffort); err != nil {
		return nil, err
	}
	if r.MaxCompletionTokens != nil {
		j.maxTokens, j.explicit = *r.MaxCompletionTokens, true
	} else if r.MaxTokens != nil {
		j.maxTokens, j.explicit = *r.MaxTokens, true
	}
	j.given = j.explicit
	if err := setChoices(j, r.N); err != nil {
		return nil, err
	}
	return j, j.setStreamOptions(r.StreamOptions)
}

func (j *job) setStreamOptions(raw json.RawMessage) error {
	o, err := parseStreamOptions(raw)
	j.opts, j.usage, j.continuous = o, o.includeUsage, o.continuous
	return err
}

// contentText flattens a message content: a string, null, or an array of
// content parts whose text parts are concatenated.
func contentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "", nil
	case raw[0] == '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case raw[0] == '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", err
		}
		var b []byte
		for _, p := range parts {
			if p.Type == "text" {
				b = append(b, p.Text...)
			}
		}
		return string(b), nil
	}
	//lint:ignore ST1005 pydantic's message in SGLang's 400, byte for byte
	return "", errors.New("Input should be a valid string")
}

// parseCompletion reads a /v1/completions body. Only a single string
// prompt is simulated.
func parseCompletion(body []byte) (*job, error) {
	var r completionRequest
	if err := decodeBody(body, &r); err != nil {
		return nil, err
	}
	raw := bytes.TrimSpace(r.Prompt)
	if len(raw) == 0 {
		return nil, validationError("missing", "'prompt'", "Field required")
	}
	j := &job{api: apiCompletion, model: modelOrDefault(r.Model), requested: r.Model, maxTokens: defaultCompletionMaxTokens, explicit: true, n: 1, stream: r.Stream,
		seed: r.Seed, temperature: r.Temperature}
	j.ids = r.wireTokenFlags
	if raw[0] != '"' {
		return nil, validationError("string_type", "'prompt'", "llmsim simulates a single string prompt")
	}
	if err := json.Unmarshal(raw, &j.prompt.Text); err != nil {
		return nil, validationError("string_type", "'prompt'", "Input should be a valid string")
	}
	if r.MaxTokens != nil {
		if *r.MaxTokens <= 0 {
			return nil, validationError("value_error", "'max_tokens'", "Value error, max_tokens must be positive")
		}
		j.maxTokens, j.given = *r.MaxTokens, true
	}
	if err := setChoices(j, r.N); err != nil {
		return nil, err
	}
	return j, j.setStreamOptions(r.StreamOptions)
}

// parseGenerate reads a /generate body: text or input_ids, one prompt.
func parseGenerate(body []byte) (*job, error) {
	var r generateRequest
	if err := decodeBody(body, &r); err != nil {
		return nil, err
	}
	j := &job{api: apiGenerate, maxTokens: defaultGenerateMaxNew, n: 1, stream: r.Stream}
	text, ids := bytes.TrimSpace(r.Text), bytes.TrimSpace(r.InputIDs)
	switch {
	case len(text) > 0 && string(text) != "null":
		if text[0] != '"' {
			return nil, badRequest("llmsim simulates /generate with one text, not a batch")
		}
		if err := json.Unmarshal(text, &j.prompt.Text); err != nil {
			return nil, validationError("string_type", "'text'", "Input should be a valid string")
		}
	case len(ids) > 0 && string(ids) != "null":
		if err := json.Unmarshal(ids, &j.prompt.InputIDs); err != nil {
			return nil, badRequest("llmsim simulates /generate with one list of input_ids, not a batch")
		}
		if len(j.prompt.InputIDs) == 0 {
			return nil, badRequest("input_ids cannot be empty.")
		}
	default:
		return nil, badRequest("Either text, input_ids or input_embeds should be provided.")
	}
	if sp := r.SamplingParams; sp != nil {
		if sp.MaxNewTokens != nil {
			j.maxTokens, j.explicit, j.given = *sp.MaxNewTokens, true, true
		}
		j.seed, j.temperature = sp.SamplingSeed, sp.Temperature
	}
	return j, nil
}

// nativeRequest is llama.cpp's /completion body (tools/server/README.md):
// one prompt, a string or token ids; n_predict -1 is no limit.
type nativeRequest struct {
	Prompt      json.RawMessage `json:"prompt"`
	NPredict    *int            `json:"n_predict"`
	Stream      bool            `json:"stream"`
	Seed        *int64          `json:"seed"`
	Temperature *float64        `json:"temperature"`
	// ReturnTokens asks for the generated ids in "tokens".
	ReturnTokens bool `json:"return_tokens"`
}

func parseNative(body []byte) (*job, error) {
	var r nativeRequest
	if err := decodeBody(body, &r); err != nil {
		return nil, err
	}
	j := &job{api: apiNative, maxTokens: -1, n: 1, stream: r.Stream, seed: r.Seed, temperature: r.Temperature}
	if r.Seed != nil && (*r.Seed == -1 || *r.Seed == 1<<32-1) {
		j.seed = nil // llama.cpp's "random seed" (-1, LLAMA_DEFAULT_SEED)
	}
	raw := bytes.TrimSpace(r.Prompt)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil, badRequest("\"prompt\" must be provided")
	case raw[0] == '"':
		if err := json.Unmarshal(raw, &j.prompt.Text); err != nil {
			return nil, badRequest("\"prompt\" must be a string or an array of tokens")
		}
	default:
		if err := json.Unmarshal(raw, &j.prompt.InputIDs); err != nil || len(j.prompt.InputIDs) == 0 {
			return nil, badRequest("llmsim simulates /completion with one prompt: a string or a list of token ids")
		}
	}
	j.ids.ReturnTokenIDs = r.ReturnTokens
	if r.NPredict != nil && *r.NPredict >= 0 {
		j.maxTokens, j.given = *r.NPredict, true
	}
	return j, nil
}

func setChoices(j *job, n *int) error {
	if n == nil {
		return nil
	}
	if *n < 1 || *n > maxChoices {
		return validationError("value_error", "'n'", fmt.Sprintf("n must be between 1 and %d", maxChoices))
	}
	j.n = *n
	return nil
}

// defaultModelName is what SGLang echoes when a request names no model
// (protocol.py DEFAULT_MODEL_NAME).
const defaultModelName = "default"

func modelOrDefault(m string) string {
	if m == "" {
		return defaultModelName
	}
	return m
}

// JSON writing. Responses are appended by hand, in SGLang's field order,
// so the simulator answers tens of thousands of requests a second.

func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendEscaped(dst, s)
	return append(dst, '"')
}

// appendEscaped appends s JSON-escaped, without quotes. Bytes that are not
// UTF-8 (a garbage body quoted in an error) become U+FFFD, as Python's
// decoding of the body before SGLang quotes it does.
func appendEscaped(dst []byte, s string) []byte {
	const hexdigits = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(append(dst, s[start:i]...), `\ufffd`...)
				start = i + 1
			} else {
				i += size - 1
			}
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexdigits[c>>4], hexdigits[c&0xf])
		}
		start = i + 1
	}
	return append(dst, s[start:]...)
}

func appendInt(dst []byte, n int) []byte { return strconv.AppendInt(dst, int64(n), 10) }

func appendFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

// errorBody is SGLang's flat OpenAI-API error (protocol.py ErrorResponse,
// serving_base.py create_error_response).
func appendErrorBody(dst []byte, msg, typ string, code int) []byte {
	dst = append(dst, `{"object":"error","message":`...)
	dst = appendString(dst, msg)
	dst = append(dst, `,"type":`...)
	dst = appendString(dst, typ)
	dst = append(dst, `,"param":null,"code":`...)
	dst = appendInt(dst, code)
	return append(dst, '}')
}

// appendNativeError is the body of /generate's errors (http_server.py
// _create_error_response): {"error": {"message": ...}}.
func appendNativeError(dst []byte, msg string) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = appendString(dst, msg)
	return append(dst, `}}`...)
}

// appendStreamError is an error sent inside an SSE stream
// (serving_base.py create_streaming_error_response).
func appendStreamError(dst []byte, msg, typ string, code int) []byte {
	dst = append(dst, `data: {"error":`...)
	dst = appendErrorBody(dst, msg, typ, code)
	return append(dst, "}\n\n"...)
}
