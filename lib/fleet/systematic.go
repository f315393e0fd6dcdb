package fleet

import (
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"

	"tokenmill/lib/openai"
)

// Systematic tells a run whose requests all fail the same way, for a
// reason of the run's own (a model no server serves, a route they do not
// have, a request field they refuse), from one whose prompts fail one by
// one. Before any request has succeeded, once three prompts (and at least
// one on every endpoint in service) were refused with the very same
// status and message, the run stops with one message naming the likely
// fix, instead of writing every prompt to the errors file. A prompt's own
// refusal (too long for the context) names its own length, so prompts
// that fail one by one do not look alike. The first success, or two
// refusals that differ, disarm it.
type Systematic struct {
	p     *Pool
	api   openai.API
	model string

	mu     sync.Mutex
	armed  bool
	status int
	msg    string
	times  int          // prompts refused so
	failed map[int]bool // endpoints that refused so
}

// systematicPrompts is how many prompts must have been refused alike.
const systematicPrompts = 3

// NewSystematic watches the run's requests of api for model on p.
func NewSystematic(p *Pool, api openai.API, model string) *Systematic {
	return &Systematic{p: p, api: api, model: model, armed: true, failed: map[int]bool{}}
}

// Succeeded: a request was answered; failures from now on are the
// prompts' own.
func (s *Systematic) Succeeded() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.armed = false
	s.mu.Unlock()
}

// Failed judges a failure f of a request on ep (its last attempt); it
// returns the error to stop the run with when the refusals are
// systematic, else nil.
func (s *Systematic) Failed(ep *Endpoint, f *Failure) error {
	if s == nil || f == nil || f.Retriable || f.Fatal {
		return nil
	}
	switch f.Status {
	case fasthttp.StatusBadRequest, fasthttp.StatusNotFound, fasthttp.StatusMethodNotAllowed, fasthttp.StatusUnprocessableEntity:
	default:
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.armed {
		return nil
	}
	if s.times == 0 {
		s.status, s.msg = f.Status, f.Message
	} else if f.Status != s.status || f.Message != s.msg {
		// Two different refusals: the prompts', not the run's.
		s.armed = false
		return nil
	}
	s.times++
	s.failed[ep.Index()] = true
	if s.times < systematicPrompts {
		return nil
	}
	for i, v := range s.p.View() {
		if v.State == StateReady && !s.failed[i] {
			return nil
		}
	}
	s.armed = false
	return fmt.Errorf("every endpoint refused the first requests the same way (HTTP %d: %s): %s; if those prompts are bad in themselves, --resume goes on: refusals an errors file records are not judged again", f.Status, f.Message, s.hint(f))
}

// unknownField finds the name of a request field a server refuses, in
// the messages of the gateways and servers that say.
var unknownField = regexp.MustCompile(`(?i)(?:unrecognized request argument supplied|extra inputs are not permitted|unknown (?:field|parameter)|unsupported parameter)[^a-z_]*["'\x60]?([a-z_][a-z0-9_.]*)`)

// hint names the likely fix of a systematic refusal.
func (s *Systematic) hint(f *Failure) string {
	low := strings.ToLower(f.Message)
	switch {
	case f.Status == fasthttp.StatusNotFound && strings.Contains(low, "model"):
		return fmt.Sprintf("model %q is not served: %s (set --model)", s.model, s.p.servedText())
	case f.Status == fasthttp.StatusNotFound || f.Status == fasthttp.StatusMethodNotAllowed:
		return fmt.Sprintf("the servers have no %s route (--api %s): use --api chat or --api completions", s.api.Path(), s.api)
	case strings.Contains(low, "stream_options") || strings.Contains(low, "stream options") || strings.Contains(low, "continuous_usage_stats"):
		return "the servers refuse stream_options: take it out of --extra-body"
	}
	if m := unknownField.FindStringSubmatch(f.Message); m != nil {
		return fmt.Sprintf("the servers refuse the request field %q: take it out of --extra-body (or the records' params)", m[1])
	}
	return "every request is refused: check --api, --model, --extra-body and the sampling flags"
}

// servedText lists the models the ready endpoints' /v1/models named.
func (p *Pool) servedText() string {
	seen := map[string]bool{}
	var names []string
	for _, v := range p.View() {
		if v.State != StateReady {
			continue
		}
		for _, m := range v.Info.Models {
			if !seen[m] {
				seen[m] = true
				names = append(names, fmt.Sprintf("%q", m))
			}
		}
	}
	if len(names) == 0 {
		return "the servers list no models on " + openai.PathModels
	}
	return "they serve " + strings.Join(names, ", ")
}

// CheckModel tells whether every ready endpoint that lists its models on
// /v1/models lists model (up to Ollama's ":latest"); the error names what
// they serve instead. Servers that list nothing are not judged.
func (p *Pool) CheckModel(model string) error {
	names := strings.Split(model, ",")
	var missing []string
	for _, v := range p.View() {
		if v.State != StateReady || len(v.Info.Models) == 0 {
			continue
		}
		found := false
		for _, m := range v.Info.Models {
			for _, n := range names {
				found = found || ModelMatches(strings.TrimSpace(n), m)
			}
		}
		if !found {
			missing = append(missing, v.Name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("--model %q is not served by %s: %s", model, strings.Join(missing, ", "), p.servedText())
}

// MissingRoute asks every ready endpoint whether it has the POST route
// path, by a GET on it: a server without the route answers 404, one with
// it 405 (or 200, 400, 422). It returns the names of those without.
func (p *Pool) MissingRoute(path string) []string {
	var missing []string
	for _, ep := range p.Endpoints() {
		p.mu.Lock()
		ready := ep.state == StateReady
		p.mu.Unlock()
		if !ready {
			continue
		}
		if status, _, err := p.get(ep, path); err == nil && status == fasthttp.StatusNotFound {
			missing = append(missing, ep.name)
		}
	}
	return missing
}

// CheckRun refuses, before anything is sent, a run the ready servers
// cannot serve: a model that one of them does not list, or --api generate
// on a server without SGLang's /generate.
func CheckRun(p *Pool, api openai.API, model string) error {
	if model != "" {
		if err := p.CheckModel(model); err != nil {
			return err
		}
	}
	if api == openai.APIGenerate {
		if missing := p.MissingRoute(openai.PathGenerate); len(missing) > 0 {
			return fmt.Errorf("--api generate: %s has no %s (SGLang's native API; GET %s answered 404): use --api chat or --api completions",
				strings.Join(missing, ", "), openai.PathGenerate, openai.PathGenerate)
		}
	}
	return nil
}
