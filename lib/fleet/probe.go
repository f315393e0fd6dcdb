package fleet

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"tokenmill/lib/openai"
)

// Readiness. A server is ready when its health route answers 200. SGLang,
// vLLM, llama.cpp's server and TGI have /health (503 while they load the
// model); Ollama and OpenAI-style gateways have none, and a 404 there
// means "no such route", not "down": they are ready once /v1/models
// answers. --health-path names the one route to ask instead. Whatever
// route answered first is the one the endpoint is probed on from then on,
// after an ejection too.

// Start probes every endpoint until it is ready.
func (p *Pool) Start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ep := range p.eps {
		p.probeLocked(ep, 0, min(p.cfg.ProbeInterval, 250*time.Millisecond))
	}
}

// probeLocked starts ep's prober unless one runs.
func (p *Pool) probeLocked(ep *Endpoint, first, interval time.Duration) {
	if ep.probing {
		return
	}
	ep.probing = true
	p.wg.Add(1)
	go p.probe(ep, first, interval)
}

// sleep waits d, or until the pool's context ends.
func (p *Pool) sleep(d time.Duration) {
	t := p.clk.NewTimer(d)
	select {
	case <-t.C():
	case <-p.ctx.Done():
		t.Stop()
	}
}

// readinessRouteLocked names what ep is probed on, for messages.
func (p *Pool) readinessRouteLocked(ep *Endpoint) string {
	switch {
	case p.cfg.HealthPath != "":
		return p.cfg.HealthPath
	case ep.readyPath != "":
		return ep.readyPath
	}
	return openai.PathHealth + " (else " + openai.PathModels + ")"
}

// probe polls ep's readiness, the first time after first, until it is
// ready, then asks what the server says of itself and puts it into
// service.
func (p *Pool) probe(ep *Endpoint, first, interval time.Duration) {
	defer p.wg.Done()
	if first > 0 {
		p.sleep(first)
	}
	for {
		if p.ctx.Err() != nil {
			p.mu.Lock()
			ep.probing = false
			p.mu.Unlock()
			return
		}
		r := p.checkReady(ep)
		if r.ready {
			r = p.admit(ep, r) // an endpoints file that no longer lists it keeps it out (grow.go)
		}
		p.mu.Lock()
		p.noteProbeLocked(ep, r)
		p.mu.Unlock()
		if r.ready {
			info := p.discover(ep)
			if p.ctx.Err() != nil {
				continue // shutting down: leave it as it was
			}
			p.bringUp(ep, info, r.note)
			return
		}
		p.sleep(interval)
		interval = p.cfg.ProbeInterval
	}
}

// bringUp puts ep into service with what the server said of itself.
func (p *Pool) bringUp(ep *Endpoint, info Info, probe string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ep.probing = false
	ep.info = info
	if c := int64(info.Context); c > 0 {
		if old := p.context.Load(); old == 0 || c < old {
			p.context.Store(c) // under p.mu: no other writer
		}
	}
	if ep.limiter == nil && !p.cfg.Ladder && p.cfg.FixedSlots == 0 && (p.cfg.Adaptive || info.Capacity == 0) {
		ep.limiter = NewLimiter(p.cfg.Limiter, p.clk.Now())
	}
	switch {
	case p.cfg.FixedSlots > 0:
		ep.slots = p.cfg.FixedSlots
	case ep.limiter != nil:
		ep.slots = ep.limiter.Limit()
	case info.Capacity > 0:
		ep.slots = info.Capacity + p.cfg.QueueDepth
	default:
		ep.slots = DefaultSlots
	}
	if ep.state == StateDown {
		p.cfg.Logf("%s is back in service (%s: ready; up to %d in flight)", ep.name, probe, ep.slots)
	} else {
		p.cfg.Logf("%s: %s: ready; %s", ep.name, probe, p.describeLocked(ep))
	}
	p.setStateLocked(ep, StateReady)
	ep.fails = 0
	if !ep.polling && !p.cfg.Ladder {
		ep.polling = true
		p.wg.Add(1)
		go p.poll(ep)
	}
	p.broadcastLocked()
}

// describeLocked is what the ready line says of ep's capacity, in-flight
// rule and context.
func (p *Pool) describeLocked(ep *Endpoint) string {
	var b strings.Builder
	in := ep.info
	if in.Capacity > 0 {
		fmt.Fprintf(&b, "capacity %d (%s)", in.Capacity, in.CapacitySource)
	} else {
		b.WriteString("capacity not reported")
	}
	if !p.cfg.Ladder {
		switch {
		case p.cfg.FixedSlots > 0:
			fmt.Fprintf(&b, ", %d in flight (--concurrency)", p.cfg.FixedSlots)
		case ep.limiter != nil:
			fmt.Fprintf(&b, ", in flight adapted to the server from %d (--concurrency N fixes it)", ep.limiter.Limit())
		default:
			fmt.Fprintf(&b, ", up to %d in flight (--queue-depth %d)", ep.slots, p.cfg.QueueDepth)
		}
	}
	if in.Context > 0 {
		fmt.Fprintf(&b, "; context %d tokens (%s)", in.Context, in.ContextSource)
	} else {
		b.WriteString("; context length not reported (--context-length N sets it)")
	}
	return b.String()
}

