package tokenizer

import (
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites a piece of text before pre-tokenization.
type normalizer interface {
	normalize(s string) string
}

type seqNormalizer []normalizer

func (q seqNormalizer) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

type prependNormalizer string

func (p prependNormalizer) normalize(s string) string {
	if s == "" {
		return s
	}
	return string(p) + s
}

// replaceNormalizer replaces every match of a pattern (a literal, or a
// regex as Oniguruma finds them) with content.
type replaceNormalizer struct {
	literal string
	re      *regex
	content string
}

func (r *replaceNormalizer) normalize(s string) string {
	if r.re == nil {
		return strings.ReplaceAll(s, r.literal, r.content)
	}
	var b strings.Builder
	for _, sp := range r.re.findMatches(s, nil) {
		if sp.match {
			b.WriteString(r.content)
		} else {
			b.WriteString(s[sp.start:sp.end])
		}
	}
	return b.String()
}

// lowercaseNormalizer lowercases rune by rune as Rust's char::to_lowercase
// does (Unicode 16, full mapping: İ becomes i and U+0307, Σ is always σ).
type lowercaseNormalizer struct{}

func (lowercaseNormalizer) normalize(s string) string {
	var b []byte
	for i, r := range s {
		l := unicode.ToLower(r)
		if v, ok := lower16[r]; ok {
			l = v
		}
		if l == r && r != 0x130 {
			if b != nil {
				b = utf8.AppendRune(b, r)
			}
			continue
		}
		if b == nil {
			b = append(make([]byte, 0, len(s)+8), s[:i]...)
		}
		if r == 0x130 {
			b = append(b, "i\u0307"...)
		} else {
			b = utf8.AppendRune(b, l)
		}
	}
	if b == nil {
		return s
	}
	return string(b)
}

// unicodeNormalizer is NFC, NFD, NFKC or NFKD as the Rust tokenizers apply
// them: with Unicode 9.0 tables (code points in normAfter9 stay as they
// are) and without the stream-safe limit on combining marks that
// x/text/unicode/norm applies. x/text only answers the quick check and
// supplies decompositions and combining classes.
type unicodeNormalizer struct {
	form    norm.Form // for the quick check
	decomp  norm.Form // NFD or NFKD: where decompositions come from
	compose bool
}

func (u unicodeNormalizer) normalize(s string) string {
	if isASCII(s) || u.form.QuickSpanString(s) == len(s) {
		return s
	}
	buf := decompose(s, u.decomp)
	reorder(buf)
	if u.compose {
		buf = composeRunes(buf)
	}
	b := make([]byte, 0, len(s)+8)
	for _, nr := range buf {
		b = utf8.AppendRune(b, nr.r)
	}
	return string(b)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

type normRune struct {
	r   rune
	ccc uint8
}

// Hangul syllables compose and decompose algorithmically.
const (
	hangulS = 0xAC00
	hangulL = 0x1100
	hangulV = 0x1161
	hangulT = 0x11A7
	countL  = 19
	countV  = 21
	countT  = 28
	countN  = countV * countT
	countS  = countL * countN
)

func after9(r rune) bool {
	if r < 0x7FD {
		return false
	}
	return inRanges(normAfter9, r)
}

// inRanges reports whether r is in sorted, disjoint ranges.
func inRanges(rs []runeRange, r rune) bool {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].hi >= r })
	return i < len(rs) && rs[i].lo <= r
}

func cccOf(r rune) uint8 {
	if r < 0x300 || after9(r) {
		return 0
	}
	var b [utf8.UTFMax]byte
	return norm.NFD.Properties(utf8.AppendRune(b[:0], r)).CCC()
}

func decompose(s string, form norm.Form) []normRune {
	out := make([]normRune, 0, len(s))
	var b [utf8.UTFMax]byte
	for _, r := range s {
		switch {
		case r >= hangulS && r < hangulS+countS:
			i := r - hangulS
			out = append(out, normRune{hangulL + i/countN, 0}, normRune{hangulV + i%countN/countT, 0})
			if t := i % countT; t != 0 {
				out = append(out, normRune{hangulT + t, 0})
			}
			continue
		case r < 0xA0 || after9(r):
			out = append(out, normRune{r, 0})
			continue
		}
		p := form.Properties(utf8.AppendRune(b[:0], r))
		d := p.Decomposition()
		if d == nil {
			out = append(out, normRune{r, p.CCC()})
			continue
		}
		for _, dr := range string(d) {
			out = append(out, normRune{dr, cccOf(dr)})
		}
	}
	return out
}

// reorder sorts each run of non-starters by combining class, stably.
func reorder(buf []normRune) {
	for i := 1; i < len(buf); i++ {
		for j := i; j > 0 && buf[j].ccc != 0 && buf[j-1].ccc > buf[j].ccc; j-- {
			buf[j], buf[j-1] = buf[j-1], buf[j]
		}
	}
}

var compositions struct {
	once  sync.Once
	pairs map[[2]rune]rune
}

// composePair is the primary composite of a and b, if there is one.
func composePair(a, b rune) (rune, bool) {
	if a >= hangulL && a < hangulL+countL && b >= hangulV && b < hangulV+countV {
		return hangulS + ((a-hangulL)*countV+b-hangulV)*countT, true
	}
	if a >= hangulS && a < hangulS+countS && (a-hangulS)%countT == 0 && b > hangulT && b < hangulT+countT {
		return a + b - hangulT, true
	}
	compositions.once.Do(buildCompositions)
	c, ok := compositions.pairs[[2]rune{a, b}]
	return c, ok
}

// buildCompositions collects the primary composites (every one is below
// U+20000) with their one-level canonical decompositions.
func buildCompositions() {
	pairs := make(map[[2]rune]rune, 1024)
	var buf [utf8.UTFMax]byte
	for r := rune(0xC0); r < 0x20000; r++ {
		if (r >= hangulS && r < hangulS+countS) || (r >= 0xD800 && r <= 0xDFFF) || after9(r) {
			continue
		}
		s := utf8.AppendRune(buf[:0], r)
		d := norm.NFD.Properties(s).Decomposition()
		if d == nil || !norm.NFC.IsNormal(s) {
			continue
		}
		last, n := utf8.DecodeLastRune(d)
		first := []rune(norm.NFC.String(string(d[:len(d)-n])))
		if len(first) != 1 || after9(first[0]) || after9(last) {
			continue
		}
		if norm.NFC.String(string(first)+string(last)) == string(r) {
			pairs[[2]rune{first[0], last}] = r
		}
	}
	compositions.pairs = pairs
}

// composeRunes is the canonical composition algorithm over a decomposed,
// reordered sequence.
func composeRunes(buf []normRune) []normRune {
	out := buf[:0]
	starter := -1 // index in out of the last starter
	lastCCC := -1 // class of the last rune after the starter, -1 if none
	for _, nr := range buf {
		if starter >= 0 && (lastCCC < 0 || (lastCCC < int(nr.ccc))) {
			if c, ok := composePair(out[starter].r, nr.r); ok {
				out[starter].r = c
				continue
			}
		}
		if nr.ccc == 0 {
			starter = len(out)
			lastCCC = -1
		} else {
			lastCCC = int(nr.ccc)
		}
		out = append(out, nr)
	}
	return out
}
