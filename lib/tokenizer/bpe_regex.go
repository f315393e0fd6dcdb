package tokenizer

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// This file parses the subset of Oniguruma's syntax that tokenizer.json
// Split patterns use. bpe_regex_exec.go compiles and runs it. Anything
// outside the subset is refused with an error naming the construct, so a
// pattern is either matched exactly as the Rust tokenizers match it or not
// accepted at all.

// charClass is a set of runes: ranges, Unicode category masks (and their
// complements), optionally case-folded, optionally negated.
type charClass struct {
	neg    bool
	fold   bool // (?i): a rune matches if any rune of its case-fold orbit does
	mask   uint32
	notIn  []*charClass // \S, \W, \P{L}, ... inside brackets: runes outside them
	ranges []runeRange
	ascii  [2]uint64 // the final answer for runes below 128
}

type runeRange struct{ lo, hi rune }

// has reports whether r is in the class.
func (c *charClass) has(r rune) bool {
	if r < utf8.RuneSelf {
		return c.ascii[r>>6]&(1<<(r&63)) != 0
	}
	return c.slow(r)
}

func (c *charClass) slow(r rune) bool {
	in := c.raw(r)
	if !in && c.fold {
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if c.raw(f) {
				in = true
				break
			}
		}
	}
	return in != c.neg
}

// raw is membership before folding and negation.
func (c *charClass) raw(r rune) bool {
	m := runeMask(r)
	if m&c.mask != 0 {
		return true
	}
	for _, n := range c.notIn {
		if !n.raw(r) {
			return true
		}
	}
	for _, rr := range c.ranges {
		if r >= rr.lo && r <= rr.hi {
			return true
		}
	}
	return false
}

// finish precomputes the ASCII answers.
func (c *charClass) finish() *charClass {
	c.ascii = [2]uint64{}
	for r := rune(0); r < utf8.RuneSelf; r++ {
		if c.slow(r) {
			c.ascii[r>>6] |= 1 << (r & 63)
		}
	}
	return c
}

func literalClass(r rune, fold bool) *charClass {
	c := &charClass{ranges: []runeRange{{r, r}}, fold: fold}
	return c.finish()
}

// reKind is the kind of a parsed node.
type reKind uint8

const (
	reEmpty  reKind = iota
	reClass         // one rune of cls
	reConcat        // subs in sequence
	reAlt           // subs, leftmost first
	reRepeat        // subs[0] min..max times (max -1: unbounded)
	reLook          // look-ahead at subs[0], negated if neg
)

type reNode struct {
	kind     reKind
	cls      *charClass
	subs     []*reNode
	min, max int
	greedy   bool
	neg      bool
}

// nullable reports whether n can match the empty string.
func (n *reNode) nullable() bool {
	switch n.kind {
	case reEmpty, reLook:
		return true
	case reClass:
		return false
	case reConcat:
		for _, s := range n.subs {
			if !s.nullable() {
				return false
			}
		}
		return true
	case reAlt:
		for _, s := range n.subs {
			if s.nullable() {
				return true
			}
		}
		return false
	default: // reRepeat
		return n.min == 0 || n.subs[0].nullable()
	}
}

type reParser struct {
	src  string
	pos  int
	fold bool
}

func (p *reParser) errorf(format string, args ...any) error {
	return fmt.Errorf("tokenizer: regex %q: "+format, append([]any{p.src}, args...)...)
}

func (p *reParser) eof() bool { return p.pos >= len(p.src) }

func (p *reParser) peek() rune {
	r, _ := utf8.DecodeRuneInString(p.src[p.pos:])
	return r
}

func (p *reParser) next() rune {
	r, n := utf8.DecodeRuneInString(p.src[p.pos:])
	p.pos += n
	return r
}

// parseRegex parses a whole pattern.
func parseRegex(src string) (*reNode, error) {
	if !utf8.ValidString(src) {
		return nil, fmt.Errorf("tokenizer: regex %q is not valid UTF-8", src)
	}
	p := &reParser{src: src}
	n, err := p.parseAlt()
	if err != nil {
		return nil, err
	}
	if !p.eof() {
		return nil, p.errorf("unmatched ) at offset %d", p.pos)
	}
	return n, nil
}

