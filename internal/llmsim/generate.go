package llmsim

import (
	"math"
	"net"

	"github.com/valyala/fasthttp"
)

// A generation request's way through the endpoint: admitted by its life
// (down, crashing, starting), read into a flight by the wire code
// (handlers.go: parse, the flavour's checks, newFlight), shaped by the
// fault draw, then run by the scheduler (or, instant, at once) and
// answered by the wire code again (respond.go, oai.go). What is here is
// scheduling; what the bytes look like is not.

// generate serves a generation request of api a: the endpoint's life
// admits it, the wire format reads it into a flight, the fault draw may
// answer or shape it, and the scheduler (or, instant, nothing) runs it
// before the answer is written.
func (e *Endpoint) generate(ctx *fasthttp.RequestCtx, a api) {
	e.stats.requests.Add(1)
	n := e.seq.Add(1)
	le := &logEntry{}
	if e.f.log != nil {
		defer e.logRequest(ctx, le)
	}
	inc, faults, nth, ok := e.enter(ctx, le)
	if !ok {
		return
	}
	if faults.FailBurst > 0 && nth > faults.FailBurstAfter && nth <= faults.FailBurstAfter+faults.FailBurst {
		// The burst answers before the request is read, as a server whose
		// every request fails alike does.
		le.outcome = faultOutcomes[faultFail]
		e.stats.failed.Add(1)
		e.fail(ctx, a, &apiError{kind: errInternal, status: fasthttp.StatusInternalServerError, msg: msgFail})
		return
	}
	f, aerr := e.prepare(ctx, a, n)
	if aerr != nil {
		e.stats.badRequests.Add(1)
		e.fail(ctx, a, aerr)
		return
	}
	le.f = f
	if e.injectFault(ctx, a, f, faults, n, le) {
		return
	}
	f.reserve()
	e.consultCache(f)
	if e.f.cfg.Instant || f.choices[0].Target == 0 {
		e.answerAtOnce(ctx, f)
		return
	}
	e.run(ctx, a, inc, f, le)
}

// enter admits a request into the endpoint's life: it returns the
// incarnation that serves it, once started, the faults in force and the
// request's number since the endpoint (re)started. A request to an
// endpoint that is down, the one that crashes it, or one whose endpoint
// stops while it waits, is lost: false, its connection closed as a dead
// server's.
func (e *Endpoint) enter(ctx *fasthttp.RequestCtx, le *logEntry) (*incarnation, Faults, int, bool) {
	inc, faults, nth, crash := e.admit()
	if inc == nil || crash {
		e.stats.lost.Add(1)
		le.outcome = "lost"
		if crash {
			le.outcome = "crash"
			e.Crash()
		}
		ctx.Conn().Close()
		return nil, faults, nth, false
	}
	select {
	case <-inc.ready:
		return inc, faults, nth, true
	case <-inc.ctx.Done():
		e.stats.lost.Add(1)
		le.outcome = "lost"
		return nil, faults, nth, false
	}
}

// admit counts a generation request against the endpoint's life: it
// returns the incarnation serving it, the faults in force, the request's
// number since the endpoint (re)started, and whether this request is the
// one CrashAfter says crashes the endpoint.
func (e *Endpoint) admit() (*incarnation, Faults, int, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.accepted++
	crash := e.inc != nil && e.faults.CrashAfter > 0 && e.accepted > e.faults.CrashAfter
	return e.inc, e.faults, e.accepted, crash
}

// prepare reads request number n of api a (parse) and works out what the
// model will answer (newFlight), or the flavour's refusal.
func (e *Endpoint) prepare(ctx *fasthttp.RequestCtx, a api, n uint64) (*flight, *apiError) {
	j, aerr := e.parse(ctx, a)
	if aerr != nil {
		return nil, aerr
	}
	f, err := e.newFlight(j, n)
	if err != nil {
		return nil, asAPIError(err)
	}
	return f, nil
}

// faultKind is what the fault draw decided for a request.
type faultKind int

const (
	faultNone faultKind = iota
	faultFail
	faultAbort
	faultHang
	faultDrop
	faultLimit
)

// draw picks the fault of generation request number n (1-based), and a
// second independent value for where an abort cuts the answer.
func (e *Endpoint) draw(f Faults, n uint64) (faultKind, uint64) {
	h := mix64(e.f.cfg.Seed ^ mix64(uint64(e.index)+1) ^ n*0x9e3779b97f4a7c15)
	u := unitFloat(h) - 1e-300 // in [0, 1)
	bits := mix64(h)
	for _, c := range []struct {
		k faultKind
		p float64
	}{{faultFail, f.FailRate}, {faultAbort, f.AbortRate}, {faultHang, f.HangRate}, {faultDrop, f.DropRate}, {faultLimit, f.LimitRate}} {
		if u < c.p {
			return c.k, bits
		}
		u -= c.p
	}
	return faultNone, bits
}

// faultOutcomes name each fault in the request log.
var faultOutcomes = [...]string{faultNone: "", faultFail: "fail", faultAbort: "abort", faultHang: "hang", faultDrop: "drop", faultLimit: "limit"}

