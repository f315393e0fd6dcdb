package compose

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/testbin"
)

// guideBlocks are the ```sh blocks of a Markdown file, in order, and the
// lines of its indented blocks that show what compose prints.
func guideBlocks(doc string) (blocks []string, shown []string) {
	lines := strings.Split(doc, "\n")
	for i := 0; i < len(lines); i++ {
		switch {
		case strings.TrimSpace(lines[i]) == "```sh":
			var b []string
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				b = append(b, lines[i])
			}
			blocks = append(blocks, strings.Join(b, "\n"))
		case strings.HasPrefix(lines[i], "    compose: "):
			shown = append(shown, strings.TrimPrefix(lines[i], "    "))
		}
	}
	return blocks, shown
}

// TestGuide runs GUIDE.md's walkthrough as printed: every sh block, in
// order, in one shell, in a directory whose data/ holds the real
// datasets, with the built tools on PATH; what the guide shows compose
// printing is what it prints.
func TestGuide(t *testing.T) {
	doc, err := os.ReadFile("../../GUIDE.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks, shown := guideBlocks(string(doc))
	if len(blocks) < 5 || len(shown) < 3 {
		t.Fatalf("GUIDE.md has %d sh blocks and %d lines of compose's output: the walkthrough is gone", len(blocks), len(shown))
	}
	data, err := filepath.Abs(filepath.Dir(testbin.RealData(t, "alpaca_en_demo.json")))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(data, filepath.Join(dir, "data")); err != nil {
		t.Fatal(err)
	}
	script := "set -euo pipefail\n" + strings.Join(blocks, "\n")
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TOKENMILL_") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "PATH="+filepath.Dir(testbin.Path("compose"))+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Whatever happens, nothing the guide started (llmsim) outlives it.
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(testbin.Timeout):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Fatalf("the guide did not finish within %v\nstderr:\n%s", testbin.Timeout, stderr.String())
	}
	if err != nil {
		t.Fatalf("the guide failed: %v\nstderr:\n%s", err, stderr.String())
	}
	for _, line := range shown {
		if !strings.Contains(stderr.String(), line+"\n") {
			t.Errorf("GUIDE.md shows %q, which compose did not print:\n%s", line, stderr.String())
		}
	}
	train := readRecords(t, filepath.Join(dir, "work", "train.jsonl"))
	if len(train) != 308 {
		t.Errorf("work/train.jsonl holds %d rows; the guide says 77 with tools and 231 without", len(train))
	}
	if !strings.Contains(stdout.String(), "against work/mt-bench.jsonl: 80 records beside 400 of the inputs") {
		t.Errorf("stats --against printed no comparison:\n%s", stdout.String())
	}
}
