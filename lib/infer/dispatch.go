package infer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"tokenmill/lib/conversation"
	"tokenmill/lib/fleet"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/openai"
	"tokenmill/lib/record"
	"tokenmill/lib/tokens"
)

// dispatch sends jobs until all are done or ctx ends.
func (r *runner) dispatch(ctx context.Context) error {
	for {
		j := r.next(ctx)
		if j == nil {
			return nil
		}
		ep, err := r.acquire(r.sendCtx, j)
		if err != nil {
			if r.unsent(j) {
				continue // every endpoint fails alike: filed, not sent
			}
			if errors.Is(err, fleet.ErrAllDown) || errors.Is(err, fleet.ErrRateLimited) {
				return err
			}
			return nil // interrupted: the job is not done, resume will redo it
		}
		r.c.queued.Add(-1)
		r.inflight.Add(1)
		r.hand(ep, j)
	}
}

// task is one attempt for a worker to make.
type task struct {
	ep  *fleet.Endpoint
	job *job
}

// hand gives an attempt to an idle worker, or to a new one. Workers live
// for the run, so their stacks have grown to what a request needs once,
// instead of a fresh goroutine growing its stack for every request.
func (r *runner) hand(ep *fleet.Endpoint, j *job) {
	select {
	case r.work <- task{ep, j}:
	default:
		go r.worker(task{ep, j})
	}
}

func (r *runner) worker(t task) {
	for {
		r.send(t.ep, t.job)
		select {
		case t = <-r.work:
		case <-r.workDone:
			return
		}
	}
}

// acquire takes a slot for j: with affinity, a resumed conversation goes
// back to the endpoint its journaled turns went to, whose prefix cache may
// still hold its history, if that one has room.
func (r *runner) acquire(ctx context.Context, j *job) (*fleet.Endpoint, error) {
	if j.prefer != "" && r.cfg.Affinity {
		prefer := r.pool.ByName(j.prefer)
		j.prefer = ""
		if prefer != nil && prefer != j.last {
			if ep := r.pool.TryAcquireOn(prefer); ep != nil {
				return ep, nil
			}
		}
	}
	return r.pool.Acquire(ctx, j.last)
}

// send makes one attempt of j on ep and files the outcome. A conversation
// goes on with its next turn on the same slot while affinity holds and ep
// stays in service; otherwise the slot is given back after each turn and
// the next turn queued like a retry.
func (r *runner) send(ep *fleet.Endpoint, j *job) {
	defer r.inflight.Done()
	for {
		if why := r.toolsLeftOut(ep, j); why != "" {
			if j.etaOn {
				j.etaOn = false
				r.eta.Ended(j, r.clk.Now(), false, 0, "")
			}
			r.pool.Release(ep)
			j.reason = record.ReasonToolsUnsupported
			r.failJob(ep, j, &fleet.Failure{Message: ep.Name() + ": " + why})
			return
		}
		start := r.clk.Now()
		if !j.etaOn {
			r.etaStarted(j, ep.Index(), start)
		}
		c, f := r.complete(ep, j)
		end := r.clk.Now()
		if f == nil || !f.Down {
			j.attempts++
		}
		if f != nil {
			j.etaOn = false
			r.eta.Ended(j, end, false, 0, "")
			r.pool.Release(ep)
			r.failed(ep, j, f)
			return
		}
		r.pool.Succeeded(ep)
		r.systematic.SucceededOn(ep)
		if r.cutByServer(j, &c) || r.cutUnstated(ep, j, &c) || r.leftTooLittle(j, &c) {
			j.etaOn = false
			r.eta.Ended(j, end, false, 0, "")
			r.pool.Release(ep)
			r.refuse(ep, j)
			return
		}
		if j.conv == nil {
			r.eta.Ended(j, end, true, c.CompletionTokens, c.FinishReason)
			r.pool.Release(ep)
			r.succeed(ep, j, &c, end.Sub(start))
			return
		}
		more, ok := r.turnDone(ep, j, &c, end.Sub(start))
		if !ok {
			r.pool.Release(ep)
			return
		}
		if !more {
			j.etaOn = false
			r.eta.Ended(j, end, true, j.conv.Usage().CompletionTokens, c.FinishReason)
			r.pool.Release(ep)
			r.finishConversation(j)
			return
		}
		if r.stopping.Load() {
			r.pool.Release(ep)
			return // not done: the journal has its turns, resume goes on from there
		}
		if !r.cfg.Affinity || !r.pool.Keep(ep) {
			r.pool.Release(ep)
			j.last = nil
			r.c.queued.Add(1)
			r.ready.push(j)
			return
		}
	}
}

