package infer

import (
	"bytes"
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
// context_full). The prompt's tokens are bounded by its bytes, and
// counted by the server's tokenizer when the bound says the request may
// not fit as asked (tokens.Counter.FitPrompt).
//
// A server that refuses a request for length anyway (400, in vLLM's,
// SGLang's, OpenAI's or llama.cpp's wording) states the context and the
// prompt's tokens: the request is sent again, fitted to those numbers
// (vLLM 0.10.1+ states only a lower bound: the tokenizer counts then), at
// most twice, before the refusal is filed as a permanent error.

// maxContextRetries is how many times a request refused for length is
// sent again.
const maxContextRetries = 2

// kwargsOf gives the chat_template_kwargs j's request for p sends (the
// flags', its arm's or its own params'), which render into the prompt:
// the body is built for them only when the prompt is counted.
func (r *runner) kwargsOf(j *job, p *record.Prompt, paramSeed *int64) func() []byte {
	return func() []byte {
		body, err := r.builder(j).Body(p, paramSeed, j.sample)
		if err != nil {
			return nil
		}
		kw, err := record.FieldValue(body, "chat_template_kwargs")
		if err != nil || len(bytes.TrimSpace(kw)) == 0 || string(bytes.TrimSpace(kw)) == "null" {
			return nil
		}
		return kw
	}
}

// context is the model's context length (tokens.Context); 0 while
// unknown.
func (r *runner) context() int { return r.ctxLen.Len() }

// learnContext takes the context a refusal for length stated, n, when it
// is smaller than the one requests are fitted to (or none is known).
func (r *runner) learnContext(ep *fleet.Endpoint, n int) {
	switch was, ok := r.ctxLen.Learn(n); {
	case ok && was > 0:
		r.logf("%s says the model's context is %d tokens, less than the %d requests were fitted to: they are fitted to %d from now on", ep.Name(), n, was, n)
	case ok:
		r.logf("%s says the model's context is %d tokens: requests are fitted to it from now on (--context-length sets it)", ep.Name(), n)
	}
}

// contextRetry handles a refusal for length: the request is sent again
// fitted to the numbers the server stated, or the prompt is found too
// long. false: f is not such a refusal, or the request was sent again too
// often already.
func (r *runner) contextRetry(ep *fleet.Endpoint, j *job, f *fleet.Failure) bool {
	if f.Status != 400 || !r.cfg.Fit.FitContext || j.ctxRetries >= maxContextRetries {
		return false
	}
	l, ok := openai.ParseContextError(f.Message)
	if !ok {
		return false
	}
	if l.Context > 0 {
		r.learnContext(ep, l.Context)
	}
	if r.context() <= 0 {
		return false
	}
	j.ctxRetries++
	known, exact := l.Prompt, !l.AtLeast && l.Prompt > 0
	if l.AtLeast {
		known = max(known, j.promptTokens)
	}
	before := j.body
	if err := r.prepare(j, known, exact); err != nil {
		r.fatal(err)
		return true
	}
	if j.refused != nil || bytes.Equal(j.body, before) {
		// Too long, or fitted already as the server's numbers say and
		// refused all the same: the prompt does not fit, in the server's
		// own words, which say it best.
		j.refused = &fleet.Failure{Status: f.Status, Message: f.Message}
		r.refuse(ep, j)
		return true
	}
	r.c.contextRetries.Add(1) // sent again, fitted otherwise than before
	r.c.queued.Add(1)
	r.ready.push(j)
	return true
}

// prepare builds j's request (a single answer's, or its conversation's
// turn), fitted to the context with the prompt's tokens known (0: not).
func (r *runner) prepare(j *job, known int, exact bool) error {
	p, seed := j.rec, j.paramSeed
	var msgs []record.Message
	if j.conv != nil {
		p, seed = j.conv.Request(), j.conv.ParamSeed()
		msgs = p.Messages
	} else {
		msgs = openai.ChatMessages(p)
	}
	tools, _, _ := record.AppendCanonicalTools(nil, p.Tools)
	ft := r.tokens.FitPrompt(r.cfg.Fit, r.context(), tokens.Prompt{Msgs: msgs, Tools: tools, Kwargs: r.kwargsOf(j, p, seed)}, r.builder(j).MaxTokens(p), known, exact)
	j.size, j.fit, j.promptTokens, j.refused = tokens.SizeOf(msgs, tools), ft, ft.Prompt, nil
	if ft.Refused {
		j.refused = &fleet.Failure{Message: ft.Refusal()}
		return nil
	}
	body, err := r.builder(j).BodyMax(p, seed, j.sample, ft.Max)
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
	if !r.cfg.Fit.FitContext || ctx <= 0 || c.PromptTokens < ctx {
		return false
	}
	j.fit.Prompt = c.PromptTokens
	j.refused = &fleet.Failure{Message: fmt.Sprintf("the server cut the prompt to its %d-token context (prompt_tokens %d): the prompt is longer", ctx, c.PromptTokens)}
	return true
}

// leftTooLittle tells an answer that stopped for length with fewer than
// --min-answer-tokens, its prompt having left no more of the context (a
// request sent without max_tokens, or one the estimate could not settle,
// where the server gives what the context leaves): not an answer worth
// keeping, j is refused as too long instead, as it would have been had its
// tokens been counted.
func (r *runner) leftTooLittle(j *job, c *openai.Completion) bool {
	ctx := r.context()
	fl := r.cfg.Fit
	if !fl.FitContext || ctx <= 0 || c.FinishReason != record.FinishLength || c.CompletionTokens >= fl.MinAnswerTokens ||
		c.PromptTokens+c.CompletionTokens+fl.ContextMargin < ctx {
		return false
	}
	if asked := r.askedMax(j); asked > 0 && asked <= c.CompletionTokens {
		return false // it asked for no more: the answer is as long as asked
	}
	j.fit.Prompt = c.PromptTokens
	j.refused = &fleet.Failure{Message: fmt.Sprintf("the prompt's %d tokens (the server's count) left %d of the model's %d-token context for the answer, fewer than --min-answer-tokens %d",
		c.PromptTokens, ctx-c.PromptTokens, ctx, fl.MinAnswerTokens)}
	return true
}

// askedMax is the max_tokens j's request was sent with (0: none).
func (r *runner) askedMax(j *job) int {
	if j.fit.Max > 0 {
		return j.fit.Max
	}
	if j.conv != nil {
		return r.cfg.Builder.MaxTokens(j.conv.Request())
	}
	return r.cfg.Builder.MaxTokens(j.rec)
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

// A context the server never states (Ollama takes OLLAMA_CONTEXT_LENGTH
// over its default, and v0.6.5 says neither): infer fits requests to the
// default, and the server cuts longer prompts to its real context, saying
// so only by the answer's prompt_tokens, the context itself. An answer
// whose prompt_tokens fall well short of the prompt's own estimate is
// such a cut, or a prompt that tokenizes shorter than estimated; one
// request settles which: a prompt of three times as many tokens, whose
// prompt_tokens are the context where the server cuts. Confirmed, the
// context is learned (requests are fitted to it from then on) and the
// answer refused as prompt_too_long; otherwise it is kept, and answers
// as short are not asked about again.

// A prompt_tokens under cutShare of the estimate, and cutGap tokens
// short of it at least, is asked about.
const (
	cutShare = 0.75
	cutGap   = 64
)

// cutUnstated tells an answer to a prompt the server cut to a context it
// did not state: see above.
func (r *runner) cutUnstated(ep *fleet.Endpoint, j *job, c *openai.Completion) bool {
	if !r.cfg.Fit.FitContext || r.tokens == nil || c.PromptTokens <= 0 || !r.pool.ContextAssumed(ep) {
		return false
	}
	est := r.tokens.Estimate(j.size)
	if float64(c.PromptTokens) >= cutShare*float64(est) || est-c.PromptTokens < cutGap {
		return false
	}
	// Asked whether it cuts prompts at that many tokens: 0 when it keeps
	// more (or could not be asked).
	n, err := r.ctxLen.ConfirmCut(c.PromptTokens, func(n int) (int, error) { return r.pool.ProbeContext(ep, n, r.cfg.RequestTimeout) })
	if err != nil {
		r.logf("%s: could not ask whether it cuts prompts at %d tokens (%v): its answers are kept", ep.Name(), c.PromptTokens, err)
	}
	if n == 0 {
		return false
	}
	r.learnContext(ep, n)
	j.fit.Prompt = est
	j.refused = &fleet.Failure{Message: fmt.Sprintf("the server cut the prompt to its %d-token context (prompt_tokens %d; the prompt's own estimate is %d): the prompt is longer", n, c.PromptTokens, est)}
	return true
}

// shifted tells an answer whose prompt and answer passed the context: the
// server dropped the prompt's start while it wrote (Ollama shifts its
// context), so the answer is to less than its prompt. It is kept, flagged
// (output.context_shifted) and counted.
func (r *runner) shifted(c *openai.Completion) bool {
	ctx := r.context()
	if ctx <= 0 || c.PromptTokens+c.CompletionTokens <= ctx {
		return false
	}
	r.c.shifted.Add(1)
	return true
}
