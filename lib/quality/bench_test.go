package quality

import (
	"testing"

	"tokenmill/lib/quality/qualitytest"
)

func benchCheck(b *testing.B, f func(string)) {
	texts := qualitytest.Answers(2000, 3)
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
