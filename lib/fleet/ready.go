package fleet

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// WaitReady waits until at least one endpoint is ready, for at most
// timeout. When every endpoint refuses the credentials it stops at once:
// waiting would not change that.
func (p *Pool) WaitReady(ctx context.Context, timeout time.Duration) error {
	deadline := p.clk.NewTimer(timeout)
	defer deadline.Stop()
	// Say what is going on if the servers are still loading their model.
	notice := p.clk.NewTimer(min(2*time.Second, timeout/2))
	defer notice.Stop()
	for {
		p.mu.Lock()
		n, wait := p.ready, p.changed
		refused := p.allRefusedLocked()
		p.mu.Unlock()
		if n > 0 {
			return nil
		}
		if refused {
			return fmt.Errorf("every endpoint refused the credentials: %s", p.probesText())
		}
		select {
		case <-wait:
		case <-notice.C():
			p.cfg.Logf("waiting for one of %d endpoints to be ready (up to %v, --wait-ready): %s", len(p.eps), timeout, p.probesText())
		case <-deadline.C():
			return fmt.Errorf("no endpoint was ready within %v (--wait-ready): %s", timeout, p.probesText())
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
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
		p.mu.Unlock()
		ready := p.readyIndexes()
		if len(ready) == len(p.eps) {
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
		if ready = p.readyIndexes(); len(ready) == len(p.eps) {
			return ready, nil
		}
		if len(ready) == 0 {
			return nil, fmt.Errorf("no endpoint was ready within %v (--wait-ready): %s", timeout, p.probesText())
		}
		p.cfg.Logf("%d of %d endpoints are not ready after %v (--wait-ready); measuring the %d that are: %s",
			len(p.eps)-len(ready), len(p.eps), timeout, len(ready), p.probesText())
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
		seen := ep.lastProbe
		if seen == "" {
			seen = "not probed yet"
		}
		parts = append(parts, ep.name+": "+seen)
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
