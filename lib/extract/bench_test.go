package extract

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/segmentio/encoding/json"

	"tokenmill/internal/corpus"
	"tokenmill/lib/cli"
)

var writeShareGPT = flag.String("write-sharegpt", "", "write the benchmark's generated ShareGPT JSONL to this file and stop (for side-by-side runs against other tools)")

var benchWords = strings.Fields(`the of and to in is that for it as was with be by on not he this are or his
from at which but have an they you were her she there been one all we their has would when who will
more no if out so what up said about than into them can only other new some could time these two may
first then do any like my now over such our man me even most made after also did many before must
through back years where much your way well down should because each just those people how too little
state good very make world still own see men work long get here between both life being under never
day same another know while last might us great old year off come since against go came right used
take three 函数 数据 模型 问题 résumé naïve café`)

// shareGPTData is a deterministic ShareGPT JSONL dataset shaped like
// Infinity-Instruct: string ids, one to three exchanges whose first human
// turn is about 600 bytes (with the newlines, quotes and non-ASCII text real
// prompts have), longer answers, and the label/langdetect/source columns.
func shareGPTData(records int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	text := func(size int) string {
		var b strings.Builder
		for b.Len() < size {
			w := benchWords[rng.IntN(len(benchWords))]
			switch rng.IntN(40) {
			case 0:
				b.WriteString("\n\n")
			case 1:
				w = `"` + w + `"`
			case 2:
				w += "."
			}
			b.WriteString(w)
			b.WriteByte(' ')
		}
		return b.String()
	}
	type turn struct {
		From  string `json:"from"`
		Value string `json:"value"`
	}
	type rec struct {
		ID            string         `json:"id"`
		Conversations []turn         `json:"conversations"`
		Label         map[string]any `json:"label"`
		Langdetect    string         `json:"langdetect"`
		Source        string         `json:"source"`
	}
	var buf bytes.Buffer
	for i := range records {
		r := rec{ID: fmt.Sprintf("gen-%07d", i), Langdetect: "en", Source: "bench",
			Label: map[string]any{"ability_en": []string{"text generation"}, "cate_ability_en": []string{"writing"}}}
		for t := range 1 + rng.IntN(3) {
			size := 600
			if t > 0 {
				size = 150
			}
			r.Conversations = append(r.Conversations, turn{"human", text(size - 50 + rng.IntN(100))}, turn{"gpt", text(400 + rng.IntN(800))})
		}
		line, err := json.Marshal(r)
		if err != nil {
			panic(err)
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// TestWriteShareGPT writes the benchmark data for side-by-side runs:
//
//	go test ./lib/extract -run TestWriteShareGPT -write-sharegpt /tmp/sharegpt.jsonl
//
// writes 100,000 records (about 265 MB) there, and the same records as
// Parquet in the Infinity-Instruct 0625 schema to /tmp/sharegpt.parquet.
func TestWriteShareGPT(t *testing.T) {
	if *writeShareGPT == "" {
		t.Skip("only with -write-sharegpt FILE")
	}
	data := shareGPTData(100000)
	if err := os.WriteFile(*writeShareGPT, data, 0o644); err != nil {
		t.Fatal(err)
	}
	writeShareGPTParquet(t, data, strings.TrimSuffix(*writeShareGPT, ".jsonl")+".parquet")
}

// BenchmarkExtractShareGPT runs the whole command (read, detect, convert,
// write) on ShareGPT JSONL, with one worker; MB/s is of input.
func BenchmarkExtractShareGPT(b *testing.B) {
	benchmarkRun(b, shareGPTData(20000), "--workers", "1")
}

// BenchmarkExtractShareGPTWorkers2 is the same with two workers (compare
// with -cpu 2 on a machine whose second core is free).
func BenchmarkExtractShareGPTWorkers2(b *testing.B) {
	benchmarkRun(b, shareGPTData(20000), "--workers", "2")
}

// BenchmarkExtractShareGPTKeep adds the work of --keep and --source.
func BenchmarkExtractShareGPTKeep(b *testing.B) {
	benchmarkRun(b, shareGPTData(20000), "--workers", "1", "--keep", "label,langdetect", "--source", "ii")
}

// BenchmarkExtractConversations makes whole conversation records (--turns
// all) of multi-turn tool-calling conversations (corpus --conversations).
func BenchmarkExtractConversations(b *testing.B) {
	benchmarkRun(b, corpusConversations(5000, 1), "--workers", "1", "--turns", "all")
}

// benchmarkRun runs the command on data; rows/s is reported beside MB/s,
// to compare with BenchmarkExtractParquet's same rows.
func benchmarkRun(b *testing.B, data []byte, args ...string) {
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		env := &cli.Env{Name: "extract", Stdin: bytes.NewReader(data), Stdout: io.Discard, Stderr: io.Discard}
		if code := cli.Run(context.Background(), env, Description, &Command{}, args); code != 0 {
			b.Fatalf("exit %d", code)
		}
	}
	b.ReportMetric(float64(bytes.Count(data, []byte("\n"))*b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkConvert is the conversion alone, without reading and writing.
func BenchmarkConvert(b *testing.B) {
	data := shareGPTData(5000)
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	x, err := NewExtractor(Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		for _, l := range lines {
			if c := x.Convert(l); c[0].Out == nil {
				b.Fatal(c[0].Reason, c[0].Detail)
			}
		}
	}
}

// BenchmarkParse is the walk of a record's fields alone (the scanner's
// hot path): ShareGPT JSONL lines checked whole; the same lines as the
// Parquet reader's trusted rows; the synthetic Infinity-Instruct corpus,
// with its Chinese and \u-escaped rows; and BenchmarkExtractConversations'
// tool-calling conversations. MB/s is of input.
func BenchmarkParse(b *testing.B) {
	sharegpt := bytes.Split(bytes.TrimSpace(shareGPTData(5000)), []byte("\n"))
	conversations := bytes.Split(bytes.TrimSpace(corpusConversations(5000, 1)), []byte("\n"))
	gen := corpus.New(1)
	var rows [][]byte
	for range 5000 {
		rows = append(rows, corpus.AppendJSON(nil, gen.Next()))
	}
	for _, c := range []struct {
		name  string
		lines [][]byte
		built bool
	}{{"sharegpt", sharegpt, false}, {"sharegpt-built", sharegpt, true}, {"corpus", rows, false}, {"conversations", conversations, false}} {
		b.Run(c.name, func(b *testing.B) {
			x, err := NewExtractor(Options{Keep: []string{"label"}})
			if err != nil {
				b.Fatal(err)
			}
			var n int64
			for _, l := range c.lines {
				n += int64(len(l))
			}
			b.SetBytes(n)
			for b.Loop() {
				for _, l := range c.lines {
					x.reset()
					if bad := x.parse(l, c.built); bad != nil || x.preList == nil {
						b.Fatalf("%s: not read with the record", l)
					}
				}
			}
		})
	}
}

// BenchmarkExtractParquet runs the whole command on an Infinity-Instruct
// shaped Parquet file (zstd, one row group) of BenchmarkExtractShareGPT's
// rows, with one worker: MB/s is of the file, and rows/s is reported too.
func BenchmarkExtractParquet(b *testing.B) {
	path := writeShareGPTParquet(b, shareGPTData(20000), filepath.Join(b.TempDir(), "ii.parquet"))
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(st.Size())
	b.ReportAllocs()
	for b.Loop() {
		env := &cli.Env{Name: "extract", Stdout: io.Discard, Stderr: io.Discard}
		if code := cli.Run(context.Background(), env, Description, &Command{}, []string{"--workers", "1", path}); code != 0 {
			b.Fatalf("exit %d", code)
		}
	}
	b.ReportMetric(float64(20000*b.N)/b.Elapsed().Seconds(), "rows/s")
}

// writeShareGPTParquet writes ShareGPT JSONL records as Parquet in the
// Infinity-Instruct 0625 schema.
func writeShareGPTParquet(tb testing.TB, jsonlData []byte, path string) string {
	type turn struct {
		From  string `parquet:"from" json:"from"`
		Value string `parquet:"value" json:"value"`
	}
	type label struct {
		AbilityEn     []string `parquet:"ability_en,list" json:"ability_en"`
		CateAbilityEn []string `parquet:"cate_ability_en,list" json:"cate_ability_en"`
	}
	type row struct {
		ID            string `parquet:"id" json:"id"`
		Conversations []turn `parquet:"conversations,list" json:"conversations"`
		Label         label  `parquet:"label" json:"label"`
		Langdetect    string `parquet:"langdetect" json:"langdetect"`
		Source        string `parquet:"source" json:"source"`
	}
	var rows []row
	for _, l := range bytes.Split(bytes.TrimSpace(jsonlData), []byte("\n")) {
		var r row
		if err := json.Unmarshal(l, &r); err != nil {
			tb.Fatal(err)
		}
		rows = append(rows, r)
	}
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := parquet.NewGenericWriter[row](f, parquet.Compression(&parquet.Zstd))
	if _, err := w.Write(rows); err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return path
}
