package dedup

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"tokenmill/internal/corpus"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// Benchmarks run on generated prompt records standing in for the real
// dataset's extracted prompts: TOKENMILL_BENCH_RECORDS of them (default
// 660,000, about 370 MB), made once and kept in the temporary directory.
//
//	go test -run XXX -bench . -benchtime 1x ./lib/dedup/
func benchRecords() int {
	if n, err := strconv.Atoi(os.Getenv("TOKENMILL_BENCH_RECORDS")); err == nil && n > 0 {
		return n
	}
	return 660_000
}

var benchFiles sync.Map // records -> path

// benchPrompts returns the path of a prompt file of n generated records.
func benchPrompts(b *testing.B, n int) (string, int64) {
	b.Helper()
	if p, ok := benchFiles.Load(n); ok {
		st, _ := os.Stat(p.(string))
		return p.(string), st.Size()
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("tokenmill-dedup-bench-%d.jsonl", n))
	if st, err := os.Stat(path); err == nil && st.Size() > 0 {
		benchFiles.Store(n, path)
		return path, st.Size()
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	g := corpus.New(1)
	var buf []byte
	for range n {
		buf = append(corpus.AppendPrompt(buf[:0], g.Next()), '\n')
		w.Write(buf)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		b.Fatal(err)
	}
	benchFiles.Store(n, path)
	st, _ := os.Stat(path)
	return path, st.Size()
}

// BenchmarkDedup runs the command in-process on the whole file.
func BenchmarkDedup(b *testing.B) {
	path, size := benchPrompts(b, benchRecords())
	for _, args := range [][]string{
		{"--normalize", "none"},
		{"--normalize", "lower"},
		{"--normalize", "aggressive"},
		{"--exact"},
		{"--key", "id"},
		{"--near"},
		{"--near", "--workers", "1"},
		{"--near", "--memory", "32MiB"},
	} {
		b.Run(strings.Join(args, " "), func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				env := &cli.Env{Name: "dedup", Stdin: nil, Stdout: io.Discard, Stderr: io.Discard}
				if code := cli.Run(context.Background(), env, Description, &Command{}, append([]string{path}, args...)); code != 0 {
					b.Fatalf("exit %d", code)
				}
			}
		})
	}
}

// BenchmarkTools runs the dedup binary and the tools users would use
// instead on the same file, reporting throughput and peak RSS. jq reads
// the whole input into memory, so it gets the first quarter of the file.
func BenchmarkTools(b *testing.B) {
	path, size := benchPrompts(b, benchRecords())
	quarter := filepath.Join(b.TempDir(), "quarter.jsonl")
	quarterSize := headFile(b, path, quarter, size/4)
	tools := []struct {
		name  string
		bytes int64
		cmd   []string
	}{
		{"dedup", size, []string{testbin.Path("dedup"), path}},
		{"dedup-exact", size, []string{testbin.Path("dedup"), "--exact", path}},
		{"dedup-1-worker", size, []string{testbin.Path("dedup"), "--workers", "1", path}},
		{"dedup-near", size, []string{testbin.Path("dedup"), "--near", path}},
		{"dedup-near-1-worker", size, []string{testbin.Path("dedup"), "--near", "--workers", "1", path}},
		{"awk", size, []string{"awk", "!seen[$0]++", path}},
		{"dedup-quarter", quarterSize, []string{testbin.Path("dedup"), quarter}},
		{"jq-quarter", quarterSize, []string{"jq", "-c", "-s", "unique_by(.messages)[]", quarter}},
	}
	// A child's own ru_maxrss counts the memory it shared with this test
	// process before exec, so peak RSS is taken from /usr/bin/time, with
	// the CPU time, which says more than the wall time on a busy machine.
	timeCmd, _ := exec.LookPath("/usr/bin/time")
	rssFile := filepath.Join(b.TempDir(), "rss")
	for _, tool := range tools {
		b.Run(tool.name, func(b *testing.B) {
			if _, err := exec.LookPath(tool.cmd[0]); err != nil {
				b.Skipf("%s is not installed", tool.cmd[0])
			}
			args := tool.cmd
			if timeCmd != "" {
				args = append([]string{timeCmd, "-f", "%M %U %S", "-o", rssFile}, args...)
			}
			b.SetBytes(tool.bytes)
			var maxRSS int64
			var cpu float64
			for b.Loop() {
				cmd := exec.Command(args[0], args[1:]...)
				cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
				if err := cmd.Run(); err != nil {
					b.Fatalf("%v: %v", tool.cmd, err)
				}
				if data, err := os.ReadFile(rssFile); err == nil {
					var kb int64
					var user, sys float64
					fmt.Sscan(string(data), &kb, &user, &sys)
					maxRSS = max(maxRSS, kb)
					cpu += user + sys
				}
			}
			if timeCmd != "" {
				b.ReportMetric(float64(maxRSS)/1024, "peak-RSS-MB")
				b.ReportMetric(cpu/float64(b.N), "cpu-s/op")
			}
		})
	}
}

