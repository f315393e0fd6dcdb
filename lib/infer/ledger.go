package infer

import (
	"github.com/zeebo/xxh3"
)

// ledger remembers, in bounded memory per prompt, which ids the input has
// shown and which (id, sample) answers are already done. Ids are kept as
// 128-bit hashes, not strings: 24 bytes or so a prompt whatever the id's
// length, and wide enough that a collision among a billion ids is not a
// practical concern.
//
// Samples 0..62 of an id are bits of one word beside its seen bit; larger
// sample numbers (rare) go to a second set keyed by (id, sample).
type ledger struct {
	ids   map[xxh3.Uint128]uint64
	extra map[extraKey]struct{}
	// arms, when set, sees the arm of every answer read back from -o.
	arms *armCheck
}

// extraKey is an (id, sample) of the second set.
type extraKey struct {
	id     xxh3.Uint128
	sample int
}

const (
	seenBit     = uint64(1) << 63
	wordSamples = 63
)

func newLedger() *ledger {
	return &ledger{ids: make(map[xxh3.Uint128]uint64)}
}

func idKey(id string) xxh3.Uint128 { return xxh3.HashString128(id) }

// markDone records the answer (id, sample) as done.
func (l *ledger) markDone(id string, sample int) {
	if sample >= 0 && sample < wordSamples {
		k := idKey(id)
		l.ids[k] |= 1 << uint(sample)
		return
	}
	if l.extra == nil {
		l.extra = make(map[extraKey]struct{})
	}
	l.extra[extraKey{idKey(id), sample}] = struct{}{}
}

// done reports whether the answer (id, sample) is done.
func (l *ledger) done(id string, sample int) bool {
	if sample >= 0 && sample < wordSamples {
		return l.ids[idKey(id)]&(1<<uint(sample)) != 0
	}
	_, ok := l.extra[extraKey{idKey(id), sample}]
	return ok
}

// see marks id as read from the input and reports whether it had been
// read before (a duplicate).
func (l *ledger) see(id string) (dup bool) {
	k := idKey(id)
	v := l.ids[k]
	l.ids[k] = v | seenBit
	return v&seenBit != 0
}
