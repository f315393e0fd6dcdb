package tokenizer

import (
	"fmt"
	"sync"
	"unicode/utf8"
)

// regex is a compiled pattern, run by a backtracking matcher with
// Oniguruma's semantics: leftmost-first alternation, greedy (or lazy)
// quantifiers, atomic look-ahead.
type regex struct {
	src  string
	prog []inst
	pool sync.Pool // *matcher
}

type instOp uint8

const (
	opClass  instOp = iota // one rune of cls, then pc+1
	opRepeat               // min..max runes of cls (greedy or lazy), then pc+1
	opSplit                // try x, on failure y
	opJmp                  // go to x
	opLook                 // look-ahead: sub-program at pc+1; then x (neg inverts)
	opMatch                // success
)

type inst struct {
	op       instOp
	greedy   bool
	neg      bool
	cls      *charClass
	x, y     int32
	min, max int32
}

// maxProg bounds a compiled program (counted repetitions are unrolled).
const maxProg = 20000

func compileRegex(src string) (*regex, error) {
	n, err := parseRegex(src)
	if err != nil {
		return nil, err
	}
	c := &reCompiler{}
	c.emit(n)
	c.prog = append(c.prog, inst{op: opMatch})
	if len(c.prog) > maxProg {
		return nil, fmt.Errorf("tokenizer: regex %q: repetitions are too large", src)
	}
	re := &regex{src: src, prog: c.prog}
	re.pool.New = func() any { return &matcher{re: re} }
	return re, nil
}

type reCompiler struct{ prog []inst }

func (c *reCompiler) add(in inst) int {
	c.prog = append(c.prog, in)
	return len(c.prog) - 1
}

func (c *reCompiler) emit(n *reNode) {
	if len(c.prog) > maxProg {
		return
	}
	switch n.kind {
	case reEmpty:
	case reClass:
		c.add(inst{op: opClass, cls: n.cls})
	case reConcat:
		for _, s := range n.subs {
			c.emit(s)
		}
	case reAlt:
		var jumps []int
		for i, s := range n.subs {
			if i == len(n.subs)-1 {
				c.emit(s)
				break
			}
			split := c.add(inst{op: opSplit})
			c.prog[split].x = int32(len(c.prog))
			c.emit(s)
			jumps = append(jumps, c.add(inst{op: opJmp}))
			c.prog[split].y = int32(len(c.prog))
		}
		for _, j := range jumps {
			c.prog[j].x = int32(len(c.prog))
		}
	case reLook:
		look := c.add(inst{op: opLook, neg: n.neg})
		c.emit(n.subs[0])
		c.add(inst{op: opMatch})
		c.prog[look].x = int32(len(c.prog))
	case reRepeat:
		c.emitRepeat(n)
	}
}

func (c *reCompiler) emitRepeat(n *reNode) {
	sub := n.subs[0]
	if sub.kind == reClass {
		c.add(inst{op: opRepeat, cls: sub.cls, min: int32(n.min), max: int32(n.max), greedy: n.greedy})
		return
	}
	for range n.min {
		c.emit(sub)
	}
	// split prefers x: the body when greedy, the exit when lazy.
	branch := func(split int, body, exit int32) {
		if n.greedy {
			c.prog[split].x, c.prog[split].y = body, exit
		} else {
			c.prog[split].x, c.prog[split].y = exit, body
		}
	}
	if n.max < 0 {
		split := c.add(inst{op: opSplit})
		c.emit(sub)
		c.add(inst{op: opJmp, x: int32(split)})
		branch(split, int32(split+1), int32(len(c.prog)))
		return
	}
	var splits []int
	for range n.max - n.min {
		splits = append(splits, c.add(inst{op: opSplit}))
		c.emit(sub)
	}
	for _, s := range splits {
		branch(s, int32(s+1), int32(len(c.prog)))
	}
}

// matcher holds the backtracking stack for one search at a time.
type matcher struct {
	re    *regex
	s     string
	stack []btEntry
}

type btKind uint8

const (
	btResume btKind = iota // continue at pc, pos
	btGreedy               // give back one rune of the repeat at pc (aux: its minimal end)
	btLazy                 // take one more rune for the lazy repeat at pc (aux: count so far)
)

type btEntry struct {
	kind btKind
	pc   int32
	pos  int32
	aux  int32
}

func decodeAt(s string, pos int) (rune, int) {
	if c := s[pos]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[pos:])
}

