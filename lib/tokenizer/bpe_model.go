package tokenizer

import (
	"hash/maphash"
	"math"
	"strings"
	"sync/atomic"

	"tokenmill/lib/minheap"
)

// The BPE model works on raw bytes: tokenizer.json spells the vocabulary
// in GPT-2's byte-to-printable-character alphabet, and the ByteLevel
// pre-tokenizer maps every byte of the text into that alphabet before the
// model sees it. Mapping the vocabulary back to bytes once, at load, gives
// the same tokens without mapping every byte of every text.

// byteChars is GPT-2's alphabet: the character standing for each byte.
var byteChars = func() (t [256]rune) {
	n := rune(0)
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			t[b] = rune(b)
		} else {
			t[b] = 256 + n
			n++
		}
	}
	return t
}()

// charBytes is the inverse of byteChars: -1 for characters outside it.
var charBytes = func() (t [324]int16) {
	for i := range t {
		t[i] = -1
	}
	for b, r := range byteChars {
		t[r] = int16(b)
	}
	return t
}()

// byteLevelDecode maps a token in the alphabet back to its bytes; ok is
// false if it has a character outside the alphabet.
func byteLevelDecode(tok string) (string, bool) {
	var buf []byte
	for _, r := range tok {
		if r >= 324 || charBytes[r] < 0 {
			return "", false
		}
		buf = append(buf, byte(charBytes[r]))
	}
	return string(buf), true
}

const noMerge = math.MaxUint64

// pairTable maps a pair of token ids to rank<<32 | merged id, with open
// addressing (faster than a Go map on this hot path).
type pairTable struct {
	keys  []uint64 // a<<32 | b
	vals  []uint64 // noMerge marks an empty slot
	shift uint
}

