package compose

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
)

// TestInProcess composes in this process (under the race detector when
// the tests run with -race), with several workers, from a file and from
// stdin alike.
func TestInProcess(t *testing.T) {
	dir := t.TempDir()
	input := strings.Join(syntheticRecords(3000), "\n") + "\n"
	path := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(path, []byte(input), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--workers", "3", "--by", "source", "--share", "a=0.5,b=0.3,c=0.2", "--total", "1500"}
	fromFile := runCompose(t, nil, append(args, path)...)
	fromStdin := runCompose(t, strings.NewReader(input), args...)
	if fromFile.Code != 0 || fromStdin.Code != 0 {
		t.Fatalf("exit %d and %d\n%s\n%s", fromFile.Code, fromStdin.Code, fromFile.Stderr, fromStdin.Stderr)
	}
	if string(fromFile.Stdout) != string(fromStdin.Stdout) {
		t.Fatal("stdin composed otherwise than the file")
	}
	counts := bySource(parseRecords(t, fromFile.Stdout))
	if counts["a"] != 750 || counts["b"] != 450 || counts["c"] != 300 {
		t.Fatalf("counts %v", counts)
	}
}

// TestInterrupt: a run interrupted while it reads exits 130 and leaves no
// output file.
func TestInterrupt(t *testing.T) {
	dir := t.TempDir()
	input := strings.Join(syntheticRecords(20000), "\n") + "\n"
	out := filepath.Join(dir, "mix.jsonl")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stdin := &testbin.InterruptingReader{Data: []byte(input), After: len(input) / 2, Cancel: cancel}
	r := testbin.InProcess(ctx, "compose", Description, &Command{}, stdin, "--by", "source", "--total", "100", "-o", out)
	if r.Code != cli.ExitInterrupted {
		t.Fatalf("exit %d, want %d\n%s", r.Code, cli.ExitInterrupted, r.Stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("an interrupted run left its output")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Fatalf("an interrupted run left %v", entries)
	}
}
