// Package fleet is what talks to the servers: the endpoints named on the
// command line, the pool that holds their state (starting, ready, out of
// service), their in-flight caps and the balancing between them, the
// probes that bring a server into service once it says it is ready, what
// each server says of itself (capacity, context length, its metrics), the
// adaptive in-flight limit of servers that do not say, the classes of
// failure a request can meet and the detector of systematic ones, and the
// server flags that every command talking to a fleet shares.
//
// It speaks to every kind of OpenAI-compatible server: SGLang, vLLM,
// llama.cpp's server, Ollama and gateways. Each offers a different part of
// what a client would like to know; the probes ask in an order that finds
// it on each (probe.go, discover.go).
package fleet

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tokenmill/lib/cli"
	"tokenmill/lib/clock"
	"tokenmill/lib/openai"
)

// State is an endpoint's state in the pool.
type State int32

const (
	StateStarting State = iota // not yet ready
	StateReady
	StateDown // ejected after failures; probed until it recovers
)

func (s State) String() string {
	switch s {
	case StateReady:
		return "ready"
	case StateDown:
		return "down"
	}
	return "starting"
}

// DefaultSlots is the in-flight cap of a server that does not say its
// capacity when nothing adapts it (infer bench sets its own levels).
const DefaultSlots = 64

// Endpoint is one server of the pool. Its 26 fields are its clients, the
// state the pool keeps of it under Pool.mu and what adapts its load: the
// pool decides on all of them under one lock.
type Endpoint struct {
	idx   int
	name  string // base URL, as written in output records
	t     Target
	gen   *Client              // generation requests
	ctl   *fasthttp.HostClient // health, server info, models
	tok   *fasthttp.HostClient // tokenize: asked by any request in flight, so not bound to ctl's few connections
	stats Stats
	// tooLarge: the routes whose answer passed maxControlBody, said once.
	tooLarge sync.Map

	// guarded by Pool.mu
	state     State
	slots     int // in-flight cap
	inflight  int
	fails     int // consecutive failures
	probing   bool
	readyPath string // the route that says the server is ready, once learned
	lastProbe string // what the last readiness probe saw, for messages
	refused   bool   // the last probe was refused for its credentials
	probed    bool   // a readiness probe has ended (answered or not)
	// wrong is what the routes of a first probe answered when none is an
	// API's (every one 404, or a web page): the address is not a server's
	// base URL; it is not probed again.
	wrong string
	// limitedSince is when the endpoint's answers turned to nothing but
	// 429 Too Many Requests (zero while it answers otherwise).
	limitedSince time.Time
	// pausedUntil: the endpoint asked to be left alone (429, 503) until
	// then; nothing new is sent to it before.
	pausedUntil time.Time
	info        Info // what the server said of itself when it came up
	limiter     *Limiter
	decode      decodeFit // latency against answer length, for its effective concurrency
	metrics     serverLoad
	polling     bool // a poller reads its /metrics
	tokenizer   tokenizeForm
}

// Index is the endpoint's place in the list it was given in.
func (e *Endpoint) Index() int { return e.idx }

// Name is the endpoint's base URL.
func (e *Endpoint) Name() string { return e.name }

// Target is where the endpoint is.
func (e *Endpoint) Target() Target { return e.t }

// Stats are the endpoint's counters, which the pool and its users update.
func (e *Endpoint) Stats() *Stats { return &e.stats }

// Stats are an endpoint's counters, updated without the pool's lock.
type Stats struct {
	Requests         atomic.Int64 // attempts sent
	OK               atomic.Int64
	Failures         atomic.Int64 // attempts that failed (any kind)
	Ejections        atomic.Int64
	CompletionTokens atomic.Int64
	Rate             RateWindow // completion tokens per second
}

