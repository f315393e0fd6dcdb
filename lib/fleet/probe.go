package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/segmentio/encoding/json"
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

// Start probes every endpoint until it is ready. An endpoint given as a
// URL that ended in an API path is said once to be taken as its base.
func (p *Pool) Start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ep := range p.eps {
		if tr := ep.t.Trimmed; tr != "" && tr != "/v1" {
			p.cfg.Logf("%s%s: taken as the base URL %s (the API's routes, %s among them, are added to it)", ep.name, tr, ep.name, tr)
		}
	}
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
		if r.wrong && ep.state == StateStarting {
			// Never ready, and its routes are not an API's: a wrong
			// address, which waiting will not mend (one ready before and
			// ejected is probed on as any other).
			ep.wrong, ep.probing = r.note, false
			if p.ready > 0 {
				p.cfg.Logf("warning: %s is left out: %s", ep.name, wrongText(ep))
			}
			p.broadcastLocked()
			p.mu.Unlock()
			return
		}
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
	if ep.wrong != "" {
		return // out of the run for good (Misconfigured)
	}
	ep.info = info
	if c := int64(info.Context); c > 0 {
		if old := p.context.Load(); old == 0 || c < old {
			p.context.Store(c) // under p.mu: no other writer
		}
	}
	if ep.limiter == nil && !p.cfg.Ladder && p.cfg.FixedSlots == 0 && (p.cfg.Adaptive || info.Capacity == 0) {
		cfg := p.cfg.Limiter
		cfg.Capacity = info.Capacity
		if cfg.Capacity == 0 && cfg.Start == 0 {
			cfg.Start = FirstLevel
		}
		ep.limiter = NewLimiter(cfg, p.clk.Now())
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
		case ep.limiter != nil && in.Capacity > 0:
			fmt.Fprintf(&b, ", in flight adapted to the server from %d (%d + %d spare; --concurrency N fixes it)", ep.limiter.Limit(), in.Capacity, ep.limiter.Limit()-in.Capacity)
		case ep.limiter != nil && in.Parallel > 0:
			fmt.Fprintf(&b, ", in flight adapted to the server from %d (it may run %d, %s; --concurrency N fixes it)", ep.limiter.Limit(), in.Parallel, in.ParallelSource)
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
	if in.Model != "" && p.otherModelLocked(ep, in.Model) {
		fmt.Fprintf(&b, "; model %s (%s), which the others name otherwise", in.Model, in.ModelSource)
	}
	return b.String()
}

// otherModelLocked: an endpoint up before ep is sent another name than
// model.
func (p *Pool) otherModelLocked(ep *Endpoint, model string) bool {
	for _, e := range p.eps {
		if e != ep && e.info.Model != "" && e.info.Model != model {
			return true
		}
	}
	return false
}

// noteProbeLocked keeps what a probe of ep found: what it saw, for
// messages, and the route that answered, to probe on from then on.
func (p *Pool) noteProbeLocked(ep *Endpoint, r readiness) {
	ep.lastProbe, ep.refused, ep.probed = r.note, r.refused, true
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
	// wrong: every route asked answered that it is not there (404), or
	// with a page that is not an API's: the address is not an
	// OpenAI-compatible server's base URL, and waiting will not change it.
	wrong bool
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
		status, body, err := p.get(ep, path)
		if err != nil {
			notes = append(notes, path+": "+transportNote(err, p.cfg.ControlTimeout))
			return readiness{note: strings.Join(notes, ", ")}
		}
		note := fmt.Sprintf("%s %d", path, status)
		page := webPage(body)
		switch {
		case status == fasthttp.StatusOK && page && p.cfg.HealthPath == "":
			// A web page at the API's route: another server (a proxy's or
			// a web application's front page) answers at this address.
			notes = append(notes, note+" (a web page, not an API)")
			if i+1 < len(paths) {
				continue
			}
			return readiness{wrong: true, note: strings.Join(notes, ", ")}
		case status == fasthttp.StatusOK && path == openai.PathModels && p.cfg.HealthPath == "" && !modelList(body):
			notes = append(notes, note+" (not a model list)")
			return readiness{wrong: true, note: strings.Join(notes, ", ")}
		case status == fasthttp.StatusOK:
			return readiness{ready: true, path: path, note: strings.Join(append(notes, note), ", ")}
		case status == fasthttp.StatusNotFound && i+1 < len(paths):
			notes = append(notes, note+" (no such route)")
			continue
		}
		r := readiness{}
		switch status {
		case fasthttp.StatusServiceUnavailable:
			note += " (starting" + said(body) + ")"
		case fasthttp.StatusNotFound:
			// The last route asked is not there either (a route that
			// answered before an ejection, or --health-path, too: the
			// server behind the address is another one now).
			note += " (no such route)"
			r.wrong = true
		case fasthttp.StatusUnauthorized, fasthttp.StatusForbidden:
			note += " (check --api-key)"
			r.refused = true
		default:
			note += said(body)
		}
		r.note = strings.Join(append(notes, note), ", ")
		return r
	}
	return readiness{note: strings.Join(notes, ", ")}
}

