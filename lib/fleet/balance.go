package fleet

// Policy chooses which endpoint gets the next request.
type Policy string

const (
	// LeastOutstanding sends each request to the ready endpoint with the
	// most free room relative to its cap (fewest outstanding requests per
	// slot). A slot that frees anywhere is refilled at once, so every
	// endpoint stays full while work remains, and a slower endpoint, which
	// frees its slots less often, gets proportionally less work.
	LeastOutstanding Policy = "least-outstanding"
	// RoundRobin hands requests to the endpoints in strict turn, waiting
	// for the next one in line to have room: what a naive client does. It
	// is here to be compared against, not to be used.
	RoundRobin Policy = "round-robin"
)

// pickLocked returns the endpoint for the next request, or nil when the
// policy has none to offer now. The caller holds p.mu.
func (p *Pool) pickLocked(avoid *Endpoint) *Endpoint {
	if p.cfg.Policy == RoundRobin {
		return p.pickRoundRobinLocked()
	}
	var best, fallback *Endpoint
	n := len(p.eps)
	now := p.clk.Now()
	// Start the scan at a rotating index so ties spread evenly.
	start := p.rr
	p.rr = (p.rr + 1) % n
	for k := 0; k < n; k++ {
		ep := p.eps[(start+k)%n]
		if ep.state != StateReady || ep.inflight >= ep.slots || now.Before(ep.pausedUntil) {
			continue
		}
		if ep == avoid {
			fallback = ep
			continue
		}
		// Fewer outstanding per slot wins: a.inflight/a.slots < b.inflight/b.slots.
		if best == nil || ep.inflight*best.slots < best.inflight*ep.slots {
			best = ep
		}
	}
	if best == nil {
		return fallback
	}
	return best
}

// pickRoundRobinLocked takes the next endpoint in turn, skipping those out
// of service but waiting for a full one.
func (p *Pool) pickRoundRobinLocked() *Endpoint {
	n := len(p.eps)
	now := p.clk.Now()
	for k := 0; k < n; k++ {
		ep := p.eps[p.rr]
		if ep.state != StateReady || now.Before(ep.pausedUntil) {
			p.rr = (p.rr + 1) % n
			continue
		}
		if ep.inflight >= ep.slots {
			return nil
		}
		p.rr = (p.rr + 1) % n
		return ep
	}
	return nil
}
