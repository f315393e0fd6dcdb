package pipelines_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkTokenIDs: what --token-ids costs. infer (the binary, its own
// process) against two llmsim --instant endpoints (another process), 5,000
// chat prompts of 256-token answers, with and without --token-ids: the
// client's CPU per request (user + system time of infer alone), its
// answers per second, and the output per 1,000 answers: the generation
// records (JSONL), and with --token-ids the training rows merge --to tokens
// makes of them, JSONL and Parquet.
func BenchmarkTokenIDs(b *testing.B) {
	const n = 5000
	dir := b.TempDir()
	in := filepath.Join(dir, "prompts.jsonl")
	var lines strings.Builder
	for i := 0; i < n; i++ {
		msg, _ := json.Marshal(fmt.Sprintf("Question %d: explain in a few sentences why topic %d matters, with an example.", i, i*7919%1000))
		fmt.Fprintf(&lines, `{"id":"q%05d","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":%s}]}`+"\n", i, msg)
	}
	if err := os.WriteFile(in, []byte(lines.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	fleet := startFleet(b, 2, "--instant", "--seed", "7", "--chat-template", "chatml")
	size := func(p string) float64 {
		st, err := os.Stat(p)
		if err != nil {
			b.Fatal(err)
		}
		return float64(st.Size())
	}
	for _, mode := range []string{"without", "with"} {
		b.Run(mode, func(b *testing.B) {
			var cpu, wall time.Duration
			var genBytes, rowsJSONL, rowsParquet float64
			for i := 0; i < b.N; i++ {
				out := filepath.Join(b.TempDir(), "gen.jsonl")
				args := []string{"-e", fleet, "--concurrency", "64", "--max-tokens", "256", "--progress", "0", "-o", out, in}
				if mode == "with" {
					args = append(args, "--token-ids")
				}
				cmd := exec.Command(filepath.Join(binDir, "infer"), args...)
				var stderr strings.Builder
				cmd.Stderr = &stderr
				start := time.Now()
				if err := cmd.Run(); err != nil {
					b.Fatalf("infer: %v\n%s", err, stderr.String())
				}
				wall += time.Since(start)
				cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
				genBytes += size(out)
				if mode == "with" {
					rows := filepath.Join(filepath.Dir(out), "rows")
					for _, ext := range []string{".jsonl", ".parquet"} {
						if msg, err := exec.Command(filepath.Join(binDir, "merge"), "--to", "tokens", "-o", rows+ext, out).CombinedOutput(); err != nil {
							b.Fatalf("merge: %v\n%s", err, msg)
						}
					}
					rowsJSONL += size(rows + ".jsonl")
					rowsParquet += size(rows + ".parquet")
				}
			}
			answers := float64(n * b.N)
			b.ReportMetric(float64(cpu.Microseconds())/answers, "client-cpu-µs/req")
			b.ReportMetric(answers/wall.Seconds(), "answers/s")
			b.ReportMetric(genBytes/answers, "gen-jsonl-KB/1k")
			if mode == "with" {
				b.ReportMetric(rowsJSONL/answers, "rows-jsonl-KB/1k")
				b.ReportMetric(rowsParquet/answers, "rows-parquet-KB/1k")
			}
		})
	}
}
