package quality

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// The loop check finds degenerate repetition with the repetition measures
// of Rae et al. 2021, "Scaling Language Models: Methods, Analysis &
// Insights from Training Gopher", appendix A (table A1), computed on the
// answer text, plus a repeated tail: the same span written again and again
// up to the end, which is how a looping answer that ran into max_tokens
// ends.
//
// Deliberate differences from the paper's filter, for answers rather than
// web pages, each kept by a test on real answers:
//   - fractions are of bytes (UTF-8), not code points: both sides of a
//     fraction are counted the same way, and no text is decoded;
//   - words are runs of bytes between ASCII white space; an n-gram's size is
//     the bytes of its words (separators not counted);
//   - the most frequent n-gram counts only when it occurs at least twice
//     (a text made of few long words is not repetitive);
//   - lines that hold only white space are neither lines nor duplicates,
//     and they separate paragraphs like empty lines do;
//   - the most frequent n-gram's occurrences may overlap ("the the the"),
//     so its bytes are capped at the bytes of all words;
//   - a duplicate n-gram's words count once however many repeated n-grams
//     cover them (the paper's "not counting overlaps twice").

// LoopConfig holds the loop check's thresholds. A fraction of 1 or more
// turns its measure off (no fraction exceeds 1).
type LoopConfig struct {
	// MinBytes: answers shorter than this are not judged by the Gopher
	// measures (the tail check still applies).
	MinBytes int
	// DupLines: lines that repeat an earlier line, over all lines.
	DupLines float64
	// DupParagraphs: the same for paragraphs (separated by blank lines).
	DupParagraphs float64
	// DupLineBytes, DupParagraphBytes: bytes of those repeats over the text.
	DupLineBytes, DupParagraphBytes float64
	// TopNgram[n] for n = 2..4: bytes of the most frequent n-gram times its
	// count, over the text.
	TopNgram [5]float64
	// DupNgram[n] for n = 5..10: bytes of words inside n-grams that repeat
	// an earlier n-gram, over the text.
	DupNgram [11]float64
	// TailCopies, TailBytes: a tail of at least TailCopies consecutive
	// copies of one span, covering at least TailBytes bytes, is a loop.
	// TailCopies 0 turns the tail check off.
	TailCopies, TailBytes int
}

// PaperLoop is the paper's table A1 as it stands, applied to every
// answer. On real answers it drops 1.6% of alpaca, glaive and v1_sft
// (short answers, lists, songs with a chorus): web-page thresholds, for
// boilerplate subtler than a model's loop.
var PaperLoop = LoopConfig{
	DupLines:          0.30,
	DupParagraphs:     0.30,
	DupLineBytes:      0.20,
	DupParagraphBytes: 0.20,
	TopNgram:          [5]float64{2: 0.20, 3: 0.18, 4: 0.16},
	DupNgram:          [11]float64{5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10},
}

// DefaultLoop is calibrated on the real answers under shared/data/real
// (TestRealAnswersKept) and the synthetic loops of TestLoopCaught: the
// Gopher measures judge answers of 500 bytes and more (a short answer
// reuses its few phrases), the paper's top n-gram and paragraph
// thresholds stand, and the line and duplicate n-gram thresholds are
// raised above the highest value a real answer reaches (a loop scores
// 0.6 to 1). Shorter loops are left to the repeated tail.
var DefaultLoop = LoopConfig{
	MinBytes:          500,
	DupLines:          0.50,
	DupParagraphs:     0.30,
	DupLineBytes:      0.30,
	DupParagraphBytes: 0.30,
	TopNgram:          [5]float64{2: 0.20, 3: 0.18, 4: 0.16},
	DupNgram:          [11]float64{5: 0.40, 6: 0.35, 7: 0.32, 8: 0.30, 9: 0.28, 10: 0.26},
	TailCopies:        4,
	TailBytes:         100,
}

