// Package corpus generates a deterministic synthetic dataset in the
// BAAI/Infinity-Instruct 0625 schema, for tests and benchmarks that need
// the real dataset's shape at its scale: long-tailed prompt lengths,
// multi-turn conversations, CJK and emoji, JSON escapes, and duplicated
// first-turn prompts in known numbers.
//
// Duplicates come in four kinds, each found by a different dedup
// normalization mode (see Counts.Removed):
//
//   - exact: the first human turn of an earlier record, byte for byte;
//   - whitespace: an earlier base prompt with white space added or changed;
//   - case: an earlier base prompt with one ASCII letter's case flipped;
//   - punctuation: an earlier base prompt with trailing punctuation added,
//     or one letter written in its fullwidth form (which NFKC folds back).
//
// Every other record's first turn is a new base prompt whose letters and
// digits (lowercased) differ from every earlier base, so no two bases meet
// under any normalization and the counts above are exact.
package corpus

import (
	"math"
	"math/rand/v2"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/zeebo/xxh3"
)

// Turn is one conversation turn: From is "human" or "gpt".
type Turn struct {
	From  string `parquet:"from,optional"`
	Value string `parquet:"value,optional"`
}

// Label is the dataset's ability tagging; any list may be empty.
type Label struct {
	AbilityEn     []string `parquet:"ability_en,list"`
	AbilityZh     []string `parquet:"ability_zh,list"`
	CateAbilityEn []string `parquet:"cate_ability_en,list"`
	CateAbilityZh []string `parquet:"cate_ability_zh,list"`
}

// Row is one row of the Infinity-Instruct 0625 schema.
type Row struct {
	ID            string `parquet:"id,optional"`
	Conversations []Turn `parquet:"conversations,list"`
	Label         Label  `parquet:"label"`
	Langdetect    string `parquet:"langdetect,optional"`
	Source        string `parquet:"source,optional"`
	// ASCII asks the JSON encoder to write every non-ASCII character as a
	// \u escape (as Python's json.dumps does by default) instead of UTF-8.
	ASCII bool `parquet:"-"`
}

// Kind is what a record's first human turn is.
type Kind uint8

const (
	KindBase Kind = iota
	KindExact
	KindWhitespace
	KindCase
	KindPunct
	numKinds
)

// Rates of each duplicate kind, per record. Exact duplicates match the real
// dataset (3,995 of 658,671 extracted prompts, 0.61%).
const (
	RateExact      = 0.0061
	RateWhitespace = 0.0010
	RateCase       = 0.0008
	RatePunct      = 0.0006
)

// Counts say how many records of each kind were generated.
type Counts struct {
	Records     int64
	Exact       int64
	Whitespace  int64
	Case        int64
	Punctuation int64
}

// Removed is how many records a dedup on the first-turn prompt removes
// with the given normalization mode (none, ws, lower, aggressive); -1 for
// an unknown mode.
func (c Counts) Removed(mode string) int64 {
	switch mode {
	case "none":
		return c.Exact
	case "ws":
		return c.Exact + c.Whitespace
	case "lower":
		return c.Exact + c.Whitespace + c.Case
	case "aggressive":
		return c.Exact + c.Whitespace + c.Case + c.Punctuation
	}
	return -1
}

// ref says how to rebuild a first turn: base prompt number base (drawn on
// attempt attempt), changed by variant kind number k.
type ref struct {
	base    int32
	attempt uint8
	kind    Kind
	k       uint16
}

// Generator produces records one at a time; the same seed gives the same
// records.
type Generator struct {
	seed    uint64
	rng     *rand.Rand
	n       int64
	refs    []ref               // first turn of every record so far
	bases   []int32             // record numbers that introduced a base prompt
	seen    map[uint64]struct{} // hashes of the letters and digits of each base
	family  map[int32]*[numKinds]uint16
	counts  Counts
	scratch []byte
	rec     Row
}

// New returns a generator for seed.
func New(seed uint64) *Generator {
	return &Generator{
		seed:   seed,
		rng:    rand.New(rand.NewPCG(seed, 0x636f72707573)),
		seen:   map[uint64]struct{}{},
		family: map[int32]*[numKinds]uint16{},
	}
}

// Counts returns the counts of the records generated so far.
func (g *Generator) Counts() Counts { return g.counts }

// Next returns the next record. It is reused by the following call.
func (g *Generator) Next() *Row {
	i := g.n
	g.n++
	g.counts.Records++
	first, lang, style := g.firstTurn(int32(i))
	r := &g.rec
	r.ID = strconv.FormatInt(i, 10)
	r.Langdetect = lang
	r.Source = pick(g.rng, sources)
	r.ASCII = g.rng.IntN(10) == 0
	r.Label = labels[g.rng.IntN(len(labels))]
	r.Conversations = append(r.Conversations[:0], Turn{From: "human", Value: first})
	turns := 1
	for t := g.rng.Float64(); t < 0.35 && turns < 8; t = g.rng.Float64() * 1.2 {
		turns++
	}
	for t := range turns {
		r.Conversations = append(r.Conversations, Turn{From: "gpt", Value: g.text(lang, style, 250, 1.0, 8000)})
		if t < turns-1 {
			r.Conversations = append(r.Conversations, Turn{From: "human", Value: g.text(lang, style, 80, 0.9, 2000)})
		}
	}
	return r
}

