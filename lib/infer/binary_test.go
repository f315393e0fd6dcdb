package infer

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
)

// The real binaries, built once for the package's tests (merge for the
// tests that turn a --regenerate output into training records).
func TestMain(m *testing.M) { testbin.Main(m, "infer", "llmsim", "extract", "corpus", "merge") }

// startSimBinary runs the llmsim binary on n free ports and returns their
// URLs once it is listening.
func startSimBinary(t testing.TB, n int, extra ...string) []string {
	t.Helper()
	dir := t.TempDir()
	ready := filepath.Join(dir, "urls")
	listen := strings.TrimSuffix(strings.Repeat("127.0.0.1:0,", n), ",")
	cmd := testbin.Command("llmsim", append([]string{"--listen", listen, "--ready-file", ready}, extra...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	var urls []string
	waitFor(t, 10*time.Second, "llmsim to write its ready file", func() bool {
		b, err := os.ReadFile(ready)
		if err != nil {
			return false
		}
		urls = strings.Fields(string(b))
		return len(urls) == n
	})
	return urls
}

// proc is a running infer binary.
type proc struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
}

func startInfer(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: testbin.Command("infer", args...)}
	p.cmd.Stderr = &p.stderr
	p.cmd.Stdout = &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	return p
}

// wait returns the exit code, failing the test past limit.
func (p *proc) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		p.cmd.Process.Kill()
		<-done
		t.Fatalf("infer did not exit within %v; stderr:\n%s", limit, p.stderr.String())
	}
	return -1
}

// completeLines counts the newline-terminated lines of a file.
func completeLines(path string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte{'\n'})
}

// killRounds runs infer with args, then with --resume, rounds times in
// all, killing each with SIGKILL as soon as its first flush lands (so
// the run never finishes before the kill); after each kill, check gets
// the round, the run and the whole lines it left. A last --resume run
// must finish; it is returned.
func killRounds(t *testing.T, args []string, rounds, total int, check func(round int, p *proc, whole []byte)) *proc {
	t.Helper()
	out := args[slices.Index(args, "-o")+1]
	resumeArgs := append(append([]string{}, args...), "--resume")
	for round := 0; round < rounds; round++ {
		a := args
		if round > 0 {
			a = resumeArgs
		}
		before := completeLines(out)
		p := startInfer(t, a...)
		waitFor(t, 30*time.Second, fmt.Sprintf("round %d to write output", round), func() bool { return completeLines(out) > before })
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.wait(t, 10*time.Second)
		if n := completeLines(out); n >= total {
			t.Fatalf("round %d: the run finished (%d lines) before it was killed", round, n)
		}
		data, _ := os.ReadFile(out)
		check(round, p, data[:bytes.LastIndexByte(data, '\n')+1])
	}
	p := startInfer(t, resumeArgs...)
	if code := p.wait(t, 60*time.Second); code != cli.ExitOK {
		t.Fatalf("final resume exit %d\n%s", code, p.stderr.String())
	}
	return p
}

