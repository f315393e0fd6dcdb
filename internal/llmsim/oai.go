package llmsim

import (
	"strconv"
)

// oaiStyle is how an OpenAI-compatible flavour (vLLM, llama.cpp, Ollama,
// an OpenAI gateway) lays out its answers. Key order does not matter to
// JSON; which keys appear, and their values, do.
type oaiStyle struct {
	shortID      bool   // Ollama 0.6.5: chatcmpl-<n>, n < 999
	fingerprint  string // JSON literal of system_fingerprint; "" leaves it out
	logprobs     bool   // chat choices carry "logprobs": null
	cmplLogprobs bool   // completion choices carry "logprobs": null
	stopReason   bool   // vLLM: "stop_reason": null with finish_reason
	// reasoningNull: the message carries the reasoning field as null when
	// there is no reasoning (vLLM); otherwise it appears only when set.
	reasoningNull bool
	messageExtra  string // literal fields added to a chat message
	noToolCalls   string // literal tool_calls field of a message without calls
	// wholeToolCalls: a stream sends each call whole, in one chunk (Ollama).
	wholeToolCalls  bool
	chatExtra       string // literal top-level fields of a chat answer
	cmplExtra       string // literal top-level fields of a completion answer
	cmplChoiceExtra string // literal fields of a completion choice
	chunkExtra      string // literal top-level fields of every chunk
	firstDelta      string // the delta opening a chat stream ("" none)
	roleInDeltas    bool   // Ollama repeats the role in every delta
	lastDelta       string // the delta of the chunk that carries finish_reason
	usage           usageStyle
	usageNulls      bool // OpenAI: with include_usage every chunk has "usage": null
	continuous      bool // vLLM: continuous_usage_stats puts usage in every chunk
	// strictStreamOptions: stream_options keys other than include_usage are
	// a 400 (OpenAI); streamOptionsNeedStream: stream_options without
	// stream is a 400 (vLLM).
	strictStreamOptions, streamOptionsNeedStream bool
	timings                                      bool // llama.cpp: a timings object
	sse, json                                    []byte
}

type usageStyle int

const (
	usagePlain  usageStyle = iota // prompt, completion, total
	usageVLLM                     // plus prompt_tokens_details (null unless reported)
	usageOpenAI                   // plus prompt and completion token details
)

func (s *oaiStyle) jsonType() []byte {
	if s.json != nil {
		return s.json
	}
	return ctJSON
}

func (f *flight) appendOAIID(dst []byte, prefix string) []byte {
	dst = append(dst, '"')
	dst = append(dst, prefix...)
	if f.e.d.oai.shortID {
		dst = strconv.AppendUint(dst, f.hash%999, 10)
	} else {
		dst = append(dst, f.id...)
	}
	return append(dst, '"')
}

func (s *oaiStyle) head(dst []byte, f *flight, object string) []byte {
	prefix := "chatcmpl-"
	if f.job.api == apiCompletion {
		prefix = "cmpl-"
	}
	dst = append(dst, `{"id":`...)
	dst = f.appendOAIID(dst, prefix)
	dst = append(dst, `,"object":"`...)
	dst = append(dst, object...)
	dst = append(dst, `","created":`...)
	dst = appendInt(dst, int(f.created))
	dst = append(dst, `,"model":`...)
	dst = appendString(dst, f.job.model)
	if s.fingerprint != "" {
		dst = append(dst, `,"system_fingerprint":`...)
		dst = append(dst, s.fingerprint...)
	}
	return dst
}

// appendUsage writes the usage object after the tokens produced so far.
func (s *oaiStyle) appendUsage(dst []byte, f *flight) []byte {
	comp, reasoning := f.completionTokens()
	dst = append(dst, `{"prompt_tokens":`...)
	dst = appendInt(dst, f.prompt)
	dst = append(dst, `,"completion_tokens":`...)
	dst = appendInt(dst, comp)
	dst = append(dst, `,"total_tokens":`...)
	dst = appendInt(dst, f.prompt+comp)
	switch s.usage {
	case usageVLLM:
		if f.reportCached() {
			dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
			dst = appendInt(dst, f.cached)
			dst = append(dst, '}')
		} else {
			dst = append(dst, `,"prompt_tokens_details":null`...)
		}
	case usageOpenAI:
		dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
		dst = appendInt(dst, f.cached)
		dst = append(dst, `,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":`...)
		dst = appendInt(dst, reasoning)
		dst = append(dst, `,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}`...)
	}
	return append(dst, '}')
}