// text generates a turn other than the first from the main stream.
func (g *Generator) text(lang string, style int, median, sigma float64, hi int) string {
	t := textGen{rng: g.rng, buf: g.scratch[:0]}
	n := lognormal(g.rng, median, sigma, 2, hi)
	if lang == "zh-cn" {
		t.chinese(n, style == styleEmoji)
	} else {
		t.english(n, style == styleEmoji)
	}
	g.scratch = t.buf
	return string(t.buf)
}

// firstTurn chooses what record i's first human turn is and counts it.
func (g *Generator) firstTurn(i int32) (string, string, int) {
	r := g.rng.Float64()
	if len(g.refs) > 0 {
		switch {
		case r < RateExact:
			return g.emit(KindExact, g.refs[g.rng.IntN(len(g.refs))])
		case r < RateExact+RateWhitespace:
			return g.variant(KindWhitespace)
		case r < RateExact+RateWhitespace+RateCase:
			return g.variant(KindCase)
		case r < RateExact+RateWhitespace+RateCase+RatePunct:
			return g.variant(KindPunct)
		}
	}
	return g.newBase(i)
}

// emit records ref as this record's first turn, counted as kind.
func (g *Generator) emit(kind Kind, f ref) (string, string, int) {
	switch kind {
	case KindExact:
		g.counts.Exact++
	case KindWhitespace:
		g.counts.Whitespace++
	case KindCase:
		g.counts.Case++
	case KindPunct:
		g.counts.Punctuation++
	}
	g.refs = append(g.refs, f)
	return g.build(f)
}

// newBase draws a base prompt whose letters and digits differ from those of
// every earlier base. A hash collision only causes a redraw, so the check
// errs on the safe side.
func (g *Generator) newBase(i int32) (string, string, int) {
	for attempt := uint8(0); ; attempt++ {
		text, lang, style := g.base(i, attempt)
		h := lettersHash(g.scratch[:0], text)
		if _, dup := g.seen[h]; dup && attempt < 255 {
			continue
		}
		g.seen[h] = struct{}{}
		g.bases = append(g.bases, i)
		g.refs = append(g.refs, ref{base: i, attempt: attempt})
		return text, lang, style
	}
}

// variant makes a new variant of a random earlier base, or, when the
// bases tried cannot take that kind of change, an exact duplicate.
func (g *Generator) variant(kind Kind) (string, string, int) {
	for range 8 {
		b := g.bases[g.rng.IntN(len(g.bases))]
		f := g.refs[b]
		fam := g.family[b]
		if fam == nil {
			fam = new([numKinds]uint16)
			g.family[b] = fam
		}
		f.kind, f.k = kind, fam[kind]
		if f.k == ^uint16(0) {
			continue
		}
		if _, ok := g.apply(f); !ok {
			continue
		}
		fam[kind]++
		return g.emit(kind, f)
	}
	return g.emit(KindExact, g.refs[g.rng.IntN(len(g.refs))])
}

// Prompt styles of a base, which later turns follow.
const (
	styleProse = iota
	styleEmoji
	styleCode
)

// base draws base prompt i from its own random stream, so that variants
// and duplicates can rebuild it later without keeping its text.
func (g *Generator) base(i int32, attempt uint8) (string, string, int) {
	rng := rand.New(rand.NewPCG(g.seed^0x9e3779b97f4a7c15, uint64(i)<<8|uint64(attempt)))
	t := textGen{rng: rng, buf: g.scratch[:0]}
	n := promptLength(rng)
	lang, style := "en", styleProse
	switch r := rng.IntN(100); {
	case r < 14:
		lang = "zh-cn"
		t.chinese(max(8, n/2), rng.IntN(10) == 0) // Chinese says as much in fewer characters
	case r < 28:
		style = styleCode
		t.code(n)
	case r < 34:
		style = styleEmoji
		t.english(n, true)
	default:
		t.english(n, false)
	}
	if r := rng.IntN(200); lang == "en" && r < len(otherLangs) {
		lang = otherLangs[r] // langdetect is sometimes wrong in the real data
	}
	g.scratch = t.buf
	return string(t.buf), lang, style
}

// promptLength draws a first-turn length in runes: median about 300, and
// a long tail of pasted documents (3 in 1,000, log-uniform up to 30k).
func promptLength(rng *rand.Rand) int {
	if rng.IntN(1000) < 3 {
		return int(3000 * math.Pow(10, rng.Float64()))
	}
	return lognormal(rng, 280, 0.85, 8, 30000)
}

var otherLangs = []string{"de", "fr", "ja", "ko", "es", "it"}

// build returns the first turn f describes.
func (g *Generator) build(f ref) (string, string, int) {
	text, ok := g.apply(f)
	if !ok {
		panic("corpus: a recorded variant can no longer be built")
	}
	_, lang, style := g.base(f.base, f.attempt)
	return text, lang, style
}

