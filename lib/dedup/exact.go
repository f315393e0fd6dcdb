package dedup

import "github.com/zeebo/xxh3"

// exactSet maps each key hash to the raw JSON id of the first record with
// that key. It holds no pointers, so the collector never walks it: the
// hashes in a hashIndex, the ids in chunks that are never copied to grow.
// A run that writes no --dups and saves no --state never reads the ids
// back: its set is bare, the hashes alone.
type exactSet struct {
	index  *hashIndex // the id's place: chunk<<40 | offset<<20 | length
	chunks [][]byte
	long   map[xxh3.Uint128]string // ids too long for a chunk slot
}

const (
	chunkBytes = 1 << 20
	maxShortID = 4 << 10 // longer ids (no real dataset has one) go to long
	fieldMask  = 1<<20 - 1
)

func newExactSet(n int) *exactSet {
	return &exactSet{index: newHashIndex(n, false)}
}

// dropIDs makes the (empty) set bare.
func (e *exactSet) dropIDs() { e.index = newHashIndex(0, true) }

func (e *exactSet) bare() bool { return e.index.bare }

func (e *exactSet) len() int { return e.index.len() }

// get returns the id kept for h, and whether h is held. The id aliases
// the set.
func (e *exactSet) get(h xxh3.Uint128) ([]byte, bool) {
	v, ok := e.index.get(h)
	if !ok || e.bare() {
		return nil, ok
	}
	if v == fieldMask {
		return []byte(e.long[h]), true
	}
	c, off, n := v>>40, v>>20&fieldMask, v&fieldMask
	return e.chunks[c][off : off+n], true
}

// put keeps id (copied) for h, which is not held yet.
func (e *exactSet) put(h xxh3.Uint128, id []byte) {
	if e.bare() {
		e.index.put(h, 0)
		return
	}
	if len(id) > maxShortID {
		if e.long == nil {
			e.long = map[xxh3.Uint128]string{}
		}
		e.long[h] = string(id)
		e.index.put(h, fieldMask)
		return
	}
	last := len(e.chunks) - 1
	if last < 0 || len(e.chunks[last])+len(id) > chunkBytes {
		e.chunks = append(e.chunks, make([]byte, 0, chunkBytes))
		last++
	}
	off := len(e.chunks[last])
	e.chunks[last] = append(e.chunks[last], id...)
	e.index.put(h, uint64(last)<<40|uint64(off)<<20|uint64(len(id)))
}

// each calls f with every hash and id, in no particular order.
func (e *exactSet) each(f func(h xxh3.Uint128, id []byte) error) error {
	return e.index.each(func(h xxh3.Uint128, _ uint64) error {
		id, _ := e.get(h)
		return f(h, id)
	})
}
