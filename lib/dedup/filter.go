package dedup

import (
	"math"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/zeebo/xxh3"

	"tokenmill/lib/minhash"
)

// Growth of a scalable bloom filter (Almeida et al., 2007): each new layer
// holds growthFactor times as many keys as the one before, at tighten times
// its false-positive rate. The first layer gets fp*(1-tighten), so the
// rates of all layers, however many there are, add up to less than fp.
const (
	growthFactor = 2
	tighten      = 0.5
)

// layer is one bloom filter of a scalable filter.
type layer struct {
	bf       *bloom.BloomFilter
	capacity uint64  // keys it was sized for
	fp       float64 // its false-positive rate when it holds capacity keys
	count    uint64  // keys added
}

// rate is the layer's false-positive probability now: the chance that all
// k bits of a new key are already set, (1 - e^(-k n / m))^k.
func (l *layer) rate() float64 {
	if l.count == 0 {
		return 0
	}
	k, m := float64(l.bf.K()), float64(l.bf.Cap())
	return math.Pow(-math.Expm1(-k*float64(l.count)/m), k)
}

// Filter is a scalable bloom filter of 128-bit key hashes: a key is looked
// up in every layer and added to the newest, and a new layer is added when
// the newest is full, so the false-positive rate stays below fp at any
// number of keys while memory grows with the keys actually seen.
type Filter struct {
	expected uint64
	fp       float64
	layers   []*layer
	// older is the probability that one of the full layers gives a false
	// positive, 1 - product of (1 - rate) over all but the newest layer,
	// kept as a sum so that tiny rates do not vanish in 1 - (1 - r).
	older float64
}

// either is the probability of either of two independent events.
func either(a, b float64) float64 { return a + b - a*b }

// NewFilter returns an empty filter sized for expected keys at rate fp.
func NewFilter(expected uint64, fp float64) *Filter {
	f := &Filter{expected: expected, fp: fp}
	f.grow()
	return f
}

// layerParams are the capacity and rate of layer i.
func (f *Filter) layerParams(i int) (uint64, float64) {
	c := float64(f.expected) * math.Pow(growthFactor, float64(i))
	return uint64(math.Min(c, math.MaxUint32*64)), f.fp * (1 - tighten) * math.Pow(tighten, float64(i))
}

func (f *Filter) grow() {
	if n := len(f.layers); n > 0 {
		f.older = either(f.older, f.layers[n-1].rate())
	}
	c, fp := f.layerParams(len(f.layers))
	m, k := layerSize(c, fp)
	f.layers = append(f.layers, &layer{bf: bloom.New(m, k), capacity: c, fp: fp})
}

// extraBits is the memory a layer may take beyond the optimum to test
// fewer bits per key. Every probe is a cache miss in a filter of megabytes,
// and the probes are the sequencer's main cost: at the default fp the
// optimal 21 probes need 30.2 bits a key, 12 probes need 33.8 (12% more
// memory, 43% fewer misses).
const extraBits = 0.15

// layerSize is the bits m and probes k for n keys at false-positive rate
// p: the fewest probes whose m, the least with (1 - e^(-k n / m))^k <= p,
// is within extraBits of the optimum (-n ln p / ln²2 bits, log2(1/p)
// probes). (bloom.EstimateParameters rounds k up after choosing m, which
// overshoots p slightly.)
func layerSize(n uint64, p float64) (m, k uint) {
	budget := (1 + extraBits) * -math.Log(p) / (math.Ln2 * math.Ln2)
	kOpt := max(1, math.Ceil(-math.Log2(p)))
	for k := 1.0; ; k++ {
		perKey := k / -math.Log1p(-math.Pow(p, 1/k)) // bits a key
		if perKey <= budget || k >= kOpt {
			return uint(math.Ceil(perKey * float64(n))), uint(k)
		}
	}
}

// Rate is the probability that a key never added is reported present.
func (f *Filter) Rate() float64 {
	return either(f.older, f.layers[len(f.layers)-1].rate())
}