// apply rebuilds base f.base and changes it as f.kind, f.k say. Each k
// gives a different string, and different kinds never meet: whitespace
// variants keep every letter, case variants keep the length, punctuation
// variants either grow or contain a fullwidth letter.
func (g *Generator) apply(f ref) (string, bool) {
	text, _, _ := g.base(f.base, f.attempt)
	k := int(f.k)
	switch f.kind {
	case KindWhitespace:
		// An inner change chosen by k (none, a doubled space, a space made
		// a newline or a no-break space), then a suffix that spells k+1 in
		// binary with spaces and tabs after a newline: unique per k.
		b := []byte(text)
		if sp := indexByte(b, ' '); sp >= 0 {
			switch k % 4 {
			case 1:
				b = append(b[:sp+1], b[sp:]...)
			case 2:
				b[sp] = '\n'
			case 3:
				b = append(b[:sp], append([]byte("\u00a0"), b[sp+1:]...)...)
			}
		}
		b = append(b, '\n')
		for v, bit := k+1, 1<<(bitsLen(k+1)-1); bit > 0; bit >>= 1 {
			if v&bit != 0 {
				b = append(b, ' ')
			} else {
				b = append(b, '\t')
			}
		}
		return string(b), true
	case KindCase:
		pos := nthASCIILetter(text, k)
		if pos < 0 {
			return "", false
		}
		b := []byte(text)
		b[pos] ^= 0x20
		return string(b), true
	case KindPunct:
		if k%2 == 0 {
			b := []byte(text)
			for range k/2 + 1 {
				b = append(b, '!')
			}
			return string(b), true
		}
		pos := nthASCIILetter(text, k/2)
		if pos < 0 {
			return "", false
		}
		// Fullwidth forms: U+FF21 is 'A', U+FF41 is 'a'.
		wide := rune(0xFF21) + rune(text[pos]|0x20-'a')
		if text[pos] >= 'a' {
			wide += 0x20
		}
		return text[:pos] + string(wide) + text[pos+1:], true
	}
	return text, true
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

func bitsLen(v int) int {
	n := 0
	for ; v > 0; v >>= 1 {
		n++
	}
	return n
}

// nthASCIILetter is the byte offset of the k-th ASCII letter of s, or -1.
func nthASCIILetter(s string, k int) int {
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20
		if c >= 'a' && c <= 'z' {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return -1
}

// lettersHash hashes the lowercased letters and digits of s: two prompts
// with different hashes differ under every dedup normalization, because
// normalizing only changes white space, case and punctuation, and (for the
// alphabets generated here) NFKC leaves letters and digits alone.
func lettersHash(buf []byte, s string) uint64 {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			switch {
			case c >= 'A' && c <= 'Z':
				buf = append(buf, c+0x20)
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
				buf = append(buf, c)
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			buf = utf8.AppendRune(buf, unicode.ToLower(r))
		}
	}
	return xxh3.Hash(buf)
}

// pick chooses from weighted options.
func pick(rng *rand.Rand, opts []weighted) string {
	n := rng.IntN(opts[len(opts)-1].cum)
	for _, o := range opts {
		if n < o.cum {
			return o.name
		}
	}
	return opts[len(opts)-1].name
}

type weighted struct {
	name string
	cum  int // cumulative weight
}

func cumulative(names []string, weights []int) []weighted {
	out := make([]weighted, len(names))
	sum := 0
	for i, n := range names {
		sum += weights[i]
		out[i] = weighted{n, sum}
	}
	return out
}

var sources = cumulative(
	[]string{"Subjective", "flan", "code_exercises", "MetaMath", "OpenHermes-2.5", "Orca-math-word-problems-200k", "Infinity-Instruct-3M", "glaive-code-assistant", "CodeFeedback", "AutoMathText"},
	[]int{30, 15, 10, 10, 10, 8, 7, 4, 4, 2},
)

var labels = []Label{
	{}, // the real data has empty labels too
	{[]string{"mathematical reasoning", "problem solved"}, []string{"数学推理", "问题解决"}, []string{"Mathematical Ability"}, []string{"数学能力"}},
	{[]string{"programming ability", "code writing"}, []string{"编程能力", "代码编写"}, []string{"Programming and Software Development"}, []string{"编程与软件开发"}},
	{[]string{"text understanding", "information extraction", "summarization"}, []string{"文本理解", "信息抽取", "总结"}, []string{"Natural Language Processing and Understanding", "Information Processing and Integration"}, []string{"自然语言处理与理解", "信息处理与整合"}},
	{[]string{"creative writing"}, []string{"创意写作"}, []string{"Creativity and Design"}, []string{"创意与设计"}},
	{[]string{"translation"}, []string{"翻译"}, []string{"Linguistic Knowledge, Multilingual and Multicultural Understanding"}, []string{"语言学知识、多语言与多元文化理解"}},
	{[]string{"knowledge question and answer", "common sense reasoning"}, []string{"知识问答", "常识推理"}, []string{"Open Knowledge Q&A", "Logic and Reasoning"}, []string{"开放知识问答", "逻辑与推理"}},
}
