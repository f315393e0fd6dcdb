package openai

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/record"
)

// Token ids: where each kind of server returns the ids it used for an
// answer (infer --token-ids), read from each server's source:
//
//	vLLM 0.10.2 and later (vllm/entrypoints/openai/chat_completion/protocol.py
//	  ChatCompletionRequest.return_token_ids, ChatCompletionResponse.prompt_token_ids,
//	  ChatCompletionResponseChoice.token_ids; completion/protocol.py
//	  CompletionResponseChoice.prompt_token_ids and token_ids): the request
//	  says "return_token_ids": true; a chat answer has the prompt's ids at its
//	  top and the answer's in its choice, a completion both in its choice.
//	vLLM before 0.10.2 has no such field: the answer's ids come from its
//	  logprobs with "return_tokens_as_token_ids" (each token "token_id:N"),
//	  the prompt's from POST /tokenize with the messages
//	  (serving_tokenization.py), which applies the same chat template.
//	SGLang (python/sglang/srt/entrypoints/openai/protocol.py, read at
//	  commit 004c82e0; serving_chat.py refuses them with a stream):
//	  "return_token_ids" and "return_prompt_token_ids": each choice carries
//	  "prompt_token_ids" and "token_ids", on chat and completions. Its
//	  native /generate answers "output_ids"; its prompt is sent as
//	  "input_ids", tokenized first by POST /v1/tokenize.
//	llama.cpp (tools/server/README.md, server-task.cpp): its
//	  OpenAI-compatible answers carry no ids; POST /completion with
//	  "return_tokens": true answers them in "tokens", and takes the prompt
//	  as ids, which POST /apply-template (the chat template applied) and
//	  POST /tokenize (with add_special, as its chat route tokenizes) give.
//	Ollama (0.6.5: openai/openai.go, api/types.go) and OpenAI-style
//	  gateways: no route answers the generated ids.

// TokenShape is where a server returns token ids.
type TokenShape int

const (
	// ShapeNone: the server returns no ids.
	ShapeNone TokenShape = iota
	// ShapeVLLM: return_token_ids (vLLM 0.10.2+).
	ShapeVLLM
	// ShapeVLLMLogprobs: logprobs' tokens as ids (vLLM before 0.10.2); the
	// prompt's ids from /tokenize.
	ShapeVLLMLogprobs
	// ShapeSGLang: the choice's prompt_token_ids and token_ids; /generate's
	// output_ids, its prompt sent as input_ids.
	ShapeSGLang
	// ShapeLlama: llama.cpp's /completion with the prompt as ids and
	// return_tokens.
	ShapeLlama
)

// PathLlamaCompletion is llama.cpp's own completion route.
const PathLlamaCompletion = "/completion"

// TokenIDsFields are the request fields that ask a server of shape s for
// the ids of an answer of api a, as a JSON object to merge into the body.
func TokenIDsFields(s TokenShape, a API) []byte {
	switch {
	case s == ShapeVLLM:
		return []byte(`{"return_token_ids":true}`)
	case s == ShapeVLLMLogprobs && a == APIChat:
		return []byte(`{"logprobs":true,"top_logprobs":0,"return_tokens_as_token_ids":true}`)
	case s == ShapeSGLang && a == APIChat:
		return []byte(`{"return_token_ids":true,"return_prompt_token_ids":true}`)
	case s == ShapeSGLang && a == APICompletions:
		return []byte(`{"return_token_ids":true}`)
	}
	return nil
}

