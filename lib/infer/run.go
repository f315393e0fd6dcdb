package infer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// runner moves answers from the input to the output: a reader goroutine
// turns records into jobs on a small bounded channel (so memory stays
// bounded whatever the input size), one dispatcher hands each job to a
// free slot chosen by the pool, and one goroutine per request in flight
// sends it and files the outcome.
type runner struct {
	cfg     *Generate
	b       *builder
	pool    *pool
	c       counters
	out     *lineWriter
	errs    *lineWriter // nil: failures are only counted and reported
	rejects *jsonl.Rejects
	ledger  *ledger
	backoff *backoff
	logf    func(format string, args ...any)
	parse   func([]byte) (openai.Completion, error)
	model   string
	eta     Estimator

	input       chan *job
	ready       *readyQueue
	work        chan task     // attempts for idle workers
	workDone    chan struct{} // closed at the end: workers exit
	outstanding atomic.Int64  // jobs read and not yet ok or failed
	inflight    sync.WaitGroup
	stopping    atomic.Bool // interrupted or fatal: no more retries or error records
	readerDone  atomic.Bool
	fatalOnce   sync.Once
	fatalErr    error
	cancelRun   context.CancelCauseFunc

	shownDup, shownFail atomic.Int64
	bufs                sync.Pool
}

// reportLimit is how many duplicates and failures are described on
// stderr; the rest are counted (and failures are all in the errors file).
const reportLimit = 10

// fatal stops the run with err (exit 1) after what is in flight is done.
func (r *runner) fatal(err error) {
	r.fatalOnce.Do(func() {
		r.fatalErr = err
		r.stopping.Store(true)
		r.cancelRun(err)
	})
}

// read feeds the input's records to r.input until EOF or ctx ends.
func (r *runner) read(ctx context.Context, rd *jsonl.Reader) {
	defer close(r.input)
	defer r.readerDone.Store(true)
	for ctx.Err() == nil {
		rec, err := rd.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			if !isInputError(err) {
				r.fatal(err)
				return
			}
			r.c.read.Add(1)
			if werr := r.rejects.Input(err); werr != nil {
				r.fatal(fmt.Errorf("rejects file: %w", werr))
				return
			}
			continue
		}
		r.c.read.Add(1)
		if !r.take(ctx, rec) {
			return
		}
	}
}

func isInputError(err error) bool {
	var ie *jsonl.InputError
	return errors.As(err, &ie)
}

// take turns one record into its jobs; false when the run is stopping.
func (r *runner) take(ctx context.Context, rec jsonl.Record) bool {
	raw := bytes.Clone(rec.Data)
	reject := func(reason, detail string) bool {
		if err := r.rejects.Add(jsonl.Record{Data: raw, File: rec.File, Line: rec.Line}, reason, detail); err != nil {
			r.fatal(fmt.Errorf("rejects file: %w", err))
			return false
		}
		return true
	}
	var p record.Prompt
	if err := record.Decode(raw, &p); err != nil {
		if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] != '{' {
			return reject(jsonl.ReasonNotObject, "a record must be a JSON object")
		}
		return reject(jsonl.ReasonMalformedJSON, err.Error())
	}
	if p.ID.IsZero() {
		return reject(ReasonNoID, `no "id" (extract and dedup give every record one)`)
	}
	paramSeed, err := r.b.check(&p)
	if err != nil {
		var pe *promptError
		if errors.As(err, &pe) {
			return reject(pe.reason, pe.detail)
		}
		return reject(ReasonBadParams, err.Error())
	}
	first, err := r.b.body(&p, paramSeed, p.Sample)
	if err != nil {
		return reject(ReasonBadParams, err.Error())
	}
	prompt, err := stripOwnFields(raw)
	if err != nil {
		return reject(jsonl.ReasonMalformedJSON, err.Error())
	}
	if r.ledger.see(p.ID.Text) {
		n := r.c.duplicates.Add(1)
		if n <= reportLimit {
			more := ""
			if n == reportLimit {
				more = " (further duplicates are counted, not shown)"
			}
			r.logf("%s:%d: duplicate id %q: generated once%s", rec.File, rec.Line, p.ID.Text, more)
		}
		return true
	}
	r.c.prompts.Add(1)
	r.c.answers.Add(int64(r.cfg.Samples))
	for k := 0; k < r.cfg.Samples; k++ {
		sample := p.Sample + k
		if r.ledger.done(p.ID.Text, sample) {
			r.c.skipped.Add(1)
			continue
		}
		body := first
		if k > 0 {
			if body, err = r.b.body(&p, paramSeed, sample); err != nil {
				r.fatal(fmt.Errorf("%s:%d: building sample %d: %w", rec.File, rec.Line, sample, err))
				return false
			}
		}
		j := &job{prompt: prompt, id: p.ID.Text, sample: sample, body: body, file: rec.File, line: rec.Line}
		r.outstanding.Add(1)
		r.c.queued.Add(1)
		select {
		case r.input <- j:
		case <-ctx.Done():
			r.c.queued.Add(-1)
			r.outstanding.Add(-1)
			return false
		}
	}
	return true
}