// run matches the program from pc at pos and returns the end of the
// first match in priority order, or -1. Entries it pushes are gone when it
// returns, which makes look-aheads atomic.
func (m *matcher) run(pc, pos int) int {
	base := len(m.stack)
	prog, s := m.re.prog, m.s
	for {
		ok := true
		in := &prog[pc]
		switch in.op {
		case opClass:
			if pos < len(s) {
				if r, n := decodeAt(s, pos); in.cls.has(r) {
					pos += n
					pc++
					continue
				}
			}
			ok = false
		case opRepeat:
			ok = m.repeat(in, &pc, &pos)
		case opSplit:
			m.stack = append(m.stack, btEntry{kind: btResume, pc: in.y, pos: int32(pos)})
			pc = int(in.x)
			continue
		case opJmp:
			pc = int(in.x)
			continue
		case opLook:
			if (m.run(pc+1, pos) >= 0) != in.neg {
				pc = int(in.x)
				continue
			}
			ok = false
		case opMatch:
			m.stack = m.stack[:base]
			return pos
		}
		if ok {
			continue
		}
		if !m.backtrack(base, &pc, &pos) {
			return -1
		}
	}
}

// repeat runs an opRepeat at *pos, pushing what backtracking needs.
func (m *matcher) repeat(in *inst, pc, pos *int) bool {
	s, p := m.s, *pos
	count := int32(0)
	limit := in.max
	if !in.greedy {
		limit = in.min
	}
	minEnd := -1
	for (limit < 0 || count < limit) && p < len(s) {
		if count == in.min {
			minEnd = p
		}
		r, n := decodeAt(s, p)
		if !in.cls.has(r) {
			break
		}
		p += n
		count++
	}
	if count < in.min {
		return false
	}
	if count == in.min {
		minEnd = p
	}
	if in.greedy && p > minEnd {
		m.stack = append(m.stack, btEntry{kind: btGreedy, pc: int32(*pc), pos: int32(p), aux: int32(minEnd)})
	} else if !in.greedy && (in.max < 0 || count < in.max) {
		m.stack = append(m.stack, btEntry{kind: btLazy, pc: int32(*pc), pos: int32(p), aux: count})
	}
	*pc++
	*pos = p
	return true
}

// backtrack pops entries down to base until one gives a new state.
func (m *matcher) backtrack(base int, pc, pos *int) bool {
	for len(m.stack) > base {
		e := m.stack[len(m.stack)-1]
		m.stack = m.stack[:len(m.stack)-1]
		switch e.kind {
		case btResume:
			*pc, *pos = int(e.pc), int(e.pos)
			return true
		case btGreedy:
			_, n := utf8.DecodeLastRuneInString(m.s[:e.pos])
			p := e.pos - int32(n)
			if p > e.aux {
				m.stack = append(m.stack, btEntry{kind: btGreedy, pc: e.pc, pos: p, aux: e.aux})
			}
			*pc, *pos = int(e.pc)+1, int(p)
			return true
		case btLazy:
			in := &m.re.prog[e.pc]
			if int(e.pos) >= len(m.s) {
				continue
			}
			r, n := decodeAt(m.s, int(e.pos))
			if !in.cls.has(r) {
				continue
			}
			p, count := e.pos+int32(n), e.aux+1
			if in.max < 0 || count < in.max {
				m.stack = append(m.stack, btEntry{kind: btLazy, pc: e.pc, pos: p, aux: count})
			}
			*pc, *pos = int(e.pc)+1, int(p)
			return true
		}
	}
	return false
}

// find returns the leftmost match starting at or after from.
func (m *matcher) find(from int) (int, int) {
	s := m.s
	for p := from; p <= len(s); {
		if e := m.run(0, p); e >= 0 {
			return p, e
		}
		if p == len(s) {
			break
		}
		_, n := decodeAt(s, p)
		p += n
	}
	return -1, -1
}

// span is a piece of a string found by a pattern: a match or the text
// between matches.
type span struct {
	start, end int
	match      bool
}

// findMatches covers s with matches and gaps, in order, as the Rust
// tokenizers' Pattern::find_matches does for an Oniguruma regex: empty
// matches are kept, but not one right where the previous match ended.
func (re *regex) findMatches(s string, dst []span) []span {
	if s == "" {
		return append(dst, span{0, 0, false})
	}
	m := re.pool.Get().(*matcher)
	m.s = s
	prev, lastEnd, lastMatchEnd := 0, 0, -1
	for lastEnd <= len(s) {
		st, e := m.find(lastEnd)
		if st < 0 {
			break
		}
		if st == e && lastMatchEnd == e {
			if lastEnd == len(s) {
				break
			}
			_, n := decodeAt(s, lastEnd)
			lastEnd += n
			continue
		}
		if prev != st {
			dst = append(dst, span{prev, st, false})
		}
		dst = append(dst, span{st, e, true})
		prev, lastEnd, lastMatchEnd = e, e, e
	}
	if prev != len(s) {
		dst = append(dst, span{prev, len(s), false})
	}
	m.s = ""
	re.pool.Put(m)
	return dst
}
