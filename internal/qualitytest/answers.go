// Package qualitytest makes answers for the benchmarks of the packages
// that check them.
package qualitytest

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

var words = strings.Fields(`the of and to in a is that for it as was with be by on not this are or from at which but have an
had they you were their one all we can has there been if more when will would who so no other its may these what them than some
time into only do out first also new could because any people two many then most like over such our even well made after must
should much way through where years work system data model answer example value result problem step second next each every number
function method case part point order process form level question language world between both under while before without during
since however therefore although simple important different possible general specific clear common small large`)

// Answers returns n answers as a model writes them: paragraphs, numbered
// lists and code blocks, 0.4 to 4 kB each, the same for a seed.
func Answers(n int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 2))
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

// Prose returns n bytes or more of answers that do not repeat one
// another, paragraphs apart: the loop check's worst case, its measures
// computed over n-grams that are nearly all distinct.
func Prose(n int) string {
	var b strings.Builder
	for seed := uint64(1); b.Len() < n; seed++ {
		for _, a := range Answers(1000, seed) {
			b.WriteString(a)
			b.WriteString("\n\n")
		}
	}
	return b.String()
}
