// Package testbin builds tokenmill's real binaries for tests and runs them,
// so that CLI tests exercise exactly what users run: flag parsing, the exit
// code mapping, signal handling and the buffered stdout. InProcess runs a
// command the same way without a build, for tests that cancel it or run it
// many times. It is also the one place for golden files: the -update flag,
// CheckGolden, and the wire exchanges of the simulated servers.
package testbin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var dir string

// Main builds every named command (tokenmill/cmd/<name>, or
// tokenmill/internal/cmd/<name> for the development commands) into one
// temporary directory, runs the package's tests and removes the directory.
// Call it from TestMain.
func Main(m *testing.M, names ...string) {
	os.Exit(run(m, names))
}

func run(m *testing.M, names []string) int {
	var err error
	dir, err = os.MkdirTemp("", "tokenmill-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testbin:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := Build(dir, names...); err != nil {
		fmt.Fprintln(os.Stderr, "testbin:", err)
		return 1
	}
	return m.Run()
}

// devCommands are the commands of the kit, under internal/cmd.
var devCommands = []string{"corpus", "benchsuite", "rusage"}

// packageOf is the import path of the command named: one of cmd/ or
// internal/cmd/, or a main package's import path (its binary is named
// for the last element).
func packageOf(name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	if slices.Contains(devCommands, name) {
		return "tokenmill/internal/cmd/" + name
	}
	return "tokenmill/cmd/" + name
}

// Path is the built binary of a command named in Main.
func Path(name string) string {
	if dir == "" {
		panic("testbin.Path called without testbin.Main in TestMain")
	}
	return filepath.Join(dir, name)
}

// Command is exec.Command for a built binary.
func Command(name string, args ...string) *exec.Cmd {
	return exec.Command(Path(name), args...)
}

// Result is what one run of a binary produced.
type Result struct {
	Code   int
	Stdout []byte
	Stderr string
}

// Timeout bounds every Run.
const Timeout = 2 * time.Minute

// Run runs a built binary in workdir (empty: the test's directory) with
// stdin (nil: empty), the process environment plus env (KEY=VALUE), and
// args. It fails the test if the binary cannot start or runs past Timeout.
func Run(t testing.TB, workdir string, stdin io.Reader, env []string, name string, args ...string) Result {
	t.Helper()
	cmd := Command(name, args...)
	cmd.Dir = workdir
	if stdin == nil {
		stdin = bytes.NewReader(nil)
	}
	cmd.Stdin = stdin
	cmd.Env = append(os.Environ(), env...)
	return Exec(t, cmd)
}

// Exec runs a prepared command, such as a shell pipeline around the built
// binaries, as Run does: bounded by Timeout, its stdout and stderr
// collected unless cmd already sends them elsewhere.
func Exec(t testing.TB, cmd *exec.Cmd) Result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &stdout
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &stderr
	}
	// Once a killed shell is gone, its children may still hold the pipes.
	cmd.WaitDelay = 10 * time.Second
	name := filepath.Base(cmd.Path)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timeout := time.NewTimer(Timeout)
	defer timeout.Stop()
	var err error
	select {
	case err = <-done:
	case <-timeout.C:
		cmd.Process.Kill()
		<-done
		t.Fatalf("%s %q did not finish within %v; stderr:\n%s", name, cmd.Args[1:], Timeout, stderr.String())
	}
	return Result{Code: exitCode(t, name, err), Stdout: stdout.Bytes(), Stderr: stderr.String()}
}

// Proc is a built binary running in the background, for tests that talk
// to it while it runs: write its stdin, wait for what it says on stderr,
// signal it. Its methods are for the test's own goroutine.
type Proc struct {
	// Stdin is the binary's standard input; close it to end the input.
	Stdin io.WriteCloser

	name   string
	cmd    *exec.Cmd
	stdout bytes.Buffer // written while it runs; read only once done is closed
	stderr stderrLog
	seen   int           // bytes of stderr that WaitFor has passed
	done   chan struct{} // closed once it has exited and all its output is in
	err    error         // what cmd.Wait said
}

// Start starts a built binary with args, the process environment, a pipe
// for stdin and its stdout and stderr collected. A binary still running
// when the test ends is killed.
func Start(t testing.TB, name string, args ...string) *Proc {
	t.Helper()
	p := &Proc{name: name, cmd: Command(name, args...), done: make(chan struct{})}
	p.stderr.grew = make(chan struct{})
	var err error
	if p.Stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// Done is closed once the binary has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Signal sends sig to the binary.
func (p *Proc) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signalling %s: %v", p.name, err)
	}
}

