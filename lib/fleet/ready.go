package fleet

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/clock"
)

// WaitReady waits until at least one endpoint is ready, for at most
// timeout. While it waits it says, after 2 s and then every
// Config.WaitNotice (10 s when unset), which endpoints it waits for, what
// each one's last probe saw (connection refused, 503 starting, no
// answer) and when it gives up. When every endpoint refuses the
// credentials it stops at once: waiting would not change that.
//
// An endpoint whose first probe finds no API at its address (every route
// 404, or a web page) makes it return a usage error once every endpoint
// was probed once, naming what each route answered and the fix: waiting
// would not change that. The first endpoint ready starts the run once the
// others' first probes are in, or ReadyGrace after it at most.
func (p *Pool) WaitReady(ctx context.Context, timeout time.Duration) error {
	start := p.clk.Now()
	deadline := p.clk.NewTimer(timeout)
	defer deadline.Stop()
	every := p.cfg.WaitNotice
	if every <= 0 {
		every = DefaultWaitNotice
	}
	notice := p.clk.NewTimer(min(2*time.Second, timeout/2))
	defer func() { notice.Stop() }()
	var grace <-chan time.Time // running once the first endpoint is ready
	graceOver := false
	for {
		p.mu.Lock()
		n, wait := p.ready, p.changed
		refused := p.allRefusedLocked()
		probed, wrong := p.firstRoundLocked()
		p.mu.Unlock()
		if len(wrong) > 0 && (probed || graceOver) {
			return wrongAddresses(wrong)
		}
		if n > 0 && (probed || graceOver) {
			return nil
		}
		if n > 0 && grace == nil {
			t := p.clk.NewTimer(ReadyGrace)
			defer t.Stop()
			grace = t.C()
		}
		if refused {
			return fmt.Errorf("every endpoint refused the credentials: %s", p.probesText())
		}
		select {
		case <-grace:
			graceOver = true
		case <-wait:
		case <-notice.C():
			left := timeout - p.clk.Now().Sub(start)
			p.cfg.Logf("waiting for %s to be ready (giving up in %v, --wait-ready %v): %s",
				endpointsWord(len(p.Endpoints())), left.Round(time.Second), timeout, p.probesText())
			notice = p.clk.NewTimer(every)
		case <-deadline.C():
			return fmt.Errorf("no endpoint was ready within %v (--wait-ready): %s", timeout, p.probesText())
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// DefaultWaitNotice is how often WaitReady says what it waits for.
const DefaultWaitNotice = 10 * time.Second

// ReadyGrace is how long the first endpoint ready waits for the others'
// first probes, so that a wrong address among them is refused before the
// run starts, while one that hangs does not hold the run up.
const ReadyGrace = 2 * time.Second

// firstRoundLocked says whether every endpoint was probed once, and which
// ones found no API at their address.
func (p *Pool) firstRoundLocked() (all bool, wrong []*Endpoint) {
	all = true
	for _, ep := range p.eps {
		all = all && ep.probed
		if ep.wrong != "" {
			wrong = append(wrong, ep)
		}
	}
	return all, wrong
}

// wrongAddresses is the usage error for endpoints whose addresses are not
// an API's.
func wrongAddresses(eps []*Endpoint) error {
	parts := make([]string, len(eps))
	for i, ep := range eps {
		parts[i] = wrongText(ep)
	}
	what := "is not an OpenAI-compatible server's base URL"
	if len(eps) > 1 {
		what = fmt.Sprintf("%d endpoints are not OpenAI-compatible servers' base URLs", len(eps))
	}
	return cli.Usagef("%s: %s", what, strings.Join(parts, "; "))
}

// wrongText names ep, what its routes answered, and the likely fix.
func wrongText(ep *Endpoint) string {
	fix := "give the server's base URL (infer adds /v1/chat/completions and its other routes itself), or --health-path PATH for a readiness route of its own"
	if path := ep.t.Path; path != "" {
		fix = fmt.Sprintf("give the server's base URL, likely without %s (infer adds /v1/chat/completions and its other routes itself), or --health-path PATH for a readiness route of its own", path)
	}
	return fmt.Sprintf("%s: %s; %s", ep.name, ep.wrong, fix)
}

func endpointsWord(n int) string {
	if n == 1 {
		return "the endpoint"
	}
	return fmt.Sprintf("one of %d endpoints", n)
}

// WarnNotReady names, once after has passed since started (at once if
// it has already), every endpoint that has not been ready yet, with what
// its last probe saw: the run goes on without them (each joins once
// ready), and the user should know why the fleet is smaller than asked.
// Then, every WaitNotice, it says so again when what their probes see
// has changed (a server that refused connections now answers 503 while
// it loads), until every one has been ready. It returns at once; stop
// cancels the warnings.
func (p *Pool) WarnNotReady(started time.Time, after time.Duration) (stop func()) {
	every := p.cfg.WaitNotice
	if every <= 0 {
		every = DefaultWaitNotice
	}
	var mu sync.Mutex // guards t, stopped and last
	var t clock.Timer // the next warning's
	stopped, last := false, ""
	var warn func()
	warn = func() {
		text, n := p.neverReadyText()
		mu.Lock()
		if stopped || n == 0 {
			mu.Unlock()
			return // stopped, or all came up
		}
		if text != last {
			again := ""
			if last != "" {
				again = "still "
			}
			p.cfg.Logf("warning: %d of %d endpoints %snot ready after %v (still probed every %v; each joins once ready): %s",
				n, len(p.Endpoints()), again, p.clk.Now().Sub(started).Round(time.Second), p.cfg.ProbeInterval, text)
			last = text
		}
		mu.Unlock()
		next := p.clk.AfterFunc(every, warn)
		mu.Lock()
		t = next
		if stopped {
			next.Stop()
		}
		mu.Unlock()
	}
	first := p.clk.AfterFunc(after-p.clk.Now().Sub(started), warn) // may run at once
	mu.Lock()
	if t == nil {
		t = first
	}
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// NeverReady reports whether endpoint i has not been ready once, and what
// its last probe saw.
func (p *Pool) NeverReady(i int) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ep := p.eps[i]
	if ep.state != StateStarting {
		return "", false
	}
	return probeSeen(ep), true
}

// neverReadyText is probesText for the endpoints that have not been
// ready once, and their number.
func (p *Pool) neverReadyText() (string, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var parts []string
	n := 0
	for _, ep := range p.eps {
		if ep.state != StateStarting {
			continue
		}
		n++
		if len(parts) < 8 {
			parts = append(parts, ep.name+": "+probeSeen(ep))
		}
	}
	if n > len(parts) {
		parts = append(parts, fmt.Sprintf("and %d more", n-len(parts)))
	}
	return strings.Join(parts, "; "), n
}

func probeSeen(ep *Endpoint) string {
	if ep.lastProbe == "" {
		return "not probed yet"
	}
	return ep.lastProbe
}

// WaitAll waits until every endpoint is ready, for at most timeout; after
// that it goes on with those that are, if any. It returns their indexes.
func (p *Pool) WaitAll(ctx context.Context, timeout time.Duration) ([]int, error) {
	deadline := p.clk.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		wait := p.changed
		refused := p.allRefusedLocked()
		probed, wrong := p.firstRoundLocked()
		p.mu.Unlock()
		if len(wrong) > 0 && probed {
			return nil, wrongAddresses(wrong)
		}
		ready := p.readyIndexes()
		if len(ready) == len(p.Endpoints()) {
			return ready, nil
		}
		if refused {
			return nil, fmt.Errorf("every endpoint refused the credentials: %s", p.probesText())
		}
		select {
		case <-wait:
			continue
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-deadline.C():
		}
		// The deadline: go on with what is ready, if anything.
		total := len(p.Endpoints())
		if ready = p.readyIndexes(); len(ready) == total {
			return ready, nil
		}
		if len(ready) == 0 {
			return nil, fmt.Errorf("no endpoint was ready within %v (--wait-ready): %s", timeout, p.probesText())
		}
		p.cfg.Logf("%d of %d endpoints are not ready after %v (--wait-ready); measuring the %d that are: %s",
			total-len(ready), total, timeout, len(ready), p.probesText())
		return ready, nil
	}
}

func (p *Pool) allRefusedLocked() bool {
	for _, ep := range p.eps {
		if !ep.refused {
			return false
		}
	}
	return len(p.eps) > 0
}

// probesText says, for every endpoint not ready, what its last probe saw:
// "http://h:1: /health 503 (starting); http://h:2: /health: connection
// refused". At most eight are named; the rest are counted.
func (p *Pool) probesText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var parts []string
	more := 0
	for _, ep := range p.eps {
		if ep.state == StateReady {
			continue
		}
		if len(parts) == 8 {
			more++
			continue
		}
		parts = append(parts, ep.name+": "+probeSeen(ep))
	}
	if more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", more))
	}
	return strings.Join(parts, "; ")
}

func (p *Pool) readyIndexes() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ready []int
	for i, ep := range p.eps {
		if ep.state == StateReady {
			ready = append(ready, i)
		}
	}
	return ready
}