// failed files a failed attempt: retried, or an error record.
func (r *runner) failed(ep *fleet.Endpoint, j *job, f *fleet.Failure) {
	if r.stopping.Load() {
		// Not done; resume redoes it. Failures now are mostly the shutdown's
		// own doing (connections closed after --grace), not the endpoint's.
		return
	}
	ep.Stats().Failures.Add(1)
	if f.Fatal {
		r.fatal(fmt.Errorf("%s refused the request (%v): check --api-key", ep.Name(), f))
		return
	}
	r.judge(ep, j, f) // before the pool's ejection, which would start its probes
	if f.Blame {
		r.pool.Failed(ep, f.Down, f.Error())
	}
	j.last = ep
	if r.wrongModel(ep, j, f) {
		return
	}
	if r.offersTools(j) && fleet.ToolsRefused(f) {
		// The record's tools, not the run: it fails so, the others go on.
		j.reason = record.ReasonToolsUnsupported
		r.failJob(ep, j, f)
		return
	}
	if r.contextRetry(ep, j, f) {
		return
	}
	if r.retry(j, f) {
		return
	}
	// A refusal for length is the prompt's, however many there are.
	if _, forLength := openai.ParseContextError(f.Message); forLength && f.Status == 400 {
		r.failJob(ep, j, f)
		return
	}
	if r.known.Again(j.id, j.sample, f.Status, f.Message) {
		// Refused as the run being resumed recorded it: the prompt's own.
		r.c.refusedAgain.Add(1)
		r.failJob(ep, j, f)
		return
	}
	if err := r.systematic.Failed(ep, f); err != nil {
		// Stopping first, so that the failures still arriving are left for
		// the resume; the refusal that tipped it is written like those
		// before it, so that the resume knows it.
		r.fatal(err)
		r.failJob(ep, j, f)
		return
	}
	r.failJob(ep, j, f)
}

func (r *runner) succeed(ep *fleet.Endpoint, j *job, c *openai.Completion, latency time.Duration) {
	model := c.Model
	if model == "" {
		model = r.modelOf(ep)
	}
	// Every call gets an id of its own (record.AddressCalls).
	r.c.readdressed.Add(int64(record.AddressCalls(c.ToolCalls, j.msgs+1)))
	out := record.Output{
		Text: c.Text, Reasoning: c.Reasoning, ReasoningField: c.ReasoningField, ToolCalls: c.ToolCalls, FinishReason: c.FinishReason, MaxTokens: j.fit.Max,
		Usage:    record.Usage{PromptTokens: c.PromptTokens, CompletionTokens: c.CompletionTokens, CachedTokens: c.CachedTokens},
		Model:    model,
		Endpoint: ep.Name(), LatencyMS: latency.Milliseconds(), Attempts: j.attempts, Sample: j.sample, SeedOffset: r.seedOffset(j),
		ContextShifted: r.shifted(c),
		TokenIDs:       r.answerTokenIDs(ep, j),
		Arm:            r.armName(j), ArmParams: j.armSent,
	}
	ids, err := r.settingsOf(ep, ep.Name(), j)
	if err != nil {
		r.fatal(err)
		return
	}
	out.Settings, out.SettingsFamily = ids.Hash, ids.Family
	if !r.writeAnswer(ep, j, func(dst []byte) ([]byte, error) { return recordLine(dst, j.prompt, "output", &out) }) {
		return
	}
	r.c.ok.Add(1)
	r.armDone(j, true, c.CompletionTokens)
	r.counted(ep, j, c)
	r.c.answerRate.Add(r.clk.Now(), 1)
	r.finish()
}

