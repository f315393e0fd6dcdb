package fleet

import (
	"github.com/valyala/fasthttp"

	"tokenmill/lib/openai"
)

// DiscoverModel asks the ready endpoints' /v1/models for the model name;
// "" when none names one.
func (p *Pool) DiscoverModel() string {
	p.mu.Lock()
	var ready []*Endpoint
	for _, ep := range p.eps {
		if ep.state == StateReady {
			ready = append(ready, ep)
		}
	}
	p.mu.Unlock()
	for _, ep := range ready {
		status, body, err := p.get(ep, openai.PathModels)
		if err != nil || status != fasthttp.StatusOK {
			continue
		}
		if l, err := openai.ParseModels(body); err == nil && len(l.Data) > 0 && l.Data[0].ID != "" {
			return l.Data[0].ID
		}
	}
	return ""
}
