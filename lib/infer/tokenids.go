package infer

import (
	"fmt"

	"tokenmill/lib/cli"
	"tokenmill/lib/fleet"
	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// --token-ids: every answer records the ids its server used, asked of
// each server in its own way by fleet.TokenIDs, which refuses a fleet
// that returns none before anything is written and stops the run when
// one joins later.

// startTokenIDs refuses, before anything is written, a fleet whose ready
// endpoints include one that returns no token ids.
func (r *runner) startTokenIDs() error {
	if !r.cfg.TokenIDs {
		return nil
	}
	r.tok = fleet.NewTokenIDs(r.pool, r.cfg.API, r.cfg.RequestTimeout, r.modelOf)
	if err := r.tok.Check(); err != nil {
		return cli.Usagef("--token-ids: %v; leave those endpoints out, or run without --token-ids", err)
	}
	return nil
}

// complete makes one attempt of j on ep: as it is, or asking for the
// token ids as ep's server returns them, kept in j.tok.
func (r *runner) complete(ep *fleet.Endpoint, j *job) (openai.Completion, *fleet.Failure) {
	api := r.cfg.API
	body := r.pool.BodyFor(ep, j.body) // the model ep serves, where the fleet's names differ
	if r.tok == nil {
		return r.pool.Complete(ep, api.Path(), body, r.cfg.RequestTimeout, api.Parse)
	}
	c, ids, f, fatal := r.tok.Complete(ep, body)
	if fatal != nil {
		r.fatal(cli.Usagef("--token-ids: %v", fatal))
	}
	j.tok = ids
	return c, f
}

// servedBy is the provenance of the endpoint named name in this run (nil
// without --token-ids).
func (r *runner) servedBy(name string) *record.ServedBy {
	if r.tok == nil {
		return nil
	}
	return r.tok.ServedBy(name)
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
		cli.Thousands(r.tok.OK.Load()), cli.Thousands(r.tok.Failed.Load()), record.ReasonNoTokenIDs)}
}
