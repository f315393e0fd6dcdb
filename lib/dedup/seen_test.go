package dedup

import "github.com/zeebo/xxh3"

// The one-key lookups the filter's tests use; a run computes the probes on
// its workers and calls SeenProbes.

// Test reports whether h may have been added.
func (f *Filter) Test(h *[16]byte) bool {
	for _, l := range f.layers {
		if l.bf.Test(h[:]) {
			return true
		}
	}
	return false
}

// Seen looks up key hash h and records it. It reports whether a record
// with the same key came before, and then (exact mode, ids kept) that
// record's raw JSON id. id is this record's raw JSON id, kept if it is new.
func (s *Set) Seen(h xxh3.Uint128, id []byte) (bool, string) {
	p := probesOf(h)
	return s.SeenProbes(h, &p, id)
}
