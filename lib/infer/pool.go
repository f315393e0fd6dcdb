package infer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tokenmill/lib/openai"
)

// The endpoint pool: every server's HTTP clients, its state (starting,
// ready, down), its in-flight cap and count, and the probes that bring a
// starting or ejected server into service once its /health answers.

type epState int32

const (
	stateStarting epState = iota // not yet answered /health
	stateReady
	stateDown // ejected after failures; probed until it recovers
)

func (s epState) String() string {
	switch s {
	case stateReady:
		return "ready"
	case stateDown:
		return "down"
	}
	return "starting"
}

// DefaultSlots is the in-flight cap of a server that does not say its
// max_running_requests (not SGLang, or an old one) when --concurrency is
// not given.
const DefaultSlots = 64

type endpoint struct {
	idx   int
	name  string // base URL, as written in output records
	t     Target
	gen   *fasthttp.HostClient // generation requests
	ctl   *fasthttp.HostClient // health, server info, models
	conns *connSet
	stats epStats

	// guarded by pool.mu
	state    epState
	slots    int // in-flight cap
	inflight int
	fails    int // consecutive failures
	probing  bool
	serverMR int // max_running_requests the server reported (0: unknown)
}

type poolConfig struct {
	apiKey         string
	fixedSlots     int // --concurrency; 0: discover
	queueDepth     int // requests kept queued beyond max_running_requests
	ejectAfter     int // consecutive failures that eject an endpoint
	probeInterval  time.Duration
	controlTimeout time.Duration
	downTimeout    time.Duration // all endpoints down this long: give up
	policy         Policy
	logf           func(format string, args ...any)
}

type pool struct {
	cfg     poolConfig
	eps     []*endpoint
	mu      sync.Mutex
	changed chan struct{} // closed (and replaced) whenever a slot frees or a state changes
	rr      int
	ready   int
	downAt  time.Time // when the last ready endpoint went away (zero while one is ready)
	ctx     context.Context
	wg      sync.WaitGroup
}

func newPool(ctx context.Context, targets []Target, cfg poolConfig) *pool {
	p := &pool{cfg: cfg, changed: make(chan struct{}), ctx: ctx, downAt: time.Now()}
	for i, t := range targets {
		ep := &endpoint{idx: i, name: t.URL, t: t, conns: newConnSet()}
		ep.gen = newHostClient(t, ep.conns, 1<<16)
		ep.ctl = newHostClient(t, nil, 8)
		p.eps = append(p.eps, ep)
	}
	return p
}

func newHostClient(t Target, conns *connSet, maxConns int) *fasthttp.HostClient {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &fasthttp.HostClient{
		Addr:                      t.Addr,
		IsTLS:                     t.TLS,
		Name:                      "tokenmill-infer",
		MaxConns:                  maxConns,
		MaxIdemponentCallAttempts: 1, // retries are ours: they go to another endpoint
		// Below uvicorn's 5 s keep-alive, so the client, not the server,
		// closes an idle connection and no request is sent on a dying one.
		MaxIdleConnDuration:    3 * time.Second,
		MaxResponseBodySize:    256 << 20,
		ReadBufferSize:         16 << 10,
		DisablePathNormalizing: true,
		Dial: func(addr string) (net.Conn, error) {
			c, err := dialer.Dial("tcp", addr)
			if err != nil {
				return nil, &dialError{err}
			}
			if conns != nil {
				return conns.track(c), nil
			}
			return c, nil
		},
	}
}

// dialError marks a failure to connect: nothing listens, so the endpoint
// is down and the request was never sent.
type dialError struct{ err error }

func (e *dialError) Error() string { return "connect: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// connSet tracks an endpoint's open connections so that shutdown can
// close them: fasthttp has no per-request cancellation, and a closed
// connection is also what makes the server drop the request and free its
// slot.
type connSet struct {
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

type trackedConn struct {
	net.Conn
	set  *connSet
	once sync.Once
}

func newConnSet() *connSet { return &connSet{conns: map[*trackedConn]struct{}{}} }

func (s *connSet) track(c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c, set: s}
	s.mu.Lock()
	s.conns[tc] = struct{}{}
	s.mu.Unlock()
	return tc
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.conns, c)
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	list := make([]*trackedConn, 0, len(s.conns))
	for c := range s.conns {
		list = append(list, c)
	}
	s.mu.Unlock()
	for _, c := range list {
		c.Close()
	}
}

