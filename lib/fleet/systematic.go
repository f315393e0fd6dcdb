package fleet

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"tokenmill/lib/cli"
	"tokenmill/lib/clock"
	"tokenmill/lib/openai"
)

// Systematic tells failures of a reason of the run's or of one server's
// from those of prompts one by one, in two ways.
//
// A run whose requests all fail the same way, for a reason of the run's
// own (a model no server serves, a route they do not have, a request
// field they refuse), from one whose prompts fail one by one. Before any
// request has succeeded, once three prompts (and at least one on every
// endpoint in service) were refused with the very same status and
// message, the run stops with one message naming the likely fix, instead
// of writing every prompt to the errors file. A prompt's own refusal (too
// long for the context) names its own length, so prompts that fail one by
// one do not look alike. The first success, or two refusals that differ,
// disarm it (Failed).
//
// An endpoint that fails every request alike (Attempt): see failing.
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
	// eps are the endpoints' streaks of failures alike (failing).
	eps map[*Endpoint]*streak
}

// systematicPrompts is how many prompts must have been refused alike.
const systematicPrompts = 3

// NewSystematic watches the run's requests of api for model on p.
func NewSystematic(p *Pool, api openai.API, model string) *Systematic {
	s := &Systematic{p: p, api: api, model: model, armed: true, failed: map[int]bool{}, eps: map[*Endpoint]*streak{}}
	// A hold (up to failingMaxHold) must not keep the pool alive past its
	// end in a process that goes on, as infer run in-process does.
	context.AfterFunc(p.ctx, s.stopHolds)
	return s
}

// stopHolds cancels the timers of the endpoints held out.
func (s *Systematic) stopHolds() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.eps {
		if st.held {
			st.timer.Stop()
		}
	}
}

// SucceededOn: a request ep answered; failures from now on are the
// prompts' own, and ep's streak of failures alike ends.
func (s *Systematic) SucceededOn(ep *Endpoint) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.armed = false
	st := s.eps[ep]
	delete(s.eps, ep) // its timer, if it fires, finds the streak gone
	held := st != nil && st.held
	if held {
		st.timer.Stop()
	}
	s.mu.Unlock()
	if held {
		// An answer to a request sent before it was held: it does answer,
		// so it is probed back now.
		s.reprobe(ep, "it answered a request")
	}
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

// An endpoint that fails every request alike. A server may answer every
// request with the same error while its health route says it is ready
// (llama.cpp's server, for one, in a state it does not leave): each
// ejection after --eject-after failures is undone by the next probe, its
// count of failures starts again, and every prompt uses up its --retries
// there. So the evidence is kept per endpoint across ejections: the streak
// of answered failures (an HTTP status that blames the server; not a
// refused or dropped connection, not 429 or 503, which say busy) with the
// same status and message since its last success. Once a streak holds
// failingPrompts prompts and the endpoint failed alike in failingSpells
// spells of service (its health brought it back failingSpells-1 times,
// and each time it failed alike again before any success), it is held out
// of service for failingHold, then probed back; failing alike again at
// once, it is held twice as long, up to failingMaxHold.
//
// A burst of errors while a server restarts or runs out of memory and
// then recovers is not such a streak: its health fails meanwhile (nothing
// brings it back) or a success ends the streak. The shortest streak
// judged is EjectAfter*(failingSpells-1)+1 failures, about
// (failingSpells-1) probe intervals long.
const (
	failingPrompts = 3
	failingSpells  = 4
	failingHold    = time.Minute
	failingMaxHold = 30 * time.Minute
	// failingMessage bounds the server's message where it is quoted.
	failingMessage = 200
)

// streak is an endpoint's failures alike since its last success.
type streak struct {
	status   int
	msg      string
	requests int
	prompts  []string // the first failingPrompts distinct ones
	spells   int      // spells of service in which it failed alike
	ejected  int64    // the endpoint's ejections when the last spell was counted
	held     bool     // out of service for failing alike
	hold     time.Duration
	timer    clock.Timer
	route    string // what its health is probed on, for messages
}