// headFile copies whole lines of src to dst until about n bytes.
func headFile(b *testing.B, src, dst string, n int64) int64 {
	in, err := os.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		b.Fatal(err)
	}
	r := bufio.NewReaderSize(in, 1<<20)
	w := bufio.NewWriterSize(out, 1<<20)
	var written int64
	for written < n {
		line, err := r.ReadBytes('\n')
		w.Write(line)
		written += int64(len(line))
		if err != nil {
			break
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := out.Close(); err != nil {
		b.Fatal(err)
	}
	return written
}

// BenchmarkKey is the per-core cost of parsing and hashing one record.
func BenchmarkKey(b *testing.B) {
	input, _ := corpusPrompts(20000, 1)
	ls := bytes.Split(bytes.TrimSuffix(input, []byte("\n")), []byte("\n"))
	for _, mode := range []Mode{None, Lower, Aggressive} {
		b.Run(mode.String(), func(b *testing.B) {
			k, _ := NewKeyer(KeyPrompt, mode)
			b.SetBytes(int64(len(input)))
			for b.Loop() {
				for _, l := range ls {
					if _, err := k.Key(l); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkFilter is the sequencer's cost per key at the default settings.
func BenchmarkFilter(b *testing.B) {
	s := NewSet(1_000_000, 1e-6, false)
	i := 0
	for b.Loop() {
		s.Seen(distinct("b", i%2_000_000), nil)
		i++
	}
}

// BenchmarkDecide is the sequencer alone, on batches of keys already
// hashed by the workers: the filter's lookups and the writes, in input
// order. 4 in 1000 keys repeat one seen before, as in the bench's prompts.
func BenchmarkDecide(b *testing.B) {
	const n, recordBytes = 660_000, 565
	line := bytes.Repeat([]byte("x"), recordBytes-1)
	batches := make([]*jsonl.Batch[key], 0, n/jsonl.BatchRecords+1)
	for i := 0; i < n; i += jsonl.BatchRecords {
		items := make([]jsonl.Item[key], min(jsonl.BatchRecords, n-i))
		for j := range items {
			k := i + j
			if k%250 == 249 {
				k /= 2
			}
			h := distinct("d", k)
			items[j].Data, items[j].V.hash, items[j].V.probes = line, h, probesOf(h)
		}
		batches = append(batches, &jsonl.Batch[key]{Items: items})
	}
	b.SetBytes(n * recordBytes)
	for b.Loop() {
		s := &sink{set: NewSet(1_000_000, 1e-6, false), n: &counts{}, out: jsonl.NewWriter(io.Discard)}
		for _, bt := range batches {
			if err := s.decide(bt); err != nil {
				b.Fatal(err)
			}
		}
		if s.n.removed.Load() == 0 {
			b.Fatal("no key repeated")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/key")
}
