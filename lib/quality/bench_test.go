package quality

import (
	"strconv"
	"strings"
	"testing"

	"tokenmill/internal/llmsim"
)

func benchCheck(b *testing.B, f func(string)) {
	texts := llmsim.Answers(2000, 3)
	var n int64
	for _, t := range texts {
		n += int64(len(t))
	}
	b.SetBytes(n)
	b.ResetTimer()
	for range b.N {
		for _, t := range texts {
			f(t)
		}
	}
}

// Each check alone, over answer text.
func BenchmarkLoop(b *testing.B) {
	var s Scratch
	benchCheck(b, func(t string) { Loop(t, &DefaultLoop, &s) })
}

func BenchmarkRepeatedTail(b *testing.B) { benchCheck(b, func(t string) { repeatedTail(t) }) }

func BenchmarkThinkResidue(b *testing.B) { benchCheck(b, func(t string) { ThinkResidue("", t, "") }) }

func BenchmarkLang(b *testing.B) {
	prompt := "Explain how the system works in a few paragraphs, with an example of its use."
	benchCheck(b, func(t string) { Lang(prompt, t, &DefaultLang) })
}

// BenchmarkRecordParse: validating generation records and reading out
// their answers (bytes of records); OtherScripts has every answer
// written in Chinese words among the English ones, whose UTF-8 is checked.
func BenchmarkRecordParse(b *testing.B)             { benchRecordParse(b, false) }
func BenchmarkRecordParseOtherScripts(b *testing.B) { benchRecordParse(b, true) }

func benchRecordParse(b *testing.B, cjk bool) {
	var lines [][]byte
	var n int64
	for i, text := range llmsim.Answers(2000, 3) {
		if cjk {
			text = strings.NewReplacer("the ", "这个 ", "of ", "的 ", "and ", "和 ", "to ", "到 ").Replace(text)
		}
		a := Answer{Prompt: "Explain how the system works, with an example.", Text: text, Finish: "stop"}
		if i%5 == 0 {
			a.Reasoning = "The user asks how the system works; " + text[:len(text)/3]
		}
		lines = append(lines, generationLine(b, strconv.Itoa(i), a))
		n += int64(len(lines[i]))
	}
	var r GenerationView
	b.SetBytes(n)
	b.ResetTimer()
	for range b.N {
		for _, l := range lines {
			if r.Parse(l) != nil {
				b.Fatal("a record did not parse")
			}
		}
	}
}
