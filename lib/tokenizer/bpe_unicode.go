package tokenizer

import (
	"sort"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Unicode general categories as Oniguruma (the regex engine of the Rust
// tokenizers, at Unicode 16.0) sees them. Go's unicode package is at 15.0,
// so its tables are patched with unicode16 (bpe_unicode16.go).
const (
	catCn uint8 = iota // unassigned
	catLu
	catLl
	catLt
	catLm
	catLo
	catMn
	catMc
	catMe
	catNd
	catNl
	catNo
	catPc
	catPd
	catPs
	catPe
	catPi
	catPf
	catPo
	catSm
	catSc
	catSk
	catSo
	catZs
	catZl
	catZp
	catCc
	catCf
	catCo
	catCs
	numCats
)

// catNames are the two-letter names, indexed by category.
var catNames = [numCats]string{"Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No",
	"Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Co", "Cs"}

// A class mask has one bit per category plus bitSpace for the White_Space
// property (what Oniguruma's \s matches).
const bitSpace = uint32(1) << 31

const (
	maskL = 1<<catLu | 1<<catLl | 1<<catLt | 1<<catLm | 1<<catLo
	maskM = 1<<catMn | 1<<catMc | 1<<catMe
	maskN = 1<<catNd | 1<<catNl | 1<<catNo
	maskP = 1<<catPc | 1<<catPd | 1<<catPs | 1<<catPe | 1<<catPi | 1<<catPf | 1<<catPo
	maskS = 1<<catSm | 1<<catSc | 1<<catSk | 1<<catSo
	maskZ = 1<<catZs | 1<<catZl | 1<<catZp
	maskC = 1<<catCn | 1<<catCc | 1<<catCf | 1<<catCo | 1<<catCs
)

// catRange is a run of code points of one category.
type catRange struct {
	lo, hi rune
	cat    uint8
}

var ucd struct {
	once   sync.Once
	bmp    [0x10000]uint8 // category | 0x80 for White_Space
	astral []catRange     // sorted, from Go's tables, overridden by unicode16
}

// loadUCD builds the lookup tables (about 1 ms); every NewBPE calls it.
func loadUCD() {
	ucd.once.Do(func() {
		for c := catLu; c < numCats; c++ {
			t := unicode.Categories[catNames[c]]
			if t == nil {
				continue
			}
			for _, r := range t.R16 {
				for x := rune(r.Lo); x <= rune(r.Hi); x += rune(r.Stride) {
					ucd.bmp[x] = c
				}
			}
			for _, r := range t.R32 {
				if r.Stride == 1 {
					ucd.astral = append(ucd.astral, catRange{rune(r.Lo), rune(r.Hi), c})
					continue
				}
				for x := rune(r.Lo); x <= rune(r.Hi); x += rune(r.Stride) {
					ucd.astral = append(ucd.astral, catRange{x, x, c})
				}
			}
		}
		var astral16 []catRange
		for _, r := range unicode16 {
			if r.hi < 0x10000 {
				for x := r.lo; x <= r.hi; x++ {
					ucd.bmp[x] = r.cat
				}
			} else {
				astral16 = append(astral16, r)
			}
		}
		ucd.astral = overrideRanges(ucd.astral, astral16)
		for _, r := range unicode.White_Space.R16 {
			for x := rune(r.Lo); x <= rune(r.Hi); x += rune(r.Stride) {
				ucd.bmp[x] |= 0x80
			}
		}
	})
}

// overrideRanges merges sorted, disjoint base ranges with sorted, disjoint
// overrides that win where they overlap.
func overrideRanges(base, over []catRange) []catRange {
	sort.Slice(base, func(i, j int) bool { return base[i].lo < base[j].lo })
	var out []catRange
	for _, b := range base {
		for _, o := range over {
			if o.hi < b.lo || o.lo > b.hi {
				continue
			}
			if o.lo > b.lo {
				out = append(out, catRange{b.lo, o.lo - 1, b.cat})
			}
			b.lo = o.hi + 1
			if b.lo > b.hi {
				break
			}
		}
		if b.lo <= b.hi {
			out = append(out, b)
		}
	}
	out = append(out, over...)
	sort.Slice(out, func(i, j int) bool { return out[i].lo < out[j].lo })
	return out
}

// category is r's general category (Unicode 16.0).
func category(r rune) uint8 {
	if r < 0x10000 {
		if r < 0 {
			return catCn
		}
		return ucd.bmp[r] & 0x7f
	}
	a := ucd.astral
	i := sort.Search(len(a), func(i int) bool { return a[i].hi >= r })
	if i < len(a) && a[i].lo <= r {
		return a[i].cat
	}
	return catCn
}

// runeMask is r's class mask: its category bit, plus bitSpace if r is
// White_Space (no White_Space character is outside the BMP).
func runeMask(r rune) uint32 {
	if r < 0x10000 && r >= 0 {
		v := ucd.bmp[r]
		return 1<<(v&0x7f) | uint32(v>>7)<<31
	}
	return 1 << category(r)
}

func isSpace(r rune) bool {
	return r < 0x10000 && r >= 0 && ucd.bmp[r]&0x80 != 0
}

func isNumber(r rune) bool { return runeMask(r)&maskN != 0 }

// appendLossy appends b to dst as valid UTF-8, replacing each maximal
// invalid subsequence with U+FFFD, as Rust's String::from_utf8_lossy does
// (Go's own conversions replace every invalid byte instead).
func appendLossy(dst, b []byte) []byte {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n != 1 {
			dst = append(dst, b[i:i+n]...)
			i += n
			continue
		}
		dst = append(dst, "\uFFFD"...)
		i += invalidPrefix(b[i:])
	}
	return dst
}

// invalidPrefix is the length of the maximal subpart of an ill-formed
// sequence at the start of b (at least 1): a lead byte followed by the
// continuation bytes that could still have completed it.
func invalidPrefix(b []byte) int {
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c >= 0xE0 && c <= 0xEF:
		need = 2
		if c == 0xE0 {
			lo = 0xA0
		} else if c == 0xED {
			hi = 0x9F
		}
	case c >= 0xF0 && c <= 0xF4:
		need = 3
		if c == 0xF0 {
			lo = 0x90
		} else if c == 0xF4 {
			hi = 0x8F
		}
	default:
		return 1
	}
	n := 1
	for ; n <= need && n < len(b); n++ {
		if b[n] < lo || b[n] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return n
}

// validUTF8 is s with invalid sequences replaced as appendLossy does.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return string(appendLossy(nil, []byte(s)))
}

func isOtherAlphabetic(r rune) bool { return unicode.Is(unicode.Other_Alphabetic, r) }