// noteProbeLocked keeps what a probe of ep found: what it saw, for
// messages, and the route that answered, to probe on from then on.
func (p *Pool) noteProbeLocked(ep *Endpoint, r readiness) {
	ep.lastProbe, ep.refused = r.note, r.refused
	if r.ready && p.cfg.HealthPath == "" {
		ep.readyPath = r.path
	}
	p.broadcastLocked() // WaitReady reports what the probes see
}

// readiness is what one probe found.
type readiness struct {
	ready   bool
	path    string // the route that answered 200
	note    string // what each route said: "/health 404 (no such route), /v1/models 200"
	refused bool   // 401 or 403: the credentials, not the server
}

// checkReady asks ep whether it is ready: --health-path, else the route
// that answered before, else /health and, if there is no such route,
// /v1/models.
func (p *Pool) checkReady(ep *Endpoint) readiness {
	p.mu.Lock()
	paths := []string{openai.PathHealth, openai.PathModels}
	switch {
	case p.cfg.HealthPath != "":
		paths = []string{p.cfg.HealthPath}
	case ep.readyPath != "":
		paths = []string{ep.readyPath}
	}
	p.mu.Unlock()
	var notes []string
	for i, path := range paths {
		status, _, err := p.get(ep, path)
		if err != nil {
			notes = append(notes, path+": "+transportNote(err, p.cfg.ControlTimeout))
			return readiness{note: strings.Join(notes, ", ")}
		}
		note := fmt.Sprintf("%s %d", path, status)
		switch {
		case status == fasthttp.StatusOK:
			return readiness{ready: true, path: path, note: strings.Join(append(notes, note), ", ")}
		case status == fasthttp.StatusNotFound && i+1 < len(paths):
			notes = append(notes, note+" (no such route)")
			continue
		}
		r := readiness{}
		switch status {
		case fasthttp.StatusServiceUnavailable:
			note += " (starting)"
		case fasthttp.StatusNotFound:
			note += " (no such route: set --health-path)"
		case fasthttp.StatusUnauthorized, fasthttp.StatusForbidden:
			note += " (check --api-key)"
			r.refused = true
		}
		r.note = strings.Join(append(notes, note), ", ")
		return r
	}
	return readiness{note: strings.Join(notes, ", ")}
}

// transportNote says in a few words why a control request got no answer.
func transportNote(err error, timeout time.Duration) string {
	var de *dialError
	switch {
	case errors.As(err, &de):
		msg := de.err.Error()
		if strings.Contains(msg, "refused") {
			return "connection refused"
		}
		return "cannot connect (" + msg + ")"
	case errors.Is(err, fasthttp.ErrTimeout):
		return fmt.Sprintf("no answer within %v", timeout)
	case errors.Is(err, fasthttp.ErrConnectionClosed):
		return "connection closed before an answer"
	}
	return err.Error()
}

// poll reads ep's /metrics every probe interval, for the server's own
// count of running and waiting requests, until the pool's context ends;
// a server whose first answer has neither is not asked again. It runs
// beside the requests, so a server slow to answer its /metrics (or that
// never does) holds up nothing.
func (p *Pool) poll(ep *Endpoint) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		ep.polling = false
		p.mu.Unlock()
	}()
	var names *metricNames
	for p.ctx.Err() == nil {
		status, body, err := p.get(ep, pathMetrics)
		now := p.clk.Now()
		if err == nil && status == fasthttp.StatusOK && names == nil {
			names = findMetrics(body)
		}
		if names == nil {
			return // none, or none known
		}
		p.mu.Lock()
		ep.info.Metrics = pathMetrics + " " + names.running + ", " + names.waiting
		if err == nil && status == fasthttp.StatusOK {
			if load, ok := names.read(body); ok {
				load.at = now
				ep.metrics = load
				if ep.limiter != nil {
					ep.limiter.Load(load.running, load.waiting)
				}
			}
		}
		p.mu.Unlock()
		p.sleep(p.cfg.ProbeInterval)
	}
}

// runningLocked is View's Running: see there.
func (p *Pool) runningLocked(ep *Endpoint, now time.Time) int {
	n := ep.inflight
	if m := ep.metrics; !m.at.IsZero() && now.Sub(m.at) <= 3*p.cfg.ProbeInterval+time.Second {
		if m.waiting == 0 {
			return n // nothing waits: all of ours run
		}
		return min(n, m.running)
	}
	if c := ep.info.Capacity; c > 0 {
		return min(n, c)
	}
	if e := ep.decode.effective(ep.stats.Rate.Rate(now, time.Minute)); e > 0 {
		return min(n, max(1, int(e+0.5)))
	}
	return n
}
