package fleet

// Affinity: the turns of one conversation go to one endpoint, whose
// prefix cache then holds the history each turn extends. A conversation
// keeps the slot its first turn took until its last turn is done, so an
// endpoint's load counts the conversations in progress on it as well as
// the requests; it gives the slot back, and moves, only when a turn fails
// there, the endpoint leaves service, or its cap shrinks below the
// conversations it holds.

// ByName is the endpoint whose base URL is name, or nil.
func (p *Pool) ByName(name string) *Endpoint {
	for _, ep := range p.Endpoints() {
		if ep.name == name {
			return ep
		}
	}
	return nil
}

// TryAcquireOn takes a free slot on ep if it is ready and has room, and
// returns it; nil otherwise.
func (p *Pool) TryAcquireOn(ep *Endpoint) *Endpoint {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ep.state != StateReady || ep.inflight >= ep.slots || p.clk.Now().Before(ep.pausedUntil) {
		return nil
	}
	ep.inflight++
	return ep
}

// Keep reports whether a conversation holding one of ep's slots may send
// its next turn there: ep is in service and holds no more than its cap.
func (p *Pool) Keep(ep *Endpoint) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return ep.state == StateReady && ep.inflight <= ep.slots && !p.clk.Now().Before(ep.pausedUntil)
}
