package benchsuite

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/testbin"
	"tokenmill/lib/tokenizer"
)

// The tokenizer section's own benchmarks, which lib/tokenizer does not
// have: rendering a conversation with the chat template, and loading a
// model's folder with the peak RSS it costs. The section runs each with
// GOMAXPROCS=1, pinned to one core, in a go test process of its own.

// renderCase is a golden case as Render takes it.
type renderCase struct {
	ID       string          `json:"id"`
	Messages json.RawMessage `json:"messages"`
	Tools    json.RawMessage `json:"tools"`
	AddGen   bool            `json:"add_generation_prompt"`
	Thinking *bool           `json:"enable_thinking"`
	Rendered string          `json:"rendered"`
}

func (c renderCase) request() tokenizer.Request {
	r := tokenizer.Request{Messages: c.Messages, Tools: c.Tools, AddGenerationPrompt: c.AddGen}
	if c.Thinking != nil {
		r.Kwargs, _ = json.Marshal(map[string]bool{"enable_thinking": *c.Thinking})
	}
	return r
}

// renderCases are a model's golden cases of exactly turns messages with
// tools: the real conversations (glaive_toolcall_en_demo) of a user, tool
// calls, tool results and answers, with the reference's rendering.
func renderCases(tb testing.TB, model string, turns int) []renderCase {
	tb.Helper()
	var out []renderCase
	for _, c := range testbin.Golden[renderCase](tb, model) {
		var msgs []json.RawMessage
		if err := json.Unmarshal(c.Messages, &msgs); err != nil {
			tb.Fatal(err)
		}
		if len(msgs) == turns && len(c.Tools) > 0 && string(c.Tools) != "null" && string(c.Tools) != "[]" {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		tb.Fatalf("%s: no golden case of %d messages with tools", model, turns)
	}
	return out
}

// BenchmarkTokenizerRender renders each golden conversation of 10 turns
// with tools with the model's chat template (tokenizer.Render), after
// checking that every one renders as the reference did; µs/conv is the
// mean time a conversation.
func BenchmarkTokenizerRender(b *testing.B) {
	for _, model := range []string{"qwen3", "deepseek_v3"} {
		b.Run(model, func(b *testing.B) {
			tok, err := tokenizer.Load(testbin.Tokenizers(b, model))
			if err != nil {
				b.Fatal(err)
			}
			cases := renderCases(b, model, 10)
			reqs := make([]tokenizer.Request, len(cases))
			size := 0
			for i, c := range cases {
				reqs[i] = c.request()
				got, err := tok.Render(reqs[i])
				if err != nil || got != c.Rendered {
					b.Fatalf("%s: renders differently from the reference (err %v)", c.ID, err)
				}
				size += len(got)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, r := range reqs {
					if _, err := tok.Render(r); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(reqs)), "µs/conv")
			b.ReportMetric(float64(len(reqs)), "convs")
		})
	}
}

// BenchmarkTokenizerLoad loads a model's folder (tokenizer.Load:
// tokenizer.json, tokenizer_config.json and its chat template). Run with
// -benchtime 1x, one sub-benchmark a process, it loads once, in a process
// that has done nothing else, and reports the load's time (ms/load) and
// the process's peak RSS before and after it (getrusage's maxrss).
func BenchmarkTokenizerLoad(b *testing.B) {
	for _, model := range []string{"qwen3", "deepseek_v3"} {
		b.Run(model, func(b *testing.B) {
			dir := testbin.Tokenizers(b, model)
			before := maxRSSMB(b)
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if _, err := tokenizer.Load(dir); err != nil {
					b.Fatal(err)
				}
			}
			took := time.Since(start)
			b.ReportMetric(float64(took.Microseconds())/1e3/float64(b.N), "ms/load")
			b.ReportMetric(maxRSSMB(b), "peak-RSS-MB")
			b.ReportMetric(before, "RSS-before-MB")
		})
	}
}

// maxRSSMB is this process's peak RSS so far.
func maxRSSMB(tb testing.TB) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return float64(ru.Maxrss) / 1024
}

