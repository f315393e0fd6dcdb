package record_test

import (
	"encoding/json"
	"strings"
	"testing"

	"tokenmill/internal/corpus"
	"tokenmill/lib/record"
)

// walkBenchLines are the lines the stages walk, from the synthetic
// Infinity-Instruct corpus (some Chinese, some \u-escaped): its prompt
// rows; generation records answering them, whose answers are the rows'
// own answers run together (about 1.6 kB); and those records' outputs.
func walkBenchLines(b *testing.B) (prompts, generations, outputs [][]byte) {
	gen := corpus.New(1)
	var answers []string
	for i := range 2000 {
		row := gen.Next()
		prompts = append(prompts, corpus.AppendJSON(nil, row))
		for _, t := range row.Conversations {
			if t.From == "gpt" {
				answers = append(answers, t.Value)
			}
		}
		if len(answers) < 3 {
			continue
		}
		text := strings.Join(answers, "\n\n")
		answers = answers[:0]
		out, err := json.Marshal(map[string]any{"text": text, "finish_reason": "stop", "sample": 0,
			"usage": map[string]int{"prompt_tokens": 40, "completion_tokens": len(text) / 4}})
		if err != nil {
			b.Fatal(err)
		}
		line, err := json.Marshal(map[string]any{"id": i, "messages": []any{map[string]string{"role": "user", "content": row.Conversations[0].Value}},
			"output": json.RawMessage(out)})
		if err != nil {
			b.Fatal(err)
		}
		generations, outputs = append(generations, line), append(outputs, out)
	}
	return prompts, generations, outputs
}

func linesSize(lines [][]byte) int64 {
	var n int64
	for _, l := range lines {
		n += int64(len(l))
	}
	return n
}

// BenchmarkWalk is each way the stages walk a record with this package:
// Object.Scan over every member (shard, merge, dedup's outer loop), and
// EachField over an output object Scan handed out (merge's answers). MB/s
// is of input.
func BenchmarkWalk(b *testing.B) {
	prompts, generations, outputs := walkBenchLines(b)
	scan := func(lines [][]byte) func(b *testing.B) {
		return func(b *testing.B) {
			b.SetBytes(linesSize(lines))
			for b.Loop() {
				for _, l := range lines {
					var o record.Object
					o.Scan(l)
					for _, _, ok := o.Next(); ok; _, _, ok = o.Next() {
					}
					if !o.Valid() {
						b.Fatalf("%s: not valid", l)
					}
				}
			}
		}
	}
	b.Run("scan-prompts", scan(prompts))
	b.Run("scan-generations", scan(generations))
	b.Run("eachfield-outputs", func(b *testing.B) {
		b.SetBytes(linesSize(outputs))
		for b.Loop() {
			for _, l := range outputs {
				if err := record.EachField(l, func(string, []byte) error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