// WaitFor waits for a stderr line matching the regular expression
// pattern and returns it. Each call looks only at the lines after the one
// the previous call returned, so successive calls follow the order in
// which the binary speaks. It fails the test if the binary exits first or
// no such line comes within the bound.
func (p *Proc) WaitFor(t testing.TB, within time.Duration, pattern string) string {
	t.Helper()
	re := regexp.MustCompile(pattern)
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		exited := false
		select {
		case <-p.done:
			exited = true // all of stderr is in
		default:
		}
		text, grew := p.stderr.snapshot()
		for {
			line, ok := text[p.seen:], exited
			if i := bytes.IndexByte(line, '\n'); i >= 0 {
				line, ok = line[:i+1], true
			}
			if !ok || len(line) == 0 {
				break
			}
			p.seen += len(line)
			if line = bytes.TrimSuffix(line, []byte("\n")); re.Match(line) {
				return string(line)
			}
		}
		if exited {
			t.Fatalf("%s exited (%v) before a stderr line matching %q; stderr:\n%s", p.name, p.cmd.ProcessState, pattern, text)
		}
		select {
		case <-grew:
		case <-p.done:
		case <-deadline.C:
			t.Fatalf("%s: no stderr line matching %q within %v; stderr:\n%s", p.name, pattern, within, text)
		}
	}
}

// Wait waits for the binary to exit and returns what it produced. It
// kills the binary and fails the test if it runs on past the bound; with
// a bound of 0 it returns at once for a binary that has exited.
func (p *Proc) Wait(t testing.TB, within time.Duration) Result {
	t.Helper()
	bound := time.NewTimer(within)
	defer bound.Stop()
	select {
	case <-p.done:
	case <-bound.C:
		select {
		case <-p.done: // just in time
		default:
			p.cmd.Process.Kill()
			<-p.done
			t.Fatalf("%s did not exit within %v; stderr:\n%s", p.name, within, p.stderr.text)
		}
	}
	return Result{Code: exitCode(t, p.name, p.err), Stdout: p.stdout.Bytes(), Stderr: string(p.stderr.text)}
}

// exitCode is the exit code behind cmd.Wait's error, failing the test if
// the binary could not be run at all.
func exitCode(t testing.TB, name string, err error) int {
	t.Helper()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		t.Fatalf("running %s: %v", name, err)
	}
	return 0
}

// stderrLog collects a running binary's stderr and says when it grows.
type stderrLog struct {
	mu   sync.Mutex
	text []byte
	grew chan struct{} // closed and replaced on every write
}

func (l *stderrLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.text = append(l.text, b...)
	close(l.grew)
	l.grew = make(chan struct{})
	return len(b), nil
}

// snapshot is the text so far and a channel closed when more arrives.
func (l *stderrLog) snapshot() ([]byte, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text[:len(l.text):len(l.text)], l.grew
}

// SmallDisk mounts a tmpfs of size bytes on a new temporary directory, so
// a test can fill a disk for real (ENOSPC), and unmounts it when the test
// ends. It skips the test, saying why, where mounting is not allowed.
func SmallDisk(t testing.TB, size int) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("cannot mount a small tmpfs to fill (needs root): %v: %s", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// RealData is the path of file in the real public datasets kept beside the
// repository (../shared/data/real from its root, where CI lays them out;
// further up where the checkout is a worktree deeper down), found from a
// package directory of lib/ or from pipelines/. Where they are not there
// the test is skipped, saying so.
func RealData(t testing.TB, file string) string {
	t.Helper()
	return sharedData(t, "real", file)
}

// Tokenizers is the path of name in the real tokenizers kept beside the
// repository (../shared/data/tokenizers: a model's Hugging Face folder such
// as "qwen3", or "golden/qwen3.jsonl.gz", the reference renderings), found
// as RealData finds its files, but absolute (the binaries under test run
// in other directories); where it is not there the test is skipped,
// saying so.
func Tokenizers(t testing.TB, name string) string {
	t.Helper()
	p := sharedData(t, "tokenizers", name)
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func sharedData(t testing.TB, kind, name string) string {
	t.Helper()
	dir := "../.."
	for range 5 {
		p := filepath.Join(dir, "shared/data", kind, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		dir = filepath.Join(dir, "..")
	}
	t.Skipf("%s is not in ../shared/data/%s beside the repository", name, kind)
	return ""
}

// LockedBuffer is a bytes.Buffer safe for concurrent writers (a
// simulator's request log written from its handlers, a run's progress
// and summary) and a reader at any time.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is what was written so far.
func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
