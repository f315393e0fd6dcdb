package llmsim

import (
	"math"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"
)

// Token ids on the wire: what each flavour answers when a request asks
// for the ids it used (the dialect's tokenIDs). Sources:
//
//	vLLM 0.10.2 and later (vllm/entrypoints/openai/chat_completion/protocol.py,
//	  completion/protocol.py): "return_token_ids": true; a chat answer carries
//	  "prompt_token_ids" at its top and "token_ids" in each choice, a
//	  completion both in each choice. Every release: "logprobs": true with
//	  "return_tokens_as_token_ids": true writes each logprob's token as
//	  "token_id:N"; /tokenize takes messages (serving_tokenization.py).
//	SGLang (python/sglang/srt/entrypoints/openai/protocol.py, read at
//	  commit 004c82e0): "return_token_ids" (and "return_prompt_token_ids"):
//	  each choice of a chat or completion answer carries "prompt_token_ids"
//	  and "token_ids"; /generate answers "output_ids".
//	llama.cpp (tools/server/README.md): /completion with "return_tokens":
//	  true fills "tokens"; its OpenAI-compatible chat answer has no ids;
//	  POST /apply-template renders messages, POST /tokenize tokenizes (its
//	  special tokens parsed).
//	Ollama 0.6.5, OpenAI: no ids anywhere.
//
// A request that is streamed gets none (SGLang refuses the flags with a
// stream; llmsim ignores them).

// wireTokenFlags are the request fields that ask for ids.
type wireTokenFlags struct {
	ReturnTokenIDs         bool `json:"return_token_ids"`
	ReturnPromptTokenIDs   bool `json:"return_prompt_token_ids"`
	Logprobs               bool `json:"logprobs"`
	ReturnTokensAsTokenIDs bool `json:"return_tokens_as_token_ids"`
}

// tokenStyle is where a flavour puts the ids a request asks for.
type tokenStyle struct {
	chatPromptTop bool // vLLM: the chat prompt's ids at the answer's top
	choiceIDs     bool // choices carry token_ids (vLLM, SGLang)
	choicePrompt  bool // chat choices carry prompt_token_ids too (SGLang)
	cmplChoice    bool // completion choices carry both (vLLM, SGLang)
	logprobIDs    bool // vLLM: logprobs' tokens as "token_id:N"
	nativeTokens  bool // llama.cpp /completion: "tokens"
}

// wireHistCall is one tool call of a history's assistant turn.
type wireHistCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// historyOf is the extras of a request's messages: nil when none has any.
func historyOf(msgs []wireMessage) []turnExtra {
	var out []turnExtra
	for i, m := range msgs {
		x := turnExtra{reasoning: derefString(m.ReasoningContent), calls: histCalls(m.ToolCalls)}
		if x.reasoning == "" && x.calls == nil {
			continue
		}
		if out == nil {
			out = make([]turnExtra, len(msgs))
		}
		out[i] = x
	}
	return out
}

func histCalls(w []wireHistCall) []toolCall {
	if len(w) == 0 {
		return nil
	}
	out := make([]toolCall, len(w))
	for i, c := range w {
		args := string(c.Function.Arguments)
		var s string
		if json.Unmarshal(c.Function.Arguments, &s) == nil {
			args = s
		}
		out[i] = toolCall{name: c.Function.Name, args: args}
	}
	return out
}

func derefString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// StopTokenIDsAfter makes the endpoint answer n more requests with the
// token ids they ask for and none after (n < 0: every one, the default),
// as a server replaced mid-run by a release without them would.
func (e *Endpoint) StopTokenIDsAfter(n int) {
	if n < 0 {
		e.idsLeft.Store(math.MaxInt64)
		return
	}
	e.idsLeft.Store(int64(n))
}

// withIDs tells, once per flight, whether the endpoint still answers ids.
func (f *flight) withIDs() bool {
	if f.ids == 0 {
		f.ids = 1
		if f.e.idsLeft.Add(-1) < 0 {
			f.ids = 2
		}
	}
	return f.ids == 1
}

// wants is what of the ids the flight's answer carries.
func (f *flight) wants() (answer, prompt, logprobs bool) {
	j := f.job
	if f.stream {
		return false, false, false
	}
	st := f.e.d.tokenIDs
	switch j.api {
	case apiChat:
		answer = st.choiceIDs && j.ids.ReturnTokenIDs
		prompt = (st.chatPromptTop && j.ids.ReturnTokenIDs) || (st.choicePrompt && (j.ids.ReturnTokenIDs || j.ids.ReturnPromptTokenIDs))
		logprobs = st.logprobIDs && j.ids.Logprobs && j.ids.ReturnTokensAsTokenIDs
	case apiCompletion:
		answer = st.cmplChoice && j.ids.ReturnTokenIDs
		prompt = answer
	case apiNative:
		answer = st.nativeTokens && j.ids.ReturnTokenIDs
	}
	if (answer || prompt || logprobs) && !f.withIDs() {
		return false, false, false
	}
	return answer, prompt, logprobs
}

