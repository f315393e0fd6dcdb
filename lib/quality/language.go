package quality

// Undetermined is the language of a text too short, or too mixed, to
// tell (BCP 47's "und").
const Undetermined = "und"

// scriptLanguages are the scripts that name their language outright.
var scriptLanguages = map[string]string{
	"Han": "zh", "Kana": "ja", "Hangul": "ko", "Greek": "el", "Hebrew": "he", "Thai": "th",
}

// Language names the language of a text as an ISO 639-1 code (639-3
// where there is none), or Undetermined: the same judgement the lang
// check makes of each of its two texts, for the tools that group records
// by language (compose --by lang, stats --against). The text is read on
// its first cfg.Sample bytes outside fenced code blocks. A script that
// has one language names it (Han: zh, kana: ja, Hangul: ko, Greek,
// Hebrew, Thai) however short the text; Latin text a quarter of whose
// words are the commonest English ones is en; the rest, from
// cfg.MinChars letters on, is what whatlanggo calls reliable, else
// Undetermined.
func Language(text string, cfg *LangConfig) string {
	p := prose(text, cfg.Sample)
	script, letters := dominantScript(p)
	if letters == 0 {
		return Undetermined
	}
	if l, ok := scriptLanguages[script]; ok {
		return l
	}
	if script == "Latin" && english(p) {
		return "en"
	}
	if letters < cfg.MinChars {
		return Undetermined
	}
	l, ok := identify(p)
	if !ok {
		return Undetermined
	}
	return langCode(l)
}