// broadcastLocked wakes everything waiting for a slot or a state change.
func (p *pool) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// start probes every endpoint until it is ready.
func (p *pool) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ep := range p.eps {
		p.probeLocked(ep, 0, min(p.cfg.probeInterval, 250*time.Millisecond))
	}
}

// probeLocked starts ep's prober unless one runs.
func (p *pool) probeLocked(ep *endpoint, first, interval time.Duration) {
	if ep.probing {
		return
	}
	ep.probing = true
	p.wg.Add(1)
	go p.probe(ep, first, interval)
}

// probe polls ep's /health, the first time after first, until it answers
// 200, reads its limits, and puts it into service.
func (p *pool) probe(ep *endpoint, first, interval time.Duration) {
	defer p.wg.Done()
	if first > 0 {
		t := time.NewTimer(first)
		select {
		case <-t.C:
		case <-p.ctx.Done():
			t.Stop()
		}
	}
	for {
		if p.ctx.Err() != nil {
			p.mu.Lock()
			ep.probing = false
			p.mu.Unlock()
			return
		}
		if status, _, err := p.get(ep, openai.PathHealth); err == nil && status == fasthttp.StatusOK {
			mr := 0
			if p.cfg.fixedSlots == 0 {
				mr = p.discoverSlots(ep)
			}
			p.mu.Lock()
			ep.probing = false
			ep.serverMR = mr
			switch {
			case p.cfg.fixedSlots > 0:
				ep.slots = p.cfg.fixedSlots
			case mr > 0:
				ep.slots = mr + p.cfg.queueDepth
			default:
				ep.slots = DefaultSlots
			}
			if ep.state == stateDown {
				p.cfg.logf("%s is back in service (%d slots)", ep.name, ep.slots)
			}
			p.setStateLocked(ep, stateReady)
			ep.fails = 0
			p.broadcastLocked()
			p.mu.Unlock()
			return
		}
		t := time.NewTimer(interval)
		select {
		case <-t.C:
		case <-p.ctx.Done():
			t.Stop()
		}
		interval = p.cfg.probeInterval
	}
}

// discoverSlots asks the server for its max_running_requests: SGLang's
// /get_server_info, or /server_info in newer releases. 0 if neither says.
func (p *pool) discoverSlots(ep *endpoint) int {
	for _, path := range []string{openai.PathServerInfo, openai.PathServerInfoNew} {
		status, body, err := p.get(ep, path)
		if err != nil || status != fasthttp.StatusOK {
			continue
		}
		info, err := openai.ParseServerInfo(body)
		if err == nil && info.Slots() > 0 {
			return info.Slots()
		}
	}
	p.cfg.logf("%s does not report max_running_requests; sending it up to %d requests at once (set --concurrency to choose)", ep.name, DefaultSlots)
	return 0
}

// get performs a control request (health, info, models).
func (p *pool) get(ep *endpoint, path string) (int, []byte, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	setURI(req, ep.t, path)
	req.Header.SetMethod(fasthttp.MethodGet)
	if p.cfg.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+p.cfg.apiKey)
	}
	if err := ep.ctl.DoTimeout(req, resp, p.cfg.controlTimeout); err != nil {
		return 0, nil, err
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...), nil
}

// setPost makes req a JSON POST of body to path on t, with the bearer
// token if there is one.
func setPost(req *fasthttp.Request, t Target, path, apiKey string, body []byte) {
	setURI(req, t, path)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	req.SetBodyRaw(body)
}

func setURI(req *fasthttp.Request, t Target, path string) {
	scheme := "http"
	if t.TLS {
		scheme = "https"
	}
	u := req.URI()
	u.SetScheme(scheme)
	u.SetHost(t.Addr)
	u.SetPath(t.Path + path)
}

func (p *pool) setStateLocked(ep *endpoint, s epState) {
	if ep.state == s {
		return
	}
	if ep.state == stateReady {
		p.ready--
	}
	if s == stateReady {
		p.ready++
		p.downAt = time.Time{}
	}
	ep.state = s
	if p.ready == 0 && p.downAt.IsZero() {
		p.downAt = time.Now()
	}
}