// appendChoiceIDs writes a choice's prompt_token_ids and token_ids, as
// the request asked and the flavour has them.
func (f *flight) appendChoiceIDs(dst []byte, c *choiceState) []byte {
	answer, prompt, _ := f.wants()
	chat := f.job.api == apiChat
	if prompt && (!chat || !f.e.d.tokenIDs.chatPromptTop) {
		dst = append(dst, `,"prompt_token_ids":`...)
		dst = appendIDs(dst, f.promptIDs())
	}
	if answer {
		dst = append(dst, `,"token_ids":`...)
		dst = appendIDs(dst, c.answerIDs(int(c.visible.Load())))
	}
	return dst
}

// appendTopIDs writes vLLM's top-level prompt_token_ids of a chat answer.
func (f *flight) appendTopIDs(dst []byte) []byte {
	if _, prompt, _ := f.wants(); prompt && f.job.api == apiChat && f.e.d.tokenIDs.chatPromptTop {
		dst = append(dst, `,"prompt_token_ids":`...)
		dst = appendIDs(dst, f.promptIDs())
	}
	return dst
}

// promptIDs are the ids the flight's prompt was charged as.
func (f *flight) promptIDs() []int {
	if f.inputIDs == nil {
		// Only a model's template refuses a prompt, and its ids were kept
		// when the flight was charged.
		f.inputIDs, _ = f.e.tok().prompt(&f.job.prompt)
	}
	return f.inputIDs
}

// appendLogprobs writes a choice's logprobs: null, or with vLLM's
// return_tokens_as_token_ids one entry per generated token.
func (c *choiceState) appendLogprobs(dst []byte) []byte {
	if _, _, lp := c.f.wants(); !lp {
		return append(dst, "null"...)
	}
	dst = append(dst, `{"content":[`...)
	for i, id := range c.answerIDs(int(c.visible.Load())) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"token":"token_id:`...)
		dst = appendInt(dst, id)
		dst = append(dst, `","logprob":-0.5,"bytes":null,"top_logprobs":[]}`...)
	}
	return append(dst, "]}"...)
}

// appendNativeTokens writes /completion's "tokens": the generated ids
// with return_tokens, else none.
func (f *flight) appendNativeTokens(dst []byte, n int) []byte {
	if answer, _, _ := f.wants(); answer {
		return appendIDs(dst, f.choices[0].answerIDs(n))
	}
	return append(dst, "[]"...)
}

// serveLlamaApplyTemplate: POST /apply-template (tools/server/README.md):
// {"messages": [...]} → {"prompt": the rendered text}. It reads the body
// as the chat route does (oaicompat_chat_params_parse: a whole chat
// request is taken, its other fields unread here): tools,
// chat_template_kwargs and add_generation_prompt (default true) reach a
// model's template as they reach it in a chat request, tools not where
// the template renders none; the text leaves out the begin-of-text token
// the chat route adds.
func serveLlamaApplyTemplate(e *Endpoint, ctx *fasthttp.RequestCtx) {
	var r struct {
		Messages            []wireMessage   `json:"messages"`
		Tools               json.RawMessage `json:"tools"`
		ChatTemplateKwargs  json.RawMessage `json:"chat_template_kwargs"`
		AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	}
	if err := json.Unmarshal(ctx.PostBody(), &r); err != nil || r.Messages == nil {
		e.fail(ctx, apiChat, newAPIError(errInvalid, fasthttp.StatusBadRequest, "\"messages\" must be provided"))
		return
	}
	p, err := conversationPrompt(r.Messages, r.Tools, r.ChatTemplateKwargs)
	if err != nil {
		e.fail(ctx, apiChat, newAPIError(errInvalid, fasthttp.StatusBadRequest, "%s", err.Error()))
		return
	}
	text, err := e.tok().renderChat(&p, orTrue(r.AddGenerationPrompt))
	if err != nil {
		e.fail(ctx, apiChat, asAPIError(err))
		return
	}
	b := []byte(`{"prompt":`)
	b = appendString(b, text)
	answerJSON(ctx, ctJSONUTF8, append(b, '}'))
}
