package tokenizer

import "unicode"

// A pre-tokenizer cuts a normalized piece of text into the words that BPE
// then encodes one at a time. The stages of a Sequence run in order, each
// on every piece the stage before produced; empty pieces are dropped, as
// PreTokenizedString::split does.

// spanFinder covers a string with spans, marking which are matches.
type spanFinder interface {
	findMatches(s string, dst []span) []span
}

// preTokenizer is one stage.
type preTokenizer interface {
	// split appends the pieces of s to dst.
	split(s string, dst []string, st *encodeState) []string
}

// behavior is what a split does with the matches (delimiters).
type behavior uint8

const (
	behaviorRemoved behavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

var behaviors = map[string]behavior{
	"Removed": behaviorRemoved, "Isolated": behaviorIsolated, "MergedWithPrevious": behaviorMergedWithPrevious,
	"MergedWithNext": behaviorMergedWithNext, "Contiguous": behaviorContiguous,
}

// splitPre is Split (and Digits, WhitespaceSplit, Punctuation, which are
// splits on a character predicate).
type splitPre struct {
	find     spanFinder
	behavior behavior
	invert   bool
}

func (p *splitPre) split(s string, dst []string, st *encodeState) []string {
	spans := p.find.findMatches(s, st.spans[:0])
	if p.invert {
		for i := range spans {
			spans[i].match = !spans[i].match
		}
	}
	spans = applyBehavior(spans, p.behavior)
	st.spans = spans
	for _, sp := range spans {
		if sp.end > sp.start {
			dst = append(dst, s[sp.start:sp.end])
		}
	}
	return dst
}

// applyBehavior turns matches and gaps into the pieces to keep, as
// NormalizedString::split does (in place; removed spans are dropped).
func applyBehavior(spans []span, b behavior) []span {
	out := spans[:0]
	prevMatch := false
	switch b {
	case behaviorIsolated:
		for i := range spans {
			spans[i].match = false
		}
		return spans
	case behaviorRemoved:
		for _, sp := range spans {
			if !sp.match {
				out = append(out, sp)
			}
		}
		return out
	case behaviorContiguous:
		for _, sp := range spans {
			if sp.match == prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, span{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
		return out
	case behaviorMergedWithPrevious:
		for _, sp := range spans {
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, span{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
		return out
	}
	// MergedWithNext: the same fold from the right, written in place from
	// the end, then moved to the front.
	w := len(spans)
	for i := len(spans) - 1; i >= 0; i-- {
		sp := spans[i]
		if sp.match && !prevMatch && w < len(spans) {
			spans[w].start = sp.start
		} else {
			w--
			spans[w] = span{sp.start, sp.end, false}
		}
		prevMatch = sp.match
	}
	return append(out, spans[w:]...)
}

// runeFinder makes every rune for which pred holds a match of its own, as
// the Rust tokenizers' Pattern for Fn(char) -> bool does.
type runeFinder func(r rune) bool

func (f runeFinder) findMatches(s string, dst []span) []span {
	if s == "" {
		return append(dst, span{0, 0, false})
	}
	last := 0
	for i, r := range s {
		if f(r) {
			if last < i {
				dst = append(dst, span{last, i, false})
			}
			n := len(string(r))
			if r == 0xFFFD {
				n = runeLenAt(s, i)
			}
			dst = append(dst, span{i, i + n, true})
			last = i + n
		}
	}
	if last < len(s) {
		dst = append(dst, span{last, len(s), false})
	}
	return dst
}

func runeLenAt(s string, i int) int {
	_, n := decodeAt(s, i)
	return n
}

// isPunctuation is the Punctuation pre-tokenizer's test: ASCII punctuation,
// or general category P as of Unicode 9.0 (the unicode_categories crate).
func isPunctuation(r rune) bool {
	if r < 0x80 {
		return r > ' ' && r < 0x7f && !(r >= '0' && r <= '9') && !(r|0x20 >= 'a' && r|0x20 <= 'z')
	}
	if r == 0x166D || r == 0x111C9 {
		return true
	}
	return unicode.IsPunct(r) && !inRanges(punctAfter9, r)
}

// byteLevelPre is the ByteLevel pre-tokenizer; it must come last. The
// mapping of bytes to printable characters is not applied: the vocabulary
// is held in raw bytes instead (see bpe_model.go).
type byteLevelPre struct {
	addPrefixSpace bool
	re             spanFinder // the GPT-2 pattern when use_regex
}

func (p *byteLevelPre) split(s string, dst []string, st *encodeState) []string {
	if p.addPrefixSpace && (s == "" || s[0] != ' ') {
		s = " " + s
	}
	if p.re == nil {
		return append(dst, s)
	}
	spans := p.re.findMatches(s, st.spans[:0])
	st.spans = spans
	for _, sp := range spans {
		if sp.end > sp.start {
			dst = append(dst, s[sp.start:sp.end])
		}
	}
	return dst
}

// gpt2Pattern is the ByteLevel pre-tokenizer's own regex.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// preTokenize runs the stages on s and appends the words to dst.
func (b *BPE) preTokenize(s string, dst []string, st *encodeState) []string {
	if len(b.pre) == 0 {
		return append(dst, s)
	}
	start := len(dst)
	dst = append(dst, s)
	for _, p := range b.pre {
		// The current pieces are dst[start:]; the next stage's go after
		// them and are then moved down.
		n := len(dst)
		for i := start; i < n; i++ {
			dst = p.split(dst[i], dst, st)
		}
		dst = append(dst[:start], dst[n:]...)
	}
	return dst
}
