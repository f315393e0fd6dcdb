package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

type testCmd struct {
	Globals
	Count int    `help:"How many." default:"1"`
	Fail  string `help:"Outcome to return." enum:"none,usage,rejects,runtime" default:"none"`
	ran   bool
}

func (c *testCmd) Run(ctx context.Context, env *Env) error {
	c.ran = true
	switch c.Fail {
	case "usage":
		return Usagef("--count must be positive")
	case "rejects":
		return ErrRejects
	case "runtime":
		return errors.New("disk on fire")
	}
	env.Stdout.Write([]byte(strings.Repeat("x", c.Count)))
	return nil
}

func TestRunExitCodes(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		env    map[string]string
		code   int
		stdout string
		stderr string
	}{
		{"ok", []string{"--count", "3"}, nil, ExitOK, "xxx", ""},
		{"env var", nil, map[string]string{"TOKENMILL_DEMO_COUNT": "2"}, ExitOK, "xx", ""},
		{"unknown flag", []string{"--nope"}, nil, ExitUsage, "", "unknown flag --nope"},
		{"bad value", []string{"--count", "x"}, nil, ExitUsage, "", "--count"},
		{"bad env value", nil, map[string]string{"TOKENMILL_DEMO_COUNT": "x"}, ExitUsage, "", "count"},
		{"bad enum", []string{"--fail", "maybe"}, nil, ExitUsage, "", "--fail"},
		{"usage error from run", []string{"--fail", "usage"}, nil, ExitUsage, "", "must be positive"},
		{"rejects", []string{"--fail", "rejects"}, nil, ExitRejects, "", ""},
		{"runtime", []string{"--fail", "runtime"}, nil, ExitFailure, "", "error: disk on fire"},
		{"help", []string{"--help"}, nil, ExitOK, "Example: demo", ""},
		{"version", []string{"--version"}, nil, ExitOK, "demo (tokenmill)", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			env := &Env{Name: "demo", Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr}
			code := Run(context.Background(), env, "Example: demo --count 3", &testCmd{}, tt.args)
			if code != tt.code {
				t.Fatalf("exit code %d, want %d; stderr: %s", code, tt.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.stdout) {
				t.Errorf("stdout %q does not contain %q", stdout.String(), tt.stdout)
			}
			if !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tt.stderr)
			}
		})
	}
}

func TestInterruptedExits130(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(ErrInterrupted)
	var stderr bytes.Buffer
	env := &Env{Name: "demo", Stdout: &bytes.Buffer{}, Stderr: &stderr}
	if code := Run(ctx, env, "", &testCmd{}, nil); code != ExitInterrupted {
		t.Fatalf("exit code %d, want %d", code, ExitInterrupted)
	}
}
