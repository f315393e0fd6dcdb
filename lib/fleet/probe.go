package fleet

import (
	"time"

	"github.com/valyala/fasthttp"

	"tokenmill/lib/openai"
)

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

// probe polls ep's /health, the first time after first, until it answers
// 200, reads its limits, and puts it into service.
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
		if status, _, err := p.get(ep, openai.PathHealth); err == nil && status == fasthttp.StatusOK {
			mr := 0
			if p.cfg.FixedSlots == 0 {
				mr = p.discoverSlots(ep)
			}
			p.mu.Lock()
			ep.probing = false
			ep.serverMR = mr
			switch {
			case p.cfg.FixedSlots > 0:
				ep.slots = p.cfg.FixedSlots
			case mr > 0:
				ep.slots = mr + p.cfg.QueueDepth
			default:
				ep.slots = DefaultSlots
			}
			if ep.state == StateDown {
				p.cfg.Logf("%s is back in service (%d slots)", ep.name, ep.slots)
			}
			p.setStateLocked(ep, StateReady)
			ep.fails = 0
			p.broadcastLocked()
			p.mu.Unlock()
			return
		}
		p.sleep(interval)
		interval = p.cfg.ProbeInterval
	}
}

// discoverSlots asks the server for its max_running_requests: SGLang's
// /get_server_info, or /server_info in newer releases. 0 if neither says.
func (p *Pool) discoverSlots(ep *Endpoint) int {
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
	p.cfg.Logf("%s does not report max_running_requests; sending it up to %d requests at once (set --concurrency to choose)", ep.name, DefaultSlots)
	return 0
}
