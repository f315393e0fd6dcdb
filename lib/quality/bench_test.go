package quality

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// benchTexts are answers as a model writes them: paragraphs, numbered
// lists and code blocks, 0.4 to 4 kB each.
func benchTexts(n int) []string {
	words := strings.Fields(proseText + " system data model answer example value result problem step function method case part point order process form level question language world between")
	rng := rand.New(rand.NewPCG(3, 4))
	sentence := func(b *strings.Builder) {
		for i := range 8 + rng.IntN(14) {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[rng.IntN(len(words))])
		}
		b.WriteString(". ")
	}
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for b.Len() < 400+rng.IntN(3600) {
			switch rng.IntN(6) {
			case 0:
				for j := range 3 + rng.IntN(4) {
					fmt.Fprintf(&b, "%d. ", j+1)
					sentence(&b)
					b.WriteByte('\n')
				}
			case 1:
				fmt.Fprintf(&b, "```python\ndef f%d(x):\n    if x > %d:\n        return x * %d\n    return 0\n```\n", rng.IntN(1000), rng.IntN(100), rng.IntN(10))
			default:
				for range 2 + rng.IntN(4) {
					sentence(&b)
				}
			}
			b.WriteString("\n\n")
		}
		out[i] = b.String()
	}
	return out
}

func benchCheck(b *testing.B, f func(string)) {
	texts := benchTexts(2000)
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
