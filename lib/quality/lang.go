package quality

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/abadojack/whatlanggo"
)

// LangConfig holds the lang check's settings.
type LangConfig struct {
	// MinChars: a prompt or answer with fewer letters than this (code
	// blocks aside) is not judged: short texts are too often misread.
	MinChars int
	// Sample: bytes of each text the identifier reads (from the start,
	// code blocks aside). Accuracy on the labelled sample stays the same
	// from 256 bytes on, and the cost grows with it.
	Sample int
}

// DefaultLang is what filter and stats use unless told otherwise.
var DefaultLang = LangConfig{MinChars: 40, Sample: 512}

// Lang reports an answer written in another language than its prompt.
// Each text is judged on its first cfg.Sample bytes outside fenced code
// blocks; a text with fewer than cfg.MinChars letters is not judged.
// Texts in different scripts (Latin, Cyrillic, Han, kana, Hangul, ...)
// differ; two texts that both read as English (a quarter of their words
// among the commonest English words) agree; the rest are identified with
// whatlanggo (trigram profiles), and a text it does not call reliable is
// not judged. The shortcuts keep the usual case, English and English,
// about a hundred times cheaper than whatlanggo.
func Lang(prompt, answer string, cfg *LangConfig) (detail string, bad bool) {
	p, a := prose(prompt, cfg.Sample), prose(answer, cfg.Sample)
	ps, pn := dominantScript(p)
	if pn < cfg.MinChars {
		return "", false
	}
	as, an := dominantScript(a)
	if an < cfg.MinChars {
		return "", false
	}
	if ps != as {
		return fmt.Sprintf("answer in %s script, prompt in %s script", as, ps), true
	}
	if ps != "Latin" && ps != "Cyrillic" && ps != "Arabic" && ps != "Devanagari" {
		return "", false // one language per script among those whatlanggo tells apart
	}
	if ps == "Latin" && english(p) && english(a) {
		return "", false
	}
	pl, ok := identify(p)
	if !ok {
		return "", false
	}
	al, ok := identify(a)
	if !ok || al == pl {
		return "", false
	}
	return fmt.Sprintf("answer in %s, prompt in %s", langCode(al), langCode(pl)), true
}

func langCode(l whatlanggo.Lang) string {
	if c := l.Iso6391(); c != "" {
		return c
	}
	return l.Iso6393()
}

// identify returns the language of s when whatlanggo is sure of it.
func identify(s string) (whatlanggo.Lang, bool) {
	info := whatlanggo.Detect(s)
	if info.Lang < 0 || !info.IsReliable() {
		return 0, false
	}
	return info.Lang, true
}

// scripts are the writing systems dominantScript tells apart.
var scripts = []struct {
	name  string
	table *unicode.RangeTable
}{
	{"Latin", unicode.Latin}, {"Han", unicode.Han}, {"Kana", nil}, {"Hangul", unicode.Hangul},
	{"Cyrillic", unicode.Cyrillic}, {"Arabic", unicode.Arabic}, {"Devanagari", unicode.Devanagari},
	{"Greek", unicode.Greek}, {"Hebrew", unicode.Hebrew}, {"Thai", unicode.Thai},
}

// dominantScript names the script of most of s's letters, and counts the
// letters. Japanese mixes Han and kana: a text with kana is Kana.
func dominantScript(s string) (string, int) {
	var n [10]int
	letters := 0
	for _, r := range s {
		if r < utf8.RuneSelf {
			if r|0x20 >= 'a' && r|0x20 <= 'z' {
				n[0]++
				letters++
			}
			continue
		}
		if !unicode.IsLetter(r) {
			continue
		}
		letters++
		if unicode.In(r, unicode.Hiragana, unicode.Katakana) {
			n[2]++
			continue
		}
		for i, sc := range scripts {
			if sc.table != nil && i > 0 && unicode.Is(sc.table, r) {
				n[i]++
				break
			}
		}
	}
	if n[2] > 0 && n[2]*10 >= n[1] {
		n[2] += n[1] // kana among kanji: Japanese
		n[1] = 0
	}
	best := 0
	for i := range n {
		if n[i] > n[best] {
			best = i
		}
	}
	return scripts[best].name, letters
}

// englishWords are the commonest English words; in English prose they
// are a third to a half of the words, in other languages written in
// Latin script almost none.
var englishWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`the of and to a in is it you that he was for on are with as i his they be at one have
		this from or had by not but what some we can out other were all there when up use your how said an each she which do
		their if will way about many then them would so these her has its than more been who may could into our any my also`) {
		m[w] = true
	}
	return m
}()

// english reports a text a quarter or more of whose words are among the
// commonest English ones.
func english(s string) bool {
	words, common := 0, 0
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && r != '\'' }) {
		words++
		if len(f) <= 5 && englishWords[strings.ToLower(f)] {
			common++
		}
	}
	return words >= 8 && 4*common >= words
}

// prose returns up to n bytes of s outside ``` fenced code blocks, cut at
// a character boundary.
func prose(s string, n int) string {
	if !strings.Contains(s, "```") {
		return cut(s, n)
	}
	var b strings.Builder
	for inCode := false; len(s) > 0 && b.Len() < n; inCode = !inCode {
		part, rest, found := strings.Cut(s, "```")
		if !inCode {
			b.WriteString(part)
			b.WriteByte('\n')
		}
		if !found {
			break
		}
		s = rest
	}
	return cut(b.String(), n)
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
