package dedup

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/zeebo/xxh3"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/minhash"
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
	id     []byte
	probes probes
	sig    minhash.Signature // --near
	contam *Contamination    // --against: the benchmark text it shares, nil if clean
}

// counts is the run's accounting: every record read is kept, removed,
// contaminated or rejected, exactly once.
type counts struct {
	read, kept, removed, near, rejected, contaminated atomic.Int64
}

// sink is what the sequencer does with each decided record.
type sink struct {
	set     *Set
	out     *jsonl.Writer
	dups    *jsonl.Writer // nil: removed records are only counted
	rejects *jsonl.Rejects
	n       *counts
	buf     []byte
	// --against: one checker per worker (nil without it), and the
	// rejects file the contaminated prompts go to (nil: counted only).
	checkers   []*againstChecker
	rejectsOut *jsonl.Writer
	logf       func(format string, args ...any)

	// --near: the index of kept prompts, the threshold, and where each
	// near-duplicate's pair goes (nil: nowhere).
	near      *minhash.Index
	threshold float64
	clusters  *jsonl.Writer
	line      []byte
}

// worker is one worker's own tools: its Keyer and, with --near, its
// Hasher.
type worker struct {
	keyer  *Keyer
	hasher *minhash.Hasher
}

// run reads in, keys records with one worker per keyer and decides them
// in order; it closes in. It returns early, without error, when ctx is
// cancelled: the whole batches read by then are decided and written.
func run(ctx context.Context, in *jsonl.Reader, workers []worker, s *sink) error {
	keepIDs := s.set.keepsIDs() || s.near != nil
	return jsonl.Parallel(ctx, in, len(workers), func(w int, b *jsonl.Batch[key]) {
		keyBatch(workers[w], b, keepIDs)
		if s.checkers != nil {
			againstBatch(s.checkers[w], b)
		}
	}, s.decide)
}

// keyBatch computes the key hash (or the reason there is none) of every
// record of b, and with --near its signature.
func keyBatch(w worker, b *jsonl.Batch[key], keepIDs bool) {
	k := w.keyer
	var sigs minhash.Signature // one allocation for the batch's signatures
	if w.hasher != nil {
		sigs = make(minhash.Signature, len(b.Items)*w.hasher.Params().K())
	}
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
		if w.hasher != nil {
			K := w.hasher.Params().K()
			it.V.sig = w.hasher.Sign(sigs[i*K:i*K:(i+1)*K], k.Text())
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
		if it.V.contam != nil {
			// Never added to the set: a later copy is contaminated too.
			if err := s.contaminated(rec, it.V.contam); err != nil {
				return err
			}
			continue
		}
		seen, first := s.set.SeenProbes(it.V.hash, &it.V.probes, it.V.id)
		if !seen && s.near != nil {
			near, err := s.nearCopy(it)
			if err != nil {
				return err
			}
			if near {
				continue
			}
		}
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

// nearCopy decides a record whose key is new by its signature: it is a
// near-duplicate (counted, written to --dups and --clusters) when a kept
// prompt is at least the threshold similar, else it is kept in the index.
func (s *sink) nearCopy(it *jsonl.Item[key]) (bool, error) {
	m, ok, err := s.near.Query(it.V.sig, s.threshold)
	if err != nil {
		return false, err
	}
	if !ok {
		_, err := s.near.Insert(it.V.sig, it.V.id)
		return false, err
	}
	s.n.near.Add(1)
	keptID := jsonID(m.ID)
	sim := strconv.AppendFloat(nil, m.Similarity, 'f', 4, 64)
	if s.clusters != nil {
		s.line = append(s.line[:0], `{"id":`...)
		s.line = append(s.line, jsonID(it.V.id)...)
		s.line = append(s.line, `,"dup_of":`...)
		s.line = append(s.line, keptID...)
		s.line = append(s.line, `,"similarity":`...)
		s.line = append(append(s.line, sim...), '}')
		if err := s.clusters.Write(s.line); err != nil {
			return true, fmt.Errorf("writing %s: %w", s.clusters.Path(), err)
		}
	}
	if s.dups == nil {
		return true, nil
	}
	line := it.RawLine.Data
	for _, f := range [...]struct {
		name  string
		value []byte
	}{{"dup_of", keptID}, {"dup_reason", []byte(`"` + ReasonNearDuplicate + `"`)}, {"similarity", sim}} {
		if s.buf, err = record.AppendField(s.buf[:0], line, f.name, f.value); err != nil {
			return true, err
		}
		line = append(s.line[:0], s.buf...)
		s.line = line
	}
	if err := s.dups.Write(line); err != nil {
		return true, fmt.Errorf("writing %s: %w", s.dups.Path(), err)
	}
	return true, nil
}

// ReasonNearDuplicate is the dup_reason of a record --near removed.
const ReasonNearDuplicate = "near_duplicate"

// jsonID is a raw JSON id as written, or null when there is none.
func jsonID(id []byte) []byte {
	if len(id) == 0 {
		return []byte("null")
	}
	return id
}
