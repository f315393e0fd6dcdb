package infer

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/corpus"
	"tokenmill/lib/cli"
)

// BenchmarkRequestCost: what infer's client costs a request, in CPU and
// allocations, against llmsim --instant running as its own process (so
// that none of the simulator's CPU is counted): infer runs in the
// benchmark's process, and its CPU is the process's user + system time
// over the run. The prompts are the corpus's (extract's records of its
// first turns), the answers 16 tokens, 64 in flight. The bench harness
// (internal/benchsuite, section "cost") fails its run when a figure here
// grows by half over internal/benchsuite/baseline.json.
func BenchmarkRequestCost(b *testing.B) {
	const n = 20000
	in := corpusPrompts(b, n)
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"plain", nil},
		{"context", []string{"--context-length", "32768"}},
		{"token-ids", []string{"--token-ids"}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			urls := startSimBinary(b, 1, "--instant", "--seed", "7", "--chat-template", "chatml")
			args := append([]string{"-e", urls[0], "--concurrency", "64", "--max-tokens", "16", "--progress", "0", "--force"}, mode.args...)
			var cpu time.Duration
			var allocs, bytes uint64
			for i := 0; i < b.N; i++ {
				out := filepath.Join(b.TempDir(), "gen.jsonl")
				runtime.GC()
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				c0 := processCPU(b)
				res := runInfer(b, 5*time.Minute, "", append(args, "-o", out, in)...)
				cpu += processCPU(b) - c0
				runtime.ReadMemStats(&m1)
				allocs += m1.Mallocs - m0.Mallocs
				bytes += m1.TotalAlloc - m0.TotalAlloc
				if res.code != cli.ExitOK {
					b.Fatalf("exit %d\n%s", res.code, res.stderr)
				}
			}
			reqs := float64(n * b.N)
			b.ReportMetric(float64(cpu.Nanoseconds())/1e3/reqs, "cpu-µs/req")
			b.ReportMetric(float64(allocs)/reqs, "allocs/req")
			b.ReportMetric(float64(bytes)/reqs, "B/req")
		})
	}
}

// corpusPrompts writes n of the corpus's prompt records (seed 1) to a
// file in a temporary directory.
func corpusPrompts(b *testing.B, n int) string {
	b.Helper()
	g := corpus.New(1)
	var buf bytes.Buffer
	var line []byte
	for range n {
		line = corpus.AppendPrompt(line[:0], g.Next())
		buf.Write(line)
		buf.WriteByte('\n')
	}
	path := filepath.Join(b.TempDir(), "prompts.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// processCPU is the user + system time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
