package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// TokenIDs asks every endpoint of a run for the token ids its answers
// used, each in its server's own way (openai/tokenids.go says where each
// kind returns them). Each endpoint's kind is found once (Provenance); one
// that returns no ids (Ollama, gateways) is refused at start (Check), or
// stops the run when it joins later. The first answer of each endpoint is
// checked (both ids present, as many as its usage counts): a server that
// fails it lacks the capability, and the run stops naming it; a later
// answer that fails it (a server replaced mid-run) is a failure
// no_token_ids, which a resume asks again.
type TokenIDs struct {
	pool    *Pool
	api     openai.API
	timeout time.Duration
	modelOf func(*Endpoint) string

	mu     sync.Mutex
	routes map[int]*tokenRoute
	byName map[string]*tokenRoute
	asking map[int]*sync.Mutex // one question at a time of each endpoint
	// OK counts the answers with ids, Failed the failures for their lack.
	OK, Failed atomic.Int64
}

// tokenRoute is how one endpoint returns ids.
type tokenRoute struct {
	served  record.ServedBy
	shape   openai.TokenShape
	err     error       // the server returns none: the refusal
	checked atomic.Bool // its first answer passed the check
}

// NewTokenIDs asks p's endpoints for ids of requests of api, each sent
// the model modelOf names, waiting for an answer at most timeout.
func NewTokenIDs(p *Pool, api openai.API, timeout time.Duration, modelOf func(*Endpoint) string) *TokenIDs {
	return &TokenIDs{pool: p, api: api, timeout: timeout, modelOf: modelOf,
		routes: map[int]*tokenRoute{}, byName: map[string]*tokenRoute{}, asking: map[int]*sync.Mutex{}}
}

// route is ep's token route, found at its first use. One request at a
// time asks the server (the others wait for its verdict), outside the
// run-wide lock, so that a slow server holds up no other endpoint's
// requests. A server that could not be asked (its answer did not come) is
// asked again by the next request: nothing is kept of it, and the error
// says why.
func (t *TokenIDs) route(ep *Endpoint) (*tokenRoute, error) {
	t.mu.Lock()
	if rt, ok := t.routes[ep.Index()]; ok {
		t.mu.Unlock()
		return rt, nil
	}
	asking, ok := t.asking[ep.Index()]
	if !ok {
		asking = &sync.Mutex{}
		t.asking[ep.Index()] = asking
	}
	t.mu.Unlock()

	asking.Lock()
	defer asking.Unlock()
	t.mu.Lock()
	rt, ok := t.routes[ep.Index()]
	t.mu.Unlock()
	if ok { // found while this request waited
		return rt, nil
	}
	served, err := t.pool.Provenance(ep, t.modelOf(ep))
	if err != nil {
		return nil, err
	}
	rt = &tokenRoute{served: served}
	rt.shape, rt.err = TokenShape(rt.served, t.api)
	t.mu.Lock()
	t.routes[ep.Index()], t.byName[ep.Name()] = rt, rt
	t.mu.Unlock()
	return rt, nil
}

// ServedBy is the provenance of the endpoint named name (nil: not asked).
func (t *TokenIDs) ServedBy(name string) *record.ServedBy {
	t.mu.Lock()
	defer t.mu.Unlock()
	if rt, ok := t.byName[name]; ok {
		sb := rt.served
		return &sb
	}
	return nil
}

// Check refuses, before anything is written, a fleet whose ready
// endpoints include one that returns no token ids.
func (t *TokenIDs) Check() error {
	var refused []string
	for i, v := range t.pool.View() {
		if v.State != StateReady {
			continue
		}
		ep := t.pool.Endpoints()[i]
		rt, err := t.route(ep)
		switch {
		case err != nil:
			refused = append(refused, err.Error())
		case rt.err != nil:
			refused = append(refused, ep.Name()+": "+rt.err.Error())
		}
	}
	if len(refused) > 0 {
		return errors.New(strings.Join(refused, "; "))
	}
	return nil
}