func (p *reParser) parseAlt() (*reNode, error) {
	var alts []*reNode
	for {
		n, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		alts = append(alts, n)
		if p.eof() || p.peek() != '|' {
			break
		}
		p.next()
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return &reNode{kind: reAlt, subs: alts}, nil
}

func (p *reParser) parseConcat() (*reNode, error) {
	var seq []*reNode
	for !p.eof() && p.peek() != '|' && p.peek() != ')' {
		n, err := p.parseRepeat()
		if err != nil {
			return nil, err
		}
		if n != nil {
			seq = append(seq, n)
		}
	}
	switch len(seq) {
	case 0:
		return &reNode{kind: reEmpty}, nil
	case 1:
		return seq[0], nil
	}
	return &reNode{kind: reConcat, subs: seq}, nil
}

func (p *reParser) parseRepeat() (*reNode, error) {
	atom, err := p.parseAtom()
	if err != nil || atom == nil {
		return atom, err
	}
	if p.eof() {
		return atom, nil
	}
	min, max, ok, err := p.parseQuantifier()
	if err != nil || !ok {
		return atom, err
	}
	n := &reNode{kind: reRepeat, subs: []*reNode{atom}, min: min, max: max, greedy: true}
	if !p.eof() {
		switch p.peek() {
		case '?':
			p.next()
			n.greedy = false
		case '+':
			return nil, p.errorf("possessive quantifier at offset %d is not supported", p.pos)
		}
	}
	if !p.eof() && strings.ContainsRune("*+?{", p.peek()) {
		return nil, p.errorf("nested quantifier at offset %d is not supported", p.pos)
	}
	if atom.kind == reLook {
		return nil, p.errorf("quantified look-ahead is not supported")
	}
	if max < 0 && atom.nullable() {
		return nil, p.errorf("unbounded repetition of an expression that can match empty is not supported")
	}
	return n, nil
}

// parseQuantifier reads ?, *, + or {n}, {n,}, {,m}, {n,m} if one is next.
func (p *reParser) parseQuantifier() (min, max int, ok bool, err error) {
	switch p.peek() {
	case '?':
		p.next()
		return 0, 1, true, nil
	case '*':
		p.next()
		return 0, -1, true, nil
	case '+':
		p.next()
		return 1, -1, true, nil
	case '{':
	default:
		return 0, 0, false, nil
	}
	end := strings.IndexByte(p.src[p.pos:], '}')
	if end < 0 {
		return 0, 0, false, p.errorf("unterminated { at offset %d", p.pos)
	}
	body := p.src[p.pos+1 : p.pos+end]
	lo, hi, comma := strings.Cut(body, ",")
	min, max = 0, -1
	if lo != "" {
		if min, err = strconv.Atoi(lo); err != nil {
			return 0, 0, false, p.errorf("bad repetition {%s}", body)
		}
	}
	if !comma {
		max = min
	} else if hi != "" {
		if max, err = strconv.Atoi(hi); err != nil {
			return 0, 0, false, p.errorf("bad repetition {%s}", body)
		}
	}
	if (lo == "" && !comma) || min < 0 || (max >= 0 && max < min) || min > 1000 || max > 1000 {
		return 0, 0, false, p.errorf("bad repetition {%s}", body)
	}
	p.pos += end + 1
	return min, max, true, nil
}

func (p *reParser) parseAtom() (*reNode, error) {
	start := p.pos
	switch r := p.next(); r {
	case '(':
		return p.parseGroup()
	case '[':
		c, err := p.parseClass()
		if err != nil {
			return nil, err
		}
		return &reNode{kind: reClass, cls: c.finish()}, nil
	case '.':
		return &reNode{kind: reClass, cls: (&charClass{neg: true, ranges: []runeRange{{'\n', '\n'}}}).finish()}, nil
	case '\\':
		c, err := p.parseEscape(false)
		if err != nil {
			return nil, err
		}
		return &reNode{kind: reClass, cls: c.finish()}, nil
	case '^', '$':
		return nil, p.errorf("anchor %c is not supported", r)
	case '*', '+', '?', '{':
		return nil, p.errorf("quantifier %c at offset %d has nothing to repeat", r, start)
	default:
		return p.literal(r)
	}
}

// literal is one rune; under (?i) only ASCII letters and non-letters are
// accepted, as Oniguruma also matches multi-character case foldings (ß for
// "ss") which this engine does not: an ASCII run that is such a folding is
// refused too.
func (p *reParser) literal(r rune) (*reNode, error) {
	if p.fold {
		if r >= utf8.RuneSelf && unicode.SimpleFold(r) != r {
			return nil, p.errorf("case-insensitive non-ASCII letter %q is not supported", r)
		}
		if prev := p.src[:p.pos]; len(prev) >= 2 {
			for _, f := range []string{"ss", "st", "ff", "fi", "fl"} {
				if strings.HasSuffix(strings.ToLower(prev), f) {
					return nil, p.errorf("case-insensitive %q may match a multi-character case folding", f)
				}
			}
		}
	}
	return &reNode{kind: reClass, cls: literalClass(r, p.fold)}, nil
}

func (p *reParser) parseGroup() (*reNode, error) {
	kind, neg := reConcat, false
	saved := p.fold
	defer func() { p.fold = saved }()
	if strings.HasPrefix(p.src[p.pos:], "?") {
		rest := p.src[p.pos:]
		switch {
		case strings.HasPrefix(rest, "?:"):
			p.pos += 2
		case strings.HasPrefix(rest, "?="):
			p.pos += 2
			kind = reLook
		case strings.HasPrefix(rest, "?!"):
			p.pos += 2
			kind, neg = reLook, true
		case strings.HasPrefix(rest, "?i:"), strings.HasPrefix(rest, "?-i:"):
			p.fold = rest[1] == 'i'
			p.pos += strings.IndexByte(rest, ':') + 1
		case strings.HasPrefix(rest, "?i)"), strings.HasPrefix(rest, "?-i)"):
			// An inline flag: it holds to the end of the enclosing group.
			saved = rest[1] == 'i'
			p.pos += strings.IndexByte(rest, ')') + 1
			return nil, nil
		case strings.HasPrefix(rest, "?<=") || strings.HasPrefix(rest, "?<!"):
			return nil, p.errorf("look-behind (%s is not supported", rest[:3])
		default:
			return nil, p.errorf("group (%s at offset %d is not supported", firstRunes(rest, 3), p.pos-1)
		}
	}
	sub, err := p.parseAlt()
	if err != nil {
		return nil, err
	}
	if p.eof() || p.next() != ')' {
		return nil, p.errorf("missing )")
	}
	if kind == reLook {
		return &reNode{kind: reLook, subs: []*reNode{sub}, neg: neg}, nil
	}
	return sub, nil
}

func firstRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

// parseClass parses a bracket expression after its [.
func (p *reParser) parseClass() (*charClass, error) {
	c := &charClass{fold: p.fold}
	if !p.eof() && p.peek() == '^' {
		p.next()
		c.neg = true
	}
	first := true
	for {
		if p.eof() {
			return nil, p.errorf("missing ]")
		}
		r := p.next()
		switch {
		case r == ']' && !first:
			return c, nil
		case r == ']' || r == '[':
			return nil, p.errorf("%c inside a character class at offset %d is not supported", r, p.pos-1)
		case r == '&' && !p.eof() && p.peek() == '&':
			return nil, p.errorf("class intersection && is not supported")
		}
		first = false
		lo := r
		if r == '\\' {
			e, err := p.parseEscape(true)
			if err != nil {
				return nil, err
			}
			if !isSingleRune(e) {
				c.merge(e)
				continue
			}
			lo = e.ranges[0].lo
		}
		hi, err := p.classRangeEnd(lo)
		if err != nil {
			return nil, err
		}
		if p.fold && (lo >= utf8.RuneSelf || hi >= utf8.RuneSelf) {
			return nil, p.errorf("case-insensitive non-ASCII class member is not supported")
		}
		c.ranges = append(c.ranges, runeRange{lo, hi})
	}
}

// classRangeEnd reads "-hi" after lo if a range follows, else returns lo.
func (p *reParser) classRangeEnd(lo rune) (rune, error) {
	rest := p.src[p.pos:]
	if len(rest) < 2 || rest[0] != '-' || rest[1] == ']' {
		return lo, nil
	}
	p.next()
	hi := p.next()
	if hi == '\\' {
		e, err := p.parseEscape(true)
		if err != nil {
			return 0, err
		}
		if !isSingleRune(e) {
			return 0, p.errorf("a range ending in a class escape is not supported")
		}
		hi = e.ranges[0].lo
	} else if hi == '[' {
		return 0, p.errorf("[ inside a character class is not supported")
	}
	if hi < lo {
		return 0, p.errorf("empty range %q-%q", lo, hi)
	}
	return hi, nil
}

func isSingleRune(c *charClass) bool {
	return !c.neg && c.mask == 0 && len(c.notIn) == 0 && len(c.ranges) == 1 && c.ranges[0].lo == c.ranges[0].hi
}

// merge adds the members of e (an escape's class) to c.
func (c *charClass) merge(e *charClass) {
	if e.neg {
		c.notIn = append(c.notIn, &charClass{mask: e.mask, ranges: e.ranges})
		return
	}
	c.mask |= e.mask
	c.ranges = append(c.ranges, e.ranges...)
}

// parseEscape parses what follows a backslash: an escaped rune (as a
// one-rune class) or a class escape. Within a bracket expression the
// negated escapes (\S, \P{..}) come back as neg.
func (p *reParser) parseEscape(inClass bool) (*charClass, error) {
	if p.eof() {
		return nil, p.errorf("trailing backslash")
	}
	r := p.next()
	one := func(r rune) (*charClass, error) {
		return &charClass{ranges: []runeRange{{r, r}}, fold: p.fold}, nil
	}
	switch r {
	case 'n':
		return one('\n')
	case 'r':
		return one('\r')
	case 't':
		return one('\t')
	case 'f':
		return one('\f')
	case 'v':
		return one('\v')
	case 'a':
		return one('\a')
	case 'e':
		return one(0x1b)
	case 'x', 'u':
		v, err := p.parseHex(r)
		if err != nil {
			return nil, err
		}
		return one(v)
	case 's', 'S':
		return &charClass{mask: bitSpace, neg: r == 'S'}, nil
	case 'd', 'D':
		return &charClass{mask: 1 << catNd, neg: r == 'D'}, nil
	case 'w', 'W':
		return &charClass{mask: maskL | maskM | 1<<catNd | 1<<catNl | 1<<catPc, ranges: onigWordExtra, neg: r == 'W'}, nil
	case 'p', 'P':
		return p.parseProperty(r == 'P')
	}
	if r < utf8.RuneSelf && !unicode.IsLetter(r) && !unicode.IsDigit(r) {
		return one(r) // an escaped punctuation or space character
	}
	return nil, p.errorf("escape \\%c is not supported", r)
}

func (p *reParser) parseHex(kind rune) (rune, error) {
	rest := p.src[p.pos:]
	var digits string
	switch {
	case kind == 'x' && strings.HasPrefix(rest, "{"):
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return 0, p.errorf("unterminated \\x{")
		}
		digits = rest[1:end]
		p.pos += end + 1
	case kind == 'x':
		digits = rest[:min(2, len(rest))]
		p.pos += len(digits)
	default:
		digits = rest[:min(4, len(rest))]
		p.pos += len(digits)
	}
	v, err := strconv.ParseUint(digits, 16, 32)
	if err != nil || digits == "" || v > unicode.MaxRune || (kind == 'u' && len(digits) != 4) {
		return 0, p.errorf("bad hex escape \\%c%s", kind, digits)
	}
	return rune(v), nil
}

