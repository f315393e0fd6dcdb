package dedup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/zeebo/xxh3"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// The work is split so that both cores help while the output stays in
// input order: the reader copies records into batches, workers parse and
// hash the batches in parallel, and one sequencer takes the batches back
// in the order they were read, looks each key up and writes. The first
// occurrence in input order therefore always wins, whatever the timing.
const (
	batchBytes   = 256 << 10
	batchRecords = 1024
)

// item is one input record (or unreadable input) in a batch.
type item struct {
	start, end int // the record in batch.data
	idStart    int // the raw JSON id in batch.ids (--exact)
	idEnd      int
	file       string
	line       int64
	hash       xxh3.Uint128
	err        error  // *KeyError, or the reader's *jsonl.InputError
	long       []byte // a long line, taken from the reader instead of copied
}

type batch struct {
	data  []byte
	ids   []byte
	items []item
	done  chan struct{} // closed when the workers are through
}

// line is the record of it.
func (b *batch) line(it *item) []byte {
	if it.long != nil {
		return it.long
	}
	return b.data[it.start:it.end]
}

// counts is the run's accounting: every record read is kept, removed or
// rejected, exactly once.
type counts struct {
	read, kept, removed, rejected atomic.Int64
}

// sink is what the sequencer does with each decided record.
type sink struct {
	set     *Set
	out     *jsonl.Writer
	dups    *jsonl.Writer // nil: removed records are only counted
	rejects *jsonl.Rejects
	n       *counts
	buf     []byte
}

// run reads in, keys records with workers keyers and decides them in
// order. It returns early, without error, when ctx is cancelled: the
// records read by then are decided and written.
func run(ctx context.Context, in *jsonl.Reader, keyers []*Keyer, s *sink) error {
	keepIDs := s.set.Exact()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	inFlight := 2*len(keyers) + 2
	free := make(chan *batch, inFlight)
	for range inFlight {
		free <- &batch{}
	}
	work := make(chan *batch, inFlight)
	order := make(chan *batch, inFlight)

	var wg sync.WaitGroup
	for _, k := range keyers {
		wg.Go(func() {
			for b := range work {
				keyBatch(k, b, keepIDs)
				close(b.done)
			}
		})
	}
	var readErr error
	wg.Go(func() {
		defer close(work)
		defer close(order)
		readErr = readBatches(ctx, in, free, work, order)
	})

	var seqErr error
	for b := range order {
		<-b.done
		if seqErr == nil {
			if seqErr = s.decide(b); seqErr != nil {
				cancel() // stop the reader; keep draining so it can finish
			}
		}
		free <- b
	}
	wg.Wait()
	return errors.Join(seqErr, readErr)
}

// readBatches fills batches from in until EOF or cancellation.
func readBatches(ctx context.Context, in *jsonl.Reader, free <-chan *batch, work, order chan<- *batch) error {
	var b *batch
	send := func() {
		if b != nil && len(b.items) > 0 {
			work <- b
			order <- b
			b = nil
		}
	}
	defer send()
	for n := 0; ; n++ {
		if n&255 == 0 && ctx.Err() != nil {
			return nil
		}
		rec, err := in.Next()
		if err == io.EOF {
			return nil
		}
		var ie *jsonl.InputError
		if err != nil && !errors.As(err, &ie) {
			return err
		}
		if b == nil {
			select {
			case b = <-free:
			case <-ctx.Done():
				return nil
			}
			b.data, b.ids, b.items, b.done = b.data[:0], b.ids[:0], b.items[:0], make(chan struct{})
		}
		it := item{start: len(b.data), file: rec.File, line: rec.Line, err: err}
		if ie != nil {
			it.file, it.line = ie.File, ie.Line
		}
		if it.long = in.TakeLong(rec); it.long == nil {
			b.data = append(b.data, rec.Data...)
		}
		it.end = len(b.data)
		b.items = append(b.items, it)
		if len(b.data) >= batchBytes || len(b.items) >= batchRecords {
			send()
		}
	}
}

// keyBatch computes the key hash (or the reason there is none) of every
// record of b.
func keyBatch(k *Keyer, b *batch, keepIDs bool) {
	for i := range b.items {
		it := &b.items[i]
		if it.err != nil {
			continue
		}
		line := b.line(it)
		key, err := k.Key(line)
		if err != nil {
			it.err = err
			continue
		}
		it.hash = xxh3.Hash128(key)
		if keepIDs {
			it.idStart = len(b.ids)
			b.ids = append(b.ids, k.ID(line)...)
			it.idEnd = len(b.ids)
		}
	}
}

// decide looks up and writes the records of b in order.
func (s *sink) decide(b *batch) error {
	for i := range b.items {
		it := &b.items[i]
		s.n.read.Add(1)
		rec := jsonl.Record{Data: b.line(it), File: it.file, Line: it.line}
		it.long = nil // written below; the batch is reused without it
		if it.err != nil {
			s.n.rejected.Add(1)
			var ke *KeyError
			var err error
			if errors.As(it.err, &ke) {
				err = s.rejects.Add(rec, ke.Reason, ke.Detail)
			} else {
				err = s.rejects.Input(it.err)
			}
			if err != nil {
				return err
			}
			continue
		}
		seen, first := s.set.Seen(it.hash, b.ids[it.idStart:it.idEnd])
		if !seen {
			s.n.kept.Add(1)
			if err := s.out.Write(rec.Data); err != nil {
				return fmt.Errorf("writing %s: %w", s.out.Path(), err)
			}
			continue
		}
		s.n.removed.Add(1)
		if s.dups == nil {
			continue
		}
		line := rec.Data
		if s.set.Exact() {
			// dup_of is the first record's id as it was written (string or
			// number), or null when it had none or the state did not keep it.
			dupOf := []byte(first)
			if len(dupOf) == 0 {
				dupOf = []byte("null")
			}
			var err error
			if s.buf, err = record.AppendField(s.buf[:0], line, "dup_of", dupOf); err != nil {
				return err
			}
			line = s.buf
		}
		if err := s.dups.Write(line); err != nil {
			return fmt.Errorf("writing %s: %w", s.dups.Path(), err)
		}
	}
	return nil
}