// webPage tells an HTML page from an API's answer.
func webPage(body []byte) bool {
	b := bytes.TrimSpace(body)
	if len(b) > 64 {
		b = b[:64]
	}
	b = bytes.ToLower(b)
	return bytes.HasPrefix(b, []byte("<!doctype html")) || bytes.HasPrefix(b, []byte("<html"))
}

// modelList: body is a /v1/models answer, {"data": [...]}.
func modelList(body []byte) bool {
	var l struct {
		Data *[]json.RawMessage `json:"data"`
	}
	return json.Unmarshal(body, &l) == nil && l.Data != nil
}

// said is what a server's answer says, in a few words, for a probe's
// note: the message of its error object, else the start of its text
// ("" when neither says anything).
func said(body []byte) string {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  string          `json:"detail"`
	}
	msg := ""
	if json.Unmarshal(body, &e) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		switch {
		case len(e.Error) > 0 && json.Unmarshal(e.Error, &inner) == nil && inner.Message != "":
			msg = inner.Message
		case len(e.Error) > 0 && json.Unmarshal(e.Error, &msg) == nil:
		case e.Message != "":
			msg = e.Message
		case e.Detail != "":
			msg = e.Detail
		}
	} else if !webPage(body) {
		msg = string(body)
	}
	msg = strings.Join(strings.Fields(msg), " ")
	if msg == "" || !utf8.ValidString(msg) {
		return ""
	}
	if r := []rune(msg); len(r) > 60 {
		msg = string(r[:60]) + "..."
	}
	return ": " + msg
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

// poll reads ep's load every probe interval, for the server's own count
// of running and waiting requests, until the pool's context ends: its
// /metrics where they count them, else llama.cpp's /slots (its /metrics
// answers 501 unless started with --metrics); a server whose first
// answers have neither is not asked again. It runs beside the requests,
// so a server slow to answer (or that never does) holds up nothing.
func (p *Pool) poll(ep *Endpoint) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		ep.polling = false
		p.mu.Unlock()
	}()
	src := p.loadSource(ep)
	if src == nil {
		return // none, or none known
	}
	p.mu.Lock()
	ep.info.Metrics = src.describe()
	p.mu.Unlock()
	for p.ctx.Err() == nil {
		status, body, err := p.get(ep, src.path())
		now := p.clk.Now()
		if err == nil && status == fasthttp.StatusOK {
			p.mu.Lock()
			if load, ok := src.read(body, ep.inflight); ok {
				load.at = now
				p.loadLocked(ep, load)
			}
			p.mu.Unlock()
		}
		p.mu.Lock()
		every := p.pollEveryLocked(ep)
		p.mu.Unlock()
		p.sleep(every)
	}
}

// climbPolls is how many times more often a server's load is read while
// ep's adaptive limit climbs (every 125 ms at the default 2 s): each
// reading that finds room raises the limit, and on a short run (a few
// hundred answers, a minute) readings at the probe interval would leave
// most of the slots idle for much of it.
const climbPolls = 16

// pollEveryLocked is the wait before ep's next load reading: the probe
// interval, shorter while its limit has not settled.
func (p *Pool) pollEveryLocked(ep *Endpoint) time.Duration {
	if ep.limiter != nil && ep.limiter.Climbing() {
		return p.cfg.ProbeInterval / climbPolls
	}
	return p.cfg.ProbeInterval
}

// loadSource finds where ep tells its load: the gauges of its /metrics,
// else its /slots; nil when neither answers with them.
func (p *Pool) loadSource(ep *Endpoint) loadSource {
	if status, body, err := p.get(ep, pathMetrics); err == nil && status == fasthttp.StatusOK {
		if names := findMetrics(body); names != nil {
			return names
		}
	}
	if status, body, err := p.get(ep, pathSlots); err == nil && status == fasthttp.StatusOK {
		if _, _, ok := parseSlots(body); ok {
			return slotsSource{}
		}
	}
	return nil
}

// loadLocked takes what ep's metrics say now: for the progress's running
// count, and for its adaptive limit, which may move on it.
func (p *Pool) loadLocked(ep *Endpoint, load serverLoad) {
	ep.metrics = load
	if ep.limiter != nil {
		before := ep.limiter.Limit()
		ep.limiter.Load(p.clk.Now(), load.running, load.waiting)
		if ep.limiter.Limit() != before {
			p.setLimitLocked(ep)
		}
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
