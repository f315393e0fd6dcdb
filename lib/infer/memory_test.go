package infer

import (
	"bufio"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/valyala/fasthttp"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
)

// runPeakRSS runs the infer binary with args and returns its exit code,
// stderr and peak resident memory in bytes (getrusage ru_maxrss).
func runPeakRSS(b *testing.B, args ...string) (int, string, int64) {
	b.Helper()
	cmd := testbin.Command("infer", args...)
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	cmd.Run()
	if cmd.ProcessState == nil {
		b.Fatalf("infer did not run:\n%s", stderr.String())
	}
	var rss int64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rss = ru.Maxrss * 1024
	}
	return cmd.ProcessState.ExitCode(), stderr.String(), rss
}

// A 500 MB prompt record between two small ones (a sparse file: its
// bytes are a hole), at the default --max-prompt-bytes: rejected as it is
// read, the two others answered. peak-RSS-bytes is infer's peak resident
// memory.
func BenchmarkHugePromptPeakRSS(b *testing.B) {
	s := newSetup(b, llmsim.Config{Instant: true}, 1, promptSet{n: 0})
	f, err := os.Create(s.in)
	if err != nil {
		b.Fatal(err)
	}
	head := `{"id":"a","messages":[{"role":"user","content":"one"}]}` + "\n" + `{"id":"huge","messages":[{"role":"user","content":"`
	f.WriteString(head)
	f.Truncate(int64(len(head)) + 500<<20)
	f.Seek(0, io.SeekEnd)
	f.WriteString(`"}]}` + "\n" + `{"id":"b","messages":[{"role":"user","content":"two"}]}` + "\n")
	f.Close()
	var peak int64
	for range b.N {
		os.Remove(s.out)
		code, stderr, rss := runPeakRSS(b, s.args("--max-tokens", "8")...)
		if code != 3 || !strings.Contains(stderr, "line_too_long") || len(readRecords(b, s.out)) != 2 {
			b.Fatalf("exit %d\n%s", code, stderr)
		}
		peak = max(peak, rss)
	}
	b.SetBytes(500 << 20)
	b.ReportMetric(float64(peak), "peak-RSS-bytes")
}

// Three requests in flight whose answers are chunked bodies of 2 GiB, at
// the default --max-answer-bytes (256MiB) and --answer-memory (1GiB): each
// is cut off at the first bound, its prompt an error record
// answer_too_large. peak-RSS-bytes is infer's peak resident memory.
func BenchmarkHugeAnswersPeakRSS(b *testing.B) {
	srv := startStub(b, func(_ *stub, ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			w.WriteString(`{"choices":[{"message":{"role":"assistant","content":"`)
			chunk := strings.Repeat("x", 64<<10)
			for range 1 << 15 {
				if _, err := w.WriteString(chunk); err != nil || w.Flush() != nil {
					return
				}
			}
		})
	}).url
	s := newSetup(b, llmsim.Config{}, 0, promptSet{n: 3})
	var peak int64
	for range b.N {
		os.Remove(s.out)
		os.Remove(s.errs())
		code, stderr, rss := runPeakRSS(b, s.args("-e", srv, "--concurrency", "3", "--retries", "0")...)
		if code != 3 || strings.Count(stderr, "--max-answer-bytes") < 3 {
			b.Fatalf("exit %d\n%s", code, stderr)
		}
		peak = max(peak, rss)
	}
	b.ReportMetric(float64(peak), "peak-RSS-bytes")
}
