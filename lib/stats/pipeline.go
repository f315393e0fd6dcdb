package stats

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"tokenmill/lib/jsonl"
)

// Records are read on one goroutine, copied into batches, parsed by
// several workers at once, and folded into the aggregator in input order
// on the caller's goroutine, so the report and the order of rejects do not
// depend on the number of workers.

const (
	batchBytes   = 512 << 10 // a batch is sent on when its lines reach this size
	batchRecords = 2048
	keepBuffer   = 8 << 20 // larger buffers (a huge line) are not reused
)

type batch struct {
	readBytes int64 // the reader's byte count when the batch was sent
	data      []byte
	items     []item
	facts     []fact
	errs      []*parseError
	done      chan struct{} // closed when parsed
}

// item is one record of a batch, or an input error in its place.
type item struct {
	start, end int
	file       string
	line       int64
	inputErr   error
}

func (b *batch) record(i int) jsonl.Record {
	it := b.items[i]
	return jsonl.Record{Data: b.data[it.start:it.end], File: it.file, Line: it.line}
}

func (b *batch) parse(ck *checker) {
	b.facts = append(b.facts[:0], make([]fact, len(b.items))...)
	b.errs = append(b.errs[:0], make([]*parseError, len(b.items))...)
	for i, it := range b.items {
		if it.inputErr == nil {
			line := b.data[it.start:it.end]
			if b.errs[i] = parse(line, &b.facts[i]); b.errs[i] == nil {
				ck.check(line, &b.facts[i])
			}
		}
	}
	close(b.done)
}

// progress counts what has been folded, for the progress display.
type progress struct {
	records atomic.Int64
	bytes   atomic.Int64 // input bytes (decompressed) up to the last record folded
}

// consume streams r's records through parse into visit, which sees every
// record (with its fact) or reject in input order. When ctx ends it folds
// the batches already read and returns without waiting for the reader,
// which may be blocked on a quiet stdin; records read into a batch not yet
// sent on are abandoned. r is closed by the time consume returns normally.
func consume(ctx context.Context, r *jsonl.Reader, workers int, newChecker func() *checker,
	visit func(b *batch, i int) error, prog *progress) error {
	workers = max(workers, 1)
	work := make(chan *batch, workers)
	order := make(chan *batch, 2*workers)
	free := make(chan *batch, 3*workers+2)
	readDone := make(chan error, 1)

	go func() {
		err := readBatches(ctx, r, free, func(b *batch) bool {
			select {
			case work <- b:
			case <-ctx.Done():
				return false
			}
			select {
			case order <- b:
				return true
			case <-ctx.Done():
				return false
			}
		})
		close(work)
		close(order)
		readDone <- errors.Join(err, r.Close())
	}()
	var wg sync.WaitGroup
	for range workers {
		ck := newChecker()
		wg.Go(func() {
			for b := range work {
				b.parse(ck)
			}
		})
	}

	var visitErr error
	fold := func(b *batch) {
		<-b.done
		if visitErr == nil {
			for i := range b.items {
				if visitErr = visit(b, i); visitErr != nil {
					break
				}
			}
			prog.records.Add(int64(len(b.items)))
			prog.bytes.Store(b.readBytes)
		}
		if cap(b.data) <= keepBuffer {
			select {
			case free <- b:
			default:
			}
		}
	}
	finished := func() error {
		wg.Wait()
		return errors.Join(visitErr, <-readDone)
	}
	for {
		var b *batch
		var ok bool
		select {
		case b, ok = <-order:
		case <-ctx.Done():
			// Fold what is ready, then stop.
			select {
			case b, ok = <-order:
			default:
				return visitErr
			}
		}
		if !ok {
			return finished()
		}
		fold(b)
	}
}

// readBatches fills batches from r and sends them on until EOF or ctx ends
// (or send refuses a batch). The last batch is sent even when empty, to
// carry the final byte count.
func readBatches(ctx context.Context, r *jsonl.Reader, free chan *batch, send func(*batch) bool) error {
	next := func() *batch {
		select {
		case b := <-free:
			b.data, b.items, b.done = b.data[:0], b.items[:0], make(chan struct{})
			return b
		default:
			return &batch{data: make([]byte, 0, batchBytes+64<<10), done: make(chan struct{})}
		}
	}
	b := next()
	flush := func() bool {
		b.readBytes = r.Stats.Bytes
		ok := send(b)
		b = next()
		return ok
	}
	for {
		if ctx.Err() != nil {
			return nil
		}
		rec, err := r.Next()
		switch {
		case err == io.EOF:
			flush()
			return nil
		case err != nil:
			var ie *jsonl.InputError
			if !errors.As(err, &ie) {
				return err
			}
			b.items = append(b.items, item{file: ie.File, line: ie.Line, inputErr: err})
		default:
			start := len(b.data)
			b.data = append(b.data, rec.Data...)
			b.items = append(b.items, item{start: start, end: len(b.data), file: rec.File, line: rec.Line})
		}
		if (len(b.data) >= batchBytes || len(b.items) >= batchRecords) && !flush() {
			return nil
		}
	}
}