// Config is how a pool treats its endpoints.
type Config struct {
	APIKey string
	// FixedSlots is --concurrency N; 0: each server's reported capacity
	// plus QueueDepth, or the adaptive limit where a server does not say.
	FixedSlots int
	// Adaptive (--concurrency auto) adapts the in-flight limit of every
	// endpoint, capacity reported or not.
	Adaptive       bool
	QueueDepth     int // requests kept queued beyond a reported capacity
	EjectAfter     int // consecutive failures that eject an endpoint
	ProbeInterval  time.Duration
	ControlTimeout time.Duration
	DownTimeout    time.Duration // all endpoints down this long: give up (0: never)
	Policy         Policy
	// HealthPath is --health-path: the one route that says a server is
	// ready. "": /health, or /v1/models where a server has no /health.
	HealthPath string
	// Model is --model ("": the first a server lists), asked about where
	// a server tells its context length per model (Ollama's /api/show);
	// Models is --model's list, where endpoints serve the model under
	// different names (each is sent the first of them it lists).
	Model  string
	Models []string
	// ContextLength is --context-length: every endpoint's context, whatever
	// the servers say (0: learn it).
	ContextLength int
	// Ladder: the caller sets its own in-flight levels (infer bench), so
	// nothing adapts and the ready line names the capacity alone.
	Ladder  bool
	Limiter LimiterConfig // the adaptive limit's bounds; zero fields take the defaults
	// TokenCache keeps Tokenize's and TokenizeTexts' counts (nil: every prompt is asked).
	TokenCache TokenCache
	// MaxAnswerBytes bounds one answer's body, AnswerMemory the bodies of
	// all requests in flight together (0: the defaults; see body.go).
	MaxAnswerBytes, AnswerMemory int64
	// MaxPause bounds how long an endpoint that answers 429 or 503 is
	// left alone (its Retry-After, else a second); 0: it is not.
	MaxPause time.Duration
	Logf     func(format string, args ...any)
	Clock    clock.Clock // nil: the real clock
	// WaitNotice is how often WaitReady says what it waits for (0: DefaultWaitNotice).
	WaitNotice time.Duration
}

// Pool holds the endpoints: their clients, their state, their in-flight
// caps and counts, and the probes that bring a starting or ejected server
// into service once it is ready.
type Pool struct {
	cfg     Config
	clk     clock.Clock
	eps     []*Endpoint
	mu      sync.Mutex
	changed chan struct{} // closed (and replaced) whenever a slot frees or a state changes
	rr      int
	ready   int
	downAt  time.Time // when the last ready endpoint went away (zero while one is ready)
	ctx     context.Context
	wg      sync.WaitGroup
	ctlConn *connSet // the control requests' connections, closed by Close
	// context is the smallest context length the endpoints up so far
	// stated (or --context-length); 0 while none has.
	context atomic.Int64
	// maxAnswer and budget bound the answers' bodies (body.go).
	maxAnswer int64
	budget    answerBudget
	// listed, once Follow runs, says whether the endpoints file lets an
	// endpoint come into service (grow.go); nil: every endpoint may.
	listed atomic.Pointer[func(Target) (bool, string)]
}

// Context is the model's context length in tokens as the endpoints state
// it: the smallest among those that came up, so that a request fitted to
// it fits on any of them; 0 while none has said.
func (p *Pool) Context() int { return int(p.context.Load()) }

// NewPool makes a pool of the targets, every one starting; Start probes
// them. The probes stop when ctx ends; Close waits for them.
func NewPool(ctx context.Context, targets []Target, cfg Config) *Pool {
	clk := clock.Or(cfg.Clock)
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	cfg.Limiter = cfg.Limiter.withDefaults()
	p := &Pool{cfg: cfg, clk: clk, changed: make(chan struct{}), ctx: ctx, downAt: clk.Now(), ctlConn: newConnSet(),
		maxAnswer: cmp.Or(cfg.MaxAnswerBytes, DefaultMaxAnswerBytes)}
	p.budget.max = cmp.Or(cfg.AnswerMemory, DefaultAnswerMemory)
	for i, t := range targets {
		p.eps = append(p.eps, p.newEndpoint(i, t))
	}
	return p
}

