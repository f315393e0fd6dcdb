package llmsim

import (
	"sync"

	"github.com/valyala/fasthttp"
)

// Response bodies, appended in SGLang's field order. Shapes:
// protocol.py ChatCompletionResponse / CompletionResponse (pydantic dumps
// None fields as null), sse_utils.py build_sse_content for chat chunks,
// serving_completions.py for completion chunks, tokenizer_manager.py
// _handle_batch_output for /generate's meta_info.

type buffer struct{ b []byte }

type bufferPool struct{ p sync.Pool }

func (p *bufferPool) get() *buffer {
	if b, ok := p.p.Get().(*buffer); ok {
		b.b = b.b[:0]
		return b
	}
	return &buffer{b: make([]byte, 0, 1024)}
}

func (p *bufferPool) put(b *buffer) {
	if cap(b.b) <= 64<<10 {
		p.p.Put(b)
	}
}

var bufPool bufferPool

// appendContent appends the content text of generated tokens [from, to)
// of the choice; appendReasoning its reasoning text. Without reasoning the
// whole answer is content; with it, the first c.reasoning tokens are
// reasoning and each part starts with the prompt digest. An answer in a
// model's own tokens has its text already (realtok.go).
func (c *choiceState) appendContent(dst []byte, from, to int) []byte {
	if c.model != nil {
		return c.model.appendContent(dst, from, to, c.reasoning)
	}
	to = min(to, c.textTokens()) // the end-of-turn id writes nothing
	from, to = max(from, c.reasoning)-c.reasoning, max(to, c.reasoning)-c.reasoning
	if c.inline > 0 {
		if from < c.inline {
			dst = c.appendInlineThink(dst, from, min(to, c.inline))
		}
		from, to = max(from, c.inline)-c.inline, max(to, c.inline)-c.inline
	}
	if c.degen != degenNone {
		return c.appendDegenerate(dst, from, to)
	}
	return appendTokens(dst, c.f.digest, c.words, from, to)
}

func (c *choiceState) appendReasoning(dst []byte, from, to int) []byte {
	if c.model != nil {
		return c.model.appendReasoning(dst, from, to, c.reasoning)
	}
	to = min(to, c.reasoning)
	return appendTokens(dst, c.f.digest, ^c.words, from, to)
}

func (c *choiceState) reasoningTokens(generated int) int { return min(generated, c.reasoning) }

// appendFinish writes the values of finish_reason and matched_stop: null
// both while the answer goes on; once it ended, the reason, and the EOS
// token id that matched when it stopped on its own.
func (c *choiceState) appendFinish(dst []byte, ended bool, eos int) []byte {
	if !ended {
		return append(dst, `null,"matched_stop":null`...)
	}
	dst = append(dst, '"')
	dst = append(dst, c.End...)
	dst = append(dst, `","matched_stop":`...)
	if c.End == finishStop || c.End == finishToolCalls {
		return appendInt(dst, eos)
	}
	return append(dst, "null"...)
}

func (f *flight) completionTokens() (total, reasoning int) {
	for _, c := range f.choices {
		n := int(c.visible.Load())
		total += n
		reasoning += c.reasoningTokens(n)
	}
	return total, reasoning
}

// appendUsage writes protocol.py UsageInfo; details=false drops the null
// prompt_tokens_details, as the completions usage chunk (exclude_none) does.
func (f *flight) appendUsage(dst []byte, details bool) []byte {
	comp, reasoning := f.completionTokens()
	dst = append(dst, `{"prompt_tokens":`...)
	dst = appendInt(dst, f.prompt)
	dst = append(dst, `,"total_tokens":`...)
	dst = appendInt(dst, f.prompt+comp)
	dst = append(dst, `,"completion_tokens":`...)
	dst = appendInt(dst, comp)
	switch {
	case f.reportCached():
		dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
		dst = appendInt(dst, f.cached)
		dst = append(dst, '}')
	case details:
		dst = append(dst, `,"prompt_tokens_details":null`...)
	}
	dst = append(dst, `,"reasoning_tokens":`...)
	dst = appendInt(dst, reasoning)
	return append(dst, '}')
}

// reportCached: usage carries prompt_tokens_details.cached_tokens, as
// SGLang (--enable-cache-report) and vLLM (--enable-prompt-tokens-details)
// do when some of the prompt was cached.
func (f *flight) reportCached() bool { return f.e.f.cfg.CacheReport && f.cached > 0 }