// counted adds an answer (or a conversation's turn) to the figures, and
// what its prompt cost to the token estimate (which only fitting reads).
func (r *runner) counted(ep *fleet.Endpoint, j *job, c *openai.Completion) {
	now := r.clk.Now()
	if j.fit.Max > 0 {
		r.c.clamped.Add(1)
	}
	if r.tokens != nil && r.cfg.Fit.FitContext && c.PromptTokens > 0 {
		// Far from the context only: a server that cuts a prompt too long
		// (Ollama) reports what it kept.
		if ctx := r.context(); ctx == 0 || j.fit.Prompt < ctx/2 {
			r.tokens.Learn(j.size, c.PromptTokens)
		}
		if j.fit.Text > 0 {
			r.tokens.LearnTemplate(j.size.Msgs, j.fit.Text, c.PromptTokens)
		}
	}
	r.c.promptTokens.Add(int64(c.PromptTokens))
	r.c.completionTokens.Add(int64(c.CompletionTokens))
	if c.CachedTokens != nil {
		r.c.cachedTokens.Add(int64(*c.CachedTokens))
	}
	r.c.finishReason(c.FinishReason)
	if c.Text == "" && len(c.ToolCalls) == 0 && c.FinishReason == record.FinishStop {
		r.c.empty.Add(1)
	}
	r.c.tokenRate.Add(now, int64(c.CompletionTokens))
	st := ep.Stats()
	st.OK.Add(1)
	st.CompletionTokens.Add(int64(c.CompletionTokens))
	st.Rate.Add(now, int64(c.CompletionTokens))
}

// prepareTurn builds the request of the turn j's conversation asks for,
// fitted to the context: the prompt's tokens are the last turn's prompt,
// as the server counted it, and what came after it (the answer, as many
// tokens as it took or as its text estimates, whichever is more: sent
// back as text it is counted again), estimated.
func (r *runner) prepareTurn(j *job) error {
	known := 0
	if turns := j.conv.Turns(); len(turns) > 0 && r.tokens != nil {
		last, out := turns[len(turns)-1], j.conv.Messages()
		if last.Usage.PromptTokens > 0 {
			answer := out[last.Message : last.Message+1]
			known = last.Usage.PromptTokens + max(last.Usage.CompletionTokens, r.tokens.Estimate(tokens.SizeOf(answer, nil))) +
				r.tokens.Estimate(tokens.SizeOf(out[last.Message+1:], nil))
		}
	}
	return r.prepare(j, known, false)
}