// wireIDs are the places a body may hold ids.
type wireIDs struct {
	PromptTokenIDs []int32 `json:"prompt_token_ids"`
	OutputIDs      []int32 `json:"output_ids"` // SGLang /generate
	Tokens         []int32 `json:"tokens"`     // llama.cpp /completion
	Choices        []struct {
		PromptTokenIDs []int32 `json:"prompt_token_ids"`
		TokenIDs       []int32 `json:"token_ids"`
		Logprobs       *struct {
			Content []struct {
				Token string `json:"token"`
			} `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
}

// ParseTokenIDs reads the ids of the first answer of a body of api a from
// a server of shape s: nil where the body holds none (the caller knows
// the prompt's ids it sent, where the server does not return them).
func ParseTokenIDs(s TokenShape, a API, body []byte) (prompt, answer []int32, err error) {
	prompt, answer, err = parseTokenIDs(s, a, body)
	for _, ids := range [][]int32{prompt, answer} {
		for _, id := range ids {
			if id < 0 {
				return nil, nil, fmt.Errorf("a negative token id (%d): not an id a tokenizer gives", id)
			}
		}
	}
	return prompt, answer, err
}

func parseTokenIDs(s TokenShape, a API, body []byte) (prompt, answer []int32, err error) {
	var w wireIDs
	if err := decode(body, &w); err != nil {
		return nil, nil, err
	}
	switch {
	case s == ShapeLlama:
		return nil, w.Tokens, nil
	case a == APIGenerate:
		return nil, w.OutputIDs, nil
	case len(w.Choices) == 0:
		return nil, nil, nil
	}
	ch := w.Choices[0]
	switch s {
	case ShapeVLLM:
		prompt = ch.PromptTokenIDs
		if a == APIChat {
			prompt = w.PromptTokenIDs
		}
		return prompt, ch.TokenIDs, nil
	case ShapeVLLMLogprobs:
		if ch.Logprobs == nil {
			return nil, nil, nil
		}
		answer = make([]int32, 0, len(ch.Logprobs.Content))
		for _, t := range ch.Logprobs.Content {
			id, ok := strings.CutPrefix(t.Token, "token_id:")
			n, err := strconv.ParseInt(id, 10, 32)
			if !ok || err != nil {
				return nil, nil, fmt.Errorf("a logprobs token %q is not token_id:N", t.Token)
			}
			answer = append(answer, int32(n))
		}
		return nil, answer, nil
	}
	return ch.PromptTokenIDs, ch.TokenIDs, nil
}

// chatIDsChoice is a chat answer's choice with the places of ids (those
// of wireIDs' choices).
type chatIDsChoice struct {
	ChatChoice
	PromptTokenIDs []int32 `json:"prompt_token_ids"`
	TokenIDs       []int32 `json:"token_ids"`
	Logprobs       *struct {
		Content []struct {
			Token string `json:"token"`
		} `json:"content"`
	} `json:"logprobs"`
}

// ParseChatTokenIDs is ParseChat and ParseTokenIDs of a chat answer from a
// server of shape ShapeSGLang or ShapeVLLM in one reading of body (which
// reads every field either reads, as each reads it): the body, whose ids
// are most of it, is not read twice. On an error the caller reads it
// with both, which tell a fault of the answer from one of its ids.
func ParseChatTokenIDs(s TokenShape, body []byte) (c Completion, prompt, answer []int32, err error) {
	var r struct {
		Response[*chatIDsChoice]
		PromptTokenIDs []int32 `json:"prompt_token_ids"` // vLLM's chat: the prompt's at the top
		OutputIDs      []int32 `json:"output_ids"`
		Tokens         []int32 `json:"tokens"`
	}
	if err := decode(body, &r); err != nil {
		return Completion{}, nil, nil, err
	}
	c, err = firstOf(&r.Response, func(ch *chatIDsChoice) (Completion, error) { return chatAnswer(&ch.ChatChoice) },
		func(ch *chatIDsChoice) *string { return ch.FinishReason })
	if err != nil {
		return Completion{}, nil, nil, err
	}
	ch := r.Choices[0]
	if s == ShapeVLLM {
		return c, r.PromptTokenIDs, ch.TokenIDs, nil
	}
	return c, ch.PromptTokenIDs, ch.TokenIDs, nil
}

// LlamaCompletionBody turns a chat or completion request body into
// llama.cpp's /completion body for the same answer: the prompt as ids,
// max_tokens as n_predict, return_tokens; every other setting carried over
// but the fields of the chat route (messages, tools, the model, stream).
func LlamaCompletionBody(body []byte, prompt []int32) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, fmt.Errorf("the request body: %w", err)
	}
	for _, k := range []string{"messages", "prompt", "tools", "tool_choice", "parallel_tool_calls", "model", "stream", "stream_options", "n"} {
		delete(fields, k)
	}
	for _, k := range []string{"max_completion_tokens", "max_tokens"} {
		if v, ok := fields[k]; ok {
			if _, set := fields["n_predict"]; !set && string(bytes.TrimSpace(v)) != "null" {
				fields["n_predict"] = v
			}
			delete(fields, k)
		}
	}
	ids, err := json.Marshal(prompt)
	if err != nil {
		return nil, err
	}
	fields["prompt"], fields["return_tokens"] = ids, json.RawMessage("true")
	return json.Marshal(fields)
}

// GenerateIDsBody is a /generate body with its text replaced by the ids
// it tokenizes to, so that the ids the server runs are the ones recorded.
func GenerateIDsBody(body []byte, prompt []int32) ([]byte, error) {
	stripped, err := record.WithoutFields(nil, body, "text")
	if err != nil {
		return nil, err
	}
	ids, err := json.Marshal(prompt)
	if err != nil {
		return nil, err
	}
	return record.AppendField(nil, stripped, "input_ids", ids)
}

// llamaCompletion is the part of llama.cpp's /completion answer read.
type llamaCompletion struct {
	Content         *string `json:"content"`
	StopType        string  `json:"stop_type"`
	TokensPredicted int     `json:"tokens_predicted"`
	TokensEvaluated int     `json:"tokens_evaluated"`
	Model           string  `json:"model"`
	Timings         *struct {
		CacheN *int `json:"cache_n"`
	} `json:"timings"`
}

// ParseLlamaCompletion reads llama.cpp's /completion answer: its text,
// its finish (stop_type eos or word: stop; limit: length) and counts.
func ParseLlamaCompletion(body []byte) (Completion, error) {
	var r llamaCompletion
	if err := decode(body, &r); err != nil {
		return Completion{}, err
	}
	if r.Content == nil {
		return Completion{}, fmt.Errorf("%w: no content", ErrNotAnswer)
	}
	c := Completion{Text: *r.Content, PromptTokens: r.TokensEvaluated, CompletionTokens: r.TokensPredicted, Model: r.Model}
	switch r.StopType {
	case "eos", "word":
		c.FinishReason = record.FinishStop
	case "limit":
		c.FinishReason = record.FinishLength
	default:
		return Completion{}, fmt.Errorf("%w: stop_type %q", ErrNotAnswer, r.StopType)
	}
	if r.Timings != nil {
		c.CachedTokens = r.Timings.CacheN
	}
	return c, nil
}

// samplingKeys are the settings SamplingOf keeps, in every API's names.
var samplingKeys = map[string]bool{
	"temperature": true, "top_p": true, "top_k": true, "min_p": true, "seed": true, "sampling_seed": true,
	"max_tokens": true, "max_completion_tokens": true, "max_new_tokens": true, "n_predict": true, "stop": true,
	"presence_penalty": true, "frequency_penalty": true, "repetition_penalty": true, "min_tokens": true, "min_new_tokens": true,
}

// SamplingOf is the sampling settings a request body sends (at its top,
// or in /generate's sampling_params), as one JSON object with keys in
// sorted order; nil when it sends none.
func SamplingOf(body []byte) json.RawMessage {
	if sp, err := record.FieldValue(body, "sampling_params"); err == nil && sp != nil {
		body = sp
	}
	keys := make([]string, 0, 8)
	values := map[string][]byte{}
	record.EachField(body, func(key string, value []byte) error {
		if samplingKeys[key] {
			if _, seen := values[key]; !seen {
				keys = append(keys, key)
			}
			values[key] = value // the last of repeated names counts
		}
		return nil
	})
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(keys)
	out := []byte{'{'}
	for i, k := range keys {
		if i > 0 {
			out = append(out, ',')
		}
		out = json.AppendEscape(out, k, 0)
		out = append(out, ':')
		out = append(out, bytes.TrimSpace(values[k])...)
	}
	return append(out, '}')
}

// ErrNoTokenIDs is what an answer without the ids asked for is.
var ErrNoTokenIDs = errors.New("the answer carries no token ids")

// CheckTokenIDs tells whether an answer's ids are whole: both present
// and as many as its usage counts.
func CheckTokenIDs(c *Completion, prompt, answer []int32) error {
	switch {
	case len(prompt) == 0 && len(answer) == 0:
		return fmt.Errorf("%w (neither prompt_token_ids nor token_ids)", ErrNoTokenIDs)
	case len(prompt) == 0:
		return fmt.Errorf("%w: no prompt token ids", ErrNoTokenIDs)
	case len(answer) == 0 && c.CompletionTokens > 0:
		return fmt.Errorf("%w: no answer token ids for %d completion tokens", ErrNoTokenIDs, c.CompletionTokens)
	case len(prompt) != c.PromptTokens:
		return fmt.Errorf("%w: %d prompt token ids for %d prompt tokens in the usage", ErrNoTokenIDs, len(prompt), c.PromptTokens)
	case len(answer) != c.CompletionTokens:
		return fmt.Errorf("%w: %d answer token ids for %d completion tokens in the usage", ErrNoTokenIDs, len(answer), c.CompletionTokens)
	}
	return nil
}