func (f *flight) appendHead(dst []byte, object string) []byte {
	dst = append(dst, `{"id":"`...)
	dst = append(dst, f.id...)
	dst = append(dst, `","object":"`...)
	dst = append(dst, object...)
	dst = append(dst, `","created":`...)
	dst = appendInt(dst, int(f.created))
	dst = append(dst, `,"model":`...)
	return appendString(dst, f.job.model)
}

func (f *flight) appendChat(dst []byte) []byte {
	return f.appendResponse(dst, "chat.completion", f.stopID(eosChat), func(dst []byte, c *choiceState, n int) []byte {
		if c.calls != nil {
			dst = append(dst, `"message":{"role":"assistant","content":null,"reasoning_content":null,"tool_calls":`...)
			return append(c.appendToolCalls(dst, true), '}')
		}
		dst = append(dst, `"message":{"role":"assistant","content":"`...)
		dst = escapeInPlace(dst, func(b []byte) []byte { return c.appendContent(b, 0, n) })
		dst = append(dst, `","reasoning_content":`...)
		if c.reasoningTokens(n) > 0 {
			dst = append(dst, '"')
			dst = escapeInPlace(dst, func(b []byte) []byte { return c.appendReasoning(b, 0, n) })
			dst = append(dst, '"')
		} else {
			dst = append(dst, "null"...)
		}
		return append(dst, `,"tool_calls":null}`...)
	})
}

func (f *flight) appendCompletion(dst []byte) []byte {
	return f.appendResponse(dst, "text_completion", f.stopID(eosText), func(dst []byte, c *choiceState, n int) []byte {
		dst = append(dst, `"text":"`...)
		dst = escapeInPlace(dst, func(b []byte) []byte { return c.appendContent(b, 0, n) })
		return append(dst, '"')
	})
}

