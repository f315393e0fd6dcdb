package merge

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
)

// writeBenchRun writes a run of n prompts answered in ~1 KB generation
// records, as infer writes them: one file of answers with 5% errors, then
// a rerun answering 10% again. It returns the prompt file, the answer
// files and their total size.
func writeBenchRun(b *testing.B, dir string, n int) (prompts string, inputs []string, size int64) {
	b.Helper()
	question := strings.Repeat("Summarise the causes of the French Revolution in three sentences. ", 3)
	// Answers of up to 700 bytes, JSON strings to splice into the records.
	var texts []string
	for _, a := range llmsim.Answers(256, 1) {
		t, err := json.Marshal(a[:min(len(a), 700)])
		if err != nil {
			b.Fatal(err)
		}
		texts = append(texts, string(t))
	}
	create := func(name string) (*os.File, *bufio.Writer) {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			b.Fatal(err)
		}
		return f, bufio.NewWriterSize(f, 1<<20)
	}
	pf, pw := create("prompts.jsonl")
	gf, gw := create("gen.jsonl")
	rf, rw := create("rerun.jsonl")
	for i := 0; i < n; i++ {
		prompt := fmt.Sprintf(`{"id": "ii-%08d", "messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "%d. %s"}], "source": "infinity-instruct/0625"`, i, i, question)
		fmt.Fprintf(pw, "%s}\n", prompt)
		if i%20 == 7 {
			fmt.Fprintf(gw, `%s, "error": {"status": 503, "message": "Service Unavailable", "attempts": 5, "endpoint": "http://127.0.0.1:30003", "retriable": true, "sample": 0}}`+"\n", prompt)
		} else {
			fmt.Fprintf(gw, `%s, "output": {"text": %s, "finish_reason": "stop", "usage": {"prompt_tokens": 61, "completion_tokens": 170, "cached_tokens": 0}, "model": "Qwen3.6-27B", "endpoint": "http://127.0.0.1:30001", "latency_ms": 6120, "attempts": 1, "sample": 0}}`+"\n", prompt, texts[i%len(texts)])
		}
		if i%10 == 7 {
			fmt.Fprintf(rw, `%s, "output": {"text": %s, "finish_reason": "length", "usage": {"prompt_tokens": 61, "completion_tokens": 170, "cached_tokens": 0}, "model": "Qwen3.6-27B", "endpoint": "http://127.0.0.1:30002", "latency_ms": 5120, "attempts": 2, "sample": 0}}`+"\n", prompt, texts[i%len(texts)])
		}
	}
	for _, w := range []*bufio.Writer{pw, gw, rw} {
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	for _, f := range []*os.File{pf, gf, rf} {
		if f != pf {
			st, _ := f.Stat()
			size += st.Size()
			inputs = append(inputs, f.Name())
		}
		f.Close()
	}
	return pf.Name(), inputs, size
}

// peakHeap samples the live heap while a benchmark runs.
type peakHeap struct {
	peak atomic.Uint64
	stop chan struct{}
	done chan struct{}
}

func startPeakHeap() *peakHeap {
	p := &peakHeap{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > p.peak.Load() {
				p.peak.Store(v)
			}
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *peakHeap) report(b *testing.B) {
	close(p.stop)
	<-p.done
	b.ReportMetric(float64(p.peak.Load())/(1<<20), "peak-heap-MB")
}

func benchMerge(b *testing.B, n int, flags ...string) {
	dir := b.TempDir()
	prompts, inputs, size := writeBenchRun(b, dir, n)
	args := append(append([]string{}, flags...), inputs...)
	for i, a := range args {
		if a == "PROMPTS" {
			args[i] = prompts
		}
	}
	b.SetBytes(size)
	b.ReportMetric(float64(n), "prompts")
	b.ResetTimer()
	heap := startPeakHeap()
	for i := 0; i < b.N; i++ {
		code, _, stderr := runMerge(b, context.Background(), nil, append([]string{"-o", filepath.Join(dir, "out.jsonl"), "--force", "--temp-dir", dir}, args...)...)
		if code != 0 {
			b.Fatalf("exit %d\n%s", code, stderr)
		}
	}
	b.StopTimer()
	heap.report(b)
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "prompts/s")
}

// BenchmarkMerge merges 100k prompts' answers (~115 MB) in the ways merge
// is used, the records read back from their files; spill forces the
// partitioned path with a 16 MiB budget; workers-1 parses on one core.
func BenchmarkMerge(b *testing.B) {
	const n = 100_000
	b.Run("memory", func(b *testing.B) { benchMerge(b, n) })
	b.Run("workers-1", func(b *testing.B) { benchMerge(b, n, "--workers", "1") })
	b.Run("spill-16MiB", func(b *testing.B) { benchMerge(b, n, "--memory", "16MiB") })
	b.Run("sort", func(b *testing.B) { benchMerge(b, n, "--sort") })
	b.Run("missing", func(b *testing.B) { benchMerge(b, n, "--prompts", "PROMPTS", "--missing") })
	b.Run("messages", func(b *testing.B) { benchMerge(b, n, "--to", "messages") })
}

// BenchmarkMerge1M merges 1M prompts' answers (~1.1 GB of generation
// records) within the default 512 MiB budget, so it spills to disk.
func BenchmarkMerge1M(b *testing.B) {
	benchMerge(b, 1_000_000)
}

func BenchmarkParseRecord(b *testing.B) {
	dir := b.TempDir()
	_, inputs, _ := writeBenchRun(b, dir, 1)
	f, err := os.Open(inputs[0])
	if err != nil {
		b.Fatal(err)
	}
	line, _ := bufio.NewReader(f).ReadBytes('\n')
	f.Close()
	line = line[:len(line)-1]
	b.SetBytes(int64(len(line)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, rej := parseRecord(line); rej != nil {
			b.Fatal(rej.detail)
		}
	}
}
