package llmsim

import (
	"bytes"
	"math"

	"github.com/segmentio/encoding/json"
)

// Thinking on and off. A reasoning model's chat template (Qwen3,
// DeepSeek V3.1) reads chat_template_kwargs.enable_thinking (or
// .thinking); gpt-oss and OpenAI's reasoning models read reasoning_effort.
// A chat request that turns thinking on gets reasoning before its answer,
// longer the more effort it asks for; one that turns it off gets the
// answer alone; one that says nothing is answered as before (reasoning
// with Config.Reasoning, none without). Where the reasoning goes is the
// server's: in the reasoning field when it runs a reasoning parser
// (Config.Reasoning), counted only by an API that hides it (OpenAI), and
// otherwise left in the content as one <think> block before the answer,
// as a server without a reasoning parser returns it.

// thinkKnobs are the request fields a flavour's chat templates read.
type thinkKnobs struct {
	// kwargs: chat_template_kwargs reach the template (SGLang, vLLM, and
	// llama.cpp's --jinja server).
	kwargs bool
	// effort: reasoning_effort is read (SGLang and vLLM pass it to
	// gpt-oss's template; OpenAI's reasoning models).
	effort bool
}

// thinkingKnobs is the dialect table's column for thinking: Ollama 0.6.5
// has neither (its "think" field came later).
var thinkingKnobs = map[Flavor]thinkKnobs{
	FlavorSGLang:   {kwargs: true, effort: true},
	FlavorVLLM:     {kwargs: true, effort: true},
	FlavorVLLM0100: {kwargs: true, effort: true},
	FlavorLlamaCpp: {kwargs: true},
	FlavorOpenAI:   {effort: true},
}

// thinkRequest is what a chat request said of thinking.
type thinkRequest struct {
	on     *bool  // chat_template_kwargs.enable_thinking or .thinking; nil: not said
	effort string // reasoning_effort (top level, or in chat_template_kwargs); "": not said
}

// parseThinking reads the request's chat_template_kwargs and
// reasoning_effort.
func parseThinking(kwargs json.RawMessage, effort *string) (thinkRequest, error) {
	var t thinkRequest
	if effort != nil {
		t.effort = *effort
	}
	if kw := bytes.TrimSpace(kwargs); len(kw) > 0 && string(kw) != "null" {
		var k struct {
			EnableThinking  *bool   `json:"enable_thinking"`
			Thinking        *bool   `json:"thinking"`
			ReasoningEffort *string `json:"reasoning_effort"`
		}
		if err := json.Unmarshal(kw, &k); err != nil {
			return t, validationError("dict_type", "'chat_template_kwargs'", "Input should be a valid dictionary")
		}
		t.on = k.EnableThinking
		if t.on == nil {
			t.on = k.Thinking
		}
		if t.effort == "" && k.ReasoningEffort != nil {
			t.effort = *k.ReasoningEffort
		}
	}
	return t, nil
}

// effortFactors are the reasoning's length against an answer's: the
// more effort, the longer the model thinks.
var effortFactors = map[string]float64{"minimal": 0.25, "low": 0.5, "medium": 1.5, "high": 4}

// thinkingLength is how many tokens of reasoning choice's answer gets: -1
// when the request said nothing of thinking that the flavour reads, 0
// when it turned thinking off.
func (e *Endpoint) thinkingLength(j *job, sample uint64, choice int) (int, error) {
	if j.api != apiChat {
		return -1, nil
	}
	k := thinkingKnobs[e.d.flavor]
	said, on, effort := false, false, "medium"
	if k.kwargs && j.think.on != nil {
		said, on = true, *j.think.on
	}
	if k.effort && j.think.effort != "" {
		if _, ok := effortFactors[j.think.effort]; !ok {
			return 0, validationError("literal_error", "'reasoning_effort'", "Input should be 'minimal', 'low', 'medium' or 'high'")
		}
		effort = j.think.effort
		if !said {
			said, on = true, true
		}
	}
	switch {
	case !said:
		return -1, nil
	case !on:
		return 0, nil
	}
	return ThinkingLength(sample, choice, effort), nil
}

// ThinkingLength is how many tokens of reasoning the simulated model
// writes, thinking at effort ("" is medium), for the answer whose sample
// hash is sample (the prompt's digest hash when it decodes greedily):
// lognormal like the answers, effortFactors times as long.
func ThinkingLength(sample uint64, choice int, effort string) int {
	f, ok := effortFactors[effort]
	if !ok {
		f = effortFactors["medium"]
	}
	return max(1, int(math.Round(f*float64(NaturalLength(mix64(sample^0x3c6ef372fe94f82b), choice)))))
}

// planThinking gives choice c its reasoning of think tokens (thinkingLength;
// -1 keeps the answer as Config.Reasoning has it), before its answer of
// natural tokens, within limit.
func (e *Endpoint) planThinking(c *choiceState, think, natural, limit int) {
	if think < 0 {
		return
	}
	total := natural
	c.reasoning = 0
	if think > 0 {
		if e.parsesReasoning() {
			c.reasoning = think
			total += think
		} else {
			c.inline = think + 2 // <think> and </think>
			total += think + 2
		}
	}
	c.Target, c.End = total, finishStop
	if total > limit {
		c.Target, c.End = limit, finishLength
	}
}

// parsesReasoning tells an endpoint that takes the reasoning out of the
// content (a reasoning parser, or an API that hides it).
func (e *Endpoint) parsesReasoning() bool {
	return e.d.hiddenReasoning || e.d.reasoning != "" && e.f.cfg.Reasoning
}

// appendInlineThink appends tokens [from, to) of the think block left in
// the content: <think>, the reasoning (starting with the prompt digest),
// </think>.
func (c *choiceState) appendInlineThink(dst []byte, from, to int) []byte {
	for k := from; k < to; k++ {
		switch k {
		case 0:
			dst = append(dst, "<think>\n"...)
		case c.inline - 1:
			dst = append(dst, "\n</think>\n\n"...)
		default:
			dst = appendToken(dst, c.f.digest, ^c.words, k-1)
		}
	}
	return dst
}