// appendResponse writes a whole chat or completion response; answer writes
// the part of a choice that differs between the two (message or text).
func (f *flight) appendResponse(dst []byte, object string, eos int, answer func(dst []byte, c *choiceState, n int) []byte) []byte {
	dst = f.appendHead(dst, object)
	dst = append(dst, `,"choices":[`...)
	for i, c := range f.choices {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"index":`...)
		dst = appendInt(dst, i)
		dst = append(dst, ',')
		dst = answer(dst, c, int(c.visible.Load()))
		dst = append(dst, `,"logprobs":null,"finish_reason":`...)
		dst = c.appendFinish(dst, true, eos)
		dst = f.appendChoiceIDs(dst, c)
		dst = append(dst, '}')
	}
	dst = append(dst, `],"usage":`...)
	dst = f.appendUsage(dst, true)
	return append(dst, `,"metadata":{"weight_version":"`+weightVersion+`"}}`...)
}

// appendGenerate writes /generate's answer after n tokens; done adds the
// finish reason and e2e_latency, as SGLang does once a request finished.
func (f *flight) appendGenerate(dst []byte, n int, done bool) []byte {
	c := f.choices[0]
	dst = append(dst, `{"text":"`...)
	dst = escapeInPlace(dst, func(b []byte) []byte { return c.appendContent(b, 0, n) })
	dst = append(dst, `","output_ids":`...)
	dst = appendIDs(dst, c.answerIDs(n))
	dst = append(dst, `,"meta_info":{"id":"`...)
	dst = append(dst, f.id...)
	dst = append(dst, `","finish_reason":`...)
	if done {
		dst = appendFinishReason(dst, c.End, c.limit, f.stopID(eosText), msgAborted, "null")
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"prompt_tokens":`...)
	dst = appendInt(dst, f.prompt)
	dst = append(dst, `,"weight_version":"`+weightVersion+`","total_retractions":0,"completion_tokens":`...)
	dst = appendInt(dst, n)
	dst = append(dst, `,"cached_tokens":`...)
	dst = appendInt(dst, f.cached)
	if done {
		dst = append(dst, `,"e2e_latency":`...)
		dst = appendFloat(dst, f.e2e())
	}
	return append(dst, "}}"...)
}

// appendFinishReason writes schedule_batch.py's FINISH_* to_json; eos is
// the id a stop matched.
func appendFinishReason(dst []byte, end string, limit, eos int, abortMsg, abortStatus string) []byte {
	switch end {
	case finishStop:
		dst = append(dst, `{"type":"stop","matched":`...)
		dst = appendInt(dst, eos)
		return append(dst, '}')
	case finishLength:
		dst = append(dst, `{"type":"length","length":`...)
		dst = appendInt(dst, limit)
		return append(dst, '}')
	}
	dst = append(dst, `{"type":"abort","message":`...)
	dst = appendString(dst, abortMsg)
	dst = append(dst, `,"status_code":`...)
	dst = append(dst, abortStatus...)
	return append(dst, `,"err_type":null}`...)
}

// tokenID is a plausible vocabulary id for token k of an answer.
func tokenID(words uint64, k int) int {
	return 1000 + int(mix64(words+uint64(k))%150000)
}

// stopID is the id an answer of this flight that ends on its own stops
// on: own, llmsim's for its kind, unless the endpoint has a model's
// tokenizer.
func (f *flight) stopID(own int) int { return f.e.tok().stopID(own) }

// escapeInPlace appends what gen appends, JSON-escaped. Generated text is
// plain ASCII words, so the common case copies nothing.
func escapeInPlace(dst []byte, gen func([]byte) []byte) []byte {
	start := len(dst)
	dst = gen(dst)
	for i := start; i < len(dst); i++ {
		if c := dst[i]; c < 0x20 || c == '"' || c == '\\' {
			raw := string(dst[start:])
			return appendEscaped(dst[:start], raw)
		}
	}
	return dst
}

// Streaming.

func (f *flight) appendChatChunk(dst []byte, c *choiceState, delta func([]byte) []byte, finish bool) []byte {
	dst = append(dst, "data: "...)
	dst = f.appendHead(dst, "chat.completion.chunk")
	dst = append(dst, `,"choices":[{"index":`...)
	dst = appendInt(dst, c.index)
	dst = append(dst, `,"delta":{`...)
	dst = delta(dst)
	dst = append(dst, `},"logprobs":null,"finish_reason":`...)
	dst = c.appendFinish(dst, finish, f.stopID(eosChat))
	return append(dst, "}]}\n\n"...)
}

func (f *flight) appendCompletionChunk(dst []byte, c *choiceState, from, to int, finish bool) []byte {
	dst = append(dst, "data: "...)
	dst = f.appendHead(dst, "text_completion")
	dst = append(dst, `,"choices":[{"index":`...)
	dst = appendInt(dst, c.index)
	dst = append(dst, `,"text":"`...)
	dst = escapeInPlace(dst, func(b []byte) []byte { return c.appendContent(b, from, to) })
	dst = append(dst, `","logprobs":null,"finish_reason":`...)
	dst = c.appendFinish(dst, finish, f.stopID(eosText))
	return append(dst, "}],\"usage\":null}\n\n"...)
}

func (f *flight) appendUsageChunk(dst []byte) []byte {
	dst = append(dst, "data: "...)
	if f.job.api == apiChat {
		dst = f.appendHead(dst, "chat.completion.chunk")
	} else {
		dst = f.appendHead(dst, "text_completion")
	}
	dst = append(dst, `,"choices":[],"usage":`...)
	dst = f.appendUsage(dst, f.job.api == apiChat)
	return append(dst, "}\n\n"...)
}

const sseDone = "data: [DONE]\n\n"

// eventWriter is where a stream goes: the server's body writer, or a
// chunked writer on a hijacked connection.
type eventWriter interface {
	Write([]byte) (int, error)
	Flush() error
}

// streamTo writes the flight as server-sent events while the scheduler
// produces it: each wake-up writes every token made since the last one
// (SGLang coalesces a backlog the same way), so a fast simulation does
// not drown the client in tiny chunks.
func (f *flight) streamTo(w eventWriter) {
	e := f.e
	written := make([]int, len(f.choices))
	finished := make([]bool, len(f.choices))
	dropAt := max(f.choices[0].Target/2, 1)
	buf := bufPool.get()
	defer bufPool.put(buf)
	for {
		buf.b = buf.b[:0]
		all := true
		for i, c := range f.choices {
			n, done := int(c.visible.Load()), c.done.Load()
			if n > written[i] || (done && !finished[i]) {
				buf.b = f.appendDelta(buf.b, c, written[i], n, done)
				written[i] = n
			}
			if done {
				finished[i] = true
			} else {
				all = false
			}
		}
		if _, err := w.Write(buf.b); err != nil {
			f.abandon()
			return
		}
		if f.drop && written[0] >= dropAt {
			w.Flush() // the caller then closes the connection
			e.stats.dropped.Add(1)
			f.cancel()
			return
		}
		if all {
			e.count(f)
			buf.b = buf.b[:0]
			switch {
			case f.job.api == apiNative: // llama.cpp's /completion stream has no [DONE]
			case e.d.oai != nil:
				buf.b = e.d.oai.appendStreamEnd(buf.b, f)
			default:
				if f.job.usage && f.job.api != apiGenerate {
					buf.b = f.appendUsageChunk(buf.b)
				}
				buf.b = append(buf.b, sseDone...)
			}
			w.Write(buf.b)
			w.Flush()
			return
		}
		if err := w.Flush(); err != nil {
			f.abandon()
			return
		}
		<-f.notify
		if f.failed.Load() {
			e.stats.lost.Add(1)
			return
		}
	}
}

// appendDelta writes the events for tokens [from, to) of a choice, and its
// finish when done.
func (f *flight) appendDelta(dst []byte, c *choiceState, from, to int, done bool) []byte {
	if f.job.api == apiNative {
		return f.appendNativeChunk(dst, c, from, to, done)
	}
	if s := f.e.d.oai; s != nil {
		return s.appendDelta(dst, f, c, from, to, done)
	}
	switch f.job.api {
	case apiGenerate:
		dst = append(dst, "data: "...)
		dst = f.appendGenerate(dst, to, done)
		return append(dst, "\n\n"...)
	case apiCompletion:
		return f.appendCompletionChunk(dst, c, from, to, done)
	}
	if from == 0 {
		dst = f.appendChatChunk(dst, c, func(b []byte) []byte { return append(b, `"role":"assistant","content":""`...) }, false)
	}
	if c.calls != nil {
		c.toolDeltas(from, to, func(d []byte) {
			dst = f.appendChatChunk(dst, c, func(b []byte) []byte { return append(b, d...) }, false)
		})
		if done {
			dst = f.appendChatChunk(dst, c, func(b []byte) []byte { return b }, true)
		}
		return dst
	}
	if r := min(to, c.reasoning); r > from {
		dst = f.appendChatChunk(dst, c, func(b []byte) []byte {
			b = append(b, `"reasoning_content":"`...)
			b = escapeInPlace(b, func(b []byte) []byte { return c.appendReasoning(b, from, r) })
			return append(b, '"')
		}, false)
	}
	if lo := max(from, c.reasoning); to > lo {
		dst = f.appendChatChunk(dst, c, func(b []byte) []byte {
			b = append(b, `"content":"`...)
			b = escapeInPlace(b, func(b []byte) []byte { return c.appendContent(b, lo, to) })
			return append(b, '"')
		}, false)
	}
	if done {
		dst = f.appendChatChunk(dst, c, func(b []byte) []byte { return b }, true)
	}
	return dst
}

// writeQueueFullStream answers a streaming request the queue had no room
// for the way SGLang does: HTTP 200, then the error as an event.
func (f *flight) writeQueueFullStream(ctx *fasthttp.RequestCtx) {
	ctx.SetContentTypeBytes(ctSSE)
	b := make([]byte, 0, 512)
	if f.job.api == apiGenerate {
		c := f.choices[0]
		b = append(b, `data: {"text":"","output_ids":[],"meta_info":{"id":"`...)
		b = append(b, f.id...)
		b = append(b, `","finish_reason":`...)
		b = appendFinishReason(b, finishAbort, c.limit, 0, msgQueueFull, "503")
		b = append(b, `,"prompt_tokens":`...)
		b = appendInt(b, f.prompt)
		b = append(b, `,"weight_version":"`+weightVersion+`","total_retractions":0,"completion_tokens":0,"cached_tokens":0,"e2e_latency":0.0}}`+"\n\n"...)
	} else {
		b = appendStreamError(b, msgQueueFull, "SERVICE_UNAVAILABLE", fasthttp.StatusServiceUnavailable)
	}
	b = append(b, sseDone...)
	ctx.SetBody(b)
}
