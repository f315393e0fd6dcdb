package dedup

import (
	"github.com/bits-and-blooms/bloom/v3"
	"github.com/zeebo/xxh3"
)

// The filter's probes, computed apart from the lookup: a worker hashes the
// key into the first five of bloom's locations (which give all the
// others), and the sequencer tests a layer's k bits with loads that do not
// wait for one another. The filter is megabytes, so every probe is a cache
// miss; bloom's TestOrAdd takes them one after another, these overlap.
// The bits are exactly the ones bloom.BloomFilter tests and sets, so a
// filter saved by either is read by both.

// probes are a key's first five unreduced bloom locations.
type probes [5]uint64

// maxProbes bounds the k a layer is tested with here; a layer with more
// probes (a very small --fp) goes through bloom itself.
const maxProbes = 32

// probesOf returns the probes of key hash h.
func probesOf(h xxh3.Uint128) probes {
	b := h.Bytes()
	l := bloom.Locations(b[:], 5)
	return probes{l[0], l[1], l[2], l[3], l[4]}
}

// at is bloom's location i (unreduced): h[i%2] + i*h[2+((i+i%2)%4)/2] of
// its four base hashes h, written with the five first locations: loc0 =
// h0, loc1 = h1+h3, loc2 = h0+2h3, loc3 = h1+3h2, loc4 = h0+4h2.
func (p *probes) at(i uint64) uint64 {
	switch i % 4 {
	case 0:
		return p[0] + i/4*(p[4]-p[0])
	case 1:
		return p[1] + (i-1)/2*(p[2]-p[0])
	case 2:
		return p[0] + i/2*(p[2]-p[0])
	}
	return p[3] + (i-3)/4*(p[4]-p[0])
}

// testProbes reports whether every bit of p is set in l; idx receives the
// bit numbers, for setProbes.
func (l *layer) testProbes(p *probes, idx *[maxProbes]uint64) bool {
	m, k := uint64(l.bf.Cap()), uint64(l.bf.K())
	words := l.bf.BitSet().Words()
	all := uint64(1)
	for i := range k {
		b := p.at(i) % m
		idx[i] = b
		all &= words[b>>6] >> (b & 63)
	}
	return all&1 == 1
}

// setProbes sets the bits testProbes found.
func (l *layer) setProbes(idx *[maxProbes]uint64) {
	words := l.bf.BitSet().Words()
	for _, b := range idx[:l.bf.K()] {
		words[b>>6] |= 1 << (b & 63)
	}
}

// fits tells whether every layer's k is within maxProbes.
func (f *Filter) fits() bool {
	return f.layers[len(f.layers)-1].bf.K() <= maxProbes
}

// testOrAddProbes is TestOrAdd for a key's probes (h is its hash, for
// layers past maxProbes).
func (f *Filter) testOrAddProbes(h *[16]byte, p *probes) bool {
	if !f.fits() {
		return f.TestOrAdd(h)
	}
	var idx [maxProbes]uint64
	last := len(f.layers) - 1
	for _, l := range f.layers[:last] {
		if l.testProbes(p, &idx) {
			return true
		}
	}
	l := f.layers[last]
	if l.testProbes(p, &idx) {
		return true
	}
	l.setProbes(&idx)
	f.added()
	return false
}

// addProbes is Add for a key's probes.
func (f *Filter) addProbes(h *[16]byte, p *probes) {
	l := f.layers[len(f.layers)-1]
	if l.bf.K() > maxProbes {
		f.Add(h)
		return
	}
	var idx [maxProbes]uint64
	l.testProbes(p, &idx)
	l.setProbes(&idx)
	f.added()
}
