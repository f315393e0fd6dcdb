// Package testbin builds tokenmill's real binaries for tests and runs them,
// so that CLI tests exercise exactly what users run: flag parsing, the exit
// code mapping, signal handling and the buffered stdout.
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
	"testing"
	"time"
)

var dir string

// Main builds tokenmill/cmd/<name> for every name into one temporary
// directory, runs the package's tests and removes the directory. Call it
// from TestMain.
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
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	for _, n := range names {
		args = append(args, "tokenmill/cmd/"+n)
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "testbin: building %v: %v\n%s", names, err, out)
		return 1
	}
	return m.Run()
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
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, Path(name), args...)
	cmd.Dir = workdir
	if stdin == nil {
		stdin = bytes.NewReader(nil)
	}
	cmd.Stdin = stdin
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within %v; stderr:\n%s", name, args, Timeout, stderr.String())
	}
	var exit *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("running %s: %v", name, err)
	}
	return Result{Code: code, Stdout: stdout.Bytes(), Stderr: stderr.String()}
}