// Loop measure names, as they appear in a finding's detail.
const (
	MeasureDupLines          = "dup_lines"
	MeasureDupParagraphs     = "dup_paragraphs"
	MeasureDupLineBytes      = "dup_line_bytes"
	MeasureDupParagraphBytes = "dup_paragraph_bytes"
	MeasureTail              = "tail"
)

// MeasureNames lists every loop measure in the order they are tried.
var MeasureNames = func() []string {
	names := []string{MeasureTail, MeasureDupLines, MeasureDupLineBytes, MeasureDupParagraphs, MeasureDupParagraphBytes}
	for n := 2; n <= 4; n++ {
		names = append(names, fmt.Sprintf("top_%dgram", n))
	}
	for n := 5; n <= 10; n++ {
		names = append(names, fmt.Sprintf("dup_%dgram", n))
	}
	return names
}()

// LoopMeasures are every measure of one text, for calibration and stats.
type LoopMeasures struct {
	DupLines, DupParagraphs, DupLineBytes, DupParagraphBytes float64
	TopNgram                                                 [5]float64
	DupNgram                                                 [11]float64
	// TailCopies copies of a TailSpan-byte span make up the last TailBytes
	// bytes (0 when the tail does not repeat).
	TailCopies, TailSpan, TailBytes int
}

func over(v, thresh float64) bool { return thresh > 0 && thresh < 1 && v > thresh }

// Scratch holds the buffers the loop check reuses from one text to the
// next. The zero value is ready; a Scratch is not safe for concurrent use.
type Scratch struct {
	words  []uint64 // hash of each word
	starts []int32  // prefix sums of word lengths: bytes of words [0, i)
	widest int32    // the longest word's bytes
	set    hashSet
	lines  hashSet
}

// Loop reports whether text loops under cfg, with the first measure over
// its threshold and its value as detail. It stops at the first measure
// found over, and skips the longer n-grams when the shorter ones show
// they cannot be over (words inside a repeated n-gram are inside repeated
// shorter ones too).
func Loop(text string, cfg *LoopConfig, s *Scratch) (detail string, bad bool) {
	if s == nil {
		s = &Scratch{}
	}
	defer s.release()
	var m LoopMeasures
	if cfg.TailCopies > 0 {
		m.TailCopies, m.TailSpan, m.TailBytes = repeatedTail(text)
		if m.TailCopies >= cfg.TailCopies && m.TailBytes >= cfg.TailBytes {
			return fmt.Sprintf("tail: the last %d bytes are %d copies of a %d-byte span", m.TailBytes, m.TailCopies, m.TailSpan), true
		}
	}
	if len(text) < cfg.MinBytes || len(text) == 0 {
		return "", false
	}
	total := float64(len(text))
	lf, lb, pf, pb := s.lineMeasures(text)
	for _, c := range []struct {
		name      string
		v, thresh float64
	}{{MeasureDupLines, lf, cfg.DupLines}, {MeasureDupLineBytes, lb / total, cfg.DupLineBytes},
		{MeasureDupParagraphs, pf, cfg.DupParagraphs}, {MeasureDupParagraphBytes, pb / total, cfg.DupParagraphBytes}} {
		if over(c.v, c.thresh) {
			return fmt.Sprintf("%s %.3f > %.2f", c.name, c.v, c.thresh), true
		}
	}
	s.hashWords(text)
	words := len(s.starts) - 1
	// Each n-gram order costs a pass over the words; an order is skipped
	// when what is known of shorter ones shows its measures cannot be
	// over: the most frequent n-gram occurs no more often than the most
	// frequent (n-1)-gram, it is at most n times the longest word, and the
	// words inside repeated n-grams are inside repeated (n-1)-grams too.
	count := uint32(words) // a bound of the most frequent n-gram's count
	dup := total           // a bound of the bytes inside repeated n-grams
	for n := 2; n <= 4 && n <= words; n++ {
		bound := float64(count) * float64(n) * float64(s.widest) / total
		needTop := over(min(bound, 1), cfg.TopNgram[n])
		if !needTop && !anyBelow(cfg, 5, dup/total) {
			continue // a longer n-gram may still need it: its bound is larger
		}
		top, c, d := s.topNgram(n)
		if v := top / total; over(v, cfg.TopNgram[n]) {
			return fmt.Sprintf("top_%dgram %.3f > %.2f", n, v, cfg.TopNgram[n]), true
		}
		count, dup = c, d
		if n == 4 {
			break
		}
	}
	if !anyBelow(cfg, 5, dup/total) {
		return "", false
	}
	for n := 5; n <= 10 && n <= words; n++ {
		v := s.dupNgram(n) / total
		if over(v, cfg.DupNgram[n]) {
			return fmt.Sprintf("dup_%dgram %.3f > %.2f", n, v, cfg.DupNgram[n]), true
		}
		// The fraction can only fall as n grows: stop once no later
		// threshold is below it.
		if !anyBelow(cfg, n+1, v) {
			break
		}
	}
	return "", false
}

