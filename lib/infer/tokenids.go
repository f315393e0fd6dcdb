package infer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"tokenmill/lib/cli"
	"tokenmill/lib/fleet"
	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// --token-ids: every answer records the ids its server used, asked of
// each server in its own way (openai/tokenids.go says where each kind
// returns them). Each endpoint's kind is found once (fleet.Provenance);
// one that returns no ids (Ollama, gateways) is refused at start, or
// stops the run when it joins later. The first answer of each endpoint is
// checked (both ids present, as many as its usage counts): a server that
// fails it lacks the capability, and the run stops naming it; a later
// answer that fails it (a server replaced mid-run) is an error record,
// no_token_ids, which --resume asks again.

// tokenIDs is the run's view of its endpoints' token routes.
type tokenIDs struct {
	mu     sync.Mutex
	routes map[int]*tokenRoute
	byName map[string]*tokenRoute
	asking map[int]*sync.Mutex // one question at a time of each endpoint
	// answers with ids, and failures for their lack
	ok, failed atomic.Int64
}

// tokenRoute is how one endpoint returns ids.
type tokenRoute struct {
	served  record.ServedBy
	shape   openai.TokenShape
	err     error       // the server returns none: the refusal
	checked atomic.Bool // its first answer passed the check
}

// tokenRoute is ep's token route, found at its first use. One request at
// a time asks the server (the others wait for its verdict), outside the
// run-wide lock, so that a slow server holds up no other endpoint's
// requests. A server that could not be asked (its answer did not come) is
// asked again by the next request: nothing is kept of it, and the error
// says why.
func (r *runner) tokenRoute(ep *fleet.Endpoint) (*tokenRoute, error) {
	t := &r.tok
	t.mu.Lock()
	if rt, ok := t.routes[ep.Index()]; ok {
		t.mu.Unlock()
		return rt, nil
	}
	if t.asking == nil {
		t.routes, t.byName, t.asking = map[int]*tokenRoute{}, map[string]*tokenRoute{}, map[int]*sync.Mutex{}
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
	served, err := r.pool.Provenance(ep, r.modelOf(ep))
	if err != nil {
		return nil, err
	}
	rt = &tokenRoute{served: served}
	rt.shape, rt.err = fleet.TokenShape(rt.served, r.cfg.API)
	t.mu.Lock()
	t.routes[ep.Index()], t.byName[ep.Name()] = rt, rt
	t.mu.Unlock()
	return rt, nil
}

// servedBy is the provenance of the endpoint named name in this run.
func (r *runner) servedBy(name string) *record.ServedBy {
	r.tok.mu.Lock()
	defer r.tok.mu.Unlock()
	if rt, ok := r.tok.byName[name]; ok {
		sb := rt.served
		return &sb
	}
	return nil
}

// startTokenIDs refuses, before anything is written, a fleet whose ready
// endpoints include one that returns no token ids.
func (r *runner) startTokenIDs() error {
	if !r.cfg.TokenIDs {
		return nil
	}
	var refused []string
	for i, v := range r.pool.View() {
		if v.State != fleet.StateReady {
			continue
		}
		ep := r.pool.Endpoints()[i]
		rt, err := r.tokenRoute(ep)
		switch {
		case err != nil:
			refused = append(refused, err.Error())
		case rt.err != nil:
			refused = append(refused, ep.Name()+": "+rt.err.Error())
		}
	}
	if len(refused) > 0 {
		return cli.Usagef("--token-ids: %s; leave those endpoints out, or run without --token-ids", strings.Join(refused, "; "))
	}
	return nil
}

// complete makes one attempt of j on ep: as it is, or asking for the
// token ids as ep's server returns them, which it then checks and keeps
// in j.tok.
func (r *runner) complete(ep *fleet.Endpoint, j *job) (openai.Completion, *fleet.Failure) {
	api := r.cfg.API
	body := r.pool.BodyFor(ep, j.body) // the model ep serves, where the fleet's names differ
	if !r.cfg.TokenIDs {
		return r.pool.Complete(ep, api.Path(), body, r.cfg.RequestTimeout, api.Parse)
	}
	j.tok = nil
	rt, err := r.tokenRoute(ep)
	if err != nil { // asked again by the retry, here or elsewhere
		return openai.Completion{}, &fleet.Failure{Message: "--token-ids: " + err.Error(), Retriable: true}
	}
	if rt.err != nil {
		r.fatal(cli.Usagef("--token-ids: %s joined the run: %v", ep.Name(), rt.err))
		return openai.Completion{}, &fleet.Failure{Message: rt.err.Error()}
	}
	path, body, parse, sent, f := r.tokenRequest(ep, rt, j, body)
	if f != nil {
		return openai.Completion{}, f
	}
	var prompt, answer []int32
	var idErr error
	oneReading := api == openai.APIChat && path == api.Path() && (rt.shape == openai.ShapeSGLang || rt.shape == openai.ShapeVLLM)
	c, f := r.pool.Complete(ep, path, body, r.cfg.RequestTimeout, func(b []byte) (openai.Completion, error) {
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
		return c, f
	}
	if sent != nil {
		prompt = sent
	}
	if idErr == nil {
		idErr = openai.CheckTokenIDs(&c, prompt, answer)
	}
	if idErr != nil {
		return c, r.noTokenIDs(ep, rt, j, idErr)
	}
	rt.checked.Store(true)
	r.tok.ok.Add(1)
	j.tok = &record.TokenIDs{PromptTokenIDs: prompt, AnswerTokenIDs: answer, Sampling: openai.SamplingOf(body)}
	return c, nil
}

// tokenRequest is the request for j (as ep is sent it: sent) on ep, whose
// token route is rt: the route, the body, how its answer is read, and the
// prompt's ids where infer tokenized the prompt itself and sends them
// (nil: the answer says).
func (r *runner) tokenRequest(ep *fleet.Endpoint, rt *tokenRoute, j *job, sent []byte) (string, []byte, func([]byte) (openai.Completion, error), []int32, *fleet.Failure) {
	api, s := r.cfg.API, rt.shape
	path, parse := api.Path(), api.Parse
	tokenize := func() ([]int32, *fleet.Failure) {
		ids, err := r.pool.PromptIDs(context.Background(), ep, s, sent)
		var refused *fleet.Failure
		switch {
		case err == nil:
			return ids, nil
		case errors.Is(err, fleet.ErrNoTokenizer):
			// No ids could be shown to be the prompt's the server would
			// run: never another rendering's.
			return nil, r.noTokenIDs(ep, rt, j, fmt.Errorf("%w: the server cannot render the chat prompt (%v)", openai.ErrNoTokenIDs, err))
		case errors.As(err, &refused):
			// Refused as the request itself would be (a template that
			// raises, a busy server): the server's status and word.
			f := *refused
			f.Message = err.Error()
			return nil, &f
		}
		return nil, &fleet.Failure{Message: err.Error(), Retriable: true, Blame: true}
	}
	switch {
	case s == openai.ShapeLlama:
		if bytes.Contains(sent, []byte(`"tools":`)) {
			r.tok.failed.Add(1)
			j.reason = record.ReasonNoTokenIDs
			return "", nil, nil, nil, &fleet.Failure{Message: "llama.cpp returns token ids only on /completion, which does not parse tool calls: a request with tools has none"}
		}
		ids, f := tokenize()
		if f != nil {
			return "", nil, nil, nil, f
		}
		body, err := openai.LlamaCompletionBody(sent, ids)
		if err != nil {
			return "", nil, nil, nil, &fleet.Failure{Message: err.Error()}
		}
		return openai.PathLlamaCompletion, body, openai.ParseLlamaCompletion, ids, nil
	case api == openai.APIGenerate || s == openai.ShapeVLLMLogprobs:
		ids, f := tokenize()
		if f != nil {
			return "", nil, nil, nil, f
		}
		var body []byte
		var err error
		if api == openai.APIGenerate {
			body, err = openai.GenerateIDsBody(sent, ids)
		} else {
			body, err = openai.Merge(sent, openai.TokenIDsFields(s, api))
		}
		if err != nil {
			return "", nil, nil, nil, &fleet.Failure{Message: err.Error()}
		}
		return path, body, parse, ids, nil
	}
	body, err := openai.Merge(sent, openai.TokenIDsFields(s, api))
	if err != nil {
		return "", nil, nil, nil, &fleet.Failure{Message: err.Error()}
	}
	return path, body, parse, nil, nil
}

// noTokenIDs files an answer without whole ids: the endpoint's first
// stops the run (the server lacks the capability), a later one fails its
// request as no_token_ids.
func (r *runner) noTokenIDs(ep *fleet.Endpoint, rt *tokenRoute, j *job, err error) *fleet.Failure {
	if !rt.checked.Load() {
		sb := rt.served
		r.fatal(cli.Usagef("--token-ids: %s (%s %s) answered its first request without whole token ids: %v", ep.Name(), sb.Server, sb.Version, err))
		return &fleet.Failure{Message: err.Error()}
	}
	r.tok.failed.Add(1)
	j.reason = record.ReasonNoTokenIDs
	return &fleet.Failure{Message: err.Error()}
}

// answerTokenIDs are what a single answer's output carries: its ids and
// its server.
func (r *runner) answerTokenIDs(ep *fleet.Endpoint, j *job) record.TokenIDs {
	if j.tok == nil {
		return record.TokenIDs{}
	}
	t := *j.tok
	t.ServedBy = r.servedBy(ep.Name())
	return t
}

// turnTokenIDs are what a regenerated turn carries: its ids, and its
// server when it is not the conversation's first turn's.
func (r *runner) turnTokenIDs(ep *fleet.Endpoint, j *job) record.TokenIDs {
	if j.tok == nil {
		return record.TokenIDs{}
	}
	t := *j.tok
	if turns := j.conv.Turns(); len(turns) > 0 {
		if first, this := r.servedBy(turns[0].Endpoint), r.servedBy(ep.Name()); first == nil || this == nil || *first != *this {
			t.ServedBy = this
		}
	}
	return t
}

// tokenSummary is the summary's line on token ids.
func (r *runner) tokenSummary() []string {
	if !r.cfg.TokenIDs {
		return nil
	}
	return []string{fmt.Sprintf("token ids: %s answers with them, %s failed without them (%s)",
		cli.Thousands(r.tok.ok.Load()), cli.Thousands(r.tok.failed.Load()), record.ReasonNoTokenIDs)}
}