// injectFault applies the fault drawn for request number n: a failure is
// answered at once, as is an instant endpoint's hang (true); a hang, an
// abort and a drop otherwise shape the flight the scheduler runs.
func (e *Endpoint) injectFault(ctx *fasthttp.RequestCtx, a api, f *flight, faults Faults, n uint64, le *logEntry) bool {
	kind, bits := e.draw(faults, n)
	le.outcome = faultOutcomes[kind]
	switch kind {
	case faultFail:
		e.stats.failed.Add(1)
		e.fail(ctx, a, &apiError{kind: errInternal, status: fasthttp.StatusInternalServerError, msg: msgFail})
		return true
	case faultLimit:
		e.stats.limited.Add(1)
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "1")
		e.fail(ctx, a, &apiError{kind: errBusy, status: fasthttp.StatusTooManyRequests, msg: msgLimit})
		return true
	case faultHang:
		e.stats.hung.Add(1)
		if e.f.cfg.Instant {
			e.holdInstant(ctx)
			return true
		}
		f.hang()
	case faultAbort:
		for _, c := range f.choices {
			c.Target = 1 + int(bits%uint64(max(c.Target, 1)))
			c.End = finishAbort
		}
	case faultDrop:
		f.drop = true
	}
	return false
}

// answerAtOnce writes the whole answer with no scheduling: an instant
// endpoint's, or one with nothing to generate.
func (e *Endpoint) answerAtOnce(ctx *fasthttp.RequestCtx, f *flight) {
	e.stats.inflight.Add(1)
	storeMax(&e.stats.maxRunning, e.stats.inflight.Load())
	for _, c := range f.choices {
		c.Generated = c.Target
		c.visible.Store(int32(c.Target))
		c.done.Store(true)
		e.stats.generatedTokens.Add(int64(c.Target))
	}
	e.stats.promptTokens.Add(int64(f.prompt - f.cached))
	e.respond(ctx, f)
	e.stats.inflight.Add(-1)
}

// holdInstant is the hang fault without the batching model: the request
// counts as running until its client closes the connection.
func (e *Endpoint) holdInstant(ctx *fasthttp.RequestCtx) {
	e.stats.inflight.Add(1)
	storeMax(&e.stats.maxRunning, e.stats.inflight.Load())
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		holdUntilClosed(c)
		e.stats.inflight.Add(-1)
	})
}

// holdUntilClosed keeps a hijacked connection open without answering,
// until the client (or a crash) closes it.
func holdUntilClosed(c net.Conn) {
	var buf [512]byte
	for {
		if _, err := c.Read(buf[:]); err != nil {
			return
		}
	}
}

// run queues the flight on incarnation inc's scheduler and answers it as
// it is generated: streamed as it goes, else once it is done. A queue with
// no room refuses it.
func (e *Endpoint) run(ctx *fasthttp.RequestCtx, a api, inc *incarnation, f *flight, le *logEntry) {
	if !e.submit(inc, f) {
		e.stats.rejected.Add(1)
		le.outcome = "rejected"
		e.refuseBusy(ctx, a, f)
		return
	}
	if f.stream && !f.hung {
		e.respond(ctx, f)
		return
	}
	if e.await(ctx, f) {
		e.respond(ctx, f)
	} else if le.outcome == "" {
		le.outcome = "lost"
	}
}

// submit queues the flight's sequences, all or none.
func (e *Endpoint) submit(inc *incarnation, f *flight) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inc != inc {
		f.fail()
		return true
	}
	m := e.model
	if m.MaxQueued > 0 && m.Waiting()+len(f.choices) > m.MaxQueued {
		return false
	}
	if !m.Busy() {
		m.SetNow(e.f.clock.Now())
	}
	f.arrived = e.f.clock.Now()
	for _, c := range f.choices {
		m.Submit(&c.Seq)
	}
	storeMax(&e.stats.maxWaiting, int64(m.Waiting()))
	select {
	case inc.wake <- struct{}{}:
	default:
	}
	return true
}

// await waits for the answer of a flight that is not streamed (a hung one
// never gets it). It reports false, the connection closed, when the flight
// was lost to a crash or its client went away; the latter is cancelled,
// so its slot frees at the next step, as SGLang aborts a request whose
// client disconnected.
func (e *Endpoint) await(ctx *fasthttp.RequestCtx, f *flight) bool {
	w := watchHangup(ctx.Conn())
	for f.remaining.Load() > 0 && !f.failed.Load() {
		select {
		case <-f.notify:
		case <-w.gone:
			f.abandon()
			ctx.Conn().Close()
			return false
		}
	}
	w.stop()
	if f.failed.Load() {
		e.stats.lost.Add(1)
		ctx.Conn().Close()
		return false
	}
	return true
}

// reserve sets what each sequence holds of the KV cache: its prompt (the
// first choice; the others share it) and its answer, at most the context.
func (f *flight) reserve() {
	for i, c := range f.choices {
		kv := min(c.Target, f.e.f.cfg.ContextLength)
		if i == 0 {
			kv = min(kv+f.prompt, f.e.f.cfg.ContextLength)
		}
		c.KV = kv
	}
}

// hang makes the flight a stuck request: it takes its running slot and
// decodes without end, answering nothing, until its client closes the
// connection or the endpoint crashes.
func (f *flight) hang() {
	f.hung = true
	for _, c := range f.choices {
		c.Target = math.MaxInt32
	}
}

// abandon cancels the flight because its client went away.
func (f *flight) abandon() {
	f.e.stats.cancelled.Add(1)
	f.cancel()
}

// cancel takes the flight's sequences out of the scheduler (its client
// went away, or the drop fault cut it).
func (f *flight) cancel() {
	e := f.e
	e.mu.Lock()
	for _, c := range f.choices {
		e.model.Cancel(&c.Seq)
	}
	e.mu.Unlock()
}
