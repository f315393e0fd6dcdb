package dedup

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/zeebo/xxh3"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// The work is split so that both cores help while the output stays in
// input order (jsonl.Parallel): workers parse and hash batches of records
// in parallel, and one sequencer takes the batches back in the order they
// were read, looks each key up and writes. The first occurrence in input
// order therefore always wins, whatever the timing.

// key is a worker's result for one record: its key hash and, with
// --exact, its raw JSON id, which aliases the record's line. A record
// without a key has its *KeyError in the item's Err instead.
type key struct {
	hash   xxh3.Uint128
	probes probes
	id     []byte
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

// run reads in, keys records with one worker per keyer and decides them
// in order; it closes in. It returns early, without error, when ctx is
// cancelled: the whole batches read by then are decided and written.
func run(ctx context.Context, in *jsonl.Reader, keyers []*Keyer, s *sink) error {
	keepIDs := s.set.keepsIDs()
	return jsonl.Parallel(ctx, in, len(keyers), func(w int, b *jsonl.Batch[key]) {
		keyBatch(keyers[w], b, keepIDs)
	}, s.decide)
}

// keyBatch computes the key hash (or the reason there is none) of every
// record of b.
func keyBatch(k *Keyer, b *jsonl.Batch[key], keepIDs bool) {
	for i := range b.Items {
		it := &b.Items[i]
		if it.Err != nil {
			continue
		}
		kb, err := k.Key(it.Data)
		if err != nil {
			it.Err = err
			continue
		}
		it.V.hash = xxh3.Hash128(kb)
		it.V.probes = probesOf(it.V.hash)
		if keepIDs {
			it.V.id = k.ID(it.Data)
		}
	}
}

// decide looks up and writes the records of b in order.
func (s *sink) decide(b *jsonl.Batch[key]) error {
	for i := range b.Items {
		it := &b.Items[i]
		s.n.read.Add(1)
		rec := it.RawLine
		if it.Err != nil {
			s.n.rejected.Add(1)
			var ke *KeyError
			var err error
			if errors.As(it.Err, &ke) {
				err = s.rejects.Add(rec, ke.Reason, ke.Detail)
			} else {
				err = s.rejects.Input(it.Err)
			}
			if err != nil {
				return err
			}
			continue
		}
		seen, first := s.set.SeenProbes(it.V.hash, &it.V.probes, it.V.id)
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
