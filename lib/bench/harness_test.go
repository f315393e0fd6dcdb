package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/llmsim"
	"tokenmill/lib/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m, "infer", "llmsim") }

// startFleet starts an in-process simulated fleet, closed with the test.
func startFleet(t testing.TB, cfg llmsim.Config, n int) *llmsim.Fleet {
	t.Helper()
	if cfg.Seed == 0 {
		cfg.Seed = 7
	}
	f, err := llmsim.Start(context.Background(), cfg, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func endpointsFlag(f *llmsim.Fleet) string { return strings.Join(f.URLs(), ",") }

// lockedBuffer takes the concurrent writes of the pool's probes and the
// bench's own lines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// result is what a run of the bench printed.
type result struct {
	code           int
	stdout, stderr string
}

// runBenchArgs runs `infer bench` in-process with args, bounded by limit.
func runBenchArgs(t testing.TB, limit time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var stdout, stderr lockedBuffer
	env := &cli.Env{Name: "infer", Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr}
	done := make(chan int, 1)
	go func() { done <- cli.Run(ctx, env, Description, &Bench{}, args) }()
	select {
	case code := <-done:
		return result{code, stdout.String(), stderr.String()}
	case <-time.After(limit + 10*time.Second):
		t.Fatalf("infer bench did not return within %v; stderr:\n%s", limit, stderr.String())
	}
	return result{}
}

// runBench runs the bench with --json and returns its report.
func runBench(t *testing.T, limit time.Duration, args ...string) (Report, result) {
	t.Helper()
	res := runBenchArgs(t, limit, append([]string{"--json", "--wait-ready", "20s"}, args...)...)
	if res.code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	var rep Report
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, res.stdout)
	}
	return rep, res
}

func levelAt(t *testing.T, rep Report, n int) Level {
	t.Helper()
	for _, lv := range rep.Levels {
		if lv.Concurrency == n {
			return lv
		}
	}
	t.Fatalf("no level %d in %+v", n, rep.Levels)
	return Level{}
}

// promptText is the question of test prompt i.
func promptText(i int) string {
	return fmt.Sprintf("Question %d: explain topic number %d in a few words.", i, i*7919%1000)
}

// writePrompts writes n chat prompt records to dir/prompts.jsonl.
func writePrompts(t testing.TB, dir string, n int) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `{"id":"p%05d","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":%q}]}`+"\n", i, promptText(i))
	}
	path := filepath.Join(dir, "prompts.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