// newEndpoint is target t as the pool's endpoint number i, starting.
func (p *Pool) newEndpoint(i int, t Target) *Endpoint {
	ep := &Endpoint{idx: i, name: t.URL, t: t, gen: NewClient(t, p.cfg.APIKey, true)}
	// A control answer is read no further than maxControlBody: a server
	// (or what answers in its place) is not trusted to keep it small.
	ep.ctl = newHostClient(t, p.ctlConn, 8, maxControlBody)
	ep.tok = newHostClient(t, p.ctlConn, 1<<16, maxControlBody)
	return ep
}

// Endpoints are the pool's endpoints, in the order they were given (Add
// appends, so a later call may return more).
func (p *Pool) Endpoints() []*Endpoint {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.eps
}

// broadcastLocked wakes everything waiting for a slot or a state change.
func (p *Pool) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Pool) setStateLocked(ep *Endpoint, s State) {
	if ep.state == s {
		return
	}
	if ep.state == StateReady {
		p.ready--
	}
	if s == StateReady {
		p.ready++
		p.downAt = time.Time{}
	}
	ep.state = s
	if p.ready == 0 && p.downAt.IsZero() {
		p.downAt = p.clk.Now()
	}
}

// ErrAllDown ends a run whose endpoints have all been down too long.
var ErrAllDown = errors.New("no endpoint is reachable")

// ErrRateLimited ends a run whose endpoints have all answered nothing but
// 429 Too Many Requests for --down-timeout: a quota ran out, or a rate
// limit holds, and waiting on would never end.
var ErrRateLimited = errors.New("the servers are refusing every request for quota or rate limit")