// anyBelow reports whether a duplicate n-gram threshold from order n on is
// on and below v.
func anyBelow(cfg *LoopConfig, n int, v float64) bool {
	for ; n <= 10; n++ {
		if t := cfg.DupNgram[n]; t > 0 && t < 1 && t < v {
			return true
		}
	}
	return false
}

// release drops the buffers a huge text needed, so that a checker does
// not hold them for the rest of a run.
func (s *Scratch) release() {
	if cap(s.words) > bigSet || len(s.set.slots) > bigSet || len(s.lines.slots) > bigSet {
		*s = Scratch{}
	}
}

// lineMeasures returns the fraction of lines repeating an earlier line and
// their bytes, and the same for paragraphs.
func (s *Scratch) lineMeasures(text string) (lineFrac, lineBytes, paraFrac, paraBytes float64) {
	var nLines, dupLines, nParas, dupParas int
	var dupLineBytes, dupParaBytes int
	lines := &s.lines
	paras := &s.set
	n := strings.Count(text, "\n") + 1
	lines.reset(n)
	paras.reset(n)
	paraStart, paraEnd := -1, -1
	var paraHash uint64
	endPara := func() {
		if paraStart < 0 {
			return
		}
		nParas++
		if paras.add(mix(paraHash)) > 1 {
			dupParas++
			dupParaBytes += paraEnd - paraStart
		}
		paraStart = -1
	}
	for start := 0; start <= len(text); {
		end := strings.IndexByte(text[start:], '\n')
		if end < 0 {
			end = len(text)
		} else {
			end += start
		}
		line := text[start:end]
		blank := true
		for i := 0; i < len(line); i++ {
			if c := line[i]; c != ' ' && c != '\t' && c != '\r' {
				blank = false
				break
			}
		}
		if blank {
			endPara()
		} else {
			h := xxh3.HashString(line)
			nLines++
			if lines.add(h) > 1 {
				dupLines++
				dupLineBytes += end - start
			}
			if paraStart < 0 {
				paraStart, paraHash = start, offset64
			}
			paraHash = (bits.RotateLeft64(paraHash, 7) ^ h) * prime64
			paraEnd = end
		}
		start = end + 1
	}
	endPara()
	if nLines > 0 {
		lineFrac = float64(dupLines) / float64(nLines)
	}
	if nParas > 0 {
		paraFrac = float64(dupParas) / float64(nParas)
	}
	return lineFrac, float64(dupLineBytes), paraFrac, float64(dupParaBytes)
}

const (
	offset64 = 14695981039346656037
	prime64  = 1099511628211
)

// mix is splitmix64's finalizer, so that table slots and n-gram
// combinations see well-spread bits.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// spaces marks the ASCII white space bytes that separate words.
var spaces = [256]bool{' ': true, '\n': true, '\t': true, '\r': true, '\v': true, '\f': true}

