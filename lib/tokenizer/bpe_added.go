package tokenizer

import "strings"

// bpeAddedToken is an entry of tokenizer.json's added_tokens.
type bpeAddedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedSet finds added tokens in text as the Rust tokenizers'
// AddedVocabulary does with its Aho-Corasick automaton: leftmost-longest,
// non-overlapping, then single_word, lstrip and rstrip applied per match.
type addedSet struct {
	nodes []trieNode
	first [256]bool // bytes that start some pattern
	one   int       // the only first byte, or -1
}

type trieNode struct {
	next  map[byte]int32
	token *bpeAddedToken // the token ending here, or nil
}

func newAddedSet(tokens []*bpeAddedToken, patterns []string) *addedSet {
	a := &addedSet{nodes: []trieNode{{}}, one: -1}
	firsts := 0
	for i, t := range tokens {
		p := patterns[i]
		if p == "" {
			continue
		}
		if !a.first[p[0]] {
			a.first[p[0]] = true
			firsts++
			a.one = int(p[0])
		}
		n := int32(0)
		for j := 0; j < len(p); j++ {
			nx, ok := a.nodes[n].next[p[j]]
			if !ok {
				nx = int32(len(a.nodes))
				a.nodes = append(a.nodes, trieNode{})
				if a.nodes[n].next == nil {
					a.nodes[n].next = map[byte]int32{}
				}
				a.nodes[n].next[p[j]] = nx
			}
			n = nx
		}
		if a.nodes[n].token == nil {
			a.nodes[n].token = t
		}
	}
	if firsts != 1 {
		a.one = -1
	}
	return a
}

func (a *addedSet) empty() bool { return len(a.nodes) == 1 }

// longest is the longest pattern starting at s[i:], or nil.
func (a *addedSet) longest(s string, i int) (*bpeAddedToken, int) {
	var best *bpeAddedToken
	end := 0
	n := int32(0)
	for j := i; j < len(s); j++ {
		nx, ok := a.nodes[n].next[s[j]]
		if !ok {
			break
		}
		n = nx
		if t := a.nodes[n].token; t != nil {
			best, end = t, j+1
		}
	}
	return best, end
}

// next finds the leftmost-longest match at or after from.
func (a *addedSet) next(s string, from int) (*bpeAddedToken, int, int) {
	for i := from; i < len(s); i++ {
		if a.one >= 0 {
			k := strings.IndexByte(s[i:], byte(a.one))
			if k < 0 {
				return nil, 0, 0
			}
			i += k
		} else if !a.first[s[i]] {
			continue
		}
		if t, end := a.longest(s, i); t != nil {
			return t, i, end
		}
	}
	return nil, 0, 0
}

// segment is a piece of text, or an added token (id >= 0) found in it.
type segment struct {
	start, end int
	id         int
}

// split covers s with segments, as AddedVocabulary::find_matches does.
func (a *addedSet) split(s string, dst []segment) []segment {
	if a.empty() {
		return append(dst, segment{0, len(s), -1})
	}
	startOffset := 0
	for pos := 0; pos < len(s); {
		t, start, stop := a.next(s, pos)
		if t == nil {
			break
		}
		pos = stop
		if t.SingleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if t.LStrip {
			start = max(leadingSpaceStart(s[:start]), startOffset)
		}
		if t.RStrip {
			stop += trailingSpaceLen(s[stop:])
		}
		if startOffset < start {
			dst = append(dst, segment{startOffset, start, -1})
		}
		dst = append(dst, segment{start, stop, t.ID})
		startOffset = stop
	}
	if startOffset != len(s) {
		dst = append(dst, segment{startOffset, len(s), -1})
	}
	return dst
}

// leadingSpaceStart is where the whitespace at the end of s begins
// (Rust regex \s*$).
func leadingSpaceStart(s string) int {
	i := len(s)
	for i > 0 {
		r, n := lastRune(s[:i])
		if !isSpace(r) {
			break
		}
		i -= n
	}
	return i
}

// trailingSpaceLen is the length of the whitespace at the start of s.
func trailingSpaceLen(s string) int {
	for i, r := range s {
		if !isSpace(r) {
			return i
		}
	}
	return len(s)
}

func lastRune(s string) (rune, int) {
	if c := s[len(s)-1]; c < 0x80 {
		return rune(c), 1
	}
	i := len(s) - 1
	for i > 0 && len(s)-i < 4 && s[i]&0xC0 == 0x80 {
		i--
	}
	r, _ := decodeAt(s, i)
	return r, len(s) - i
}

// isWordRune is the Rust regex crate's Unicode \w: Alphabetic, marks,
// decimal digits, connector punctuation and the joiners.
func isWordRune(r rune) bool {
	m := runeMask(r)
	if m&(maskL|maskM|1<<catNd|1<<catNl|1<<catPc) != 0 || r == 0x200C || r == 0x200D {
		return true
	}
	return r >= 0x345 && isOtherAlphabetic(r)
}

func endsWithWord(s string) bool {
	r, _ := lastRune(s)
	return isWordRune(r)
}

func startsWithWord(s string) bool {
	r, _ := decodeAt(s, 0)
	return isWordRune(r)
}