// Acquire waits for a free slot on a ready endpoint, chosen by the
// policy, and takes it. avoid (may be nil) is passed over when another
// endpoint has room: a retry goes elsewhere if it can.
func (p *Pool) Acquire(ctx context.Context, avoid *Endpoint) (*Endpoint, error) {
	for {
		p.mu.Lock()
		if err := p.rateLimitedLocked(); err != nil {
			p.mu.Unlock()
			return nil, err
		}
		if ep := p.takeLocked(avoid); ep != nil {
			p.mu.Unlock()
			return ep, nil
		}
		wait := p.changed
		var deadline <-chan time.Time
		if p.ready == 0 && p.cfg.DownTimeout > 0 {
			left := p.cfg.DownTimeout - p.clk.Now().Sub(p.downAt)
			if left <= 0 {
				p.mu.Unlock()
				return nil, fmt.Errorf("%w: every endpoint has been down for %v (--down-timeout)", ErrAllDown, p.cfg.DownTimeout)
			}
			deadline = p.clk.After(left)
		} else if until := p.pauseEndLocked(); !until.IsZero() {
			deadline = p.clk.After(until.Sub(p.clk.Now()))
		}
		p.mu.Unlock()
		select {
		case <-wait:
		case <-deadline:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// TryAcquire takes a free slot as Acquire does, or returns nil at once
// when no endpoint has one.
func (p *Pool) TryAcquire(avoid *Endpoint) *Endpoint {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.takeLocked(avoid)
}

func (p *Pool) takeLocked(avoid *Endpoint) *Endpoint {
	ep := p.pickLocked(avoid)
	if ep != nil {
		ep.inflight++
		if ep.limiter != nil {
			ep.limiter.Inflight(p.clk.Now(), ep.inflight)
		}
	}
	return ep
}

// Release gives back ep's slot.
func (p *Pool) Release(ep *Endpoint) {
	p.mu.Lock()
	ep.inflight--
	if ep.limiter != nil {
		ep.limiter.Inflight(p.clk.Now(), ep.inflight)
	}
	p.broadcastLocked()
	p.mu.Unlock()
}

// Succeeded clears ep's failure streak.
func (p *Pool) Succeeded(ep *Endpoint) {
	p.mu.Lock()
	ep.fails = 0
	p.mu.Unlock()
}

// Failed counts a failure against ep; down (it refused the connection)
// or a streak of EjectAfter failures takes it out of service until its
// /health answers again.
func (p *Pool) Failed(ep *Endpoint, down bool, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ep.fails++
	if ep.state != StateReady || (!down && ep.fails < p.cfg.EjectAfter) {
		return
	}
	p.setStateLocked(ep, StateDown)
	ep.stats.Ejections.Add(1)
	p.cfg.Logf("%s is out of service after %d failure(s) (last: %s); probing %s until it recovers", ep.name, ep.fails, why, p.readinessRouteLocked(ep))
	// Out of service for one probe interval at least: a server that fails
	// while its /health says ok is not taken back at once.
	p.probeLocked(ep, p.cfg.ProbeInterval, p.cfg.ProbeInterval)
	p.broadcastLocked()
}

// answered notes the HTTP status of an answer from ep. An endpoint that
// has answered nothing but 429 (Too Many Requests) for --down-timeout is
// taken out of service like one that does not answer, and probed as one;
// it stays in that state until it answers anything else. Each 429 also
// counts toward the request's --retries (see infer's retry policy), so a
// quota that ran out ends in error records or, once every endpoint is in
// that state, in ErrRateLimited: neither waits for ever.
func (p *Pool) answered(ep *Endpoint, status int) {
	now := p.clk.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if status != fasthttp.StatusTooManyRequests {
		ep.limitedSince = time.Time{}
		return
	}
	if ep.limitedSince.IsZero() {
		ep.limitedSince = now
	}
	limit := p.cfg.DownTimeout
	if limit <= 0 || now.Sub(ep.limitedSince) < limit {
		return
	}
	if ep.state == StateReady {
		p.setStateLocked(ep, StateDown)
		ep.stats.Ejections.Add(1)
		p.cfg.Logf("%s has answered nothing but 429 Too Many Requests for %v (--down-timeout): out of service as refusing for quota or rate limit; probing %s",
			ep.name, limit, p.readinessRouteLocked(ep))
		p.probeLocked(ep, p.cfg.ProbeInterval, p.cfg.ProbeInterval)
	}
	p.broadcastLocked()
}

// pause leaves ep alone for d (a 429's or 503's Retry-After, or a second
// when it gave none), capped by Config.MaxPause: the requests that would
// have gone to it go elsewhere, or wait.
func (p *Pool) pause(ep *Endpoint, d time.Duration) {
	if p.cfg.MaxPause <= 0 {
		return
	}
	if d <= 0 {
		d = time.Second
	}
	until := p.clk.Now().Add(min(d, p.cfg.MaxPause))
	p.mu.Lock()
	if until.After(ep.pausedUntil) {
		ep.pausedUntil = until
	}
	p.mu.Unlock()
}

// pauseEndLocked is the earliest end of a pause of a ready endpoint still
// paused (zero: none), for Acquire to wake at.
func (p *Pool) pauseEndLocked() time.Time {
	now := p.clk.Now()
	var end time.Time
	for _, ep := range p.eps {
		if ep.state == StateReady && ep.pausedUntil.After(now) && (end.IsZero() || ep.pausedUntil.Before(end)) {
			end = ep.pausedUntil
		}
	}
	return end
}

// rateLimitedLocked is ErrRateLimited once every endpoint has answered
// nothing but 429 for --down-timeout (nil before).
func (p *Pool) rateLimitedLocked() error {
	limit := p.cfg.DownTimeout
	if limit <= 0 || len(p.eps) == 0 {
		return nil
	}
	now := p.clk.Now()
	for _, ep := range p.eps {
		if ep.limitedSince.IsZero() || now.Sub(ep.limitedSince) < limit {
			return nil
		}
	}
	return fmt.Errorf("%w: every endpoint has answered nothing but 429 Too Many Requests for %v (--down-timeout); --resume continues once they accept requests again",
		ErrRateLimited, limit)
}

// AbortAll closes every generation connection, ending the requests in
// flight (used when a shutdown's grace period runs out).
func (p *Pool) AbortAll() {
	for _, ep := range p.Endpoints() {
		ep.gen.CloseAll()
	}
}

// Close waits for the probes and pollers, which end with the pool's
// context, and closes the idle connections. A control request still
// waiting on a server that accepted it and never answers has its
// connection closed rather than waited for.
func (p *Pool) Close() {
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	for {
		p.ctlConn.closeAll()
		select {
		case <-done:
			for _, ep := range p.Endpoints() {
				ep.gen.CloseIdle()
				ep.ctl.CloseIdleConnections()
				ep.tok.CloseIdleConnections()
			}
			return
		case <-time.After(20 * time.Millisecond): // a probe that was just dialling
		}
	}
}

// View is a snapshot of one endpoint, for progress, metrics and reports.
type View struct {
	Name     string
	State    State
	Slots    int // in-flight cap
	Inflight int
	// Running is how many of the requests in flight the server is
	// generating now, the others waiting in its queue: its own count where
	// its metrics say, else at most its reported capacity, else its
	// measured effective concurrency, else all of them.
	Running int
	// MaxRunning is the capacity the server reported (0: it did not say).
	MaxRunning int
	// Adaptive: the in-flight cap is the adaptive limit.
	Adaptive bool
	// Info is what the server said of itself when it came up.
	Info Info
}

// View is a snapshot of every endpoint, in order.
func (p *Pool) View() []View {
	now := p.clk.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]View, len(p.eps))
	for i, ep := range p.eps {
		out[i] = View{Name: ep.name, State: ep.state, Slots: ep.slots, Inflight: ep.inflight, Running: p.runningLocked(ep, now),
			MaxRunning: ep.info.Capacity, Adaptive: ep.limiter != nil, Info: ep.info}
	}
	return out
}

// Running is View's Running of endpoint i alone.
func (p *Pool) Running(i int) int {
	now := p.clk.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runningLocked(p.eps[i], now)
}

// Complete sends one generation request, body to path on ep, and reads
// the whole answer with parse. A failure says what it means for a retry.
func (p *Pool) Complete(ep *Endpoint, path string, body []byte, timeout time.Duration, parse func([]byte) (openai.Completion, error)) (openai.Completion, *Failure) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	ep.gen.Post(req, path, body)
	ep.stats.Requests.Add(1)
	sent := p.sent(ep)
	err := ep.gen.DoTimeout(req, resp, timeout)
	defer resp.CloseBodyStream() // before the release: an unread rest closes the connection
	if err != nil {
		f := ClassifyTransport(err, timeout)
		if !f.Down && !errors.Is(err, fasthttp.ErrTimeout) {
			// The connection broke. A server that went away (a crash, a
			// restart) broke its idle ones too, and a retry sent on one of
			// them would fail the same way, using up an attempt, without
			// ever reaching it; a fresh connection finds out at once.
			ep.gen.CloseIdle()
		}
		p.observe(ep, sent, 0, f)
		return openai.Completion{}, f
	}
	p.answered(ep, resp.StatusCode())
	if status := resp.StatusCode(); status != fasthttp.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(bodyOf(resp), maxErrorBody))
		f := ClassifyStatus(status, msg)
		f.RetryAfter = retryAfter(resp.Header.Peek(fasthttp.HeaderRetryAfter), p.clk.Now())
		if status == fasthttp.StatusTooManyRequests || status == fasthttp.StatusServiceUnavailable {
			p.pause(ep, f.RetryAfter)
		}
		p.observe(ep, sent, 0, f)
		return openai.Completion{}, f
	}
	answer, reserved, err := p.readBody(bodyOf(resp), int64(resp.Header.ContentLength()))
	defer p.budget.give(reserved)
	if err != nil {
		f := p.bodyFailure(err, timeout)
		if f.Blame {
			ep.gen.CloseIdle() // as for a connection that broke before the answer
		}
		p.observe(ep, sent, 0, f)
		return openai.Completion{}, f
	}
	c, err := parse(answer)
	if err != nil {
		f := &Failure{Status: fasthttp.StatusOK, Message: err.Error(), Retriable: true, Blame: true}
		p.observe(ep, sent, 0, f)
		return openai.Completion{}, f
	}
	if f := ClassifyAnswer(&c); f != nil {
		p.observe(ep, sent, 0, f)
		return openai.Completion{}, f
	}
	p.observe(ep, sent, c.CompletionTokens, nil)
	return c, nil
}

