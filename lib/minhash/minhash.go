// Package minhash estimates the Jaccard similarity of texts' word n-gram
// sets with MinHash signatures, and finds the texts similar to a new one
// among many with a banded LSH index that spills to disk past a memory
// budget.
//
// A text's words are its runs of non-white-space characters, except that
// each CJK, kana or hangul character is a word of its own (those scripts
// do not separate words by spaces). Its shingles are the runs of Shingle
// consecutive words; a text of fewer words has one shingle of all of them,
// and a text of none one empty shingle. Each shingle is hashed once to 64
// bits; the signature's K = Bands*Rows values are the minima, over the
// shingles, of K permutations h -> a*h+b (mod 2^64, a odd, from the seed),
// keeping the top 32 bits. Two texts agree at a position with probability
// their Jaccard similarity J, so the share of equal positions estimates J
// with a standard error of sqrt(J(1-J)/K).
//
// LSH: two signatures are candidates when all Rows values of any of the
// Bands bands agree, which happens with probability 1-(1-J^Rows)^Bands (the
// S-curve; see Params.CandidateProbability). A candidate is only a match
// when its whole signature is at least Threshold similar.
package minhash

import (
	"errors"
	"fmt"
	"math"
	"unicode"
	"unicode/utf8"

	"github.com/zeebo/xxh3"
)

// Params fix how signatures are made and banded. Two signatures can only
// be compared when made with the same Params.
type Params struct {
	Bands   int    `json:"bands"`
	Rows    int    `json:"rows"`
	Shingle int    `json:"shingle"` // words in a shingle
	Seed    uint64 `json:"seed"`
}

// Defaults: 14 bands of 8 rows put the S-curve's steep part around J=0.8
// (a pair at J=0.8 is a candidate with probability 0.92, at 0.9 with
// 0.9996, at 0.6 with 0.21, at 0.5 with 0.05), and the 112-value
// signature then estimates J near 0.8 within about 0.04.
const (
	DefaultBands   = 14
	DefaultRows    = 8
	DefaultShingle = 5
	DefaultSeed    = 1
)

// Limits on Params, so that a signature stays small and a band key means
// something.
const (
	MaxK       = 1024
	MaxShingle = 64
)

// K is the signature's length.
func (p Params) K() int { return p.Bands * p.Rows }

// Validate says what is wrong with p, if anything.
func (p Params) Validate() error {
	switch {
	case p.Bands < 1 || p.Rows < 1:
		return fmt.Errorf("bands and rows must be at least 1, not %d and %d", p.Bands, p.Rows)
	case p.Bands > MaxK || p.Rows > MaxK || p.K() > MaxK:
		return fmt.Errorf("bands x rows is %d x %d; at most %d values a signature", p.Bands, p.Rows, MaxK)
	case p.Shingle < 1 || p.Shingle > MaxShingle:
		return fmt.Errorf("a shingle has 1 to %d words, not %d", MaxShingle, p.Shingle)
	}
	return nil
}

// CandidateProbability is the chance that two texts of Jaccard similarity
// j share at least one band: 1-(1-j^Rows)^Bands.
func (p Params) CandidateProbability(j float64) float64 {
	return 1 - math.Pow(1-math.Pow(j, float64(p.Rows)), float64(p.Bands))
}

// Signature is a text's K MinHash values.
type Signature []uint32

// Agree counts the positions where a and b (of one length) agree.
func Agree(a, b Signature) int {
	b = b[:len(a)]
	n := 0
	for i, v := range a {
		if v == b[i] {
			n++
		}
	}
	return n
}

// Hasher makes signatures. It keeps scratch space, so it is not safe for
// concurrent use: each goroutine has its own. Making one is cheap.
type Hasher struct {
	p    Params
	a, b []uint64    // the permutations
	ab   [][8]uint64 // the same, four at a time: a[i..i+3], b[i..i+3]
	ring []uint64    // the last Shingle word hashes
	sh   []uint64    // the text's shingle hashes
	pow  uint64      // rollMul^(Shingle-1)
}

// rollMul is the odd multiplier of the rolling polynomial over word hashes.
const rollMul = 0x9E3779B97F4A7C15

// NewHasher returns a Hasher for p, which must be valid.
func NewHasher(p Params) *Hasher {
	if err := p.Validate(); err != nil {
		panic("minhash: " + err.Error())
	}
	h := &Hasher{p: p, a: make([]uint64, p.K()), b: make([]uint64, p.K()),
		ring: make([]uint64, p.Shingle), pow: 1}
	state := p.Seed
	for i := range h.a {
		h.a[i] = splitmix(&state) | 1
		h.b[i] = splitmix(&state)
	}
	for range p.Shingle - 1 {
		h.pow *= rollMul
	}
	for i := 0; i+4 <= len(h.a); i += 4 {
		var ab [8]uint64
		copy(ab[:4], h.a[i:])
		copy(ab[4:], h.b[i:])
		h.ab = append(h.ab, ab)
	}
	return h
}

// Params are the Hasher's.
func (h *Hasher) Params() Params { return h.p }