// TestTokenizerRenderCases: the render benchmark's conversations exist
// and render as the reference did (where the real tokenizers are beside
// the repository).
func TestTokenizerRenderCases(t *testing.T) {
	if testing.Short() {
		t.Skip("loads a real tokenizer: not in -short")
	}
	tok, err := tokenizer.Load(testbin.Tokenizers(t, "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	cases := renderCases(t, "qwen3", 10)
	for _, c := range cases {
		if got, err := tok.Render(c.request()); err != nil || got != c.Rendered {
			t.Errorf("%s: renders differently from the reference (err %v)", c.ID, err)
		}
		if !strings.Contains(c.Rendered, "<tools>") || !strings.Contains(c.Rendered, "<tool_call>") {
			t.Errorf("%s: no tools or tool calls rendered", c.ID)
		}
	}
	t.Logf("%d conversations of 10 turns with tools", len(cases))
}

// cannedTokenizerRuns are two runs' outputs as go test and the node
// script print them, with round figures.
func cannedTokenizerRuns(t *testing.T, withHF bool) tokenizerRuns {
	t.Helper()
	encode := func(mbps float64) []byte {
		return []byte(fmt.Sprintf(`goos: linux
pkg: tokenmill/lib/tokenizer
BenchmarkEncode/qwen3         	       3	 100000000 ns/op	  %.2f MB/s	    762608 tokens/op	  524211 B/op	   23367 allocs/op
BenchmarkEncode/deepseek_v3   	       3	 100000000 ns/op	  %.2f MB/s	    518091 tokens/op	  471776 B/op	   20940 allocs/op
BenchmarkEncodeCases/qwen3    	       3	 110000000 ns/op	  31.85 MB/s
BenchmarkEncodeCases/deepseek_v3         	       3	 100000000 ns/op	  28.39 MB/s
BenchmarkEncodeCold/qwen3                	       3	 125000000 ns/op	  28.03 MB/s
BenchmarkEncodeCold/deepseek_v3          	       3	 120000000 ns/op	  23.66 MB/s
PASS
ok  	tokenmill/lib/tokenizer	5.726s
`, mbps, mbps*0.81))
	}
	render := []byte(`BenchmarkTokenizerRender/qwen3         	     200	   2900000 ns/op	  12.89 MB/s	        29.00 convs	       100.0 µs/conv	 1132910 B/op	   18353 allocs/op
BenchmarkTokenizerRender/deepseek_v3   	     200	   2030000 ns/op	   9.19 MB/s	        29.00 convs	        70.00 µs/conv	  720664 B/op	   12970 allocs/op
`)
	load := func(model string, ms, peak float64) []byte {
		return []byte(fmt.Sprintf("BenchmarkTokenizerLoad/%s         	       1	 %d ns/op	        38.30 RSS-before-MB	       %.1f ms/load	        %.2f peak-RSS-MB\n", model, int(ms*1e6), ms, peak))
	}
	runs := tokenizerRuns{out: map[string][][]byte{
		"encode": {encode(35.04), encode(30)}, "render": {render, render},
		"load qwen3": {load("qwen3", 574, 95.38), load("qwen3", 600, 96)}, "load deepseek_v3": {load("deepseek_v3", 498, 78.3), load("deepseek_v3", 500, 78)},
	}, loads: []float64{1, 2}}
	if !withHF {
		return runs
	}
	for _, m := range []struct {
		name          string
		bytes, tokens int64
	}{{"qwen3", 3503792, 762608}, {"deepseek_v3", 2838841, 518091}} {
		for _, f := range []float64{1, 1.2} {
			line := fmt.Sprintf(`{"binding":"@anush008/tokenizers 0.6.0","node":"v20.20.2","load":{"ms":%g,"rss_before_mb":46.9,"rss_peak_mb":%g},"bytes":%d,"documents":4835,`+
				`"golden_tokens":%d,"golden_mismatches":0,"whole":{"seconds":3.5,"mbps":%g,"tokens":%d,"tok_s":200000,"reps":3},`+
				`"docs":{"seconds":3,"mbps":%g,"tokens":%d,"tok_s":250000,"reps":3},"batch":{"seconds":2,"mbps":%g,"tokens":%d,"tok_s":380000,"reps":3},`+
				`"cold":{"seconds":4.5,"mbps":0.8,"tokens":%d,"tok_s":170000,"reps":3},"call_floor_us":%g}`+"\n",
				700*f, 196.7*f, m.bytes, m.tokens, 1.0*f, m.tokens, 1.2*f, m.tokens, 1.75*f, m.tokens, m.tokens, 70*f)
			runs.out["hf "+m.name] = append(runs.out["hf "+m.name], []byte("npm warn something\n"+line))
		}
	}
	return runs
}

var cannedTokenizerStats = map[string]goldenStats{"qwen3": {bytes: 3503792, docs: 4835, tokens: 762608}, "deepseek_v3": {bytes: 2838841, docs: 4835, tokens: 518091}}

// TestTokenizerSection makes the section's rows of canned runs and
// renders them as the report shows them: with the binding's rows, and
// without (each of its cells saying why, lib/tokenizer's figures kept).
func TestTokenizerSection(t *testing.T) {
	cmds := tokenizerCommandsForTest()
	for _, tc := range []struct {
		name   string
		withHF bool
		why    string
	}{{"tokenizer", true, ""}, {"tokenizer-no-binding", false, "@anush008/tokenizers does not load here: Error: Cannot find module"}} {
		t.Run(tc.name, func(t *testing.T) {
			version := "0.6.0"
			if tc.why != "" {
				version = ""
			}
			rows, err := tokenizerResults(cannedTokenizerRuns(t, tc.withHF), cannedTokenizerStats, cmds, shellJoin, version, tc.why)
			if err != nil {
				t.Fatal(err)
			}
			h := testHarness(t)
			h.results = rows
			h.info.Started = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
			h.info.LoadBefore, h.info.LoadAfter = "load average: 1.00, 1.00, 1.00", "load average: 2.00, 1.50, 1.00"
			text := renderSection(t, h, tokenizerSection)
			golden(t, "sections/"+tc.name+".md", []byte(text))

			find := func(name string) *Result {
				for _, r := range rows {
					if r.Name == name {
						return r
					}
				}
				t.Fatalf("no row %q", name)
				return nil
			}
			// Medians of two runs are the lower; peak RSS the higher.
			if v, _ := find(oursEncodeRow("qwen3", "whole")).Metric("mbps"); v != 30 {
				t.Errorf("lib/tokenizer qwen3 whole: %v MB/s, want the median 30", v)
			}
			if v, _ := find(oursLoadRow("qwen3")).Metric("rss_mb"); v != 96 {
				t.Errorf("lib/tokenizer qwen3 load: peak %v MB, want the higher 96", v)
			}
			if v, _ := find(oursEncodeRow("qwen3", "docs")).Metric("tok_s"); math.Abs(v-762608/0.11) > 1 {
				t.Errorf("lib/tokenizer qwen3 per document: %v tokens/s, want the golden tokens over ns/op", v)
			}
			hf := find(hfEncodeRow("qwen3", "batch"))
			if tc.withHF {
				if v, _ := hf.Metric("mbps"); v != 1.75 {
					t.Errorf("HF qwen3 batch: %v MB/s, want 1.75", v)
				}
			} else if !strings.Contains(hf.Note, "not available: "+tc.why) {
				t.Errorf("HF qwen3 batch without the binding: note %q", hf.Note)
			}
		})
	}

	// The binding given other text than lib/tokenizer: no comparison.
	runs := cannedTokenizerRuns(t, true)
	runs.out["hf qwen3"][1] = bytes.Replace(runs.out["hf qwen3"][1], []byte(`"bytes":3503792`), []byte(`"bytes":3503793`), 1)
	if _, err := tokenizerResults(runs, cannedTokenizerStats, cmds, shellJoin, "0.6.0", ""); err == nil || !strings.Contains(err.Error(), "not the same text") {
		t.Errorf("other text: %v, want an error", err)
	}
	runs.out["hf qwen3"][1] = []byte(`{"bytes":3503792,"documents":4835}`)
	if _, err := tokenizerResults(runs, cannedTokenizerStats, cmds, shellJoin, "0.6.0", ""); err == nil || !strings.Contains(err.Error(), "without figures") {
		t.Errorf("a report without figures: %v, want an error", err)
	}

	// A run whose go test output lacks a figure: no rows, half-measured.
	runs = cannedTokenizerRuns(t, true)
	runs.out["render"][1] = runs.out["render"][1][:bytes.IndexByte(runs.out["render"][1], '\n')+1]
	if _, err := tokenizerResults(runs, cannedTokenizerStats, cmds, shellJoin, "0.6.0", ""); err == nil || !strings.Contains(err.Error(), "run 2: no convs of BenchmarkTokenizerRender/deepseek_v3") {
		t.Errorf("a figure missing: %v, want an error", err)
	}

	// The binding's token counts differ from lib/tokenizer's: the text says
	// so, and no longer that they are the same.
	runs = cannedTokenizerRuns(t, true)
	for i, out := range runs.out["hf qwen3"] {
		out = bytes.Replace(out, []byte(`"tokens":762608,"tok_s":200000`), []byte(`"tokens":762609,"tok_s":200000`), 1) // whole
		runs.out["hf qwen3"][i] = bytes.Replace(out, []byte(`"tokens":762608,"tok_s":250000`), []byte(`"tokens":762607,"tok_s":250000`), 1)
	}
	rows, err := tokenizerResults(runs, cannedTokenizerStats, cmds, shellJoin, "0.6.0", "")
	if err != nil {
		t.Fatal(err)
	}
	h := testHarness(t)
	h.results = rows
	text := renderSection(t, h, tokenizerSection)
	for _, want := range []string{"**Qwen3, whole: the binding gave 762,609 tokens of the concatenated text, lib/tokenizer 762,608**",
		"**Qwen3, docs: the binding gave 762,607 tokens of the documents, the golden ids 762,608**"} {
		if !strings.Contains(text, want) {
			t.Errorf("the text does not say %q", want)
		}
	}
	if strings.Contains(text, "token counts are lib/tokenizer's") || strings.Contains(text, "DeepSeek-V3, whole: the binding") {
		t.Error("the text says the counts are the same, or differ where they do not")
	}
}

// TestReadGoldenStats: a golden file's text in bytes and documents and
// the reference's tokens; a line that is not JSON is named.
func TestReadGoldenStats(t *testing.T) {
	path := filepath.Join(t.TempDir(), "qwen3.jsonl.gz")
	write := func(text string) {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write([]byte(text))
		zw.Close()
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"id":"a","rendered":"ab","ids":[1,2,3]}` + "\n" + `{"id":"b","rendered":"é\n","ids":[4]}` + "\n")
	if st, err := readGoldenStats(path); err != nil || st != (goldenStats{bytes: 5, docs: 2, tokens: 4}) {
		t.Errorf("got %+v, %v; want 5 bytes, 2 documents, 4 tokens", st, err)
	}
	write(`{"rendered":"ab","ids":[1]}` + "\n" + `{"rendered":` + "\n")
	if _, err := readGoldenStats(path); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a bad line: %v, want an error naming line 2", err)
	}
}