// kill -9 at several points, a partial last line planted by hand, and
// --resume each time: the output ends with exactly one record per answer
// and no partial line.
func TestKillAndResume(t *testing.T) {
	t.Parallel()
	// Slow enough that the run takes a few seconds, so each kill lands
	// in the middle of it.
	urls := startSimBinary(t, 3, "--time-scale", "40", "--max-running", "8")
	dir := t.TempDir()
	in, lines := promptSet{n: 600}.write(t, dir, "prompts.jsonl")
	out := filepath.Join(dir, "gen.jsonl")
	args := append([]string{"-e", strings.Join(urls, ","), "--max-tokens", "48", "--flush-interval", "100ms", "-o", out, in}, fastFlags...)
	p := killRounds(t, args, 3, 600, func(round int, _ *proc, whole []byte) {
		// Whatever the kill left must read back as whole records.
		parseRecords(t, out, whole)
		if round == 1 {
			// A crash mid-write: half a record at the end.
			f, err := os.OpenFile(out, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(`{"id":"p00599","messages":[{"role":"user","content":"Quest`)
			f.Close()
		}
	})
	if !strings.Contains(p.stderr.String(), "resuming") {
		t.Errorf("no resume report:\n%s", p.stderr.String())
	}
	acc := checkExactlyOnce(t, lines, 1, readRecords(t, out), readRecords(t, filepath.Join(dir, "gen.errors.jsonl")))
	if acc.ok != 600 {
		t.Fatalf("ok %d", acc.ok)
	}
}

// The partial line a crash leaves is cut off, and said so.
func TestResumeRepairsPartialLine(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{TimeScale: 2000, MaxRunning: 8}, 2, promptSet{n: 40})
	// A first run over half the prompts.
	half := newSetup(t, llmsim.Config{}, 0, promptSet{n: 20})
	half.out = s.out
	runWant(t, cli.ExitOK, half.args("-e", endpointsFlag(s.fleet.URLs()), "--max-tokens", "16")...)
	checkExactlyOnce(t, half.lines, 1, readRecords(t, s.out), nil)
	f, _ := os.OpenFile(s.out, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"id":"p00003","messages":[{"ro`)
	f.Close()

	res := runWant(t, cli.ExitOK, s.args("--max-tokens", "16", "--resume")...)
	if !strings.Contains(res.stderr, "removed a partial last line (31 bytes)") || !strings.Contains(res.stderr, "20 answers already done") {
		t.Errorf("stderr:\n%s", res.stderr)
	}
	acc := s.check(t, 1)
	if acc.ok != 40 {
		t.Fatalf("ok %d", acc.ok)
	}
	if !strings.Contains(res.stderr, "skipped 20") {
		t.Errorf("summary does not count the 20 skipped:\n%s", res.stderr)
	}
}

// SIGINT stops the real binary with 130 and what was done flushed;
// --resume finishes the job.
func TestSigintThenResume(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{TimeScale: 60, MaxRunning: 8}, 2, promptSet{n: 400})
	out := s.out
	args := s.args("--max-tokens", "48", "--grace", "100ms", "--flush-interval", "100ms")
	p := startInfer(t, args...)
	waitFor(t, 30*time.Second, "some output", func() bool { return completeLines(out) >= 50 })
	p.cmd.Process.Signal(syscall.SIGINT)
	if code := p.wait(t, 10*time.Second); code != cli.ExitInterrupted {
		t.Fatalf("exit %d, want 130\n%s", code, p.stderr.String())
	}
	stopped := readRecords(t, out)
	if len(stopped) >= 400 {
		t.Fatalf("the run finished before the signal")
	}
	// Said at once: what it finishes, for how long, how to stop now, how
	// to go on; and "not done" is every prompt of the input without an
	// answer, those never read included: what the resume then answers.
	first := p.stderr.String()
	if !regexp.MustCompile(`infer: stopping: (finishing [\d,]+ requests in flight \(up to 100ms, --grace\)|no requests in flight); Ctrl-C again to stop now; --resume continues`).MatchString(first) {
		t.Errorf("no stopping line:\n%s", first)
	}
	m := regexp.MustCompile(`not done ([\d,]+) \(run again with --resume\)`).FindStringSubmatch(first)
	if m == nil {
		t.Fatalf("no not-done count:\n%s", first)
	}
	if notDone := atoiCommas(m[1]); notDone != int64(400-len(stopped)) {
		t.Errorf("not done %d, but %d of 400 prompts have no record", notDone, 400-len(stopped))
	}
	p = startInfer(t, append(args, "--resume")...)
	if code := p.wait(t, 60*time.Second); code != cli.ExitOK {
		t.Fatalf("resume exit %d\n%s", code, p.stderr.String())
	}
	if want := fmt.Sprintf("ok %d, failed 0, skipped %d", 400-len(stopped), len(stopped)); !strings.Contains(p.stderr.String(), want) {
		t.Errorf("the resume's summary does not say %q:\n%s", want, p.stderr.String())
	}
	acc := s.check(t, 1)
	if acc.ok != 400 {
		t.Fatalf("ok %d", acc.ok)
	}
}

// Without --resume an existing output is never touched.
func TestRefusesToOverwrite(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 3})
	out := s.out
	const old = "{\"id\":\"keep\",\"output\":{\"text\":\"precious\"}}\n"
	os.WriteFile(out, []byte(old), 0o644)
	p := startInfer(t, s.args("-e", "127.0.0.1:1")...)
	if code := p.wait(t, 10*time.Second); code != cli.ExitUsage {
		t.Fatalf("exit %d, want 2\n%s", code, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "already exists") || !strings.Contains(p.stderr.String(), "--resume") {
		t.Errorf("stderr:\n%s", p.stderr.String())
	}
	if b, _ := os.ReadFile(out); string(b) != old {
		t.Errorf("the output was changed: %q", b)
	}
}

// The default command stays generation: infer [flags] [files], infer
// generate [flags] [files], and help naming both commands.
func TestCommands(t *testing.T) {
	s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 20})
	if r := runBinary(t, append([]string{"generate"}, s.args()...)...); r.Code != cli.ExitOK {
		t.Fatalf("infer generate: exit %d\n%s", r.Code, r.Stderr)
	}
	if acc := s.check(t, 1); acc.ok != 20 {
		t.Fatalf("infer generate: %d answers", acc.ok)
	}
	// infer --help is generate's: the flags a run takes, and where bench is.
	r := runBinary(t, "--help")
	help := strings.Join(strings.Fields(string(r.Stdout)), " ")
	for _, want := range []string{"Usage: infer generate", "--retries=N", "infer bench --help", "Example:"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q:\n%s", want, r.Stdout)
		}
	}
	r = runBinary(t, "bench", "--help")
	if !strings.Contains(string(r.Stdout), "knee") || !strings.Contains(string(r.Stdout), "--concurrency") {
		t.Errorf("bench --help:\n%s", r.Stdout)
	}
	// The flags' names: --progress and --force shown, the old
	// --progress-interval hidden.
	r = runBinary(t, "generate", "--help")
	gen := string(r.Stdout)
	for _, want := range []string{"-o, --output=FILE", "--rejects=FILE", "--progress=DURATION", "--force", "TOKENMILL_INFER_PROGRESS"} {
		if !strings.Contains(gen, want) {
			t.Errorf("generate --help lacks %q:\n%s", want, gen)
		}
	}
	if strings.Contains(gen, "progress-interval") {
		t.Errorf("generate --help shows the hidden --progress-interval:\n%s", gen)
	}
}

// stdinPipe gives cmd a pipe for stdin; the test writes and closes it.
func stdinPipe(t *testing.T, cmd *exec.Cmd) io.WriteCloser {
	t.Helper()
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	return w
}
