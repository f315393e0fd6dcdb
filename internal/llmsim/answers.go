package llmsim

import (
	"math/rand/v2"
	"strconv"
)

// Answers returns n answers as a model writes them, for the tests and
// benchmarks of what reads answers: paragraphs, numbered lists and code
// blocks, about 0.4 to 4 kB each, in the words the simulated servers
// answer with, the same for a seed.
func Answers(n int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 2))
	var b []byte
	words := func(n int) {
		h := rng.Uint64()
		for k := 1; k <= n; k++ {
			b = appendWord(b, h, k)
		}
	}
	out := make([]string, n)
	for i := range out {
		b = b[:0]
		size := 400 + rng.IntN(3600)
		for len(b) < size {
			switch rng.IntN(6) {
			case 0:
				for j := range 3 + rng.IntN(4) {
					b = strconv.AppendInt(b, int64(j+1), 10)
					b = append(b, '.')
					words(8 + rng.IntN(14))
					b = append(b, ".\n"...)
				}
			case 1:
				b = append(b, "```python\ndef f"...)
				b = strconv.AppendInt(b, int64(rng.IntN(1000)), 10)
				b = append(b, "(x):\n    if x > "...)
				b = strconv.AppendInt(b, int64(rng.IntN(100)), 10)
				b = append(b, ":\n        return x * "...)
				b = strconv.AppendInt(b, int64(rng.IntN(10)), 10)
				b = append(b, "\n    return 0\n```\n"...)
			default:
				from := len(b)
				words(16 + rng.IntN(60))
				b = append(b[:from], b[from+1:]...) // no space before a paragraph
				b = append(b, '.')
			}
			b = append(b, "\n\n"...)
		}
		out[i] = string(b)
	}
	return out
}

// Prose returns n bytes or more of answers that do not repeat one
// another, paragraphs apart: for a text whose n-grams are nearly all
// distinct, the worst case of a check for loops.
func Prose(n int) string {
	var b []byte
	for seed := uint64(1); len(b) < n; seed++ {
		for _, a := range Answers(1000, seed) {
			b = append(b, a...)
			b = append(b, "\n\n"...)
		}
	}
	return string(b)
}
