package infer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"tokenmill/lib/fleet"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// job is one answer to generate: a prompt record and a sample number.
type job struct {
	prompt []byte // the record, any old output/error field removed
	id     string
	sample int
	body   []byte
	file   string
	line   int64

	attempts int             // requests that got an answer or an error (refused connections do not count)
	deferred int             // of them, answered 429/503 with Retry-After: not counted against --retries
	last     *fleet.Endpoint // where the last attempt went
}

// readyQueue holds answers whose backoff is over, to be dispatched before
// new input, and wakes the dispatcher when one arrives or a job ends.
type readyQueue struct {
	mu     sync.Mutex
	jobs   []*job
	notify chan struct{}
}

func newReadyQueue() *readyQueue { return &readyQueue{notify: make(chan struct{}, 1)} }

func (q *readyQueue) push(j *job) {
	q.mu.Lock()
	q.jobs = append(q.jobs, j)
	q.mu.Unlock()
	q.wake()
}

func (q *readyQueue) pop() *job {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.jobs) == 0 {
		return nil
	}
	j := q.jobs[0]
	q.jobs[0] = nil
	q.jobs = q.jobs[1:]
	return j
}

func (q *readyQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.jobs)
}

// wake signals the dispatcher; a signal sent while it is busy is kept.
func (q *readyQueue) wake() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// ReasonNoID is the reject reason of a record without an id (the others
// are the reader's and the request builder's).
const ReasonNoID = "no_id"

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
	paramSeed, err := r.b.Check(&p)
	if err != nil {
		var pe *openai.PromptError
		if errors.As(err, &pe) {
			return reject(pe.Reason, pe.Detail)
		}
		return reject(openai.ReasonBadParams, err.Error())
	}
	first, err := r.b.Body(&p, paramSeed, p.Sample)
	if err != nil {
		return reject(openai.ReasonBadParams, err.Error())
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
			if body, err = r.b.Body(&p, paramSeed, sample); err != nil {
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