func newPairTable(n int) *pairTable {
	size, shift := 1, uint(64)
	for size < 2*n+2 {
		size <<= 1
		shift--
	}
	t := &pairTable{keys: make([]uint64, size), vals: make([]uint64, size), shift: shift}
	for i := range t.vals {
		t.vals[i] = noMerge
	}
	return t
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// put sets the pair's value; a later merge of the same pair wins, as it
// does when the Rust tokenizers collect merges into a map.
func (t *pairTable) put(a, b int32, v uint64) {
	k := pairKey(a, b)
	mask := uint64(len(t.keys) - 1)
	for i := (k * 0x9E3779B97F4A7C15) >> t.shift; ; i = (i + 1) & mask {
		if t.vals[i] == noMerge || t.keys[i] == k {
			t.keys[i], t.vals[i] = k, v
			return
		}
	}
}

func (t *pairTable) get(a, b int32) uint64 {
	k := pairKey(a, b)
	mask := uint64(len(t.keys) - 1)
	for i := (k * 0x9E3779B97F4A7C15) >> t.shift; ; i = (i + 1) & mask {
		if t.keys[i] == k {
			return t.vals[i]
		}
		if t.vals[i] == noMerge {
			return noMerge
		}
	}
}

type bpeModel struct {
	vocab        map[string]int32 // raw bytes -> id, for tokens in the alphabet
	byteIDs      [256]int32       // the one-byte tokens, -1 where absent
	pairs        *pairTable
	unk          int32 // -1: unknown bytes are dropped
	fuseUnk      bool
	ignoreMerges bool
	cache        *wordCache
}

// appendWord appends the ids of one pre-tokenized word (raw bytes).
func (m *bpeModel) appendWord(dst []int, w string, st *encodeState) []int {
	if m.ignoreMerges {
		if id, ok := m.vocab[w]; ok {
			return append(dst, int(id))
		}
	}
	if len(w) == 1 && m.byteIDs[w[0]] >= 0 {
		return append(dst, int(m.byteIDs[w[0]]))
	}
	cacheable := len(w) <= maxCachedWord
	var h uint64
	if cacheable {
		h = maphash.String(m.cache.seed, w)
		if ids, ok := m.cache.get(h, w); ok {
			for _, id := range ids {
				dst = append(dst, int(id))
			}
			return dst
		}
	}
	syms := m.symbols(w, st.syms[:0])
	syms = m.merge(syms, st)
	st.syms = syms
	if cacheable {
		m.cache.put(h, w, syms)
	}
	for _, id := range syms {
		dst = append(dst, int(id))
	}
	return dst
}

// symbols is the word's bytes as one-byte tokens, with unknown bytes
// dropped or made unk (fused if fuse_unk), as BPE::merge_word does.
func (m *bpeModel) symbols(w string, syms []int32) []int32 {
	pendingUnk := false
	for i := 0; i < len(w); i++ {
		id := m.byteIDs[w[i]]
		if id >= 0 {
			if pendingUnk {
				syms = append(syms, m.unk)
				pendingUnk = false
			}
			syms = append(syms, id)
			continue
		}
		if m.unk < 0 {
			continue
		}
		if pendingUnk && !m.fuseUnk {
			syms = append(syms, m.unk)
		}
		pendingUnk = true
	}
	if pendingUnk {
		syms = append(syms, m.unk)
	}
	return syms
}

// shortWord is the length up to which the quadratic merge loop is used.
const shortWord = 64

// merge applies merges lowest rank first, leftmost first among equal ranks.
func (m *bpeModel) merge(syms []int32, st *encodeState) []int32 {
	if len(syms) < 2 {
		return syms
	}
	if len(syms) > shortWord {
		return m.mergeLong(syms, st)
	}
	n := len(syms)
	ranks := st.ranks[:0]
	for i := 0; i < n-1; i++ {
		ranks = append(ranks, m.pairs.get(syms[i], syms[i+1]))
	}
	st.ranks = ranks
	for {
		best, bi := uint64(noMerge), -1
		for i, r := range ranks[:n-1] {
			if r < best {
				best, bi = r, i
			}
		}
		if bi < 0 {
			return syms[:n]
		}
		syms[bi] = int32(uint32(best))
		copy(syms[bi+1:n-1], syms[bi+2:n])
		if bi+2 < n-1 {
			copy(ranks[bi+1:n-2], ranks[bi+2:n-1])
		}
		n--
		if bi > 0 {
			ranks[bi-1] = m.pairs.get(syms[bi-1], syms[bi])
		}
		if bi < n-1 {
			ranks[bi] = m.pairs.get(syms[bi], syms[bi+1])
		}
	}
}

// mergeLong is the same for long words (a megabyte of spaces), in
// O(n log n): a linked list of symbols and a heap of candidate merges
// keyed by rank<<32 | position, like Word::merge_all.
func (m *bpeModel) mergeLong(syms []int32, st *encodeState) []int32 {
	n := len(syms)
	next := make([]int32, n)
	prev := make([]int32, n)
	for i := range n {
		next[i], prev[i] = int32(i+1), int32(i-1)
	}
	next[n-1] = -1
	h := minheap.Heap[uint64](make([]uint64, 0, n))
	for i := 0; i < n-1; i++ {
		if v := m.pairs.get(syms[i], syms[i+1]); v != noMerge {
			h.Push(v>>32<<32 | uint64(i))
		}
	}
	for len(h) > 0 {
		top := h.Pop()
		pos := int32(uint32(top))
		if syms[pos] < 0 || next[pos] < 0 {
			continue
		}
		right := next[pos]
		v := m.pairs.get(syms[pos], syms[right])
		if v == noMerge || v>>32 != top>>32 {
			continue // stale
		}
		syms[pos] = int32(uint32(v))
		syms[right] = -1
		next[pos] = next[right]
		if next[right] >= 0 {
			prev[next[right]] = pos
		}
		if p := prev[pos]; p >= 0 {
			if v := m.pairs.get(syms[p], syms[pos]); v != noMerge {
				h.Push(v>>32<<32 | uint64(p))
			}
		}
		if nx := next[pos]; nx >= 0 {
			if v := m.pairs.get(syms[pos], syms[nx]); v != noMerge {
				h.Push(v>>32<<32 | uint64(pos))
			}
		}
	}
	out := syms[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

// maxCachedWord bounds the words kept in the cache, and with cacheSlots
// the cache's memory (a few MB at most).
const (
	maxCachedWord = 64
	cacheSlots    = 1 << 16
)

// wordCache remembers the ids of recent words: direct-mapped by hash,
// lock-free (each slot is an immutable entry swapped atomically), so
// concurrent encoders share it and it never grows.
type wordCache struct {
	seed  maphash.Seed
	slots []atomic.Pointer[cacheEntry]
}

type cacheEntry struct {
	word string
	ids  []int32
}

func newWordCache() *wordCache {
	return &wordCache{seed: maphash.MakeSeed(), slots: make([]atomic.Pointer[cacheEntry], cacheSlots)}
}

func (c *wordCache) get(h uint64, w string) ([]int32, bool) {
	e := c.slots[h&(cacheSlots-1)].Load()
	if e != nil && e.word == w {
		return e.ids, true
	}
	return nil, false
}

func (c *wordCache) put(h uint64, w string, ids []int32) {
	c.slots[h&(cacheSlots-1)].Store(&cacheEntry{word: strings.Clone(w), ids: append([]int32(nil), ids...)})
}