// maxErrorBody bounds what is read of a refusal's body: its message.
const maxErrorBody = 64 << 10

// bodyOf is resp's body as a stream (the generation client streams
// bodies; an answer without a body has none).
func bodyOf(resp *fasthttp.Response) io.Reader {
	if r := resp.BodyStream(); r != nil {
		return r
	}
	return bytes.NewReader(resp.Body())
}

// sent stamps a request to ep going out now, and tells ep's adaptive limit.
func (p *Pool) sent(ep *Endpoint) time.Time {
	now := p.clk.Now()
	p.mu.Lock()
	if ep.limiter != nil {
		ep.limiter.Sent(now)
	}
	p.mu.Unlock()
	return now
}

// observe tells ep's adaptive limit and its effective-concurrency fit how
// a request sent at sent ended: tokens generated, or failure f.
func (p *Pool) observe(ep *Endpoint, sent time.Time, tokens int, f *Failure) {
	now := p.clk.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if f == nil && tokens > 0 {
		ep.decode.add(float64(tokens), now.Sub(sent).Seconds())
	}
	if ep.limiter == nil || f != nil && f.Down {
		return
	}
	busy := f != nil && (f.Status == fasthttp.StatusTooManyRequests || f.Status == fasthttp.StatusServiceUnavailable)
	if ep.limiter.Observe(now, sent, now.Sub(sent), tokens, f == nil, busy) {
		p.setLimitLocked(ep)
	}
}

