package shard

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// binary is the real shard executable, built once for the CLI tests.
var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "shard-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "shard")
	build := exec.Command("go", "build", "-o", binary, "tokenmill/cmd/shard")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building shard: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runBinary runs the built tool with stdin and extra environment.
func runBinary(t *testing.T, dir, stdin string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("running shard: %v", err)
	}
	return code, out.String(), errb.String()
}

func TestBinary(t *testing.T) {
	input := strings.Join(syntheticInput(40), "\n") + "\n"
	records, err := filepath.Abs(filepath.Join(testdataDir, "records.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		env    []string
		stdin  string
		code   int
		files  []string // must exist afterwards
		stdout string   // substring
		stderr string   // substring
	}{
		{name: "help shows the examples", args: []string{"--help"}, code: 0,
			stdout: "shard -n 8 -o 'shards/part-{i}.jsonl.zst' prompts.jsonl"},
		{name: "stdin to compressed shards", args: []string{"-n", "3", "-o", "shards/part-{i}.jsonl.zst"}, stdin: input, code: 0,
			files:  []string{"shards/part-0.jsonl.zst", "shards/part-1.jsonl.zst", "shards/part-2.jsonl.zst"},
			stderr: "shard: read 40, wrote 40 into 3 shards"},
		{name: "shard count from the environment", args: []string{"-o", "p-{i:02}.jsonl", "-"}, env: []string{"TOKENMILL_SHARD_SHARDS=2"},
			stdin: input, code: 0, files: []string{"p-00.jsonl", "p-01.jsonl"}},
		{name: "select to stdout", args: []string{"--select", "0/1"}, stdin: input, code: 0,
			stdout: `{"id": 100000, "messages"`, stderr: "selected 40 (shard 0/1"},
		{name: "bad records exit 3 with file and line", args: []string{"-n", "2", "-o", "r-{i}.jsonl", records}, code: 3,
			files: []string{"r-0.jsonl", "r-1.jsonl"}, stderr: "records.jsonl:22: malformed_json"},
		{name: "usage error exits 2", args: []string{"-n", "2"}, code: 2, stderr: "Run 'shard --help' for usage."},
		{name: "unreadable input exits 3", args: []string{"-n", "2", "-o", "u-{i}.jsonl", "no-such-file.jsonl"}, code: 3,
			stderr: "unreadable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			code, stdout, stderr := runBinary(t, dir, tt.stdin, tt.env, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstderr:\n%s", code, tt.code, stderr)
			}
			if !strings.Contains(stdout, tt.stdout) {
				t.Errorf("stdout lacks %q:\n%.500s", tt.stdout, stdout)
			}
			if !strings.Contains(stderr, tt.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderr, stderr)
			}
			for _, f := range tt.files {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("missing output: %v", err)
				}
			}
		})
	}
}