func isSpace(c byte) bool { return spaces[c] }

// hashWords fills s.words with one hash per word and s.starts with the
// prefix sums of word lengths. A word of up to 8 bytes is its bytes and its
// length (its end found among 8 bytes read at once, which are its hash
// too); a longer one is hashed.
func (s *Scratch) hashWords(text string) {
	words, starts := s.words[:0], append(s.starts[:0], 0)
	if len(text) > bigSet {
		// A long text's words are counted first, so that the buffers are
		// made once at their size, not grown to twice it.
		c := countWords(text)
		words, starts = slices.Grow(words, c+1), slices.Grow(starts, c+1)
	}
	var sum, widest int32
	n := len(text)
	for i := 0; ; {
		for i < n && spaces[text[i]] {
			i++
		}
		if i >= n {
			break
		}
		var h uint64
		j := i
		if i+8 <= n {
			x := load8(text, i)
			if m := sepMask(x); m != 0 {
				w := bits.TrailingZeros64(m) >> 3 // at least 1: text[i] is no separator
				j, h = i+w, x&(1<<(8*w)-1)
			} else {
				j = wordEnd(text, i+8)
				if h = x; j-i > 8 {
					h = xxh3.HashString(text[i:j])
				}
			}
		} else {
			for j < n && !spaces[text[j]] {
				j++
			}
			for k := j - 1; k >= i; k-- {
				h = h<<8 | uint64(text[k])
			}
		}
		h ^= uint64(j-i) * 0x9e3779b97f4a7c15
		words = append(words, mix(h))
		w := int32(j - i)
		sum += w
		widest = max(widest, w)
		starts = append(starts, sum)
		i = j + 1 // text[j], if any, is a separator
	}
	// A sentinel past the last word, which the rolling n-gram hash reads
	// (and throws away) after the last n-gram.
	words = append(words, 0)
	s.words, s.starts, s.widest = words[:len(words)-1], starts, widest
}

// countWords returns how many words hashWords finds in text: the
// non-separators that follow a separator or start the text, 8 bytes at a
// time.
func countWords(text string) int {
	count, prev := 0, highs>>56<<56 // a separator before the text
	i := 0
	for ; i+8 <= len(text); i += 8 {
		sep := sepMask(load8(text, i))
		before := sep<<8 | prev>>56 // whether the byte before each is one
		count += bits.OnesCount64(^sep & before & highs)
		prev = sep
	}
	wasSep := prev>>63 == 1
	for ; i < len(text); i++ {
		sep := spaces[text[i]]
		if !sep && wasSep {
			count++
		}
		wasSep = sep
	}
	return count
}

// wordEnd returns the index of the first separator from i on, or len(text).
func wordEnd(text string, i int) int {
	for ; i+8 <= len(text); i += 8 {
		if m := sepMask(load8(text, i)); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for i < len(text) && !spaces[text[i]] {
		i++
	}
	return i
}

func load8(text string, i int) uint64 {
	return binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(text[i:]), 8))
}

// sepMask marks, in the top bit of each byte, the separators (the bytes of
// spaces) among the 8 bytes of x.
func sepMask(x uint64) uint64 {
	y := x ^ (ones * ' ')
	space := ^((y&^highs + ^highs) | y) // a byte's top bit: y's byte is 0
	low := x &^ highs
	ctrl := (low + ones*(0x80-'\t')) &^ (low + ones*(0x80-'\r'-1)) &^ x // \t \n \v \f \r
	return (space | ctrl) & highs
}

// The hash of the n-gram at i is the rotate-and-xor fold of its words'
// hashes, rotl(...rotl(rotl(w[i], 11) ^ w[i+1], 11)..., 11) ^ w[i+n-1],
// which is the sum of rotl(w[i+k], 11*(n-1-k)): the next one follows from
// it in a step (rollGram), so no order's hashes are stored.

