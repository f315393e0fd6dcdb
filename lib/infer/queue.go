package infer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"sync"
	"time"

	"tokenmill/lib/conversation"
	"tokenmill/lib/fleet"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/openai"
	"tokenmill/lib/record"
	"tokenmill/lib/tokens"
)

// job is one answer to generate: a prompt record and a sample number.
// It holds more fields than a struct should because it carries the whole
// state of an answer (its request, attempts, conversation, fitting, token
// ids and arm) from the reader to the workers and the retry timers, which
// take turns with it; one allocation an answer, grouped by concern below.
type job struct {
	prompt []byte // the record, any old output/error field removed
	id     string
	rid    record.ID // id as the record has it (a string or a number)
	msgs   int       // the turns the request sends (where an answer's calls are named from)
	sample int
	body   []byte
	file   string
	line   int64

	attempts int             // requests that got an answer or an error (refused connections do not count)
	last     *fleet.Endpoint // where the last attempt went

	// A conversation (--regenerate): its walk, the journal's fingerprint
	// and base for it, and the endpoint its journaled turns went to.
	conv    *conversation.Walk
	fp      string
	base    int
	prefer  string
	etaOn   bool // the estimator has the conversation in flight
	started time.Time

	// Fitting the context: the record (to build the request again), how it
	// fitted, the prompt's tokens as last known, refusals for length so
	// far, and the failure of a prompt too long.
	rec          *record.Prompt
	paramSeed    *int64
	size         tokens.Size
	fit          tokens.Fit
	promptTokens int
	ctxRetries   int
	refused      *fleet.Failure
	reason       string // the error record's reason, when infer decided the failure
	// tok is the last answer's token ids (--token-ids, tokenids.go).
	tok *record.TokenIDs
	// arm is 1 + the index of the answer's arm in --mix (0: none), and
	// armSent what its requests send of the arm's settings (mix.go).
	arm     int
	armSent []byte
	// params are the keys the record's own params set (settings.go).
	params string
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

// Reject reasons of infer's own (the others are the reader's and the
// request builder's): a record without an id; one whose "sample", with
// the --samples after it, is not a sample number merge takes
// (0 to record.MaxSample), or whose seeds would pass the largest integer.
const (
	ReasonNoID      = "no_id"
	ReasonBadSample = "bad_sample"
)

// read feeds the input's records to r.input until EOF or ctx ends.
func (r *runner) read(ctx context.Context, rd *jsonl.Reader) {
	defer close(r.input)
	defer r.readerDone.Store(true)
	for ctx.Err() == nil {
		rec, err := rd.Next()
		if err == io.EOF {
			r.readAll.Store(true)
			return
		}
		if err != nil {
			var ie *jsonl.InputError
			if !errors.As(err, &ie) {
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
		// A long line's buffer is handed over, not copied: a prompt is
		// held once.
		raw := rd.TakeLong(rec)
		if raw == nil {
			raw = bytes.Clone(rec.Data)
		}
		if !r.take(ctx, rec, raw) {
			return
		}
	}
}

// take turns one record into its jobs; false when the run is stopping.
func (r *runner) take(ctx context.Context, rec jsonl.RawLine, raw []byte) bool {
	reject := func(reason, detail string) bool {
		if err := r.rejects.Add(jsonl.RawLine{Data: raw, File: rec.File, Line: rec.Line}, reason, detail); err != nil {
			r.fatal(fmt.Errorf("rejects file: %w", err))
			return false
		}
		return true
	}
	if detail := r.checkSample(raw); detail != "" {
		return reject(ReasonBadSample, detail)
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
	regen := r.cfg.Regenerate
	if regen && !p.HasPrompt() {
		return reject(openai.ReasonNoPrompt, `neither "messages" nor "prompt"`)
	}
	check := r.cfg.Builder.Check
	if regen {
		check = r.cfg.Builder.CheckParams
	}
	paramSeed, err := check(&p)
	var pe *openai.PromptError
	switch {
	case errors.As(err, &pe):
		return reject(pe.Reason, pe.Detail)
	case err != nil:
		return reject(openai.ReasonBadParams, err.Error())
	}
	if r.seedsWrap(paramSeed, p.Sample) {
		return reject(ReasonBadSample, "the seeds of its samples would pass the largest integer")
	}
	var questions bool
	if regen {
		if questions, err = conversation.IsQuestionList(raw); err != nil {
			return reject(ReasonBadQuestionList, err.Error())
		}
		if _, ok := conversation.New(&p, paramSeed, r.cfg.ToolRounds, questions); !ok {
			return reject(ReasonNoConversation, "nothing to regenerate: no assistant turn after a user turn, and the last turn is not a user turn")
		}
	}
	prompt, err := stripOwnFields(raw)
	if err != nil {
		return reject(jsonl.ReasonMalformedJSON, err.Error())
	}
	if r.duplicate(&p, rec) {
		return true
	}
	return r.takeSamples(ctx, &p, prompt, rec, paramSeed, questions, reject)
}

// takeSamples turns a prompt into its jobs, one per sample not done yet:
// a conversation resumed from the journal's turns where it has some.
func (r *runner) takeSamples(ctx context.Context, p *record.Prompt, prompt []byte, rec jsonl.RawLine, paramSeed *int64, questions bool, reject func(reason, detail string) bool) bool {
	r.c.prompts.Add(1)
	r.c.answers.Add(int64(r.cfg.Samples))
	regen := r.cfg.Regenerate
	fp, known, exact := "", 0, false // the prompt's tokens, counted once for every sample
	if regen {
		fp = conversation.Fingerprint(prompt)
	}
	for k := 0; k < r.cfg.Samples; k++ {
		sample := p.Sample + k
		if r.ledger.Done(p.ID.Text, sample) {
			r.c.skipped.Add(1)
			continue
		}
		j := &job{prompt: prompt, id: p.ID.Text, rid: p.ID, sample: sample, file: rec.File, line: rec.Line, fp: fp, paramSeed: paramSeed}
		err := r.assignArm(j, p)
		switch {
		case err == nil && regen:
			if j.conv = r.resumeTurns(j, p, paramSeed, questions); !j.conv.Next() {
				r.outstanding.Add(1)
				r.finishConversation(j)
				continue
			}
		case err == nil:
			j.msgs, j.rec = len(openai.ChatMessages(p)), p
			err = r.prepare(j, known, exact)
			known, exact = j.fit.Prompt, j.fit.Exact
		}
		if err == nil && regen {
			err = r.prepareTurn(j)
		}
		if err != nil && k == 0 && !regen {
			return reject(openai.ReasonBadParams, err.Error())
		}
		if err != nil {
			r.fatal(fmt.Errorf("%s:%d: building sample %d: %w", rec.File, rec.Line, sample, err))
			return false
		}
		if !r.enqueue(ctx, j) {
			return false
		}
	}
	return true
}

// resumeTurns is the walk of j's conversation: from the journal's turns
// where it has some that fit the record, else from the start.
func (r *runner) resumeTurns(j *job, p *record.Prompt, paramSeed *int64, questions bool) *conversation.Walk {
	conv, _ := conversation.New(p, paramSeed, r.cfg.ToolRounds, questions)
	jn := r.files.Journal
	if jn == nil {
		return conv
	}
	j.base = jn.Base(j.id, j.sample)
	var err error
	if j.prefer, err = conv.Replay(jn.Claim(j.id, j.sample, j.fp)); err != nil {
		r.logf("%s:%d: id %q sample %d: the journal's turns do not fit the record (%v): regenerating it from the start", j.file, j.line, j.id, j.sample, err)
		conv, _ = conversation.New(p, paramSeed, r.cfg.ToolRounds, questions)
	}
	return conv
}

// checkSample says what is wrong with a record's top-level "sample" ("":
// nothing): the samples it asks for (sample to sample+K-1) must be numbers
// merge takes, from 0 to record.MaxSample. A record that is not valid JSON
// is left to the decoder to report.
func (r *runner) checkSample(raw []byte) string {
	v, err := record.FieldValue(raw, "sample")
	if err != nil || v == nil || string(v) == "null" {
		return ""
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if last := int64(record.MaxSample - (r.cfg.Samples - 1)); err != nil || n < 0 || n > last {
		return fmt.Sprintf("\"sample\" %.20s: with --samples %d it must be an integer from 0 to %d", v, r.cfg.Samples, last)
	}
	return ""
}

// seedsWrap tells whether the seed of a record's last sample (its params'
// seed or --seed, plus --seed-offset and the sample) would pass the
// largest int64, so that seeds would wrap around to negative ones.
func (r *runner) seedsWrap(paramSeed *int64, sample int) bool {
	base := r.cfg.Seed
	if paramSeed != nil {
		base = paramSeed
	}
	return base != nil && seedOverflows(*base, r.cfg.SeedOffset, sample+r.cfg.Samples-1)
}

// seedOffset is the --seed-offset j's requests were asked with, 0 when
// they carried no seed.
func (r *runner) seedOffset(j *job) int64 {
	if j.paramSeed == nil && r.cfg.Seed == nil {
		return 0
	}
	return r.cfg.SeedOffset
}

// seedOverflows tells whether seed base+offset+sample passes the int64
// range.
func seedOverflows(base, offset int64, sample int) bool {
	last := big.NewInt(base)
	last.Add(last, big.NewInt(offset))
	last.Add(last, big.NewInt(int64(sample)))
	return !last.IsInt64()
}

// enqueue hands j to the dispatcher, or files it at once when its prompt
// does not fit the context; false when the run is stopping.
func (r *runner) enqueue(ctx context.Context, j *job) bool {
	r.outstanding.Add(1)
	if j.refused != nil {
		r.refuse(nil, j)
		return true
	}
	r.c.queued.Add(1)
	select {
	case r.input <- j:
		return true
	case <-ctx.Done():
		r.c.queued.Add(-1)
		r.outstanding.Add(-1)
		return false
	}
}

// duplicate reports (and names, the first few) a record whose id the
// input has shown before: it is generated once.
func (r *runner) duplicate(p *record.Prompt, rec jsonl.RawLine) bool {
	if !r.ledger.See(p.ID.Text) {
		return false
	}
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

// Reject reasons under --regenerate: a record with nothing to
// regenerate, and one whose question_list mark is neither true nor false.
const (
	ReasonNoConversation  = "no_conversation"
	ReasonBadQuestionList = "bad_question_list"
)

// next returns the next job to send: retries whose backoff is over first,
// then new input. nil when everything is done or the run is stopping.
// Once every endpoint fails alike, each is filed instead (unsent), the
// input read to its end.
func (r *runner) next(ctx context.Context) *job {
	input := r.input
	for {
		if j := r.ready.pop(); j != nil {
			if r.unsent(j) {
				continue
			}
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
			if r.unsent(j) {
				continue
			}
			return j
		case <-ctx.Done():
			return nil
		}
	}
}
