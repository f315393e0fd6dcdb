// Package fleet is what talks to the servers: the endpoints named on the
// command line, the pool that holds their state (starting, ready, out of
// service), their in-flight caps and the balancing between them, the
// probes that bring a server into service once its /health answers, the
// classes of failure a request can meet, and the server flags that every
// command talking to a fleet shares.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tokenmill/lib/clock"
	"tokenmill/lib/openai"
)

// State is an endpoint's state in the pool.
type State int32

const (
	StateStarting State = iota // not yet answered /health
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
// max_running_requests (not SGLang, or an old one) when --concurrency is
// not given.
const DefaultSlots = 64

// Endpoint is one server of the pool.
type Endpoint struct {
	idx   int
	name  string // base URL, as written in output records
	t     Target
	gen   *Client              // generation requests
	ctl   *fasthttp.HostClient // health, server info, models
	stats Stats

	// guarded by Pool.mu
	state    State
	slots    int // in-flight cap
	inflight int
	fails    int // consecutive failures
	probing  bool
	serverMR int // max_running_requests the server reported (0: unknown)
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
	APIKey         string
	FixedSlots     int // --concurrency; 0: discover
	QueueDepth     int // requests kept queued beyond max_running_requests
	EjectAfter     int // consecutive failures that eject an endpoint
	ProbeInterval  time.Duration
	ControlTimeout time.Duration
	DownTimeout    time.Duration // all endpoints down this long: give up (0: never)
	Policy         Policy
	Logf           func(format string, args ...any)
	Clock          clock.Clock // nil: the real clock
}

// Pool holds the endpoints: their clients, their state, their in-flight
// caps and counts, and the probes that bring a starting or ejected server
// into service once its /health answers.
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
}

// NewPool makes a pool of the targets, every one starting; Start probes
// them. The probes stop when ctx ends; Close waits for them.
func NewPool(ctx context.Context, targets []Target, cfg Config) *Pool {
	clk := clock.Or(cfg.Clock)
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	p := &Pool{cfg: cfg, clk: clk, changed: make(chan struct{}), ctx: ctx, downAt: clk.Now()}
	for i, t := range targets {
		ep := &Endpoint{idx: i, name: t.URL, t: t, gen: NewClient(t, cfg.APIKey, false)}
		ep.ctl = newHostClient(t, nil, 8)
		p.eps = append(p.eps, ep)
	}
	return p
}

// Endpoints are the pool's endpoints, in the order they were given.
func (p *Pool) Endpoints() []*Endpoint { return p.eps }

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

// Acquire waits for a free slot on a ready endpoint, chosen by the
// policy, and takes it. avoid (may be nil) is passed over when another
// endpoint has room: a retry goes elsewhere if it can.
func (p *Pool) Acquire(ctx context.Context, avoid *Endpoint) (*Endpoint, error) {
	for {
		p.mu.Lock()
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
	}
	return ep
}

// Release gives back ep's slot.
func (p *Pool) Release(ep *Endpoint) {
	p.mu.Lock()
	ep.inflight--
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
	p.cfg.Logf("%s is out of service after %d failure(s) (last: %s); probing %s until it recovers", ep.name, ep.fails, why, openai.PathHealth)
	// Out of service for one probe interval at least: a server that fails
	// while its /health says ok is not taken back at once.
	p.probeLocked(ep, p.cfg.ProbeInterval, p.cfg.ProbeInterval)
	p.broadcastLocked()
}

// AbortAll closes every generation connection, ending the requests in
// flight (used when a shutdown's grace period runs out).
func (p *Pool) AbortAll() {
	for _, ep := range p.eps {
		ep.gen.CloseAll()
	}
}

// Close waits for the probes, which end with the pool's context, and
// closes the idle connections.
func (p *Pool) Close() {
	p.wg.Wait()
	for _, ep := range p.eps {
		ep.gen.CloseIdle()
		ep.ctl.CloseIdleConnections()
	}
}

// View is a snapshot of one endpoint, for progress, metrics and reports.
type View struct {
	Name     string
	State    State
	Slots    int // in-flight cap
	Inflight int
	// MaxRunning is the max_running_requests the server reported (0:
	// unknown, or --concurrency fixed the slots).
	MaxRunning int
}

// View is a snapshot of every endpoint, in order.
func (p *Pool) View() []View {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]View, len(p.eps))
	for i, ep := range p.eps {
		out[i] = View{Name: ep.name, State: ep.state, Slots: ep.slots, Inflight: ep.inflight, MaxRunning: ep.serverMR}
	}
	return out
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
	if err := ep.gen.DoTimeout(req, resp, timeout); err != nil {
		f := ClassifyTransport(err, timeout)
		if !f.Down && !errors.Is(err, fasthttp.ErrTimeout) {
			// The connection broke. A server that went away (a crash, a
			// restart) broke its idle ones too, and a retry sent on one of
			// them would fail the same way, using up an attempt, without
			// ever reaching it; a fresh connection finds out at once.
			ep.gen.CloseIdle()
		}
		return openai.Completion{}, f
	}
	if status := resp.StatusCode(); status != fasthttp.StatusOK {
		return openai.Completion{}, ClassifyStatus(status, resp.Body())
	}
	c, err := parse(resp.Body())
	if err != nil {
		return openai.Completion{}, &Failure{Status: fasthttp.StatusOK, Message: err.Error(), Retriable: true, Blame: true}
	}
	if f := ClassifyAnswer(&c); f != nil {
		return openai.Completion{}, f
	}
	return c, nil
}

// get performs a control request (health, info, models).
func (p *Pool) get(ep *Endpoint, path string) (int, []byte, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	setURI(req, ep.t, path)
	req.Header.SetMethod(fasthttp.MethodGet)
	if p.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+p.cfg.APIKey)
	}
	if err := ep.ctl.DoTimeout(req, resp, p.cfg.ControlTimeout); err != nil {
		return 0, nil, err
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...), nil
}