// turnDone takes a conversation's answer: into the walk, the journal and
// the figures; then readies the next turn. more: a turn is to be sent;
// !ok: the run is stopping (the journal could not be written).
func (r *runner) turnDone(ep *fleet.Endpoint, j *job, c *openai.Completion, latency time.Duration) (more, ok bool) {
	conv := j.conv
	turn := record.Turn{FinishReason: c.FinishReason, ReasoningField: c.ReasoningField, ContextShifted: r.shifted(c), Usage: record.TurnUsage{PromptTokens: c.PromptTokens, CompletionTokens: c.CompletionTokens, CachedTokens: c.CachedTokens},
		MaxTokens: j.fit.Max, LatencyMS: latency.Milliseconds(), Endpoint: ep.Name(), Attempts: j.attempts, TokenIDs: r.turnTokenIDs(ep, j)}
	a, err := conv.NewAnswer(c, turn)
	if err != nil {
		r.fatal(err)
		return false, false
	}
	if n := len(j.prompt) + len(a.Message.Content) + len(a.Message.ReasoningContent) + len(a.Message.ToolCalls); n > maxLineOut {
		// Neither the journal nor -o could hold it: no use going on.
		j.reason = record.ReasonAnswerTooLarge
		r.failJob(ep, j, &fleet.Failure{Message: fmt.Sprintf("turn %d's answer would make a record of more than %d bytes, the line limit", len(conv.Turns()), maxLineOut)})
		return false, false
	}
	if jn := r.files.Journal; jn != nil {
		l := conversation.JournalLine{ID: j.rid, Sample: j.sample, FP: j.fp, Base: j.base, Turn: len(conv.Turns()), Model: c.Model, Answer: a.Message, Meta: turn}
		if err := jn.Write(&l); err != nil {
			r.fatal(err)
			return false, false
		}
	}
	conv.Apply(a)
	r.c.readdressed.Add(int64(a.Readdressed))
	j.attempts, j.ctxRetries = 0, 0
	r.counted(ep, j, c)
	r.c.turns.Add(1)
	if !conv.Next() {
		return false, true
	}
	if err := r.prepareTurn(j); err != nil {
		r.fatal(fmt.Errorf("%s:%d: building turn %d: %w", j.file, j.line, len(conv.Turns()), err))
		return false, false
	}
	if j.refused != nil {
		conv.Truncate(record.TruncContextFull, len(conv.Turns()), j.refused.Message)
		return false, true
	}
	return true, true
}

// finishConversation writes a conversation's generation record.
func (r *runner) finishConversation(j *job) {
	conv := j.conv
	out := conv.Output(j.sample, r.model)
	if r.cfg.TokenIDs {
		out.ServedBy = r.servedBy(out.Endpoint)
	}
	out.Arm, out.ArmParams, out.SeedOffset = r.armName(j), j.armSent, r.seedOffset(j)
	var ep *fleet.Endpoint
	if out.Endpoint != "" {
		ep = r.pool.ByName(out.Endpoint)
	}
	ids, err := r.settingsOf(ep, out.Endpoint, j)
	if err != nil {
		r.fatal(err)
		return
	}
	out.Settings, out.SettingsFamily = ids.Hash, ids.Family
	if !r.writeAnswer(nil, j, func(dst []byte) ([]byte, error) { return recordLine(dst, j.prompt, "output", out) }) {
		return
	}
	r.c.ok.Add(1)
	r.armDone(j, true, out.Usage.CompletionTokens)
	r.c.replayed.Add(int64(conv.Replayed()))
	r.c.paired.Add(int64(conv.Paired()))
	if t := conv.Truncated(); t != nil {
		r.c.truncated(t.Reason)
	}
	r.c.answerRate.Add(r.clk.Now(), 1)
	r.finish()
}

// failJob writes j's error record; ep is nil for a prompt that was never
// sent.
func (r *runner) failJob(ep *fleet.Endpoint, j *job, f *fleet.Failure) {
	if n := r.shownFail.Add(1); n <= reportLimit {
		more := ""
		if n == reportLimit {
			more = " (further failures are counted, not shown)"
		}
		what := "failed"
		if f.Retriable {
			what = fmt.Sprintf("failed after %d attempts", j.attempts)
		}
		r.logf("%s:%d: id %q sample %d %s: %v%s", j.file, j.line, j.id, j.sample, what, f, more)
	}
	r.c.failed.Add(1)
	r.armDone(j, false, 0)
	r.c.answerRate.Add(r.clk.Now(), 1)
	if r.files.Errs != nil {
		e := record.Error{Status: f.Status, Message: f.Message, Attempts: j.attempts, Retriable: f.Retriable, Sample: j.sample, Arm: r.armName(j)}
		if ep != nil {
			e.Endpoint = ep.Name()
		}
		switch {
		case f == j.refused:
			e.Reason, e.PromptTokens = record.ReasonPromptTooLong, j.fit.Prompt
		case j.reason != "":
			e.Reason = j.reason
		case f.Reason != "":
			e.Reason = f.Reason
		}
		if j.conv != nil {
			n := len(j.conv.Turns())
			e.TurnsDone, e.Turn = &n, &n
		}
		if _, ok := r.writeRecord(r.files.Errs, func(dst []byte) ([]byte, error) { return recordLine(dst, j.prompt, "error", &e) }, 0); !ok {
			return
		}
	}
	r.finish()
}

