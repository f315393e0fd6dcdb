package filter

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/quality"
)

var benchWords = strings.Fields(`the of and to in a is that for it as was with be by on not this are or from at which but have an
had they you were their one all we can has there been if more when will would who so no other its may these what them than some
time into only do out first also new could because any people two many then most like over such our even well made after must
should much way through where years work system data model answer example value result problem step second next each every number
function method case part point order process form level question language world between both under while before without during
since however therefore although simple important different possible general specific clear common small large`)

// benchRecords makes generation records whose answers look like a model's:
// paragraphs, lists, a code block now and then, about 2 kB each, some
// with reasoning, and a few percent of them degenerate.
func benchRecords(size int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	var buf bytes.Buffer
	sentence := func(b *strings.Builder) {
		n := 8 + rng.IntN(14)
		for i := range n {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(benchWords[rng.IntN(len(benchWords))])
		}
		b.WriteString(". ")
	}
	for i := 0; buf.Len() < size; i++ {
		var b strings.Builder
		for b.Len() < 400+rng.IntN(3200) {
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
		text, finish, reasoning := b.String(), "stop", ""
		switch i % 50 {
		case 7:
			finish = "length"
		case 17:
			text += strings.Repeat("I hope this helps you with your question. ", 40)
		case 27:
			reasoning = "The user asks a question and I should answer it."
		}
		fmt.Fprintf(&buf, `{"id":"%d","messages":[{"role":"user","content":%q}],"output":{"text":%q,"reasoning":%q,"finish_reason":%q,"usage":{"prompt_tokens":100,"completion_tokens":500},"sample":0}}`+"\n",
			i, "Explain how the system works in a few paragraphs, with an example.", text, reasoning, finish)
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
		s.bad = jsonl.NewRejects("filter", io.Discard, nil)
		in := jsonl.NewReader(nil, bytes.NewReader(data), jsonl.Options{})
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
