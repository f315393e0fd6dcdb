package tokenizer

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

// bpeBenchText is the concatenated golden renderings of a tokenizer:
// realistic chat text (English, code, JSON, tool calls, some CJK).
func bpeBenchText(b *testing.B, name string) string {
	var sb strings.Builder
	for _, c := range readBPEGolden(b, name) {
		sb.WriteString(c.Rendered)
	}
	return sb.String()
}

func BenchmarkEncode(b *testing.B) {
	for _, name := range bpeTokenizers {
		b.Run(name, func(b *testing.B) {
			tok := loadTestBPE(b, name)
			text := bpeBenchText(b, name)
			ids := tok.AppendEncode(nil, text) // warm the word cache, as a long run would
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				ids = tok.AppendEncode(ids[:0], text)
			}
			b.ReportMetric(float64(len(ids)), "tokens/op")
		})
	}
}

// BenchmarkEncodeCases encodes the golden renderings one call each
// (typical prompts of a few KB), as a server or merge would.
func BenchmarkEncodeCases(b *testing.B) {
	for _, name := range bpeTokenizers {
		b.Run(name, func(b *testing.B) {
			tok := loadTestBPE(b, name)
			cases := readBPEGolden(b, name)
			size := 0
			for _, c := range cases {
				size += len(c.Rendered)
			}
			var ids []int
			b.SetBytes(int64(size))
			b.ResetTimer()
			for b.Loop() {
				for _, c := range cases {
					ids = tok.AppendEncode(ids[:0], c.Rendered)
				}
			}
		})
	}
}

// BenchmarkEncodeCold encodes with a fresh word cache every time: the
// cost of text never seen before.
func BenchmarkEncodeCold(b *testing.B) {
	for _, name := range bpeTokenizers {
		b.Run(name, func(b *testing.B) {
			tok := loadTestBPE(b, name)
			text := bpeBenchText(b, name)
			b.SetBytes(int64(len(text)))
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				tok.model.cache = newWordCache()
				b.StartTimer()
				tok.Encode(text)
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, name := range bpeTokenizers {
		b.Run(name, func(b *testing.B) {
			tok := loadTestBPE(b, name)
			text := bpeBenchText(b, name)
			ids := tok.Encode(text)
			b.SetBytes(int64(len(text)))
			b.ResetTimer()
			for b.Loop() {
				tok.Decode(ids)
			}
		})
	}
}

func BenchmarkNewBPE(b *testing.B) {
	for _, name := range bpeTokenizers {
		b.Run(name, func(b *testing.B) {
			data, err := os.ReadFile(filepath.Join(testbin.Tokenizers(b, name), "tokenizer.json"))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for b.Loop() {
				if _, err := NewBPE(data); err != nil {
					b.Fatal(err)
				}
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/(1<<20), "MB-alloc/op")
		})
	}
}
