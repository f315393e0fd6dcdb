package corpus

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The alphabets below are chosen so that Unicode NFKC leaves every letter
// and digit of a generated base prompt unchanged (plain ASCII, CJK unified
// ideographs, emoji). That is what lets the generator know, without running
// a normalizer, that two bases whose letters and digits differ stay
// different under every normalization mode (see Generator.newBase).

var englishWords = strings.Fields(`
the of and to in is that for it as with was on be by this are or from at an
which have not can has will more one all their there been if would about when
what so some them these two other into time only could new may then do any
like such how each use our over also first most where after through very well
even because those many much before under while should between each long both
data model system function value number list string table file code error
result user question answer problem example method process language text image
network memory server request response energy water light history science
student teacher school city country company market price growth policy health
patient doctor study research theory equation graph matrix vector probability
explain describe write summarize translate compare calculate list identify
analyze generate create design implement improve evaluate classify convert
simple complex important different possible available common specific
following given previous next main key basic final general local global
quickly carefully clearly briefly exactly roughly
story poem essay letter email report review article recipe plan
Python JavaScript Go Rust SQL JSON HTML Linux Paris London Tokyo Einstein
Shakespeare Newton Amazon Mars Pacific Europe Africa Monday January
`)

// Punctuation that ends or splits an English sentence.
var englishStops = []string{". ", ". ", ". ", "? ", "! ", "; ", ": "}

// Common Chinese characters (CJK unified ideographs, all NFKC-stable).
var hanzi = []rune(`的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处理府研质`)

var emoji = []rune(`😀😂😊😍🤔😎😭🙏👍👋🔥✨🎉🚀💡📚📝💻🌍🌟🍕☕🐍🐱🐶🌈⚡🎵🏆✅❌`)

// Chinese punctuation (some fullwidth forms that NFKC maps to ASCII; they
// are punctuation either way, so a prompt's letters are unaffected).
var hanziStops = []string{"，", "。", "？", "！", "；", "：", "、"}

var codeLines = []string{
	`def f(x):`,
	`	return x * 2`,
	`print("hello, world\n")`,
	`path = "C:\\Users\\data\\file.txt"`,
	`s = 'it\'s a "quoted" string'`,
	`for (int i = 0; i < n; i++) {`,
	`	sum += a[i];`,
	`}`,
	`if err != nil {`,
	`	return fmt.Errorf("read %s: %w", name, err)`,
	`SELECT name, COUNT(*) FROM users GROUP BY name;`,
	`const re = /\d+\.\d*/g;`,
	`x = {"key": [1, 2, 3], "nested": {"a": null}}`,
	`echo "$HOME" | tr '\t' ' '`,
}

// lognormal draws a length with the given median and spread, clipped.
func lognormal(rng *rand.Rand, median, sigma float64, lo, hi int) int {
	n := int(median * math.Exp(sigma*rng.NormFloat64()))
	return max(lo, min(hi, n))
}

// textGen appends generated text to a buffer, counting runes as it goes.
type textGen struct {
	rng   *rand.Rand
	buf   []byte
	runes int
}

func (t *textGen) add(s string) {
	t.buf = append(t.buf, s...)
	t.runes += utf8.RuneCountInString(s)
}

func (t *textGen) addRune(r rune) {
	t.buf = utf8.AppendRune(t.buf, r)
	t.runes++
}

// english writes sentences until the text is at least target runes long.
func (t *textGen) english(target int, withEmoji bool) {
	for t.runes < target {
		n := 3 + t.rng.IntN(14)
		for i := range n {
			w := englishWords[t.rng.IntN(len(englishWords))]
			if i == 0 && w[0] >= 'a' && w[0] <= 'z' {
				t.buf = append(t.buf, w[0]-'a'+'A')
				t.add(w[1:])
				t.runes++
			} else {
				t.add(w)
			}
			switch r := t.rng.IntN(40); {
			case i == n-1:
			case r == 0:
				t.add(", ")
			case r == 1:
				t.add(" " + strconv.Itoa(t.rng.IntN(2000)) + " ")
			case r == 2 && withEmoji:
				t.add(" ")
				t.addRune(emoji[t.rng.IntN(len(emoji))])
				t.add(" ")
			default:
				t.add(" ")
			}
		}
		t.add(englishStops[t.rng.IntN(len(englishStops))])
		if t.rng.IntN(12) == 0 {
			t.buf = t.buf[:len(t.buf)-1] // drop the stop's space before a paragraph break
			t.add("\n\n")
		}
	}
	t.trimEnd()
}

// chinese writes CJK sentences, with the odd ASCII term and number.
func (t *textGen) chinese(target int, withEmoji bool) {
	for t.runes < target {
		n := 6 + t.rng.IntN(24)
		for range n {
			t.addRune(hanzi[t.rng.IntN(len(hanzi))])
			switch t.rng.IntN(60) {
			case 0:
				t.add(englishWords[t.rng.IntN(len(englishWords))])
			case 1:
				t.add(strconv.Itoa(t.rng.IntN(100)))
			case 2:
				if withEmoji {
					t.addRune(emoji[t.rng.IntN(len(emoji))])
				}
			}
		}
		t.add(hanziStops[t.rng.IntN(len(hanziStops))])
		if t.rng.IntN(15) == 0 {
			t.add("\n")
		}
	}
	t.trimEnd()
}

// code writes a question followed by a fenced code block: tabs, quotes
// and backslashes, which JSON has to escape.
func (t *textGen) code(target int) {
	t.english(min(target/3+20, 400), false)
	t.add("\n\n```\n")
	for t.runes < target {
		t.add(codeLines[t.rng.IntN(len(codeLines))])
		t.add("\n")
	}
	t.add("```")
}

// trimEnd drops trailing white space, so that a generated base never ends
// in white space and a variant that adds some is a different string.
func (t *textGen) trimEnd() {
	for len(t.buf) > 0 {
		c := t.buf[len(t.buf)-1]
		if c != ' ' && c != '\n' && c != '\t' {
			return
		}
		t.buf = t.buf[:len(t.buf)-1]
		t.runes--
	}
}
