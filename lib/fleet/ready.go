package fleet

import (
	"context"
	"fmt"
	"time"

	"tokenmill/lib/openai"
)

// WaitReady waits until at least one endpoint is ready, for at most
// timeout.
func (p *Pool) WaitReady(ctx context.Context, timeout time.Duration) error {
	deadline := p.clk.NewTimer(timeout)
	defer deadline.Stop()
	// Say what is going on if the servers are still loading their model.
	notice := p.clk.NewTimer(min(2*time.Second, timeout/2))
	defer notice.Stop()
	for {
		p.mu.Lock()
		n, wait := p.ready, p.changed
		p.mu.Unlock()
		if n > 0 {
			return nil
		}
		select {
		case <-wait:
		case <-notice.C():
			p.cfg.Logf("waiting for one of %d endpoints to answer %s (up to %v, --wait-ready)", len(p.eps), openai.PathHealth, timeout)
		case <-deadline.C():
			return fmt.Errorf("no endpoint answered %s within %v (--wait-ready): are the servers up?", openai.PathHealth, timeout)
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
		p.mu.Unlock()
		ready := p.readyIndexes()
		if len(ready) == len(p.eps) {
			return ready, nil
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
			return nil, fmt.Errorf("no endpoint answered %s within %v (--wait-ready): are the servers up?", openai.PathHealth, timeout)
		}
		p.cfg.Logf("%d of %d endpoints are not ready after %v (--wait-ready); measuring the %d that are", len(p.eps)-len(ready), len(p.eps), timeout, len(ready))
		return ready, nil
	}
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
