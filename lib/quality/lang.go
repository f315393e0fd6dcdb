package quality

import (
	"fmt"
	"strings"
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
// Both texts are identified with whatlanggo (trigram profiles, scripts by
// their Unicode ranges) on their first cfg.Sample bytes outside fenced
// code blocks; a text too short, or whose identification whatlanggo does
// not call reliable, is not judged.
func Lang(prompt, answer string, cfg *LangConfig) (detail string, bad bool) {
	p, ok := identify(prompt, cfg)
	if !ok {
		return "", false
	}
	a, ok := identify(answer, cfg)
	if !ok || a == p {
		return "", false
	}
	return fmt.Sprintf("answer in %s, prompt in %s", langCode(a), langCode(p)), true
}

func langCode(l whatlanggo.Lang) string {
	if c := l.Iso6391(); c != "" {
		return c
	}
	return l.Iso6393()
}

// identify returns the language of s, when s is long enough and the
// identification reliable.
func identify(s string, cfg *LangConfig) (whatlanggo.Lang, bool) {
	sample := prose(s, cfg.Sample)
	letters := 0
	for _, r := range sample {
		if r >= 'A' && (r <= 'Z' || r >= 'a' && r <= 'z' || r >= utf8.RuneSelf) {
			letters++
		}
	}
	if letters < cfg.MinChars {
		return 0, false
	}
	info := whatlanggo.Detect(sample)
	if info.Lang < 0 || !info.IsReliable() {
		return 0, false
	}
	return info.Lang, true
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
