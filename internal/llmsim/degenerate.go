package llmsim

// Degenerate answers, the ways real models fail a generation job while
// the server is fine (Config.LoopRate and the others). At most one hits
// an answer, drawn from the flight's sample hash (the prompt, and the
// request's seed when it samples), the choice and the seed; answers with
// text still start with the prompt digest.

type degeneracy int

const (
	degenNone     degeneracy = iota
	degenLoop                // a span repeats until the length limit: finish "length"
	degenEmpty               // no text at all: finish "stop"
	degenThink               // <think> and </think> left in the content
	degenTruncate            // cut early: finish "length" before any limit
)

// degenerate draws choice c's degeneracy and shapes its answer; limit is
// the most tokens it may have.
func (e *Endpoint) degenerate(f *flight, c *choiceState, limit int) {
	cfg := &e.f.cfg
	if cfg.LoopRate+cfg.EmptyRate+cfg.ThinkResidueRate+cfg.TruncateRate <= 0 || c.calls != nil {
		return
	}
	h := mix64(f.sample ^ mix64(cfg.Seed+0x2545f4914f6cdd1d) ^ uint64(c.index+1)*0x9e3779b97f4a7c15)
	u := unitFloat(h) - 1e-300
	kind := degenNone
	for _, r := range []struct {
		k degeneracy
		p float64
	}{{degenLoop, cfg.LoopRate}, {degenEmpty, cfg.EmptyRate}, {degenThink, cfg.ThinkResidueRate}, {degenTruncate, cfg.TruncateRate}} {
		if u < r.p {
			kind = r.k
			break
		}
		u -= r.p
	}
	r := mix64(h)
	switch kind {
	case degenLoop:
		c.span = 3 + int(r%6)
		c.loopFrom = c.span + 1 + int((r>>8)%24)
		if limit <= c.loopFrom+c.span {
			return // too short to fall into a loop
		}
		c.Target, c.End = limit, finishLength
	case degenEmpty:
		c.Target, c.End, c.reasoning, c.inline = 1, finishStop, 0, 0
	case degenThink:
		n := c.Target - c.reasoning - c.inline
		if n < 4 {
			return
		}
		c.thinkOpen = 1 + int(r%uint64(n/2))
		c.thinkClose = c.thinkOpen + 1 + int((r>>16)%uint64(n-c.thinkOpen-1))
	case degenTruncate:
		if c.Target < 2 {
			return
		}
		c.Target, c.End = 1+int(r%uint64(c.Target-1)), finishLength
	}
	c.degen = kind
}

// appendDegenerate appends content tokens [from, to) of a degenerate answer.
func (c *choiceState) appendDegenerate(dst []byte, from, to int) []byte {
	for k := from; k < to; k++ {
		switch {
		case c.degen == degenEmpty:
			return dst
		case c.degen == degenLoop && k >= c.loopFrom:
			dst = appendToken(dst, c.f.digest, c.words, c.loopFrom-c.span+(k-c.loopFrom)%c.span)
		case c.degen == degenThink && k == c.thinkOpen:
			dst = append(dst, " <think>"...)
		case c.degen == degenThink && k == c.thinkClose:
			dst = append(dst, " </think>"...)
		default:
			dst = appendToken(dst, c.f.digest, c.words, k)
		}
	}
	return dst
}
