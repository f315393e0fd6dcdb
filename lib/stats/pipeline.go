package stats

import (
	"context"
	"sync/atomic"

	"tokenmill/lib/jsonl"
)

// Records are read on one goroutine, parsed by several workers at once,
// and folded into the aggregator in input order on the caller's goroutine
// (jsonl.Parallel), so the report and the order of rejects do not depend
// on the number of workers.

// parsed is a worker's result for one record: its fact, or why it has
// none.
type parsed struct {
	fact fact
	err  *parseError
}

type item = jsonl.Item[parsed]

func parseBatch(ck *checker, b *jsonl.Batch[parsed]) {
	for i := range b.Items {
		it := &b.Items[i]
		if it.Err == nil {
			if it.V.err = parse(it.Data, &it.V.fact); it.V.err == nil {
				ck.check(it.Data, &it.V.fact)
			}
		}
	}
}

// progress counts what has been folded, for the progress display.
type progress struct {
	records atomic.Int64
	bytes   atomic.Int64 // input bytes (decompressed) up to the last record folded
}

// consume streams r's records through parse into visit, which sees every
// record (with its fact) or reject in input order. When ctx ends it folds
// the whole batches already read and returns without waiting for the
// reader, which may be blocked on a quiet stdin; records read into a batch
// not yet sent on are abandoned. r is closed by the time consume returns
// normally.
func consume(ctx context.Context, r *jsonl.Reader, workers int, newChecker func() *checker,
	visit func(it *item) error, prog *progress) error {
	checkers := make([]*checker, max(workers, 1))
	for w := range checkers {
		checkers[w] = newChecker()
	}
	return jsonl.Parallel(ctx, r, len(checkers), func(w int, b *jsonl.Batch[parsed]) {
		parseBatch(checkers[w], b)
	}, func(b *jsonl.Batch[parsed]) error {
		for i := range b.Items {
			if err := visit(&b.Items[i]); err != nil {
				return err
			}
		}
		prog.records.Add(int64(len(b.Items)))
		prog.bytes.Store(b.Read.Bytes)
		return nil
	})
}
