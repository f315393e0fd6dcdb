// Package ledger remembers what a run has done: the ids its input has
// shown and the (id, sample) answers already written, in about 13 bytes an
// id. It owns the files that hold them (Files: the output a run writes or
// continues, its errors file, the turn journal beside it, their locks),
// and reads them back: the answers of the output a run continues, the
// refusals of the errors file it leaves.
package ledger

import (
	"runtime"

	"github.com/zeebo/xxh3"
)

// Ledger remembers which ids the input has shown and which (id, sample)
// answers are already done: one entry a prompt for the whole run, so its
// size is what infer's memory grows with (a Go map of 128-bit hashes took
// 34-54 bytes an id, and the garbage collector's slack half as much again).
//
// An id is its 128-bit xxh3 hash: the top 12 bits pick one of 4,096
// open-addressing tables, and a slot keeps 62 bits more, with the id's
// seen bit and its sample 0's done bit in the 2 bits left. Two of ten
// million ids share those 74 bits with odds of about 1 in 400 million. A
// table doubles once 7/8 full, so its slots are 44-88% used: 9-18 bytes
// an id, 13 on average. Samples 1 to 64 take a second word a slot,
// allocated for a table once one of them is done; larger sample numbers
// (rare) go to a map of (id, sample). Arrays of a page or more live
// outside the Go heap (offHeap), unmapped when the ledger is dropped.
type Ledger struct {
	tables [ledgerTables]ledgerTable
	extra  map[extraKey]struct{}
	mem    *offHeap // apart from the Ledger, so its cleanup can have it
}

const (
	ledgerTableBits = 12
	ledgerTables    = 1 << ledgerTableBits

	slotSeen  = 1 << 0 // the input has shown the id
	slotDone0 = 1 << 1 // its sample 0 is done
	slotFlags = slotSeen | slotDone0
	// moreSamples: samples 1..moreSamples are bits of the second word.
	moreSamples = 64
)

// ledgerTable is one open-addressing table (linear probing) of slots:
// keys[i] is 0 when empty, else a fingerprint with the flags in its low
// bits; more[i], once more is allocated, holds samples 1..64.
type ledgerTable struct {
	keys []uint64
	more []uint64
	used int
}

// extraKey is an (id, sample) of the map of large sample numbers.
type extraKey struct {
	id     xxh3.Uint128
	sample int
}

// New is an empty ledger.
func New() *Ledger {
	l := &Ledger{mem: &offHeap{}}
	// Unmapped once l is unreachable: See, Done and MarkDone keep l
	// alive to their end, as a mapped array's address does not.
	runtime.AddCleanup(l, (*offHeap).release, l.mem)
	return l
}

// locate hashes id into its table and fingerprint.
func (l *Ledger) locate(id string) (t *ledgerTable, fp uint64) {
	h := xxh3.HashString128(id)
	fp = h.Lo &^ slotFlags
	if fp == 0 {
		fp = slotFlags + 1 // 0 marks an empty slot
	}
	return &l.tables[h.Hi>>(64-ledgerTableBits)], fp
}

// find returns fp's slot in t, -1 when it has none.
func (t *ledgerTable) find(fp uint64) int {
	if len(t.keys) == 0 {
		return -1
	}
	mask := len(t.keys) - 1
	for i := t.start(fp); ; i = (i + 1) & mask {
		switch k := t.keys[i]; {
		case k == 0:
			return -1
		case k&^slotFlags == fp:
			return i
		}
	}
}

// slot returns fp's slot in t, giving it one if it has none.
func (t *ledgerTable) slot(fp uint64, m *offHeap) int {
	if (t.used+1)*8 > len(t.keys)*7 {
		t.grow(m)
	}
	mask := len(t.keys) - 1
	for i := t.start(fp); ; i = (i + 1) & mask {
		switch k := t.keys[i]; {
		case k == 0:
			t.keys[i] = fp
			t.used++
			return i
		case k&^slotFlags == fp:
			return i
		}
	}
}

// start is where fp's probe begins: the fingerprint's bits are uniform,
// those above the flags serve.
func (t *ledgerTable) start(fp uint64) int {
	return int(fp>>2) & (len(t.keys) - 1)
}

// grow doubles the table (8 slots to begin with) and puts every slot back.
func (t *ledgerTable) grow(m *offHeap) {
	old, oldMore := t.keys, t.more
	t.keys = m.alloc(max(8, 2*len(old)))
	if oldMore != nil {
		t.more = m.alloc(len(t.keys))
	}
	mask := len(t.keys) - 1
	for j, k := range old {
		if k == 0 {
			continue
		}
		i := t.start(k &^ slotFlags)
		for t.keys[i] != 0 {
			i = (i + 1) & mask
		}
		t.keys[i] = k
		if oldMore != nil {
			t.more[i] = oldMore[j]
		}
	}
	m.free(old)
	if oldMore != nil {
		m.free(oldMore)
	}
}

// MarkDone records the answer (id, sample) as done.
func (l *Ledger) MarkDone(id string, sample int) {
	defer runtime.KeepAlive(l)
	switch {
	case sample == 0:
		t, fp := l.locate(id)
		t.keys[t.slot(fp, l.mem)] |= slotDone0
	case sample > 0 && sample <= moreSamples:
		t, fp := l.locate(id)
		i := t.slot(fp, l.mem)
		if t.more == nil {
			t.more = l.mem.alloc(len(t.keys))
		}
		t.more[i] |= 1 << (sample - 1)
	default:
		if l.extra == nil {
			l.extra = make(map[extraKey]struct{})
		}
		l.extra[extraKey{xxh3.HashString128(id), sample}] = struct{}{}
	}
}

// Done reports whether the answer (id, sample) is done.
func (l *Ledger) Done(id string, sample int) bool {
	defer runtime.KeepAlive(l)
	if sample < 0 || sample > moreSamples {
		_, ok := l.extra[extraKey{xxh3.HashString128(id), sample}]
		return ok
	}
	t, fp := l.locate(id)
	i := t.find(fp)
	switch {
	case i < 0:
		return false
	case sample == 0:
		return t.keys[i]&slotDone0 != 0
	default:
		return t.more != nil && t.more[i]&(1<<(sample-1)) != 0
	}
}

// See marks id as read from the input and reports whether it had been
// read before (a duplicate).
func (l *Ledger) See(id string) (dup bool) {
	defer runtime.KeepAlive(l)
	t, fp := l.locate(id)
	i := t.slot(fp, l.mem)
	dup = t.keys[i]&slotSeen != 0
	t.keys[i] |= slotSeen
	return dup
}
