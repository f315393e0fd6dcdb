package infer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"tokenmill/lib/fleet"
	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// dispatch sends jobs until all are done or ctx ends.
func (r *runner) dispatch(ctx context.Context) error {
	for {
		j := r.next(ctx)
		if j == nil {
			return nil
		}
		ep, err := r.pool.Acquire(ctx, j.last)
		if err != nil {
			if errors.Is(err, fleet.ErrAllDown) {
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

// send makes one attempt of j on ep and files the outcome.
func (r *runner) send(ep *fleet.Endpoint, j *job) {
	defer r.inflight.Done()
	start := r.clk.Now()
	r.eta.Started(j, ep.Index(), start)
	c, f := r.pool.Complete(ep, r.cfg.API.Path(), j.body, r.cfg.RequestTimeout, r.cfg.API.Parse)
	end := r.clk.Now()
	r.eta.Ended(j, end, f == nil, c.CompletionTokens, c.FinishReason)
	r.pool.Release(ep)
	if f == nil || !f.Down {
		j.attempts++
	}
	if f == nil {
		r.pool.Succeeded(ep)
		r.systematic.Succeeded()
		r.succeed(ep, j, &c, end.Sub(start))
		return
	}
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
	if f.Blame {
		r.pool.Failed(ep, f.Down, f.Error())
	}
	j.last = ep
	if r.retry(j, f) {
		return
	}
	if err := r.systematic.Failed(ep, f); err != nil {
		r.fatal(err)
		return
	}
	r.failJob(ep, j, f)
}

func (r *runner) succeed(ep *fleet.Endpoint, j *job, c *openai.Completion, latency time.Duration) {
	model := c.Model
	if model == "" {
		model = r.model
	}
	out := record.Output{
		Text: c.Text, Reasoning: c.Reasoning, FinishReason: c.FinishReason,
		Usage:    record.Usage{PromptTokens: c.PromptTokens, CompletionTokens: c.CompletionTokens, CachedTokens: c.CachedTokens},
		Model:    model,
		Endpoint: ep.Name(), LatencyMS: latency.Milliseconds(), Attempts: j.attempts, Sample: j.sample,
	}
	if !r.writeRecord(r.out, func(dst []byte) ([]byte, error) { return generationLine(dst, j.prompt, &out) }) {
		return
	}
	now := r.clk.Now()
	r.c.ok.Add(1)
	r.c.promptTokens.Add(int64(c.PromptTokens))
	r.c.completionTokens.Add(int64(c.CompletionTokens))
	if c.CachedTokens != nil {
		r.c.cachedTokens.Add(int64(*c.CachedTokens))
	}
	r.c.finishReason(c.FinishReason)
	r.c.tokenRate.Add(now, int64(c.CompletionTokens))
	r.c.answerRate.Add(now, 1)
	st := ep.Stats()
	st.OK.Add(1)
	st.CompletionTokens.Add(int64(c.CompletionTokens))
	st.Rate.Add(now, int64(c.CompletionTokens))
	r.finish()
}

// failJob writes j's error record.
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
	r.c.answerRate.Add(r.clk.Now(), 1)
	if r.errs != nil {
		e := record.Error{Status: f.Status, Message: f.Message, Attempts: j.attempts, Endpoint: ep.Name(), Retriable: f.Retriable, Sample: j.sample}
		if !r.writeRecord(r.errs, func(dst []byte) ([]byte, error) { return errorLine(dst, j.prompt, &e) }) {
			return
		}
	}
	r.finish()
}

func (r *runner) finish() {
	r.outstanding.Add(-1)
	r.ready.wake()
}

// writeRecord writes the line build makes to w, in a buffer of the
// runner's pool; false, and the run stopped, when it cannot.
func (r *runner) writeRecord(w *lineWriter, build func(dst []byte) ([]byte, error)) bool {
	var buf []byte
	if b, ok := r.bufs.Get().(*[]byte); ok {
		buf = (*b)[:0]
	} else {
		buf = make([]byte, 0, 8<<10)
	}
	line, err := build(buf)
	if err == nil {
		err = w.writeLine(line)
	}
	r.bufs.Put(&line)
	if err != nil {
		r.fatal(err)
		return false
	}
	return true
}