// Complete makes one attempt of body on ep (as ep is sent it) asking for
// the token ids as ep's server returns them, and checks them. fatal: the
// server lacks the capability, and the run stops naming it.
func (t *TokenIDs) Complete(ep *Endpoint, body []byte) (c openai.Completion, ids *record.TokenIDs, f *Failure, fatal error) {
	rt, err := t.route(ep)
	if err != nil { // asked again by the retry, here or elsewhere
		return c, nil, &Failure{Message: "--token-ids: " + err.Error(), Retriable: true}, nil
	}
	if rt.err != nil {
		return c, nil, &Failure{Message: rt.err.Error()}, fmt.Errorf("%s joined the run: %w", ep.Name(), rt.err)
	}
	path, req, parse, sent, f, fatal := t.request(ep, rt, body)
	if f != nil {
		return c, nil, f, fatal
	}
	var prompt, answer []int32
	var idErr error
	api := t.api
	oneReading := api == openai.APIChat && path == api.Path() && (rt.shape == openai.ShapeSGLang || rt.shape == openai.ShapeVLLM)
	c, f = t.pool.Complete(ep, path, req, t.timeout, func(b []byte) (openai.Completion, error) {
		if oneReading {
			if c, p, a, err := openai.ParseChatTokenIDs(rt.shape, b); err == nil {
				prompt, answer = p, a
				return c, nil
			}
			// Read again in two: a fault of the answer is not one of its ids.
		}
		c, err := parse(b)
		if err == nil {
			prompt, answer, idErr = openai.ParseTokenIDs(rt.shape, api, b)
		}
		return c, err
	})
	if f != nil {
		return c, nil, f, nil
	}
	if sent != nil {
		prompt = sent
	}
	if idErr == nil {
		idErr = openai.CheckTokenIDs(&c, prompt, answer)
	}
	if idErr != nil {
		f, fatal := t.noIDs(ep, rt, idErr)
		return c, nil, f, fatal
	}
	rt.checked.Store(true)
	t.OK.Add(1)
	return c, &record.TokenIDs{PromptTokenIDs: prompt, AnswerTokenIDs: answer, Sampling: openai.SamplingOf(req)}, nil, nil
}

// request is the request for body on ep, whose token route is rt: the
// route, the body, how its answer is read, and the prompt's ids where the
// client tokenized the prompt itself and sends them (nil: the answer
// says).
func (t *TokenIDs) request(ep *Endpoint, rt *tokenRoute, body []byte) (string, []byte, func([]byte) (openai.Completion, error), []int32, *Failure, error) {
	api, s := t.api, rt.shape
	fail := func(f *Failure, fatal error) (string, []byte, func([]byte) (openai.Completion, error), []int32, *Failure, error) {
		return "", nil, nil, nil, f, fatal
	}
	if s == openai.ShapeLlama && bytes.Contains(body, []byte(`"tools":`)) {
		t.Failed.Add(1)
		return fail(&Failure{Message: "llama.cpp returns token ids only on /completion, which does not parse tool calls: a request with tools has none", Reason: record.ReasonNoTokenIDs}, nil)
	}
	var ids []int32
	if s == openai.ShapeLlama || api == openai.APIGenerate || s == openai.ShapeVLLMLogprobs {
		var err error
		if ids, err = t.pool.PromptIDs(context.Background(), ep, s, body); err != nil {
			return fail(t.tokenizeFailed(ep, rt, err))
		}
	}
	var req []byte
	var err error
	path, parse := api.Path(), api.Parse
	switch {
	case s == openai.ShapeLlama:
		path, parse = openai.PathLlamaCompletion, openai.ParseLlamaCompletion
		req, err = openai.LlamaCompletionBody(body, ids)
	case api == openai.APIGenerate:
		req, err = openai.GenerateIDsBody(body, ids)
	default:
		req, err = openai.Merge(body, openai.TokenIDsFields(s, api))
	}
	if err != nil {
		return fail(&Failure{Message: err.Error()}, nil)
	}
	return path, req, parse, ids, nil, nil
}

// tokenizeFailed is the failure of a request whose prompt the server
// could not tokenize.
func (t *TokenIDs) tokenizeFailed(ep *Endpoint, rt *tokenRoute, err error) (*Failure, error) {
	var refused *Failure
	switch {
	case errors.Is(err, ErrNoTokenizer):
		// No ids could be shown to be the prompt's the server would run:
		// never another rendering's.
		return t.noIDs(ep, rt, fmt.Errorf("%w: the server cannot render the chat prompt (%v)", openai.ErrNoTokenIDs, err))
	case errors.As(err, &refused):
		// Refused as the request itself would be (a template that raises,
		// a busy server): the server's status and word.
		f := *refused
		f.Message = err.Error()
		return &f, nil
	}
	return &Failure{Message: err.Error(), Retriable: true, Blame: true}, nil
}

// noIDs is the failure of an answer without whole ids: the endpoint's
// first is fatal (the server lacks the capability), a later one fails
// its request as no_token_ids.
func (t *TokenIDs) noIDs(ep *Endpoint, rt *tokenRoute, err error) (*Failure, error) {
	if !rt.checked.Load() {
		sb := rt.served
		return &Failure{Message: err.Error()}, fmt.Errorf("%s (%s %s) answered its first request without whole token ids: %w", ep.Name(), sb.Server, sb.Version, err)
	}
	t.Failed.Add(1)
	return &Failure{Message: err.Error(), Reason: record.ReasonNoTokenIDs}, nil
}
