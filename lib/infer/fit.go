package infer

import (
	"fmt"

	"tokenmill/lib/fleet"
	"tokenmill/lib/openai"
	"tokenmill/lib/record"
	"tokenmill/lib/tokens"
)

// Fitting requests into the model's context (--fit-context, on whenever
// the context length is known: --context-length, or learned from the
// first refusal that states it). A request's max_tokens is lowered to
// context - prompt tokens - --context-margin - 1 when it asked for more,
// and a prompt that leaves fewer than --min-answer-tokens is not sent: it
// becomes an error record prompt_too_long with its token count (a
// conversation's later turn ends the conversation, truncated
// context_full). The prompt's tokens are estimated, and counted by the
// server's tokenizer when the estimate says the request may not fit as
// asked.
//
// A server that refuses a request for length anyway (400, in vLLM's,
// SGLang's, OpenAI's or llama.cpp's wording) states the context and the
// prompt's tokens: the request is sent again, fitted to those numbers
// (vLLM 0.10.1+ states only a lower bound: the tokenizer counts then), at
// most twice, before the refusal is filed as a permanent error.

// maxContextRetries is how many times a request refused for length is
// sent again.
const maxContextRetries = 2

// fit works out the request of a prompt of msgs (and tools): see
// tokens.Counter.Fit.
func (r *runner) fit(msgs []record.Message, tools []byte, requested, known int, exact bool) tokens.Fit {
	return r.tokens.Fit(r.cfg.FitFlags, r.context(), msgs, tools, requested, known, exact)
}

// context is the model's context length: as the servers (or
// --context-length) state it, else as the first refusal for length said;
// 0 while unknown.
func (r *runner) context() int {
	if r.pool != nil {
		if n := r.pool.Context(); n > 0 {
			return n
		}
	}
	return int(r.contextLen.Load())
}

// contextRetry handles a refusal for length: the request is sent again
// fitted to the numbers the server stated, or the prompt is found too
// long. false: f is not such a refusal, or the request was sent again too
// often already.
func (r *runner) contextRetry(ep *fleet.Endpoint, j *job, f *fleet.Failure) bool {
	if f.Status != 400 || !r.cfg.FitContext || j.ctxRetries >= maxContextRetries {
		return false
	}
	l, ok := openai.ParseContextError(f.Message)
	if !ok {
		return false
	}
	if l.Context > 0 {
		if r.pool != nil && r.pool.Context() == 0 && r.contextLen.CompareAndSwap(0, int64(l.Context)) {
			r.logf("%s says the model's context is %d tokens: requests are fitted to it from now on (--context-length sets it)", ep.Name(), l.Context)
		}
	}
	if r.context() <= 0 {
		return false
	}
	j.ctxRetries++
	r.c.contextRetries.Add(1)
	known, exact := l.Prompt, !l.AtLeast && l.Prompt > 0
	if l.AtLeast {
		known = max(known, j.promptTokens)
	}
	if err := r.refit(j, known, exact); err != nil {
		r.fatal(err)
		return true
	}
	if j.refused != nil {
		// The server's own words say it best.
		j.refused = &fleet.Failure{Status: f.Status, Message: f.Message}
		r.refuse(ep, j)
		return true
	}
	r.c.queued.Add(1)
	r.ready.push(j)
	return true
}

// refit rebuilds j's request (a single answer, or its conversation's turn)
// fitted to the context with the prompt's tokens known.
func (r *runner) refit(j *job, known int, exact bool) error {
	if j.conv != nil {
		return r.prepareTurnKnown(j, known, exact)
	}
	return r.prepareSingle(j, known, exact)
}

// prepareSingle builds a single answer's request body, fitted.
func (r *runner) prepareSingle(j *job, known int, exact bool) error {
	p := j.rec
	msgs := openai.ChatMessages(p)
	tools, _, _ := record.AppendCanonicalTools(nil, p.Tools)
	ft := r.fit(msgs, tools, r.builder(j).MaxTokens(p), known, exact)
	j.size, j.fit = tokens.SizeOf(msgs, tools), ft
	j.promptTokens = ft.Prompt
	if ft.Refused {
		j.refused = &fleet.Failure{Message: ft.Refusal()}
		return nil
	}
	body, err := r.builder(j).BodyMax(p, j.paramSeed, j.sample, ft.Max)
	j.body = body
	return err
}

// cutByServer tells whether the server answered a prompt it cut to fit
// the context: Ollama does not refuse a prompt longer than num_ctx, it
// keeps num_ctx of its tokens (the first few and the last) and says so
// only by prompt_tokens. That answer is not to the prompt sent, so j is
// refused as too long instead, as it would have been had its tokens been
// counted.
func (r *runner) cutByServer(j *job, c *openai.Completion) bool {
	ctx := r.context()
	if !r.cfg.FitContext || ctx <= 0 || c.PromptTokens < ctx {
		return false
	}
	j.fit.Prompt = c.PromptTokens
	j.refused = &fleet.Failure{Message: fmt.Sprintf("the server cut the prompt to its %d-token context (prompt_tokens %d): the prompt is longer", ctx, c.PromptTokens)}
	return true
}

// refuse files a prompt too long for the context: an error record
// prompt_too_long, or for a conversation past its first turn the end of
// the conversation, truncated context_full.
func (r *runner) refuse(ep *fleet.Endpoint, j *job) {
	if conv := j.conv; conv != nil && len(conv.Turns()) > 0 {
		conv.Truncate(record.TruncContextFull, len(conv.Turns()), j.refused.Message)
		r.finishConversation(j)
		return
	}
	r.c.tooLong.Add(1)
	r.failJob(ep, j, j.refused)
}