// errAllDown ends a run whose endpoints have all been down too long.
var errAllDown = errors.New("no endpoint is reachable")

// acquire waits for a free slot on a ready endpoint, chosen by the
// policy, and takes it. avoid (may be nil) is passed over when another
// endpoint has room: a retry goes elsewhere if it can.
func (p *pool) acquire(ctx context.Context, avoid *endpoint) (*endpoint, error) {
	for {
		p.mu.Lock()
		if ep := p.pickLocked(avoid); ep != nil {
			ep.inflight++
			p.mu.Unlock()
			ep.stats.inflight.Add(1)
			return ep, nil
		}
		wait := p.changed
		var deadline <-chan time.Time
		if p.ready == 0 && p.cfg.downTimeout > 0 {
			left := p.cfg.downTimeout - time.Since(p.downAt)
			if left <= 0 {
				p.mu.Unlock()
				return nil, fmt.Errorf("%w: every endpoint has been down for %v (--down-timeout)", errAllDown, p.cfg.downTimeout)
			}
			deadline = time.After(left)
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

// release gives back ep's slot.
func (p *pool) release(ep *endpoint) {
	ep.stats.inflight.Add(-1)
	p.mu.Lock()
	ep.inflight--
	p.broadcastLocked()
	p.mu.Unlock()
}

// succeeded clears ep's failure streak.
func (p *pool) succeeded(ep *endpoint) {
	p.mu.Lock()
	ep.fails = 0
	p.mu.Unlock()
}

// failed counts a failure against ep; down (it refused the connection)
// or a streak of ejectAfter failures takes it out of service until its
// /health answers again.
func (p *pool) failed(ep *endpoint, down bool, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ep.fails++
	if ep.state != stateReady || (!down && ep.fails < p.cfg.ejectAfter) {
		return
	}
	p.setStateLocked(ep, stateDown)
	ep.stats.ejections.Add(1)
	p.cfg.logf("%s is out of service after %d failure(s) (last: %s); probing %s until it recovers", ep.name, ep.fails, why, openai.PathHealth)
	// Out of service for one probe interval at least: a server that fails
	// while its /health says ok is not taken back at once.
	p.probeLocked(ep, p.cfg.probeInterval, p.cfg.probeInterval)
	p.broadcastLocked()
}

// abortAll closes every generation connection, ending the requests in
// flight (used when a shutdown's grace period runs out).
func (p *pool) abortAll() {
	for _, ep := range p.eps {
		ep.conns.closeAll()
	}
}

// waitReady waits until at least one endpoint is ready, for at most
// timeout.
func (p *pool) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.After(timeout)
	// Say what is going on if the servers are still loading their model.
	notice := time.After(min(2*time.Second, timeout/2))
	for {
		p.mu.Lock()
		n, wait := p.ready, p.changed
		p.mu.Unlock()
		if n > 0 {
			return nil
		}
		select {
		case <-wait:
		case <-notice:
			p.cfg.logf("waiting for one of %d endpoints to answer %s (up to %v, --wait-ready)", len(p.eps), openai.PathHealth, timeout)
		case <-deadline:
			return fmt.Errorf("no endpoint answered %s within %v (--wait-ready): are the servers up?", openai.PathHealth, timeout)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// close stops the probes.
func (p *pool) close() {
	p.wg.Wait()
	for _, ep := range p.eps {
		ep.gen.CloseIdleConnections()
		ep.ctl.CloseIdleConnections()
	}
}

// epView is a snapshot of one endpoint for progress and metrics.
type epView struct {
	name     string
	state    epState
	slots    int
	inflight int
}

func (p *pool) view() []epView {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]epView, len(p.eps))
	for i, ep := range p.eps {
		out[i] = epView{name: ep.name, state: ep.state, slots: ep.slots, inflight: ep.inflight}
	}
	return out
}

// epStats are an endpoint's counters, updated without the pool lock.
type epStats struct {
	inflight         atomic.Int64
	requests         atomic.Int64 // attempts sent
	ok               atomic.Int64
	failures         atomic.Int64 // attempts that failed (any kind)
	ejections        atomic.Int64
	promptTokens     atomic.Int64
	completionTokens atomic.Int64
	rate             rateWindow // completion tokens per second
}