// next returns the next job to send: retries whose backoff is over first,
// then new input. nil when everything is done or the run is stopping.
func (r *runner) next(ctx context.Context) *job {
	input := r.input
	for {
		if j := r.ready.pop(); j != nil {
			return j
		}
		if input == nil && r.outstanding.Load() == 0 {
			return nil
		}
		select {
		case <-r.ready.notify:
		case j, ok := <-input:
			if !ok {
				input = nil
				continue
			}
			return j
		case <-ctx.Done():
			return nil
		}
	}
}

// dispatch sends jobs until all are done or ctx ends.
func (r *runner) dispatch(ctx context.Context) error {
	for {
		j := r.next(ctx)
		if j == nil {
			return nil
		}
		ep, err := r.pool.acquire(ctx, j.last)
		if err != nil {
			if errors.Is(err, errAllDown) {
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
	ep  *endpoint
	job *job
}

// hand gives an attempt to an idle worker, or to a new one. Workers live
// for the run, so their stacks have grown to what a request needs once,
// instead of a fresh goroutine growing its stack for every request.
func (r *runner) hand(ep *endpoint, j *job) {
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
func (r *runner) send(ep *endpoint, j *job) {
	defer r.inflight.Done()
	start := time.Now()
	r.eta.Started(j, start)
	c, f := r.attempt(ep, j)
	r.eta.Ended(j, time.Now(), f == nil, c.CompletionTokens, c.FinishReason)
	r.pool.release(ep)
	if f == nil || !f.down {
		j.attempts++
	}
	if f == nil {
		r.pool.succeeded(ep)
		r.succeed(ep, j, &c, time.Since(start))
		return
	}
	if r.stopping.Load() {
		// Not done; resume redoes it. Failures now are mostly the shutdown's
		// own doing (connections closed after --grace), not the endpoint's.
		return
	}
	ep.stats.failures.Add(1)
	if f.fatal {
		r.fatal(fmt.Errorf("%s refused the request (%v): check --api-key", ep.name, f))
		return
	}
	if f.blame {
		r.pool.failed(ep, f.down, f.Error())
	}
	j.last = ep
	if f.retriable && (f.down || j.attempts <= r.cfg.Retries) {
		r.c.retries.Add(1)
		var wait time.Duration
		if !f.down {
			wait = r.backoff.delay(j.attempts)
		}
		r.c.backingOff.Add(1)
		time.AfterFunc(wait, func() {
			r.c.backingOff.Add(-1)
			r.ready.push(j)
		})
		return
	}
	r.failJob(ep, j, f)
}

// attempt sends j to ep once.
func (r *runner) attempt(ep *endpoint, j *job) (openai.Completion, *failure) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	setPost(req, ep.t, r.cfg.API.Path(), r.cfg.APIKey, j.body)
	ep.stats.requests.Add(1)
	if err := ep.gen.DoTimeout(req, resp, r.cfg.RequestTimeout); err != nil {
		return openai.Completion{}, classifyTransport(err, r.cfg.RequestTimeout)
	}
	if status := resp.StatusCode(); status != fasthttp.StatusOK {
		return openai.Completion{}, classifyStatus(status, resp.Body())
	}
	c, err := r.parse(resp.Body())
	if err != nil {
		return openai.Completion{}, &failure{status: fasthttp.StatusOK, message: err.Error(), retriable: true, blame: true}
	}
	if f := classifyAnswer(&c); f != nil {
		return openai.Completion{}, f
	}
	return c, nil
}

func (r *runner) succeed(ep *endpoint, j *job, c *openai.Completion, latency time.Duration) {
	model := c.Model
	if model == "" {
		model = r.model
	}
	out := record.Output{
		Text: c.Text, Reasoning: c.Reasoning, FinishReason: c.FinishReason,
		Usage:    record.Usage{PromptTokens: c.PromptTokens, CompletionTokens: c.CompletionTokens, CachedTokens: c.CachedTokens},
		Model:    model,
		Endpoint: ep.name, LatencyMS: latency.Milliseconds(), Attempts: j.attempts, Sample: j.sample,
	}
	buf := r.buffer()
	line, err := generationLine(buf[:0], j.prompt, &out)
	if err == nil {
		err = r.out.writeLine(line)
	}
	r.bufs.Put(&line)
	if err != nil {
		r.fatal(err)
		return
	}
	now := time.Now()
	r.c.ok.Add(1)
	r.c.promptTokens.Add(int64(c.PromptTokens))
	r.c.completionTokens.Add(int64(c.CompletionTokens))
	r.c.cachedTokens.Add(int64(c.CachedTokens))
	r.c.finishReason(c.FinishReason)
	r.c.tokenRate.add(now, int64(c.CompletionTokens))
	r.c.answerRate.add(now, 1)
	ep.stats.ok.Add(1)
	ep.stats.promptTokens.Add(int64(c.PromptTokens))
	ep.stats.completionTokens.Add(int64(c.CompletionTokens))
	ep.stats.rate.add(now, int64(c.CompletionTokens))
	r.finish()
}

// failJob writes j's error record.
func (r *runner) failJob(ep *endpoint, j *job, f *failure) {
	if n := r.shownFail.Add(1); n <= reportLimit {
		more := ""
		if n == reportLimit {
			more = " (further failures are counted, not shown)"
		}
		what := "failed"
		if f.retriable {
			what = fmt.Sprintf("failed after %d attempts", j.attempts)
		}
		r.logf("%s:%d: id %q sample %d %s: %v%s", j.file, j.line, j.id, j.sample, what, f, more)
	}
	r.c.failed.Add(1)
	r.c.answerRate.add(time.Now(), 1)
	if r.errs != nil {
		e := record.Error{Status: f.status, Message: f.message, Attempts: j.attempts, Endpoint: ep.name, Retriable: f.retriable, Sample: j.sample}
		buf := r.buffer()
		line, err := errorLine(buf[:0], j.prompt, &e)
		if err == nil {
			err = r.errs.writeLine(line)
		}
		r.bufs.Put(&line)
		if err != nil {
			r.fatal(err)
			return
		}
	}
	r.finish()
}

func (r *runner) finish() {
	r.outstanding.Add(-1)
	r.ready.wake()
}

func (r *runner) buffer() []byte {
	if b, ok := r.bufs.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, 0, 8<<10)
}

// summary gathers the final figures.
func (r *runner) summary(wall time.Duration) Summary {
	s := Summary{
		Read: r.c.read.Load(), Rejected: r.rejects.Total(), Duplicates: r.c.duplicates.Load(), Prompts: r.c.prompts.Load(),
		Samples: r.cfg.Samples, Answers: r.c.answers.Load(), Skipped: r.c.skipped.Load(), OK: r.c.ok.Load(), Failed: r.c.failed.Load(),
		Retries: r.c.retries.Load(), PromptTokens: r.c.promptTokens.Load(), CompletionTokens: r.c.completionTokens.Load(),
		CachedTokens: r.c.cachedTokens.Load(), FinishStop: r.c.finishStop.Load(), FinishLength: r.c.finishLength.Load(),
		FinishOther: r.c.finishOther.Load(), Wall: wall,
	}
	s.NotDone = s.Answers - s.Skipped - s.OK - s.Failed
	for i, v := range r.pool.view() {
		st := &r.pool.eps[i].stats
		s.Endpoints = append(s.Endpoints, EndpointSummary{
			Name: v.name, Requests: st.requests.Load(), OK: st.ok.Load(), Failures: st.failures.Load(),
			Ejections: st.ejections.Load(), CompletionTokens: st.completionTokens.Load(), Slots: v.slots,
		})
	}
	return s
}
