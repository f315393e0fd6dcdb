package dedup

import (
	"math/bits"

	"github.com/zeebo/xxh3"
)

// hashIndex maps 128-bit key hashes to a 64-bit value (or to nothing, when
// bare) in 256 open-addressed tables chosen by the hash's top byte. A
// table grows alone, by doubling, so the copy a growth makes is never more
// than a 256th of the index, and slots are the hash (and value) alone:
// 16 or 24 bytes, at least 7/16 full. A Go map took about 45 bytes a key
// for the same.
type hashIndex struct {
	parts [256]indexPart
	n     int
	bare  bool
	// The all-zero hash marks an empty slot, so it is held apart.
	zero  bool
	zeroV uint64
}

type indexPart struct {
	keys []xxh3.Uint128 // a power of two long, or empty
	vals []uint64       // as long as keys; nil when bare
	n    int
}

const minPart = 16

func newHashIndex(n int, bare bool) *hashIndex {
	x := &hashIndex{bare: bare}
	if per := n / len(x.parts); per > 0 {
		size := max(minPart, 1<<bits.Len(uint(per*8/7)))
		for i := range x.parts {
			x.parts[i].alloc(size, bare)
		}
	}
	return x
}

func (p *indexPart) alloc(size int, bare bool) {
	p.keys = make([]xxh3.Uint128, size)
	if !bare {
		p.vals = make([]uint64, size)
	}
}

func (x *hashIndex) len() int { return x.n }

func (x *hashIndex) part(h xxh3.Uint128) *indexPart { return &x.parts[h.Hi>>56] }

// get returns h's value and whether h is held.
func (x *hashIndex) get(h xxh3.Uint128) (uint64, bool) {
	if h == (xxh3.Uint128{}) {
		return x.zeroV, x.zero
	}
	p := x.part(h)
	if len(p.keys) == 0 {
		return 0, false
	}
	mask := uint64(len(p.keys) - 1)
	for i := h.Lo & mask; ; i = (i + 1) & mask {
		switch p.keys[i] {
		case h:
			if p.vals == nil {
				return 0, true
			}
			return p.vals[i], true
		case xxh3.Uint128{}:
			return 0, false
		}
	}
}

// put sets h's value; h may be held already.
func (x *hashIndex) put(h xxh3.Uint128, v uint64) {
	if h == (xxh3.Uint128{}) {
		if !x.zero {
			x.n++
		}
		x.zero, x.zeroV = true, v
		return
	}
	p := x.part(h)
	if (p.n+1)*8 > len(p.keys)*7 {
		p.grow(x.bare)
	}
	if p.insert(h, v) {
		x.n++
	}
}

// insert puts h in its slot and reports whether it was new.
func (p *indexPart) insert(h xxh3.Uint128, v uint64) bool {
	mask := uint64(len(p.keys) - 1)
	for i := h.Lo & mask; ; i = (i + 1) & mask {
		switch p.keys[i] {
		case h:
			if p.vals != nil {
				p.vals[i] = v
			}
			return false
		case xxh3.Uint128{}:
			p.keys[i] = h
			if p.vals != nil {
				p.vals[i] = v
			}
			p.n++
			return true
		}
	}
}

func (p *indexPart) grow(bare bool) {
	old := *p
	p.alloc(max(minPart, 2*len(old.keys)), bare)
	p.n = 0
	for i, h := range old.keys {
		if h != (xxh3.Uint128{}) {
			var v uint64
			if old.vals != nil {
				v = old.vals[i]
			}
			p.insert(h, v)
		}
	}
}

// each calls f with every hash held and its value, in no particular order.
func (x *hashIndex) each(f func(h xxh3.Uint128, v uint64) error) error {
	if x.zero {
		if err := f(xxh3.Uint128{}, x.zeroV); err != nil {
			return err
		}
	}
	for pi := range x.parts {
		p := &x.parts[pi]
		for i, h := range p.keys {
			if h == (xxh3.Uint128{}) {
				continue
			}
			var v uint64
			if p.vals != nil {
				v = p.vals[i]
			}
			if err := f(h, v); err != nil {
				return err
			}
		}
	}
	return nil
}
