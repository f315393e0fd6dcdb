package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
)

// The infer binary on hostile endpoints files and servers: what is read
// of them is bounded, nothing is waited on, and the memory a run takes is
// capped on the process itself.
func TestMain(m *testing.M) { testbin.Main(m, "infer", "rusage") }

// Memory bounds of the binaries under test, run under testbin.CapKB:
// peakRSS the resident memory each may reach.
const (
	peakRSS = 100 << 20
	// controlRSS: four endpoints' control answers read up to 4 MiB at once
	// (was up to 256 MiB each).
	controlRSS = 192 << 20
)

// cappedProc is a binary running under testbin.CapKB, its peak RSS measured.
type cappedProc struct {
	stdin  io.WriteCloser
	stderr *testbin.LockedBuffer
	stats  string
	done   chan struct{}
	err    error
	cmd    *exec.Cmd
}

// startCapped starts the built binary name with args in dir, under the
// address-space cap, its stdin a pipe.
func startCapped(t *testing.T, dir, name string, args ...string) *cappedProc {
	t.Helper()
	p := &cappedProc{stderr: &testbin.LockedBuffer{}, stats: filepath.Join(t.TempDir(), "rusage"), done: make(chan struct{})}
	p.cmd = testbin.Capped(p.stats, 0, name, args...)
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = io.Discard, p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill() // rusage takes the binary with it (PR_SET_PDEATHSIG)
		<-p.done
	})
	return p
}

// waitFor waits, up to within, for a stderr line matching pattern.
func (p *cappedProc) waitFor(t *testing.T, within time.Duration, pattern string) {
	t.Helper()
	re := regexp.MustCompile(pattern)
	deadline := time.Now().Add(within)
	for !re.MatchString(p.stderr.String()) {
		select {
		case <-p.done:
			if re.MatchString(p.stderr.String()) {
				return
			}
			t.Fatalf("exited (%v) before saying %q:\n%s", p.err, pattern, p.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing matching %q within %v:\n%s", pattern, within, p.stderr.String())
		}
	}
}

// wait waits, up to within, for the binary to exit, and returns its exit
// code and peak resident memory in bytes.
func (p *cappedProc) wait(t *testing.T, within time.Duration) (code int, rss int64) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("did not exit within %v:\n%s", within, p.stderr.String())
	}
	return testbin.PeakRSS(t, p.stats, p.stderr.String())
}

// runCapped runs the binary to its end, within a bound, with empty stdin.
func runCapped(t *testing.T, dir, name string, args ...string) (code int, stderr string, rss int64) {
	t.Helper()
	p := startCapped(t, dir, name, args...)
	p.stdin.Close()
	code, rss = p.wait(t, time.Minute)
	return code, p.stderr.String(), rss
}

func promptLines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"id":"q%03d","messages":[{"role":"user","content":"question %d"}]}`+"\n", i, i)
	}
	return b.String()
}

// answeredBy reads the id and answering endpoint of every record of a
// JSONL file.
func answeredBy(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r struct {
			ID     string `json:"id"`
			Output struct {
				Endpoint string `json:"endpoint"`
			} `json:"output"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if _, dup := out[r.ID]; dup {
			t.Errorf("%s answered twice", r.ID)
		}
		out[r.ID] = r.Output.Endpoint
	}
	return out
}

// --endpoints-file naming what is not a list of endpoints: a FIFO no one
// writes (refused at once, never opened for a wait), a link to /dev/zero
// (refused, not a byte read: the run stays under its memory cap, where it
// grew 1.5 GB in 5 s), a link to a one-line token file (refused by its
// line, which is not quoted). Each is a usage error, exit 2, before
// anything is written.
func TestInferEndpointsFileNotAList(t *testing.T) {
	dir := t.TempDir()
	const secret = "hf_S3cr3tT0k3nOnItsOwnLine"
	mustWriteFile(t, filepath.Join(dir, "token"), secret+"\n")
	os.Symlink(filepath.Join(dir, "token"), filepath.Join(dir, "token.txt"))
	os.Symlink("/dev/zero", filepath.Join(dir, "zero.txt"))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.txt"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ file, want string }{
		{"fifo.txt", "fifo.txt: not a regular file"},
		{"zero.txt", "zero.txt: not a regular file"},
		{"token.txt", "token.txt:1: not an endpoint: missing port (host:port, or a URL with http:// or https://) (the line is not shown)"},
	} {
		t.Run(tt.file, func(t *testing.T) {
			code, stderr, rss := runCapped(t, dir, "infer", "--endpoints-file", tt.file, "-o", "gen.jsonl")
			if code != 2 || !strings.Contains(stderr, tt.want) || strings.Contains(stderr, secret) {
				t.Errorf("exit %d, want 2 with %q and no quote of the file:\n%s", code, tt.want, stderr)
			}
			if rss > peakRSS {
				t.Errorf("peak RSS %d MB, past %d MB", rss>>20, peakRSS>>20)
			}
			if _, err := os.Stat(filepath.Join(dir, "gen.jsonl")); err == nil {
				t.Error("the refused run wrote its output")
			}
			t.Logf("exit %d, peak RSS %.1f MB", code, float64(rss)/(1<<20))
		})
	}
}