// onigWordExtra are the runes outside letters, marks, Nd, Nl and Pc that
// Oniguruma's \w matches (checked on every code point against the Rust
// tokenizers): the Latin-1 superscripts and fractions, and the symbols
// that are Other_Alphabetic (circled and squared letters).
var onigWordExtra = []runeRange{{0xB2, 0xB3}, {0xB9, 0xB9}, {0xBC, 0xBE},
	{0x24B6, 0x24E9}, {0x1F130, 0x1F149}, {0x1F150, 0x1F169}, {0x1F170, 0x1F189}}

// propertyMasks are the \p{..} names accepted: general categories and
// their groups (Oniguruma also matches names case-insensitively).
var propertyMasks = func() map[string]uint32 {
	m := map[string]uint32{"l": maskL, "m": maskM, "n": maskN, "p": maskP, "s": maskS, "z": maskZ, "c": maskC,
		"letter": maskL, "mark": maskM, "number": maskN, "punctuation": maskP, "symbol": maskS,
		"separator": maskZ, "other": maskC, "any": ^uint32(0)}
	for i, name := range catNames {
		m[strings.ToLower(name)] = 1 << i
	}
	return m
}()

func (p *reParser) parseProperty(neg bool) (*charClass, error) {
	rest := p.src[p.pos:]
	end := strings.IndexByte(rest, '}')
	if !strings.HasPrefix(rest, "{") || end < 0 {
		return nil, p.errorf("\\p needs {name}")
	}
	name := rest[1:end]
	p.pos += end + 1
	if strings.HasPrefix(name, "^") {
		neg = !neg
		name = name[1:]
	}
	key := strings.ToLower(strings.NewReplacer("_", "", " ", "", "-", "").Replace(name))
	mask, ok := propertyMasks[key]
	if !ok {
		return nil, p.errorf("unicode property \\p{%s} is not supported", name)
	}
	return &charClass{mask: mask, neg: neg, fold: p.fold}, nil
}