// splitmix is SplitMix64: the permutations' coefficients from the seed.
func splitmix(state *uint64) uint64 {
	*state += 0x9E3779B97F4A7C15
	z := *state
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// fmix is a 64-bit finalizer: a rolling sum's bits mixed into all of a
// shingle hash's.
func fmix(z uint64) uint64 {
	z = (z ^ (z >> 33)) * 0xFF51AFD7ED558CCD
	z = (z ^ (z >> 33)) * 0xC4CEB9FE1A85EC53
	return z ^ (z >> 33)
}

// asciiSpace[c] is whether the ASCII byte c is Unicode White_Space.
var asciiSpace = func() (t [utf8.RuneSelf]bool) {
	for c := range utf8.RuneSelf {
		t[c] = unicode.IsSpace(rune(c))
	}
	return t
}()

// ownWord reports whether r is a word by itself: a character of a script
// written without spaces between words.
func ownWord(r rune) bool {
	switch {
	case 0x3040 <= r && r <= 0x30FF: // hiragana, katakana
		return true
	case 0x3400 <= r && r <= 0x4DBF, 0x4E00 <= r && r <= 0x9FFF, 0xF900 <= r && r <= 0xFAFF: // CJK ideographs
		return true
	case 0xAC00 <= r && r <= 0xD7AF: // hangul syllables
		return true
	case 0x20000 <= r && r <= 0x3FFFF: // CJK extensions B and later
		return true
	}
	return false
}

// Words calls fn with each word of text, in order.
func Words(text []byte, fn func(word []byte)) {
	for i := 0; i < len(text); {
		c := text[i]
		if c < utf8.RuneSelf {
			if asciiSpace[c] {
				i++
				continue
			}
		} else {
			r, size := utf8.DecodeRune(text[i:])
			if unicode.IsSpace(r) {
				i += size
				continue
			}
			if ownWord(r) {
				fn(text[i : i+size])
				i += size
				continue
			}
		}
		// A word: up to the next space or character that is a word alone.
		j := i + 1
		if c >= utf8.RuneSelf {
			_, size := utf8.DecodeRune(text[i:])
			j = i + size
		}
		for j < len(text) {
			c := text[j]
			if c < utf8.RuneSelf {
				if asciiSpace[c] {
					break
				}
				j++
				continue
			}
			r, size := utf8.DecodeRune(text[j:])
			if unicode.IsSpace(r) || ownWord(r) {
				break
			}
			j += size
		}
		fn(text[i:j])
		i = j
	}
}

// Shingles appends the 64-bit hashes of text's shingles to dst, in order
// (a shingle that recurs is there each time).
func (h *Hasher) Shingles(dst []uint64, text []byte) []uint64 {
	k := len(h.ring)
	n := 0 // words seen
	var roll uint64
	Words(text, func(w []byte) {
		wh := xxh3.Hash(w)
		slot := n % k
		if n >= k {
			roll -= h.ring[slot] * h.pow
		}
		roll = roll*rollMul + wh
		h.ring[slot] = wh
		n++
		if n >= k {
			dst = append(dst, fmix(roll))
		}
	})
	if n < k {
		// Fewer words than a shingle: one shingle of them all (of none,
		// for an empty text), which a longer text never has.
		dst = append(dst, fmix(roll^uint64(n+1)<<56))
	}
	return dst
}

// Sign appends the signature of text to dst[:0] and returns it.
func (h *Hasher) Sign(dst Signature, text []byte) Signature {
	h.sh = h.Shingles(h.sh[:0], text)
	sh := h.sh
	dst = dst[:0]
	// One permutation at a time over all the shingles, which stay in the
	// cache, so the running minimum stays in a register.
	// Four permutations at a time over all the shingles (min4): four
	// independent minima keep the multiplier busy.
	var m [4]uint64
	for _, ab := range h.ab {
		min4(sh, &ab, &m)
		dst = append(dst, uint32(m[0]>>32), uint32(m[1]>>32), uint32(m[2]>>32), uint32(m[3]>>32))
	}
	a, b := h.a, h.b[:len(h.a)]
	for i := 4 * len(h.ab); i < len(a); i++ {
		m := uint64(math.MaxUint64)
		for _, s := range sh {
			m = min(m, a[i]*s+b[i])
		}
		dst = append(dst, uint32(m>>32))
	}
	if cap(h.sh) > keepShingles {
		h.sh = nil // a huge text's buffer is let go
	}
	return dst
}

// keepShingles is the most shingle hashes a Hasher keeps room for between
// texts.
const keepShingles = 1 << 16

// BandKeys appends the key of each of sig's bands to dst: a hash of the
// band's values and its number, so equal values in two bands differ.
func (p Params) BandKeys(dst []uint64, sig Signature) []uint64 {
	for band := range p.Bands {
		h := uint64(band+1) * rollMul
		for _, v := range sig[band*p.Rows : (band+1)*p.Rows] {
			h = (h ^ uint64(v)) * 0xFF51AFD7ED558CCD
			h ^= h >> 32
		}
		dst = append(dst, fmix(h))
	}
	return dst
}

// ErrParams is returned for signatures of the wrong length.
var ErrParams = errors.New("minhash: signature of the wrong length")

// min4Go is min4 in Go, for every platform and as the reference the
// assembly is tested against.
func min4Go(sh []uint64, ab *[8]uint64, out *[4]uint64) {
	a0, a1, a2, a3 := ab[0], ab[1], ab[2], ab[3]
	b0, b1, b2, b3 := ab[4], ab[5], ab[6], ab[7]
	m0, m1, m2, m3 := uint64(math.MaxUint64), uint64(math.MaxUint64), uint64(math.MaxUint64), uint64(math.MaxUint64)
	for _, s := range sh {
		m0 = min(m0, a0*s+b0)
		m1 = min(m1, a1*s+b1)
		m2 = min(m2, a2*s+b2)
		m3 = min(m3, a3*s+b3)
	}
	*out = [4]uint64{m0, m1, m2, m3}
}