// A shared endpoints directory that holds, from the start, a stray
// notes.txt (prose, a token on its first line), and gets, while infer
// runs, a FIFO and a link to /dev/zero named *.txt and then a node's file
// listing a second server. The first server holds every request without
// answering, so only the node added later can answer: every one of 150
// prompts must be answered by it (the stray file made infer ignore the
// directory: it got 0 of 150). Each bad file is said once, by name and
// line, quoting nothing; the run ends by itself once its input ends (a
// FIFO held it after its summary), within its memory cap (the link to
// /dev/zero grew it 1.5 GB in 5 s).
func TestInferEndpointsDirectoryHostile(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	hanging, err := llmsim.Start(ctx, llmsim.Config{Instant: true, Faults: llmsim.Faults{HangRate: 1}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hanging.Close() })
	later, err := llmsim.Start(ctx, llmsim.Config{Instant: true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { later.Close() })
	first, second := hanging.URLs()[0], later.URLs()[0]

	work := t.TempDir()
	eps := filepath.Join(work, "endpoints")
	os.Mkdir(eps, 0o755)
	const secret = "hf_S3cr3tInTheNotes"
	mustWriteFile(t, filepath.Join(eps, "node1.txt"), "# node1\n"+first+"\n")
	mustWriteFile(t, filepath.Join(eps, "notes.txt"), secret+" is the token\nnode2 joins on Monday\n")
	gen := filepath.Join(work, "gen.jsonl")
	p := startCapped(t, work, "infer", "--endpoints-file", eps, "--probe-interval", "50ms", "--request-timeout", "500ms",
		"--backoff", "20ms", "--max-backoff", "100ms", "--max-tokens", "8", "-o", gen)
	p.waitFor(t, 30*time.Second, regexp.QuoteMeta(first)+`: /health 200: ready`)
	p.waitFor(t, 10*time.Second, `notes\.txt:1: not an endpoint: .*left out, the other files of`)

	if err := syscall.Mkfifo(filepath.Join(eps, "fifo.txt"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(eps, "zero.txt")); err != nil {
		t.Fatal(err)
	}
	p.waitFor(t, 10*time.Second, `fifo\.txt: not a regular file`)
	p.waitFor(t, 10*time.Second, `zero\.txt: not a regular file`)
	writeList(t, filepath.Join(eps, "node2.txt"), second)
	p.waitFor(t, 10*time.Second, "lists a new endpoint, "+regexp.QuoteMeta(second))
	p.waitFor(t, 10*time.Second, regexp.QuoteMeta(second)+`: /health 200: ready`)

	const n = 150
	if _, err := io.WriteString(p.stdin, promptLines(n)); err != nil {
		t.Fatal(err)
	}
	p.stdin.Close()
	code, rss := p.wait(t, 90*time.Second)
	stderr := p.stderr.String()
	if code != 0 {
		t.Fatalf("infer exited %d:\n%s", code, stderr)
	}
	got := answeredBy(t, gen)
	fromSecond := 0
	for _, ep := range got {
		if ep == second {
			fromSecond++
		}
	}
	if len(got) != n || fromSecond != n {
		t.Errorf("%d of %d prompts answered, %d by the node added to the directory (only it answers):\n%s", len(got), n, fromSecond, stderr)
	}
	for _, name := range []string{"notes.txt:1", "fifo.txt", "zero.txt"} {
		if c := strings.Count(stderr, name); c != 1 {
			t.Errorf("%s said %d times, want once:\n%s", name, c, stderr)
		}
	}
	if strings.Contains(stderr, secret) || strings.Contains(stderr, "Monday") {
		t.Errorf("a line of the stray file is quoted:\n%s", stderr)
	}
	if rss > peakRSS {
		t.Errorf("peak RSS %d MB, past %d MB", rss>>20, peakRSS>>20)
	}
	t.Logf("%d of %d answered by the node added later; peak RSS %.1f MB", fromSecond, n, float64(rss)/(1<<20))
}

// SIGTERM ends a run whose endpoints directory holds a FIFO (which held
// infer past its summary, deaf to SIGTERM): exit 130 within 20 s, its
// lock file gone.
func TestInferSigtermWithFIFOInEndpoints(t *testing.T) {
	f, err := llmsim.Start(context.Background(), llmsim.Config{Instant: true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	work := t.TempDir()
	eps := filepath.Join(work, "endpoints")
	os.Mkdir(eps, 0o755)
	mustWriteFile(t, filepath.Join(eps, "node1.txt"), f.URLs()[0]+"\n")
	if err := syscall.Mkfifo(filepath.Join(eps, "fifo.txt"), 0o644); err != nil {
		t.Fatal(err)
	}
	gen := filepath.Join(work, "gen.jsonl")
	infer := testbin.Start(t, "infer", "--endpoints-file", eps, "--probe-interval", "50ms", "--max-tokens", "8", "-o", gen)
	io.WriteString(infer.Stdin, promptLines(3)) // stdin stays open: the run waits for more
	infer.WaitFor(t, 30*time.Second, `fifo\.txt: not a regular file`)
	infer.WaitFor(t, 30*time.Second, `/health 200: ready`)
	infer.Signal(t, syscall.SIGTERM)
	r := infer.Wait(t, 20*time.Second)
	if r.Code != 130 {
		t.Errorf("exit %d after SIGTERM, want 130:\n%s", r.Code, r.Stderr)
	}
	if _, err := os.Stat(gen + ".lock"); err == nil {
		t.Errorf("the lock file is left:\n%s", r.Stderr)
	}
}

// Control answers without end: four servers whose /v1/models,
// /get_server_info, /props, /metrics (and every other route but /health
// and the generation route) stream a body that never ends, then four
// whose /health does. fasthttp read each up to 256 MiB before infer's
// 4 MiB cut (2.9 GB peak with four endpoints); now no more than 4 MiB of
// one is read. The first fleet answers every prompt (the routes taken as
// no answer, each said once per endpoint); the second is never ready,
// and infer says why: the answer past 4 MiB. Both runs stay under the
// memory cap.
func TestInferControlAnswersWithoutEnd(t *testing.T) {
	for _, tt := range []struct {
		name    string
		endless func(path string) bool
	}{
		{"discovery routes", func(path string) bool { return path != "/health" }},
		{"health", func(path string) bool { return path == "/health" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var list []string
			for range 4 {
				list = append(list, endlessServer(t, tt.endless))
			}
			work := t.TempDir()
			in := filepath.Join(work, "prompts.jsonl")
			mustWriteFile(t, in, promptLines(20))
			gen := filepath.Join(work, "gen.jsonl")
			code, stderr, rss := runCapped(t, work, "infer", "-e", strings.Join(list, ","), "--model", "m", "--probe-interval", "50ms",
				"--wait-ready", "3s", "--max-tokens", "8", "-o", gen, in)
			// Four endpoints probed every 50ms, each answer read to 4 MiB in a
			// buffer that doubles: what the garbage collector has not taken
			// back yet is counted too.
			if rss > controlRSS {
				t.Errorf("peak RSS %d MB, past %d MB", rss>>20, controlRSS>>20)
			}
			t.Logf("exit %d, peak RSS %.1f MB", code, float64(rss)/(1<<20))
			if tt.name == "health" {
				if code == 0 || !strings.Contains(stderr, "/health: an answer past 4MiB, not read further") {
					t.Errorf("exit %d, want a failure saying why no endpoint is ready:\n%s", code, stderr)
				}
				return
			}
			if code != 0 || len(answeredBy(t, gen)) != 20 {
				t.Fatalf("exit %d:\n%s", code, stderr)
			}
			// Said once per endpoint and route (an endpoint whose discovery
			// had not reached a route when the run ended says nothing of it).
			for _, route := range []string{"/get_server_info", "/v1/models"} {
				total := 0
				for _, u := range list {
					c := strings.Count(stderr, u+route+": an answer past 4MiB, not read further")
					if c > 1 {
						t.Errorf("%s%s said %d times, want once:\n%s", u, route, c, stderr)
					}
					total += c
				}
				if total == 0 {
					t.Errorf("no endpoint's %s said to be past the bound:\n%s", route, stderr)
				}
			}
		})
	}
}

// endlessServer serves, on a port of its own, a chat answer to
// /v1/chat/completions, a 200 "ok" to the routes endless does not name,
// and a 200 body that never ends (chunked, 64 KiB a write, until the
// client stops reading) to those it names. It returns its URL.
func endlessServer(t *testing.T, endless func(path string) bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for i := range chunk {
		chunk[i] = 'x'
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		path := string(ctx.Path())
		switch {
		case path == "/v1/chat/completions":
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
		case endless(path):
			ctx.SetContentType("application/json")
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
				w.WriteString(`{"data":[{"id":"`)
				for range 1 << 14 { // 1 GiB at most
					if _, err := w.Write(chunk); err != nil || w.Flush() != nil {
						return
					}
				}
			})
		default:
			ctx.SetBodyString("ok")
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String()
}
