package stats

// keySet is a set of 64-bit hashes (the duplicate check's (id, sample)
// keys): open addressing in one flat table, 8 bytes a slot and at most
// 7/8 full, no pointers. A Go map of the same keys took twice the memory
// and was the aggregator's main cost, on the one goroutine that folds
// records in order. The keys are xxh3 hashes, so their low bits index
// the table as they are.
type keySet struct {
	slots []uint64 // a power of two long; 0 is an empty slot
	n     int
	zero  bool // the key 0, held apart
}

// add puts h in the set and reports whether it was there already.
func (s *keySet) add(h uint64) bool {
	if h == 0 {
		had := s.zero
		s.zero = true
		return had
	}
	if (s.n+1)*8 > len(s.slots)*7 {
		s.grow()
	}
	mask := uint64(len(s.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch s.slots[i] {
		case h:
			return true
		case 0:
			s.slots[i] = h
			s.n++
			return false
		}
	}
}

func (s *keySet) grow() {
	old := s.slots
	s.slots = make([]uint64, max(1024, 2*len(old)))
	mask := uint64(len(s.slots) - 1)
	for _, h := range old {
		if h == 0 {
			continue
		}
		i := h & mask
		for s.slots[i] != 0 {
			i = (i + 1) & mask
		}
		s.slots[i] = h
	}
}