// TestOrAdd reports whether h may have been added, and adds it if not.
func (f *Filter) TestOrAdd(h *[16]byte) bool {
	last := len(f.layers) - 1
	for _, l := range f.layers[:last] {
		if l.bf.Test(h[:]) {
			return true
		}
	}
	if f.layers[last].bf.TestOrAdd(h[:]) {
		return true
	}
	f.added()
	return false
}

// Add adds h (whose bits may all be set already: a false positive that an
// exact set has overruled still counts as a key held).
func (f *Filter) Add(h *[16]byte) {
	f.layers[len(f.layers)-1].bf.Add(h[:])
	f.added()
}

func (f *Filter) added() {
	l := f.layers[len(f.layers)-1]
	l.count++
	if l.count >= l.capacity {
		f.grow()
	}
}

// Keys is the number of keys added.
func (f *Filter) Keys() uint64 {
	var n uint64
	for _, l := range f.layers {
		n += l.count
	}
	return n
}

// Bytes is the memory the filter's bits take.
func (f *Filter) Bytes() uint64 {
	var n uint64
	for _, l := range f.layers {
		n += uint64(l.bf.Cap()+63) / 64 * 8
	}
	return n
}

// Set decides which keys were seen: the filter alone (memory-bounded, with
// a small chance of wrongly calling a new key seen), or the filter plus
// every key's 128-bit hash (exact, memory grows with the keys).
type Set struct {
	Filter *Filter
	// exact maps each key hash to the raw JSON id of the first record with
	// that key ("" when it had none); nil without --exact.
	exact *exactSet

	// ExpectedFalseDrops is the expected number of new keys the filter
	// wrongly called seen (bloom mode only): for every key found new when
	// the filter's false-positive rate was p, p/(1-p) more new keys are
	// expected to have been dropped unseen. Summing p over the new keys
	// alone would miss the dropped ones; the odds p/(1-p) count them.
	ExpectedFalseDrops float64
	// Overruled counts filter false positives the exact set caught.
	Overruled int64
	// Near holds the kept prompts' signatures (--near; nil without).
	Near *minhash.Index
}

// NewSet returns an empty set. With exact, key hashes are kept too, each
// with the id of its first record.
func NewSet(expected uint64, fp float64, exact bool) *Set {
	s := &Set{Filter: NewFilter(expected, fp)}
	if exact {
		s.exact = newExactSet(0)
	}
	return s
}

// Exact reports whether s keeps key hashes.
func (s *Set) Exact() bool { return s.exact != nil }

// DropIDs stops an empty exact set from keeping the ids of first
// records, which only --dups (dup_of) and a saved state read: the hashes
// alone take less than half the memory.
func (s *Set) DropIDs() {
	if s.exact != nil && s.exact.len() == 0 {
		s.exact.dropIDs()
	}
}

// keepsIDs tells an exact set that keeps first records' ids.
func (s *Set) keepsIDs() bool { return s.exact != nil && !s.exact.bare() }

// exactLen is the number of key hashes kept (0 without --exact).
func (s *Set) exactLen() int {
	if s.exact == nil {
		return 0
	}
	return s.exact.len()
}

// SeenProbes is Seen for a key whose filter probes were computed already
// (probesOf, on a worker).
func (s *Set) SeenProbes(h xxh3.Uint128, pr *probes, id []byte) (bool, string) {
	b := h.Bytes()
	if s.exact != nil {
		if first, ok := s.exact.get(h); ok {
			return true, string(first)
		}
		if s.Filter.testOrAddProbes(&b, pr) {
			s.Overruled++
			s.Filter.addProbes(&b, pr)
		}
		s.exact.put(h, id)
		return false, ""
	}
	p := s.Filter.Rate()
	if s.Filter.testOrAddProbes(&b, pr) {
		return true, ""
	}
	s.ExpectedFalseDrops += p / (1 - p)
	return false, ""
}
