package dedup

import "github.com/zeebo/xxh3"

// exactSet maps each key hash to the raw JSON id of the first record with
// that key. It holds no pointers, so the collector never walks it, and the
// ids live in chunks that are never copied to grow: about 40 bytes a key
// for the index plus the id's own bytes, where a map of strings took a
// 16-byte header and an allocation per id on top, and garbage-collection
// headroom on both.
//
// A run that writes no --dups and saves no --state never reads the ids
// back: its set is bare, the hashes alone, about 25 bytes a key.
type exactSet struct {
	index  map[xxh3.Uint128]uint64 // where the id is: chunk<<40 | offset<<20 | length
	chunks [][]byte
	long   map[xxh3.Uint128]string   // ids too long for a chunk slot
	bare   map[xxh3.Uint128]struct{} // not nil: no ids are kept, and index is nil
}

const (
	chunkBytes = 1 << 20
	maxShortID = 4 << 10 // longer ids (no real dataset has one) go to long
	fieldMask  = 1<<20 - 1
)

func newExactSet(n int) *exactSet {
	return &exactSet{index: make(map[xxh3.Uint128]uint64, n)}
}

// dropIDs makes the (empty) set bare.
func (e *exactSet) dropIDs() {
	e.index, e.bare = nil, map[xxh3.Uint128]struct{}{}
}

func (e *exactSet) len() int {
	if e.bare != nil {
		return len(e.bare)
	}
	return len(e.index)
}

// get returns the id kept for h, and whether h is held. The id aliases
// the set.
func (e *exactSet) get(h xxh3.Uint128) ([]byte, bool) {
	if e.bare != nil {
		_, ok := e.bare[h]
		return nil, ok
	}
	v, ok := e.index[h]
	if !ok {
		return nil, false
	}
	if v == fieldMask {
		return []byte(e.long[h]), true
	}
	c, off, n := v>>40, v>>20&fieldMask, v&fieldMask
	return e.chunks[c][off : off+n], true
}

// put keeps id (copied) for h, which is not held yet.
func (e *exactSet) put(h xxh3.Uint128, id []byte) {
	if e.bare != nil {
		e.bare[h] = struct{}{}
		return
	}
	if len(id) > maxShortID {
		if e.long == nil {
			e.long = map[xxh3.Uint128]string{}
		}
		e.long[h] = string(id)
		e.index[h] = fieldMask
		return
	}
	last := len(e.chunks) - 1
	if last < 0 || len(e.chunks[last])+len(id) > chunkBytes {
		e.chunks = append(e.chunks, make([]byte, 0, chunkBytes))
		last++
	}
	off := len(e.chunks[last])
	e.chunks[last] = append(e.chunks[last], id...)
	e.index[h] = uint64(last)<<40 | uint64(off)<<20 | uint64(len(id))
}

// each calls f with every hash and id, in no particular order.
func (e *exactSet) each(f func(h xxh3.Uint128, id []byte) error) error {
	for h := range e.bare {
		if err := f(h, nil); err != nil {
			return err
		}
	}
	for h := range e.index {
		id, _ := e.get(h)
		if err := f(h, id); err != nil {
			return err
		}
	}
	return nil
}
