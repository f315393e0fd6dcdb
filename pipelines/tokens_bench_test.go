package pipelines_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
//
// The fleet modes ask the same without and with on a fleet with a real
// server's latencies: two llmsim endpoints at their calibrated timing (48
// slots each, an answer taking seconds), run tokenIDsFleetScale times
// faster, with as many requests in flight as slots. There the client's CPU
// is a small share of the machine, and the answers per second say what the
// ids cost a run.
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
	fleetIn := filepath.Join(dir, "fleet-prompts.jsonl")
	if err := os.WriteFile(fleetIn, []byte(firstLines(lines.String(), tokenIDsFleetPrompts)), 0o644); err != nil {
		b.Fatal(err)
	}
	instant := startFleet(b, 2, "--instant", "--seed", "7", "--chat-template", "chatml")
	calibrated := startFleet(b, 2, "--time-scale", strconv.Itoa(tokenIDsFleetScale), "--seed", "7", "--chat-template", "chatml")
	size := func(p string) float64 {
		st, err := os.Stat(p)
		if err != nil {
			b.Fatal(err)
		}
		return float64(st.Size())
	}
	for _, mode := range []string{"without", "with", "fleet-without", "fleet-with"} {
		b.Run(mode, func(b *testing.B) {
			fleet, prompts, concurrency, answers := instant, in, "64", float64(n*b.N)
			if strings.HasPrefix(mode, "fleet-") {
				fleet, prompts, concurrency, answers = calibrated, fleetIn, "96", float64(tokenIDsFleetPrompts*b.N)
			}
			var cpu, wall time.Duration
			var genBytes, rowsJSONL, rowsParquet float64
			for i := 0; i < b.N; i++ {
				out := filepath.Join(b.TempDir(), "gen.jsonl")
				args := []string{"-e", fleet, "--concurrency", concurrency, "--max-tokens", "256", "--progress", "0", "-o", out, prompts}
				if strings.HasSuffix(mode, "with") {
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
			b.ReportMetric(float64(cpu.Microseconds())/answers, "client-cpu-µs/req")
			b.ReportMetric(answers/wall.Seconds(), "answers/s")
			if strings.HasPrefix(mode, "fleet-") {
				return // the sizes are the instant modes'
			}
			b.ReportMetric(genBytes/answers, "gen-jsonl-KB/1k")
			if mode == "with" {
				b.ReportMetric(rowsJSONL/answers, "rows-jsonl-KB/1k")
				b.ReportMetric(rowsParquet/answers, "rows-parquet-KB/1k")
			}
		})
	}
}

// tokenIDsFleetScale is the fleet section's --time-scale: simulated time
// runs this many times faster than a real GPU server's. tokenIDsFleetPrompts
// are three waves of the two endpoints' 96 slots.
const (
	tokenIDsFleetScale   = 20
	tokenIDsFleetPrompts = 288
)

// firstLines is the first n lines of s.
func firstLines(s string, n int) string {
	i := 0
	for ; n > 0 && i < len(s); n-- {
		j := strings.IndexByte(s[i:], '\n')
		if j < 0 {
			return s
		}
		i += j + 1
	}
	return s[:i]
}