// firstGram is the hash of the n-gram at 0.
func firstGram(words []uint64, n int) uint64 {
	h := words[0]
	for k := 1; k < n; k++ {
		h = bits.RotateLeft64(h, 11) ^ words[k]
	}
	return h
}

// rollGram turns h, the hash of the n-gram at i, into that of the n-gram
// at i+1: out goes w[i] (rotated n-1 times), in comes in = w[i+n].
func rollGram(h, out, in uint64, n int) uint64 {
	return bits.RotateLeft64(h^bits.RotateLeft64(out, 11*(n-1)), 11) ^ in
}

// topNgram returns bytes of the most frequent n-gram times its count
// (0 when none occurs twice; among equally frequent ones, the largest),
// that count, and the bytes of words inside n-grams repeating an earlier
// one (as dupNgram), which bounds the same measure of longer n-grams.
func (s *Scratch) topNgram(n int) (top float64, count uint32, dup float64) {
	grams := len(s.starts) - n
	s.set.reset(grams)
	// best starts at 1 (grams is at least 1): an n-gram seen once is
	// never the answer, so its bytes are not looked at.
	best := uint32(1)
	var bestBytes, dupBytes int32
	covered := 0
	words := s.words[:len(s.words)+1] // and the sentinel hashWords leaves
	h := firstGram(words, n)
	for i := 0; i < grams; i++ {
		c := s.set.add(h)
		h = rollGram(h, words[i], words[i+n], n)
		if c < 2 {
			continue
		}
		from := max(i, covered)
		dupBytes += s.starts[i+n] - s.starts[from]
		covered = i + n
		if c < best {
			continue
		}
		b := s.starts[i+n] - s.starts[i]
		if c > best || b > bestBytes {
			best, bestBytes = c, b
		}
	}
	if best < 2 {
		return 0, best, float64(dupBytes)
	}
	// Overlapping occurrences ("the the the") count each time, as in the
	// paper's measure; the fraction is capped at the whole text.
	return min(float64(best)*float64(bestBytes), float64(s.starts[len(s.starts)-1])), best, float64(dupBytes)
}

// dupNgram returns the bytes of words inside n-grams that repeat an
// earlier n-gram, each word counted once.
func (s *Scratch) dupNgram(n int) float64 {
	count := len(s.starts) - n
	s.set.reset(count)
	covered := 0 // words [0, covered) are counted
	var bytes int32
	words := s.words[:len(s.words)+1] // and the sentinel hashWords leaves
	h := firstGram(words, n)
	for i := 0; i < count; i++ {
		c := s.set.add(h)
		h = rollGram(h, words[i], words[i+n], n)
		if c < 2 {
			continue
		}
		from := max(i, covered)
		bytes += s.starts[i+n] - s.starts[from]
		covered = i + n
	}
	return float64(bytes)
}

// repeatedTail finds the longest run of copies of one span at the end of
// text (trailing white space aside): it returns how many whole copies,
// the span's length and the bytes the run covers (a last copy cut short,
// as by max_tokens, counts in the bytes). Candidate spans, up to maxSpan
// bytes, are the distances back to the nearest earlier occurrences of the
// text's last bytes, so a tail that does not repeat costs one backward
// search over maxSpan bytes.
func repeatedTail(text string) (copies, span, covered int) {
	const key = 8 // bytes of the tail looked for earlier
	const maxSpan = 4 << 10
	const tries = 8
	end := len(text)
	for end > 0 && isSpace(text[end-1]) {
		end--
	}
	t := text[:end]
	if len(t) < 2 {
		return 0, 0, 0
	}
	k := min(key, len(t)/2)
	suffix := t[len(t)-k:]
	// The nearest occurrences ending before the text does: found scanning
	// forward, which is much faster than backward, keeping the last few.
	// A span over half the text cannot make two copies: the search starts
	// where the spans are at most maxSpan and half the text.
	lo := max(0, len(t)-1-maxSpan-k, len(t)-len(t)/2-k)
	a := rarest(suffix)
	var near [tries]int // ends of occurrences, a ring
	found := 0
	for from := lo; ; {
		q := indexAnchored(t[from:len(t)-1], suffix, a)
		if q < 0 {
			break
		}
		near[found%tries] = from + q + k
		found++
		from += q + 1
	}
	for j := 0; j < min(found, tries); j++ {
		p := len(t) - near[(found-1-j)%tries] // a candidate span, nearest first
		run := 0
		for i := len(t) - 1 - p; i >= 0 && t[i] == t[i+p]; i-- {
			run++
		}
		if c := (run + p) / p; c >= 2 && run+p > covered {
			copies, span, covered = c, p, run+p
		}
	}
	return copies, span, covered
}

