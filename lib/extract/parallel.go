package extract

import (
	"context"
	"errors"
	"sync"

	"tokenmill/lib/jsonl"
)

// Conversion in parallel: workers convert whole batches of records, each
// with an Extractor of its own, and the batches are written in input
// order, so the output does not depend on the number of workers. A
// message of a flat OpenAssistant export waits for its tree across
// records, so it, and every record while messages are held, is converted
// in order by one Extractor of the writing side instead.

// converted is a worker's result for one input: its candidates in the
// batch's results, or, in order, that it needs the ordered Extractor.
type converted struct {
	lo, hi  int32
	ordered bool
}

// batchOut holds a batch's candidates, their prompt records back to back.
type batchOut struct {
	cands []Candidate
	buf   []byte
	spans []span // each candidate's record in buf
}

type span struct{ start, end int } // end -1: no record

// outs gives each batch the results it keeps across its reuses.
type outs struct {
	mu sync.Mutex
	of map[*jsonl.Batch[converted]]*batchOut
}

func (o *outs) get(b *jsonl.Batch[converted]) *batchOut {
	o.mu.Lock()
	defer o.mu.Unlock()
	bo := o.of[b]
	if bo == nil {
		bo = &batchOut{}
		o.of[b] = bo
	}
	return bo
}

// errLimit ends the run at --limit.
var errLimit = errors.New("limit reached")

// extractParallel is the record loop with workers converting.
func (cfg *Config) extractParallel(ctx context.Context, in *jsonl.Reader, workers int, opts Options, out *jsonl.Writer, rejects *jsonl.Rejects, n *counts) error {
	xs := make([]*Extractor, workers+1)
	for i := range xs {
		x, err := NewExtractor(opts)
		if err != nil {
			return err
		}
		xs[i] = x
	}
	ordered := xs[workers]
	results := &outs{of: map[*jsonl.Batch[converted]]*batchOut{}}
	work := func(w int, b *jsonl.Batch[converted]) {
		x, bo := xs[w], results.get(b)
		bo.cands, bo.buf, bo.spans = bo.cands[:0], bo.buf[:0], bo.spans[:0]
		for i := range b.Items {
			it := &b.Items[i]
			if it.Err != nil {
				continue
			}
			cands, order := x.convertFree(it.RawLine)
			if order {
				it.V.ordered = true
				continue
			}
			it.V.lo = int32(len(bo.cands))
			for _, cand := range cands {
				sp := span{start: len(bo.buf), end: -1}
				if cand.Out != nil {
					bo.buf = append(bo.buf, cand.Out...)
					sp.end = len(bo.buf)
				}
				cand.Out = nil
				bo.cands = append(bo.cands, cand)
				bo.spans = append(bo.spans, sp)
			}
			it.V.hi = int32(len(bo.cands))
		}
		// buf has stopped growing: the records can point into it.
		for i, sp := range bo.spans {
			if sp.end >= 0 {
				bo.cands[i].Out = bo.buf[sp.start:sp.end:sp.end]
			}
		}
	}
	sequence := func(b *jsonl.Batch[converted]) error {
		bo := results.get(b)
		for i := range b.Items {
			it := &b.Items[i]
			n.read.Add(1)
			if it.Err != nil {
				n.candidates.Add(1)
				if err := rejects.Input(it.Err); err != nil {
					return err
				}
				continue
			}
			var cands []Candidate
			if it.V.ordered || ordered.holding() {
				cands = ordered.ConvertRecord(it.RawLine)
			} else {
				cands = bo.cands[it.V.lo:it.V.hi]
			}
			if err := cfg.take(cands, it.RawLine, out, rejects, n); err != nil {
				return err
			}
			if cfg.Limit > 0 && n.wrote.Load() >= cfg.Limit {
				return errLimit
			}
		}
		return nil
	}
	err := jsonl.Parallel(ctx, in, workers, work, sequence)
	if errors.Is(err, errLimit) {
		return nil
	}
	if err != nil || ctx.Err() != nil {
		return err
	}
	if cfg.Limit > 0 && n.wrote.Load() >= cfg.Limit {
		return nil
	}
	return cfg.take(ordered.Flush(), jsonl.RawLine{}, out, rejects, n)
}