func (r *runner) finish() {
	r.outstanding.Add(-1)
	r.ready.wake()
}

// maxLineOut is the longest record infer writes: the line limit every
// tool reads (tests lower it).
var maxLineOut = jsonl.MaxLine

// writeAnswer writes j's generation record, built by build, to -o; a
// record longer than the line limit, which no reader would take back
// (--resume included), becomes an error record answer_too_large instead.
// false when nothing was written to -o.
func (r *runner) writeAnswer(ep *fleet.Endpoint, j *job, build func(dst []byte) ([]byte, error)) bool {
	size, ok := r.writeRecord(r.files.Out, build, maxLineOut)
	if ok || size <= maxLineOut {
		return ok
	}
	j.reason = record.ReasonAnswerTooLarge
	r.failJob(ep, j, &fleet.Failure{Message: fmt.Sprintf("the answer's record would be %d bytes, more than the %d-byte line limit", size, maxLineOut)})
	return false
}

// writeRecord writes the line build makes to w, in a buffer of the
// runner's pool, unless it is longer than limit bytes (0: no limit). It
// returns the line's length, and false when it did not write it (the run
// stopped when it could not).
func (r *runner) writeRecord(w *jsonl.Appender, build func(dst []byte) ([]byte, error), limit int) (int, bool) {
	var buf []byte
	if b, ok := r.bufs.Get().(*[]byte); ok {
		buf = (*b)[:0]
	} else {
		buf = make([]byte, 0, 8<<10)
	}
	line, err := build(buf)
	if err == nil && limit > 0 && len(line) > limit {
		r.bufs.Put(&buf)
		return len(line), false
	}
	if err == nil {
		err = w.WriteLine(line)
	}
	if cap(line) <= 1<<20 { // a huge buffer is let go, not kept for every record
		r.bufs.Put(&line)
	}
	if err != nil {
		r.fatal(err)
		return 0, false
	}
	return len(line), true
}

// offersTools: j's request carries tools.
func (r *runner) offersTools(j *job) bool {
	if j.conv != nil {
		return len(j.conv.Request().Tools) > 0
	}
	return j.rec != nil && len(j.rec.Tools) > 0
}

// toolsLeftOut says why j, whose request offers tools, is not sent to ep:
// ep's template would leave them out of the prompt (fleet's
// ToolsUnsupported), an answer to another request than asked. "" when it
// may be sent.
func (r *runner) toolsLeftOut(ep *fleet.Endpoint, j *job) string {
	if !r.offersTools(j) {
		return ""
	}
	return r.pool.ToolsUnsupported(ep)
}

// modelOf is the model ep is sent.
func (r *runner) modelOf(ep *fleet.Endpoint) string {
	if m := r.pool.ModelOf(ep); m != "" {
		return m
	}
	return r.model
}

// wrongModel handles a refusal of the model ep was sent as one it does
// not serve: ep's misconfiguration, not the prompt's. ep is out of the
// run at once and j goes to another endpoint, the attempt not counted;
// when no endpoint is left the run stops. false: f is not such a refusal.
func (r *runner) wrongModel(ep *fleet.Endpoint, j *job, f *fleet.Failure) bool {
	if !fleet.ModelNotFound(f) {
		return false
	}
	why := fmt.Sprintf("it does not serve model %q (%s): check --model", r.modelOf(ep), f.Message)
	if !r.pool.Misconfigured(ep, why) {
		r.fatal(fmt.Errorf("no endpoint serves the model: %s", why))
		return true
	}
	j.attempts--
	r.c.queued.Add(1)
	r.ready.push(j)
	return true
}
