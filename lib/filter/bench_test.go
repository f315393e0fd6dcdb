package filter

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"tokenmill/internal/llmsim"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/quality"
)

// benchRecords makes generation records whose answers look like a
// model's (llmsim.Answers), some with reasoning, and a few percent
// of them degenerate.
func benchRecords(size int) []byte {
	var buf bytes.Buffer
	texts := llmsim.Answers(4000, 1)
	for i := 0; buf.Len() < size; i++ {
		text, finish, reasoning := texts[i%len(texts)], "stop", ""
		switch i % 50 {
		case 7:
			finish = "length"
		case 17:
			text += strings.Repeat("I hope this helps you with your question. ", 40)
		case 27:
			reasoning = "The user asks a question and I should answer it."
		}
		out, _ := json.Marshal(map[string]any{"text": text, "reasoning": reasoning, "finish_reason": finish,
			"usage": map[string]int{"prompt_tokens": 100, "completion_tokens": 500}, "sample": 0})
		fmt.Fprintf(&buf, `{"id":"%d","messages":[{"role":"user","content":"Explain how the system works in a few paragraphs, with an example."}],"output":%s}`+"\n", i, out)
	}
	return buf.Bytes()
}

func benchFilter(b *testing.B, checks string, workers int) {
	data := benchRecords(32 << 20)
	list, err := quality.ParseChecks(checks)
	if err != nil {
		b.Fatal(err)
	}
	var f quality.Flags
	f.LoopMinBytes, f.LoopLines, f.LoopLineBytes, f.LoopParagraphs, f.LoopParagraphBytes = 500, 0.5, 0.3, 0.3, 0.3
	f.LoopTopNgram, f.LoopDupNgram, f.LoopTailCopies, f.LoopTailBytes, f.LangMinChars = "2=0.2,3=0.18,4=0.16", "5=0.4,6=0.35,7=0.32,8=0.3,9=0.28,10=0.26", 4, 100, 40
	cfg, err := f.Config(list)
	if err != nil {
		b.Fatal(err)
	}
	checkers := make([]*quality.Checker, workers)
	for i := range checkers {
		checkers[i], _ = quality.NewChecker(cfg)
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		s := &sink{n: &counts{byReason: map[string]int64{}}, out: jsonl.NewWriter(io.Discard)}
		s.bad = jsonl.NewRejects(nil, nil)
		in := jsonl.NewReader(context.Background(), nil, nil, bytes.NewReader(data), jsonl.Options{})
		if err := run(context.Background(), in, checkers, s); err != nil {
			b.Fatal(err)
		}
		if s.n.dropped.Load() == 0 {
			b.Fatal("nothing dropped")
		}
	}
}

// BenchmarkFilter is filter's throughput with the default checks, on all
// CPUs and on one; BenchmarkFilterLang adds language identification.
func BenchmarkFilter(b *testing.B)          { benchFilter(b, "default", runtime.GOMAXPROCS(0)) }
func BenchmarkFilterOneWorker(b *testing.B) { benchFilter(b, "default", 1) }
func BenchmarkFilterLang(b *testing.B)      { benchFilter(b, "default,lang", runtime.GOMAXPROCS(0)) }