// answer is the failure the streak repeats, its message bounded.
func (st *streak) answer() string {
	return fmt.Sprintf("HTTP %d: %s", st.status, cli.Escape(st.msg, failingMessage))
}

// alike tells a failure that may be an endpoint's systematic one: a
// status that blames the server.
func alike(f *Failure) bool {
	return f.Status != 0 && f.Blame && !f.Down && !f.Fatal
}

// FailingError ends a run whose every endpoint fails every request alike.
type FailingError struct {
	Endpoint string // the endpoint whose hold left none
	Status   int
	Message  string // the server's message, bounded
	text     string
}

func (e *FailingError) Error() string { return e.text }

// Attempt judges a failed attempt f on ep of the request of prompt (any
// key telling prompts apart): an endpoint that fails every request alike
// is taken out of service (see failing). Once no endpoint is left that
// may answer (each is held so, or out of the run) it returns the error to
// end the run with; nil before.
func (s *Systematic) Attempt(ep *Endpoint, prompt string, f *Failure) *FailingError {
	if s == nil || f == nil || !alike(f) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.eps[ep]
	if st != nil && st.held {
		return nil // a request sent before it was held
	}
	if st == nil || st.status != f.Status || st.msg != f.Message {
		st = &streak{status: f.Status, msg: f.Message, ejected: -1}
		s.eps[ep] = st
	}
	st.requests++
	if len(st.prompts) < failingPrompts && !slices.Contains(st.prompts, prompt) {
		st.prompts = append(st.prompts, prompt)
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if ep.state != StateReady {
		return nil // out already: counted once its health brings it back
	}
	if n := ep.stats.Ejections.Load(); n != st.ejected {
		st.ejected = n
		st.spells++
	}
	if len(st.prompts) < failingPrompts || st.spells < failingSpells && st.hold == 0 {
		return nil
	}
	st.hold = min(max(2*st.hold, failingHold), failingMaxHold)
	st.held, st.route = true, p.readinessRouteLocked(ep)
	p.setStateLocked(ep, StateDown)
	ep.stats.Ejections.Add(1)
	p.broadcastLocked()
	p.cfg.Logf("%s is out of service for %v: it answers every request alike (%s; %d requests in a row), though its %s brought it back %d times; probed again after that",
		ep.name, st.hold, st.answer(), st.requests, st.route, st.spells-1)
	hold := st.hold
	st.timer = p.clk.AfterFunc(hold, func() {
		s.mu.Lock()
		due := s.eps[ep] == st && st.held
		st.held = false
		s.mu.Unlock()
		if due {
			s.reprobe(ep, fmt.Sprintf("%v out of service for failing every request alike", hold))
		}
	})
	for _, e := range p.eps {
		if o := s.eps[e]; e.wrong == "" && (o == nil || !o.held) {
			return nil
		}
	}
	return s.failingLocked(ep)
}

// failingLocked is the error that ends a run once last, held, left no
// endpoint; it names every endpoint held and its answer.
func (s *Systematic) failingLocked(last *Endpoint) *FailingError {
	var parts []string
	for _, e := range s.p.eps {
		if st := s.eps[e]; st != nil && st.held {
			parts = append(parts, fmt.Sprintf("%s answered %d requests in a row alike (%s), though its %s brought it back %d times",
				e.name, st.requests, st.answer(), st.route, st.spells-1))
		}
	}
	st := s.eps[last]
	return &FailingError{Endpoint: last.name, Status: st.status, Message: cli.Escape(st.msg, failingMessage),
		text: "no endpoint is left: each fails every request alike: " + strings.Join(parts, "; ")}
}

// reprobe brings ep, held out of service, back by its probes.
func (s *Systematic) reprobe(ep *Endpoint, why string) {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil || ep.state != StateDown || ep.wrong != "" {
		return
	}
	p.cfg.Logf("%s: probing %s again after %s", ep.name, p.readinessRouteLocked(ep), why)
	p.probeLocked(ep, 0, p.cfg.ProbeInterval)
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
