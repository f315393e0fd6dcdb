package bench

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
)

func TestMain(m *testing.M) { testbin.Main(m, "infer", "llmsim") }

// simFleet starts an in-process simulated fleet of n endpoints, closed
// with the test, and returns it with its --endpoints value.
func simFleet(t testing.TB, cfg llmsim.Config, n int) (*llmsim.Fleet, string) {
	t.Helper()
	cfg.Seed = cmp.Or(cfg.Seed, 7)
	f, err := llmsim.Start(context.Background(), cfg, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, strings.Join(f.URLs(), ",")
}

// result is what a run of the bench printed.
type result struct {
	code           int
	stdout, stderr string
}

// runBenchArgs runs `infer bench` in-process with args; past limit it is
// interrupted (and exits 1 saying so).
func runBenchArgs(t testing.TB, limit time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	r := testbin.InProcess(ctx, "infer", Description, &Bench{}, nil, args...)
	return result{r.Code, string(r.Stdout), r.Stderr}
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

// hasAll fails the test for each of wants that text lacks.
func hasAll(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, text)
		}
	}
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

// relay is a TCP relay in front of a server, counting the connections
// clients open through it and the POST requests they send. A connection
// the server closes is closed to the client too.
type relay struct {
	*testbin.Conns
	posts atomic.Int64
}

func startRelay(t *testing.T, endpoint string) *relay {
	t.Helper()
	target := strings.TrimPrefix(endpoint, "http://")
	rl := &relay{}
	rl.Conns = testbin.ServeConns(t, func(c net.Conn, _ <-chan struct{}) {
		up, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		defer up.Close()
		go io.Copy(up, postCounter{c, &rl.posts})
		io.Copy(c, up)
	})
	return rl
}

// postCounter reads a client's side of a relayed connection and counts the
// POST requests on it (a request line starts with "POST /"; one split
// across two reads is missed, which can only make the count lower).
type postCounter struct {
	r io.Reader
	n *atomic.Int64
}

func (p postCounter) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n.Add(int64(bytes.Count(b[:n], []byte("POST /"))))
	return n, err
}