// setLimitLocked makes ep's in-flight cap its adaptive limit, and says so
// when the limit settles or moves.
func (p *Pool) setLimitLocked(ep *Endpoint) {
	old := ep.slots
	ep.slots = ep.limiter.Limit()
	if ep.slots > old {
		p.broadcastLocked()
	}
	if note := ep.limiter.Note(); note != "" {
		p.cfg.Logf("%s: %s", ep.name, note)
	}
}

// maxControlBody bounds what a control answer (health, info, models,
// metrics, tokenize) may hold: a server is not trusted to keep it small.
// The clients read no further (MaxResponseBodySize), and an answer past
// it is a failed request (errBodyTooLarge), never a truncated body.
const maxControlBody = 4 << 20

// errControlTooLarge is a control answer whose body passed
// maxControlBody: not read further, a failed request.
var errControlTooLarge = fmt.Errorf("an answer past %s, not read further (no server's control answer is that large)", cli.Size(maxControlBody))

// controlTooLarge says, once per endpoint and route, that an answer
// passed maxControlBody, and returns errControlTooLarge: the request
// failed (a readiness probe's note says why each time).
func (p *Pool) controlTooLarge(ep *Endpoint, path string) error {
	if _, said := ep.tooLarge.LoadOrStore(path, true); !said {
		p.cfg.Logf("%s%s: %v; taken as no answer", ep.name, path, errControlTooLarge)
	}
	return errControlTooLarge
}

// get performs a control request (health, info, models, metrics).
func (p *Pool) get(ep *Endpoint, path string) (int, []byte, error) {
	return p.control(ep, fasthttp.MethodGet, path, nil)
}

// control performs a control request with a JSON body (nil: none).
func (p *Pool) control(ep *Endpoint, method, path string, body []byte) (int, []byte, error) {
	return p.controlOn(ep.ctl, ep, method, path, body)
}

// controlOn is control on the client hc of ep's.
func (p *Pool) controlOn(hc *fasthttp.HostClient, ep *Endpoint, method, path string, body []byte) (int, []byte, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	setURI(req, ep.t, path)
	req.Header.SetMethod(method)
	if auth := ep.t.Authorization(p.cfg.APIKey); auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(body)
	}
	timeout := p.cfg.ControlTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if err := do(hc, p.ctlConn, req, resp, time.Now().Add(timeout)); err != nil {
		if errors.Is(err, fasthttp.ErrBodyTooLarge) {
			return 0, nil, p.controlTooLarge(ep, path)
		}
		return 0, nil, err
	}
	b := resp.Body()
	if len(b) > maxControlBody {
		return 0, nil, p.controlTooLarge(ep, path)
	}
	return resp.StatusCode(), append([]byte(nil), b...), nil
}