// commonness ranks bytes by how often prose holds them, roughly: white
// space and the commonest letters first; the rest (capitals, digits,
// punctuation, bytes of other scripts) share rank 0.
var commonness = func() (r [256]uint8) {
	for i, set := range []string{"bcfgjkpqvwxyz", ",.", "lducm\n", "etaoinsrh", " "} {
		for _, c := range []byte(set) {
			r[c] = uint8(i + 1)
		}
	}
	return r
}()

// rarest is the index of the byte of s that prose holds least often.
func rarest(s string) int {
	a := 0
	for i := 1; i < len(s); i++ {
		if commonness[s[i]] < commonness[s[a]] {
			a = i
		}
	}
	return a
}

// indexAnchored is strings.Index(s, sub), looking for sub's byte at a
// (its rarest) first: strings.Index looks for the first byte, which in
// prose is often a space or a common letter that stops the search every
// few bytes. Once the anchor too proves common, strings.Index takes over.
func indexAnchored(s, sub string, a int) int {
	n := len(sub)
	if n == 0 || n > len(s) {
		return strings.Index(s, sub)
	}
	c, last := sub[a], len(s)-n+a // the anchor's last possible place
	fails := 0
	for i := a; i <= last; i++ {
		o := strings.IndexByte(s[i:last+1], c)
		if o < 0 {
			return -1
		}
		i += o
		if s[i-a:i-a+n] == sub {
			return i - a
		}
		if fails++; fails > 4+i>>4 {
			if q := strings.Index(s[i-a+1:], sub); q >= 0 {
				return i - a + 1 + q
			}
			return -1
		}
	}
	return -1
}

// bigSet is the table size past which a Scratch does not keep its buffers
// from one text to the next, and a table may fill to three quarters.
const bigSet = 1 << 18

// hashSet counts 64-bit keys in an open-addressed table. Slots carry the
// generation they were written in, so emptying the table between texts
// costs nothing.
type hashSet struct {
	slots []slot
	mask  uint64
	gen   uint32
}

type slot struct {
	key   uint64
	count uint32
	gen   uint32
}

// reset empties the set, sized for about n keys.
func (h *hashSet) reset(n int) {
	// At most half full, for short probes; a table past bigSet slots may
	// fill to three quarters (a huge answer's n-grams: one slot in three
	// saved, at a few more probes).
	want := 2 * n
	if want > bigSet {
		want = n + n/3
	}
	size := 64
	for size < want {
		size <<= 1
	}
	if size > len(h.slots) {
		h.slots = nil // the old table is garbage before the new one is made
		h.slots = make([]slot, size)
		h.gen = 0
	}
	h.mask = uint64(size - 1)
	h.gen++
	if h.gen == 0 {
		clear(h.slots)
		h.gen = 1
	}
}

// add counts key and returns its count so far, this one included.
func (h *hashSet) add(key uint64) uint32 {
	i := key & h.mask
	for {
		s := &h.slots[i]
		if s.gen != h.gen {
			*s = slot{key: key, count: 1, gen: h.gen}
			return 1
		}
		if s.key == key {
			s.count++
			return s.count
		}
		i = (i + 1) & h.mask
	}
}
