package merge

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

const testdataDir = "../../testdata/merge"

// runMerge runs the command in process, as the binary would.
func runMerge(t testing.TB, ctx context.Context, stdin io.Reader, args ...string) (code int, stdout, stderr string) {
	r := testbin.InProcess(ctx, "merge", Description, &Command{}, stdin, args...)
	return r.Code, string(r.Stdout), r.Stderr
}

func td(name string) string { return filepath.Join(testdataDir, name) }

var runInputs = []string{td("gen-a.jsonl"), td("gen-a.errors.jsonl"), td("gen-b.jsonl"), td("gen-b.errors.jsonl")}

// spilledClause is the summary's note on temporary files, the one part of
// the output that differs between an in-memory and a spilling merge.
var spilledClause = regexp.MustCompile(`, spilled \d+ times, [0-9.]+ MB in [0-9.]+ MB of temporary files`)

// TestGolden runs merge over the hand-made run in testdata/merge with each
// combination of flags that matters, compares the output with the golden
// file, and runs it again with a memory budget so small that every record
// goes through the spill files: the output must be the same.
func TestGolden(t *testing.T) {
	prompts := []string{"--prompts", td("prompts.jsonl")}
	reversed := []string{runInputs[3], runInputs[2], runInputs[1], runInputs[0]}
	tests := []struct {
		name   string
		args   []string
		errors bool // also write --errors
		code   int
	}{
		{"default", runInputs, true, 0},
		{"reversed", reversed, false, 0},
		{"sort", append([]string{"--sort"}, runInputs...), false, 0},
		{"drop-length", append([]string{"--drop-length"}, runInputs...), true, 0},
		{"prompts", append(prompts, runInputs...), true, 0},
		{"missing", append(append(prompts, "--missing"), runInputs...), false, 0},
		{"missing-samples2", append(append(prompts, "--missing", "--samples", "2", "--drop-length", "--sort"), runInputs...), false, 0},
		{"messages", append([]string{"--to", "messages"}, runInputs...), false, 0},
		{"messages-reasoning", append([]string{"--to", "messages", "--with-reasoning", "--sort"}, runInputs...), false, 0},
		{"sharegpt-reasoning", append([]string{"--to", "sharegpt", "--with-reasoning", "--drop-length"}, runInputs...), false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runGolden(t, tt.name, tt.args, tt.errors, tt.code) })
	}
}

// runGolden runs merge with args (and --errors if errors), in memory and
// with a budget so small that every record goes through the spill files,
// checks that both runs write the same, and compares that with the golden
// file testdata/merge/NAME.golden.
func runGolden(t *testing.T, name string, args []string, errors bool, wantCode int) {
	var report strings.Builder
	var first string
	for _, memory := range []string{"512MiB", "1KiB"} {
		dir := t.TempDir()
		run := append([]string{"--memory", memory}, args...)
		if errors {
			run = append(run, "--errors", filepath.Join(dir, "errors.jsonl"))
		}
		code, stdout, stderr := runMerge(t, context.Background(), nil, run...)
		if code != wantCode {
			t.Fatalf("--memory %s: exit %d, want %d\n%s", memory, code, wantCode, stderr)
		}
		report.Reset()
		fmt.Fprintf(&report, "## merge %s\n%s", strings.Join(args, " "), stdout)
		if errors {
			errs, err := os.ReadFile(filepath.Join(dir, "errors.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&report, "## --errors file\n%s", errs)
		}
		if memory == "1KiB" && !spilledClause.MatchString(stderr) {
			t.Errorf("--memory 1KiB did not spill:\n%s", stderr)
		}
		stderr = spilledClause.ReplaceAllString(strings.ReplaceAll(stderr, dir, "$TMP"), "")
		fmt.Fprintf(&report, "## stderr\n%s", strings.ReplaceAll(stderr, testdataDir+"/", ""))
		if first == "" {
			first = report.String()
		} else if report.String() != first {
			t.Errorf("spilling merge differs from the in-memory one:\n%s\n--- in memory:\n%s", report.String(), first)
		}
		for _, l := range splitLines(stdout) {
			if !json.Valid([]byte(l)) {
				t.Errorf("invalid JSON out: %s", l)
			}
		}
	}
	testbin.CheckGolden(t, td(name+".golden"), []byte(first))
}

func splitLines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func writeLines(t testing.TB, path string, lines []string) string {
	t.Helper()
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
