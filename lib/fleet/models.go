package fleet

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// The model each endpoint is sent. A fleet may serve one model under
// different names (SGLang and llama.cpp name it after their --model-path
// or --served-model-name, vLLM after its --served-model-name): without
// --model each endpoint is sent the first model its own /v1/models lists,
// and with a --model list the first name of the list it lists. Requests
// are built once, with the run's first model, and BodyFor gives each
// endpoint its own name.

// DiscoverModel is the model the first ready endpoint is sent (the first
// its /v1/models lists, without --model); "" when none names one.
func (p *Pool) DiscoverModel() string {
	for _, v := range p.View() {
		if v.State == StateReady && v.Info.Model != "" {
			return v.Info.Model
		}
	}
	return ""
}

// Models are --model's names, comma-separated, in order ("" none).
func (f *ServerFlags) Models() []string {
	var out []string
	for _, m := range strings.Split(f.Model, ",") {
		if m = strings.TrimSpace(m); m != "" && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// PoolConfig fills in what cfg takes from the server flags.
func (f *ServerFlags) PoolConfig(cfg Config) Config {
	cfg.APIKey, cfg.HealthPath, cfg.ContextLength = f.APIKey, f.HealthPath, f.ContextLength
	cfg.Models = f.Models()
	if len(cfg.Models) > 0 {
		cfg.Model = cfg.Models[0]
	}
	return cfg
}

// pickModel is the model an endpoint that lists listed is sent: the
// first of --model's names it lists (the first name when it lists none
// of them: CheckModel refuses it), else the first it lists.
func (p *Pool) pickModel(listed []string) (model, source string) {
	names := p.cfg.Models
	if len(names) == 0 && p.cfg.Model != "" {
		names = []string{p.cfg.Model}
	}
	for _, n := range names {
		for _, m := range listed {
			if ModelMatches(n, m) {
				return n, "--model"
			}
		}
	}
	switch {
	case len(names) > 0:
		return names[0], "--model"
	case len(listed) > 0:
		return listed[0], openai.PathModels
	}
	return "", ""
}

// ModelOf is the model ep is sent ("" when it named none).
func (p *Pool) ModelOf(ep *Endpoint) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return ep.info.Model
}

// BodyFor is a request body as ep is to be sent it: the model it names,
// when that is another endpoint's (the run built it for the first),
// replaced by ep's own. A model a record's own params name is sent as
// it is.
func (p *Pool) BodyFor(ep *Endpoint, body []byte) []byte {
	p.mu.Lock()
	own, mixed := ep.info.Model, p.mixedLocked()
	p.mu.Unlock()
	if !mixed || own == "" {
		return body
	}
	raw, err := record.FieldValue(body, "model")
	var named string
	if err != nil || raw == nil || json.Unmarshal(raw, &named) != nil || named == own || !p.servesAnother(named) {
		return body
	}
	patch, _ := json.Marshal(map[string]string{"model": own})
	out, err := openai.Merge(body, patch)
	if err != nil {
		return body
	}
	return out
}

// mixedLocked: the endpoints up so far are sent more than one model name.
func (p *Pool) mixedLocked() bool {
	first := ""
	for _, ep := range p.eps {
		if m := ep.info.Model; m != "" {
			if first != "" && m != first {
				return true
			}
			first = m
		}
	}
	return false
}

// servesAnother: some endpoint is sent model.
func (p *Pool) servesAnother(model string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ep := range p.eps {
		if ep.info.Model == model {
			return true
		}
	}
	return false
}

// ModelsText names the models the endpoints in service are sent, when
// they differ ("Qwen3.6-27B (http://a:1, http://a:2); fake/model
// (http://b:1)"); "" when they are one.
func (p *Pool) ModelsText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.mixedLocked() {
		return ""
	}
	var order []string
	by := map[string][]string{}
	for _, ep := range p.eps {
		m := ep.info.Model
		if m == "" || ep.state != StateReady {
			continue
		}
		if by[m] == nil {
			order = append(order, m)
		}
		by[m] = append(by[m], ep.name)
	}
	parts := make([]string, len(order))
	for i, m := range order {
		parts[i] = fmt.Sprintf("%s (%s)", m, strings.Join(by[m], ", "))
	}
	return strings.Join(parts, "; ")
}

// ModelNotFound tells a refusal that names the request's model as one
// the server does not serve: vLLM's 404 "The model `X` does not exist.",
// Ollama's 404 `model "X" not found, try pulling it first`, a gateway's
// model_not_found. It is the endpoint's, not the prompt's: another
// endpoint may serve the model.
func ModelNotFound(f *Failure) bool {
	if f == nil || f.Status != fasthttp.StatusNotFound {
		return false
	}
	low := strings.ToLower(f.Message)
	return strings.Contains(low, "model") && (strings.Contains(low, "does not exist") || strings.Contains(low, "not found") || strings.Contains(low, "model_not_found"))
}

// Misconfigured takes ep out of service for good: it refused the run's
// requests for a reason of its own setup (a model it does not serve), which
// no retry mends. It reports whether an endpoint is left that may still
// answer (ready, starting, or out of service for a while).
func (p *Pool) Misconfigured(ep *Endpoint, why string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ep.wrong == "" {
		ep.wrong = why
		p.setStateLocked(ep, StateDown)
		ep.stats.Ejections.Add(1)
		p.cfg.Logf("%s is out of service for the run: %s", ep.name, why)
		p.broadcastLocked()
	}
	for _, e := range p.eps {
		if e.wrong == "" {
			return true
		}
	}
	return false
}

// ContextAssumed tells an endpoint whose context the server did not state
// (Info.ContextAssumed).
func (p *Pool) ContextAssumed(ep *Endpoint) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return ep.info.ContextAssumed && p.cfg.ContextLength == 0
}

// ProbeContext asks ep how many tokens of a prompt longer than n it keeps:
// a chat request of about 3n tokens of filler, one answer token asked.
// A server that cuts prompts to its context (Ollama) says its context in
// the answer's prompt_tokens; one that refuses them answers 400 (an
// error). It is one request's prefill of the context at most.
func (p *Pool) ProbeContext(ep *Endpoint, n int, timeout time.Duration) (int, error) {
	body, _ := json.Marshal(map[string]any{
		"model":       p.ModelOf(ep),
		"messages":    []map[string]string{{"role": "user", "content": strings.Repeat("the ", 3*n+64)}},
		"max_tokens":  1,
		"temperature": 0,
	})
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	ep.gen.Post(req, openai.PathChat, body)
	if err := ep.gen.DoTimeout(req, resp, timeout); err != nil {
		return 0, err
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode(), openai.ErrorMessage(resp.Body()))
	}
	c, err := openai.ParseChat(resp.Body())
	if err != nil {
		return 0, err
	}
	return c.PromptTokens, nil
}
