package record_test

import (
	"strings"
	"testing"

	"tokenmill/internal/corpus"
	"tokenmill/lib/record"
)

// BenchmarkCheckDepth is the depth check's cost; MB/s is of input. rows:
// the synthetic Infinity-Instruct corpus (lines under 10,000 bytes cost a
// length check); long: 200 KB answers (two byte counts); walked: a long
// line with more brackets than the limit, shallow, walked byte by byte.
func BenchmarkCheckDepth(b *testing.B) {
	gen := corpus.New(1)
	var rows [][]byte
	for range 2000 {
		rows = append(rows, corpus.AppendJSON(nil, gen.Next()))
	}
	long := [][]byte{[]byte(`{"id":"x","output":{"text":"` + strings.Repeat("all work and no play ", 10000) + `"}}`)}
	walked := [][]byte{[]byte(`{"id":"x","v":[` + strings.Repeat(`[1,{"a":2}],`, 20000) + `0]}`)}
	for _, c := range []struct {
		name  string
		lines [][]byte
	}{{"rows", rows}, {"long", long}, {"walked", walked}} {
		b.Run(c.name, func(b *testing.B) {
			var size int64
			for _, l := range c.lines {
				size += int64(len(l))
			}
			b.SetBytes(size)
			for b.Loop() {
				for _, l := range c.lines {
					if err := record.CheckDepth(l); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