// appendTimings writes llama.cpp's timings object (server-task.cpp
// result_timings::to_json) from the simulated clock.
func (f *flight) appendTimings(dst []byte) []byte {
	comp, _ := f.completionTokens()
	total := f.e2e() * 1000
	computed := f.prompt - f.cached
	prompt := min(total, float64(computed)*f.e.f.cfg.Timing.PrefillPerToken.Seconds()*1000)
	predicted := total - prompt
	dst = append(dst, `,"timings":{"cache_n":`...)
	dst = appendInt(dst, f.cached)
	dst = append(dst, `,"prompt_n":`...)
	dst = appendInt(dst, computed)
	dst = append(dst, `,"prompt_ms":`...)
	dst = appendFloat(dst, prompt)
	dst = append(dst, `,"prompt_per_token_ms":`...)
	dst = appendFloat(dst, ratio(prompt, float64(computed)))
	dst = append(dst, `,"prompt_per_second":`...)
	dst = appendFloat(dst, ratio(float64(computed)*1000, prompt))
	dst = append(dst, `,"predicted_n":`...)
	dst = appendInt(dst, comp)
	dst = append(dst, `,"predicted_ms":`...)
	dst = appendFloat(dst, predicted)
	dst = append(dst, `,"predicted_per_token_ms":`...)
	dst = appendFloat(dst, ratio(predicted, float64(comp)))
	dst = append(dst, `,"predicted_per_second":`...)
	dst = appendFloat(dst, ratio(float64(comp)*1000, predicted))
	return append(dst, '}')
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// appendFinishValue writes the finish_reason of a choice.
func appendFinishValue(dst []byte, c *choiceState, ended bool) []byte {
	if !ended {
		return append(dst, "null"...)
	}
	dst = append(dst, '"')
	dst = append(dst, c.End...)
	return append(dst, '"')
}

func (s *oaiStyle) appendMessage(dst []byte, f *flight, c *choiceState, n int) []byte {
	if c.calls != nil {
		if s.wholeToolCalls {
			dst = append(dst, `{"role":"assistant","content":""`...)
		} else {
			dst = append(dst, `{"role":"assistant","content":null`...)
		}
		if field := f.e.d.reasoning; field != "" && s.reasoningNull {
			dst = append(dst, `,"`+field+`":null`...)
		}
		dst = append(dst, s.messageExtra...)
		dst = append(dst, `,"tool_calls":`...)
		return append(c.appendToolCalls(dst, s.wholeToolCalls), '}')
	}
	dst = append(dst, `{"role":"assistant","content":"`...)
	dst = escapeInPlace(dst, func(b []byte) []byte { return c.appendContent(b, 0, n) })
	dst = append(dst, '"')
	if field := f.e.d.reasoning; field != "" {
		if c.reasoningTokens(n) > 0 {
			dst = append(dst, `,"`+field+`":"`...)
			dst = escapeInPlace(dst, func(b []byte) []byte { return c.appendReasoning(b, 0, n) })
			dst = append(dst, '"')
		} else if s.reasoningNull {
			dst = append(dst, `,"`+field+`":null`...)
		}
	}
	dst = append(dst, s.messageExtra...)
	dst = append(dst, s.noToolCalls...)
	return append(dst, '}')
}

// appendAnswer writes a whole (not streamed) chat or completion answer.
func (s *oaiStyle) appendAnswer(dst []byte, f *flight) []byte {
	chat := f.job.api == apiChat
	object := "text_completion"
	if chat {
		object = "chat.completion"
	}
	dst = s.head(dst, f, object)
	dst = append(dst, `,"choices":[`...)
	for i, c := range f.choices {
		if i > 0 {
			dst = append(dst, ',')
		}
		n := int(c.visible.Load())
		dst = append(dst, `{"index":`...)
		dst = appendInt(dst, i)
		if chat {
			dst = append(dst, `,"message":`...)
			dst = s.appendMessage(dst, f, c, n)
		} else {
			dst = append(dst, `,"text":"`...)
			dst = escapeInPlace(dst, func(b []byte) []byte { return c.appendContent(b, 0, n) })
			dst = append(dst, '"')
		}
		dst = s.appendChoiceTail(dst, c, chat, true)
		dst = f.appendChoiceIDs(dst, c)
		dst = append(dst, '}')
	}
	dst = append(dst, `],"usage":`...)
	dst = s.appendUsage(dst, f)
	dst = f.appendTopIDs(dst)
	if chat {
		dst = append(dst, s.chatExtra...)
	} else {
		dst = append(dst, s.cmplExtra...)
	}
	if s.timings {
		dst = f.appendTimings(dst)
	}
	return append(dst, '}')
}

// appendChoiceTail writes a choice's logprobs, finish_reason and
// stop_reason, as the flavour has them.
func (s *oaiStyle) appendChoiceTail(dst []byte, c *choiceState, chat, ended bool) []byte {
	switch {
	case chat && s.logprobs:
		dst = append(dst, `,"logprobs":`...)
		dst = c.appendLogprobs(dst)
	case !chat && s.cmplLogprobs:
		dst = append(dst, `,"logprobs":null`...)
	}
	dst = append(dst, `,"finish_reason":`...)
	dst = appendFinishValue(dst, c, ended)
	if s.stopReason && (ended || !chat) {
		dst = append(dst, `,"stop_reason":null`...)
	}
	if !chat {
		dst = append(dst, s.cmplChoiceExtra...)
	}
	return dst
}

// appendChunk writes one event of a stream: delta writes a chat delta's
// fields (or nil for a completion chunk of tokens [from, to)).
func (s *oaiStyle) appendChunk(dst []byte, f *flight, c *choiceState, delta func([]byte) []byte, from, to int, ended bool) []byte {
	chat := f.job.api == apiChat
	object := "text_completion"
	if chat {
		object = "chat.completion.chunk"
	}
	dst = append(dst, "data: "...)
	dst = s.head(dst, f, object)
	dst = append(dst, s.chunkExtra...)
	dst = append(dst, `,"choices":[{"index":`...)
	dst = appendInt(dst, c.index)
	if chat {
		dst = append(dst, `,"delta":{`...)
		if s.roleInDeltas {
			dst = append(dst, `"role":"assistant"`...)
			if b := delta(nil); len(b) > 0 {
				dst = append(dst, ',')
				dst = append(dst, b...)
			}
		} else {
			dst = delta(dst)
		}
		dst = append(dst, '}')
	} else {
		dst = append(dst, `,"text":"`...)
		dst = escapeInPlace(dst, func(b []byte) []byte { return c.appendContent(b, from, to) })
		dst = append(dst, '"')
	}
	dst = s.appendChoiceTail(dst, c, chat, ended)
	dst = append(dst, "}]"...)
	switch {
	case f.job.continuous && s.continuous:
		dst = append(dst, `,"usage":`...)
		dst = s.appendUsage(dst, f)
	case f.job.usage && s.usageNulls:
		dst = append(dst, `,"usage":null`...)
	}
	if ended && s.timings && !f.job.usage {
		dst = f.appendTimings(dst)
	}
	return append(dst, "}\n\n"...)
}

// appendDelta writes the events for tokens [from, to) of a choice, and
// its finish when done.
func (s *oaiStyle) appendDelta(dst []byte, f *flight, c *choiceState, from, to int, done bool) []byte {
	if f.job.api != apiChat {
		if to > from || done {
			dst = s.appendChunk(dst, f, c, nil, from, to, done)
		}
		return dst
	}
	if from == 0 && s.firstDelta != "" {
		dst = s.appendChunk(dst, f, c, func(b []byte) []byte { return append(b, s.firstDelta...) }, 0, 0, false)
	}
	if c.calls != nil {
		switch {
		case s.wholeToolCalls && done:
			dst = s.appendChunk(dst, f, c, func(b []byte) []byte {
				return c.appendToolCalls(append(b, `"content":"","tool_calls":`...), true)
			}, 0, 0, false)
		case !s.wholeToolCalls:
			c.toolDeltas(from, to, func(d []byte) {
				dst = s.appendChunk(dst, f, c, func(b []byte) []byte { return append(b, d...) }, 0, 0, false)
			})
		}
		if done {
			dst = s.appendChunk(dst, f, c, func(b []byte) []byte { return append(b, s.lastDelta...) }, 0, 0, true)
		}
		return dst
	}
	if field := f.e.d.reasoning; field != "" {
		if r := min(to, c.reasoning); r > from {
			dst = s.appendChunk(dst, f, c, func(b []byte) []byte {
				b = append(b, `"`+field+`":"`...)
				b = escapeInPlace(b, func(b []byte) []byte { return c.appendReasoning(b, from, r) })
				return append(b, '"')
			}, 0, 0, false)
		}
	}
	if lo := max(from, c.reasoning); to > lo {
		dst = s.appendChunk(dst, f, c, func(b []byte) []byte {
			b = append(b, `"content":"`...)
			b = escapeInPlace(b, func(b []byte) []byte { return c.appendContent(b, lo, to) })
			return append(b, '"')
		}, 0, 0, false)
	}
	if done {
		dst = s.appendChunk(dst, f, c, func(b []byte) []byte { return append(b, s.lastDelta...) }, 0, 0, true)
	}
	return dst
}

// appendStreamEnd writes what follows the last choice's finish: the usage
// chunk (with include_usage) and [DONE].
func (s *oaiStyle) appendStreamEnd(dst []byte, f *flight) []byte {
	if f.job.usage {
		object := "text_completion"
		if f.job.api == apiChat {
			object = "chat.completion.chunk"
		}
		dst = append(dst, "data: "...)
		dst = s.head(dst, f, object)
		dst = append(dst, s.chunkExtra...)
		dst = append(dst, `,"choices":[],"usage":`...)
		dst = s.appendUsage(dst, f)
		if s.timings {
			dst = f.appendTimings(dst)
		}
		dst = append(dst, "}\n\n"...)
	}
	return append(dst, sseDone...)
}
