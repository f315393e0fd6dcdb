package testbin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/lib/cli"
)

// Stand-ins for built binaries: shell scripts in the directory Path reads,
// so that these tests need no build.
var scripts = map[string]string{
	// echo copies stdin to stdout and says where it ran and what $WHO is.
	"echo": `cat; echo "dir $(pwd) who $WHO" >&2; exit ${CODE:-0}`,
	// talker speaks three lines, then idles until SIGINT, which it
	// acknowledges before exiting 130.
	"talker": `trap 'echo "talker: interrupted" >&2; exit 130' INT
echo one >&2; echo two >&2; echo "one again" >&2
while :; do sleep 0.02; done`,
	// partial ends its stderr without a newline.
	"partial": `printf 'first\nlast words' >&2`,
	// sleeper outlives any bound these tests set.
	"sleeper": `exec sleep 60`,
}

func TestMain(m *testing.M) {
	var err error
	if dir, err = os.MkdirTemp("", "testbin-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fakeT records the first fatal failure, or the skip, of a helper under
// test.
type fakeT struct {
	testing.TB
	failure, skipped string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.failure = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fakeT) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

func (f *fakeT) Skipf(format string, args ...any) {
	f.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fake runs fn against a fakeT and returns it.
func fake(t *testing.T, fn func(tb testing.TB)) *fakeT {
	f := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

// failure runs fn against a fakeT and returns what it failed with ("" if
// it did not).
func failure(t *testing.T, fn func(tb testing.TB)) string { return fake(t, fn).failure }

func TestRun(t *testing.T) {
	work := t.TempDir()
	tests := []struct {
		name    string
		workdir string
		stdin   io.Reader
		env     []string
		code    int
		stdout  string
		stderr  string
	}{
		{name: "defaults", stderr: "who \n"},
		{name: "stdin, env and exit code", stdin: strings.NewReader("in\n"), env: []string{"WHO=me", "CODE=3"},
			code: 3, stdout: "in\n", stderr: "who me\n"},
		{name: "workdir", workdir: work, stderr: "dir " + work + " "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Run(t, tt.workdir, tt.stdin, tt.env, "echo")
			if r.Code != tt.code || string(r.Stdout) != tt.stdout || !strings.Contains(r.Stderr, tt.stderr) {
				t.Errorf("got exit %d, stdout %q, stderr %q; want %d, %q, stderr with %q", r.Code, r.Stdout, r.Stderr, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}

func TestExecKeepsARedirectedStdout(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := Command("echo")
	cmd.Stdin = strings.NewReader("to the file")
	cmd.Stdout = f
	r := Exec(t, cmd)
	if got, _ := os.ReadFile(out); r.Code != 0 || len(r.Stdout) != 0 || string(got) != "to the file" {
		t.Errorf("exit %d, collected %q, file %q: want the output in the file only", r.Code, r.Stdout, got)
	}
}

// WaitFor follows stderr in order; the signal is taken and the exit code
// and whole stderr are reported.
func TestStartWaitForSignal(t *testing.T) {
	p := Start(t, "talker")
	steps := []struct{ pattern, want string }{
		{"one", "one"},
		{"t.o", "two"},
		{"one", "one again"}, // not the first "one" again
	}
	for _, s := range steps {
		if got := p.WaitFor(t, 10*time.Second, s.pattern); got != s.want {
			t.Fatalf("WaitFor(%q) = %q, want %q", s.pattern, got, s.want)
		}
	}
	p.Signal(t, syscall.SIGINT)
	p.WaitFor(t, 10*time.Second, "interrupted$")
	r := p.Wait(t, 10*time.Second)
	if r.Code != 130 || r.Stderr != "one\ntwo\none again\ntalker: interrupted\n" {
		t.Errorf("exit %d, stderr %q", r.Code, r.Stderr)
	}
	select {
	case <-p.Done():
	default:
		t.Error("Done is open after Wait")
	}
}

func TestWaitForLastLineWithoutNewline(t *testing.T) {
	p := Start(t, "partial")
	if got := p.WaitFor(t, 10*time.Second, "words"); got != "last words" {
		t.Errorf("got %q", got)
	}
}

func TestBoundsFail(t *testing.T) {
	tests := []struct {
		name string
		fn   func(tb testing.TB)
		want string
	}{
		{"exit before the line", func(tb testing.TB) {
			Start(tb, "partial").WaitFor(tb, 10*time.Second, "never said")
		}, `partial exited (exit status 0) before a stderr line matching "never said"`},
		{"no line in time", func(tb testing.TB) {
			Start(tb, "talker").WaitFor(tb, 100*time.Millisecond, "never said")
		}, `talker: no stderr line matching "never said" within 100ms`},
		{"no exit in time", func(tb testing.TB) {
			Start(tb, "sleeper").Wait(tb, 100*time.Millisecond)
		}, "sleeper did not exit within 100ms"},
		{"signal after exit", func(tb testing.TB) {
			p := Start(tb, "partial")
			p.Wait(tb, 10*time.Second)
			p.Signal(tb, syscall.SIGINT)
		}, "signalling partial: "},
	}
	for _, tt := range tests {
		// Each failure names the bound that ended it: a wait that outlived
		// its bound would end at another's, with another message.
		t.Run(tt.name, func(t *testing.T) {
			if got := failure(t, tt.fn); !strings.HasPrefix(got, tt.want) {
				t.Errorf("failure %q, want one starting %q", got, tt.want)
			}
		})
	}
}

// A binary left running is killed when its test ends.
func TestCleanupKills(t *testing.T) {
	var p *Proc
	t.Run("inner", func(t *testing.T) { p = Start(t, "sleeper") })
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10 s after its test ended")
	}
}

// copyCommand copies stdin to stdout until it ends or the run is
// interrupted.
type copyCommand struct {
	cli.Globals
	Fail bool `help:"Fail after copying." default:"false"`
}

func (c *copyCommand) Run(ctx context.Context, env *cli.Env) error {
	buf := make([]byte, 1000)
	for ctx.Err() == nil {
		n, err := env.Stdin.Read(buf)
		env.Stdout.Write(buf[:n])
		if err == io.EOF {
			break
		}
	}
	if c.Fail {
		return errors.New("asked to fail")
	}
	return nil
}

func TestInProcess(t *testing.T) {
	data := []byte(strings.Repeat("0123456789", 5000))
	tests := []struct {
		name   string
		stdin  func(cancel context.CancelCauseFunc) io.Reader
		args   []string
		code   int
		stdout func(n int) bool
		stderr string
	}{
		{name: "no stdin", stdin: func(context.CancelCauseFunc) io.Reader { return nil },
			stdout: func(n int) bool { return n == 0 }},
		{name: "copies", stdin: func(context.CancelCauseFunc) io.Reader { return strings.NewReader(string(data)) },
			stdout: func(n int) bool { return n == len(data) }},
		{name: "failure", stdin: func(context.CancelCauseFunc) io.Reader { return nil }, args: []string{"--fail"},
			code: cli.ExitFailure, stdout: func(n int) bool { return n == 0 }, stderr: "copy: error: asked to fail"},
		{name: "interrupted mid-stream", stdin: func(cancel context.CancelCauseFunc) io.Reader {
			return &InterruptingReader{Data: data, After: 20000, Cancel: cancel}
		}, code: cli.ExitInterrupted, stdout: func(n int) bool { return n >= 20000 && n < len(data) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			r := InProcess(ctx, "copy", "Copies.", &copyCommand{}, tt.stdin(cancel), tt.args...)
			if r.Code != tt.code || !tt.stdout(len(r.Stdout)) || !strings.Contains(r.Stderr, tt.stderr) {
				t.Errorf("exit %d, %d bytes out, stderr %q", r.Code, len(r.Stdout), r.Stderr)
			}
		})
	}
}

func TestInterruptingReader(t *testing.T) {
	data := make([]byte, 10000)
	var cause error
	r := &InterruptingReader{Data: data, After: 5000, Cancel: func(err error) { cause = err }}
	buf := make([]byte, len(data))
	var reads []int
	for {
		n, err := r.Read(buf)
		if err == io.EOF {
			break
		}
		reads = append(reads, n)
		if got := cause != nil; got != (r.served >= 5000) {
			t.Fatalf("after %d bytes: interrupted %v", r.served, got)
		}
	}
	if fmt.Sprint(reads) != "[4096 4096 1808]" || !errors.Is(cause, cli.ErrInterrupted) {
		t.Errorf("reads %v, cause %v: want 4 KiB reads and cli.ErrInterrupted", reads, cause)
	}
}

// Long skips outside the long tier, naming the switch and what was set
// instead of 1; in the long tier it lets the test run, and Size picks the
// long size.
func TestLong(t *testing.T) {
	for _, tt := range []struct {
		value string // "-": unset
		skip  string
		size  int
	}{
		{"-", "long tier (a real server): run with TOKENMILL_TEST_LONG=1", 1},
		{"", `long tier (a real server): run with TOKENMILL_TEST_LONG=1, not ""`, 1},
		{"yes", `long tier (a real server): run with TOKENMILL_TEST_LONG=1, not "yes"`, 1},
		{"1", "", 2},
	} {
		t.Run(tt.value, func(t *testing.T) {
			t.Setenv(LongEnv, tt.value)
			if tt.value == "-" {
				os.Unsetenv(LongEnv)
			}
			f := fake(t, func(tb testing.TB) { Long(tb, "a real server") })
			if f.skipped != tt.skip || Size(1, 2) != tt.size {
				t.Errorf("skipped %q, size %d; want %q, %d", f.skipped, Size(1, 2), tt.skip, tt.size)
			}
		})
	}
}

// Build links a command once for every package of a checkout: a second
// Build, and one at the same time, find it up to date in the shared
// directory and give their own directory the same binary, which runs.
func TestBuild(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("TOKENMILL_CACHE", cache)
	const hello = "tokenmill/internal/testbin/testdata/hello"
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	if err := Build(dirs[0], hello); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for _, d := range dirs[1:] {
		go func() { errs <- Build(d, hello) }()
	}
	for range dirs[1:] {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	shared, err := filepath.Glob(filepath.Join(cache, "testbin", "*", "hello"))
	if err != nil || len(shared) != 1 {
		t.Fatalf("shared binaries %v (%v), want one", shared, err)
	}
	want, err := os.ReadFile(shared[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		got, err := os.ReadFile(filepath.Join(d, "hello"))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes (%v), want the shared binary's %d", d, len(got), err, len(want))
		}
		if out, err := exec.Command(filepath.Join(d, "hello")).CombinedOutput(); err != nil || string(out) != "hello\n" {
			t.Fatalf("the built hello said %q (%v)", out, err)
		}
	}
	if err := Build(t.TempDir(), "tokenmill/no/such/command"); err == nil || !strings.Contains(err.Error(), "building [tokenmill/no/such/command]") {
		t.Errorf("building a package that is not there: %v", err)
	}
}

// Commands are the product's, read from cmd/.
func TestCommands(t *testing.T) {
	names, err := Commands()
	if err != nil || !slices.Contains(names, "infer") || !slices.Contains(names, "llmsim") || slices.Contains(names, "corpus") {
		t.Errorf("commands %v (%v)", names, err)
	}
}
