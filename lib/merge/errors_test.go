package merge

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
	"tokenmill/lib/record"
)

// badLines are answer-file lines merge must reject, with the reason.
var badLines = []struct {
	line, reason string
}{
	{`{"id": "a", "output": {"text": "x", "finish_reason": "stop"`, "malformed_json"},
	{`not json at all`, "malformed_json"},
	{`["an", "array"]`, "not_an_object"},
	{`42`, "not_an_object"},
	{`{"output": {"text": "x", "finish_reason": "stop", "sample": 0}}`, "no_id"},
	{`{"id": "", "output": {"text": "x", "finish_reason": "stop"}}`, "no_id"},
	{`{"id": null, "error": {"status": 500}}`, "no_id"},
	{`{"id": {"a": 1}, "output": {"text": "x", "finish_reason": "stop"}}`, "bad_id"},
	{`{"id": 1.5, "output": {"text": "x", "finish_reason": "stop"}}`, "bad_id"},
	{`{"id": "a", "output": "just text"}`, "bad_record"},
	{`{"id": "a", "output": {"text": "x", "finish_reason": "stop", "sample": -1}}`, "bad_record"},
	{`{"id": "a", "output": {"text": "x", "finish_reason": "stop", "sample": "1"}}`, "bad_record"},
	{`{"id": "a", "error": {"status": 500, "sample": 2.5}}`, "bad_record"},
	{`{"id": "a", "sample": true, "output": {"text": "x", "finish_reason": "stop"}}`, "bad_record"},
	{`{"id": "a", "messages": [{"role": "user", "content": "a prompt, not an answer"}]}`, "not_a_generation"},
	{`{"id": "a", "output": null, "error": null}`, "not_a_generation"},
}

// TestRejects: every bad line is reported with file, line and reason,
// written to --rejects, and the merge goes on and exits 3.
func TestRejects(t *testing.T) {
	dir := t.TempDir()
	good := answer(`"good"`, 0, "stop", "kept")
	lines := []string{good}
	for _, b := range badLines {
		lines = append(lines, b.line)
	}
	lines = append(lines, answer(`"after"`, 0, "stop", "the stream goes on"))
	in := writeLines(t, filepath.Join(dir, "in.jsonl"), lines)
	rejectsPath := filepath.Join(dir, "rejects.jsonl")
	code, stdout, stderr := runMerge(t, context.Background(), nil, "--rejects", rejectsPath, in)
	if code != cli.ExitRejects {
		t.Fatalf("exit %d, want %d\n%s", code, cli.ExitRejects, stderr)
	}
	if out := splitLines(stdout); len(out) != 2 || label(t, out[0]) != "kept" || label(t, out[1]) != "the stream goes on" {
		t.Errorf("output: %v", out)
	}
	raw, err := os.ReadFile(rejectsPath)
	if err != nil {
		t.Fatal(err)
	}
	rejected := splitLines(string(raw))
	if len(rejected) != len(badLines) {
		t.Fatalf("%d rejects written, want %d", len(rejected), len(badLines))
	}
	for i, l := range rejected {
		var r struct {
			Raw    string
			Reject record.Reject
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("reject %d: %v: %s", i, err, l)
		}
		want := badLines[i]
		if r.Reject.Reason != want.reason || r.Reject.File != in || r.Reject.Line != int64(i+2) {
			t.Errorf("line %d (%s): rejected as %s at %s:%d, want %s", i+2, want.line, r.Reject.Reason, r.Reject.File, r.Reject.Line, want.reason)
		}
	}
	if !strings.Contains(stderr, in+":2: malformed_json") {
		t.Errorf("stderr does not point at the first bad line:\n%s", stderr)
	}
	if !strings.Contains(stderr, "merge: read 2, unique out 2, replaced 0, missing 0, rejected 16 (") {
		t.Errorf("summary:\n%s", stderr)
	}
}

// TestRejectsForTraining: --to needs a prompt to put the answer after, and
// a record that decodes; a record rejected there lets an earlier answer win.
func TestRejectsForTraining(t *testing.T) {
	dir := t.TempDir()
	in := writeLines(t, filepath.Join(dir, "in.jsonl"), []string{
		answer(`"a"`, 0, "length", "earlier, cut"),
		`{"id": "a", "output": {"text": "no prompt", "finish_reason": "stop", "sample": 0}}`,
		`{"id": "b", "messages": "not a list", "output": {"text": "x", "finish_reason": "stop", "sample": 0}}`,
	})
	code, stdout, stderr := runMerge(t, context.Background(), nil, "--to", "messages", in)
	if code != cli.ExitRejects {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stderr, ":2: no_prompt") || !strings.Contains(stderr, ":3: bad_record") {
		t.Errorf("stderr:\n%s", stderr)
	}
	if want := `{"id":"a","messages":[{"role":"user","content":"p"},{"role":"assistant","content":"earlier, cut"}]}` + "\n"; stdout != want {
		t.Errorf("output %q, want %q", stdout, want)
	}
}

// TestPromptFileRejects: the prompt file's bad lines are rejected too, and
// a generation record there stands for its prompt.
func TestPromptFileRejects(t *testing.T) {
	dir := t.TempDir()
	prompts := writeLines(t, filepath.Join(dir, "prompts.jsonl"), []string{
		`{"id": "p1", "prompt": "one"}`,
		`{"prompt": "no id"}`,
		`{"id": "p2", "prompt": "two", "output": {"text": "old", "finish_reason": "abort", "sample": 0}}`,
	})
	in := writeLines(t, filepath.Join(dir, "gen.jsonl"), []string{answer(`"p1"`, 0, "stop", "ok")})
	code, stdout, stderr := runMerge(t, context.Background(), nil, "--prompts", prompts, "--missing", in)
	if code != cli.ExitRejects {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "prompts.jsonl:2: no_id") {
		t.Errorf("stderr:\n%s", stderr)
	}
	if want := `{"id":"p2","prompt":"two"}` + "\n"; stdout != want {
		t.Errorf("to-do %q, want %q", stdout, want)
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--missing"}, "--missing needs --prompts"},
		{[]string{"--prompts", "p.jsonl", "--missing", "--to", "messages"}, "does not go with --to"},
		{[]string{"--prompts", "p.jsonl", "--missing", "--errors", "e.jsonl"}, "does not go with --errors"},
		{[]string{"--with-reasoning"}, "--with-reasoning applies to --to"},
		{[]string{"--samples", "0"}, "--samples must be from 1"},
		{[]string{"--memory", "0"}, "--memory must be positive"},
		{[]string{"--memory", "lots"}, "want a number with an optional unit"},
		{[]string{"--to", "alpaca"}, "--to must be one of"},
		{[]string{"--prompts", "-"}, "cannot both come from stdin"},
		{[]string{"--prompts", "-", "a.jsonl", "-"}, "cannot both come from stdin"},
		{[]string{"-o", "x.jsonl", "--errors", "x.jsonl"}, `--errors "x.jsonl" is the same file as -o "x.jsonl"`},
		{[]string{"--errors", "-"}, "name the same place"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runMerge(t, context.Background(), strings.NewReader(answer(`"a"`, 0, "stop", "x")+"\n"), tt.args...)
			if code != cli.ExitUsage || stdout != "" || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, stdout, stderr, tt.want)
			}
		})
	}
}

// TestOutputFiles: -o and --errors are written atomically, never over an
// existing file without --force, and an interrupted merge leaves neither.
func TestOutputFiles(t *testing.T) {
	dir := t.TempDir()
	in := writeLines(t, filepath.Join(dir, "in.jsonl"), []string{answer(`"a"`, 0, "stop", "x"), answer(`"b"`, 0, "error", "y")})
	out, errs := filepath.Join(dir, "final.jsonl"), filepath.Join(dir, "final.errors.jsonl")
	if code, _, stderr := runMerge(t, context.Background(), nil, "-o", out, "--errors", errs, in); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	code, _, stderr := runMerge(t, context.Background(), nil, "-o", out, in)
	if code != cli.ExitUsage || !strings.Contains(stderr, "already exists: pass --force") {
		t.Errorf("second merge over the same -o: exit %d\n%s", code, stderr)
	}
	code, _, stderr = runMerge(t, context.Background(), nil, "-o", filepath.Join(dir, "new.jsonl"), "--errors", errs, in)
	if code != cli.ExitUsage || !strings.Contains(stderr, "already exists: pass --force") {
		t.Errorf("merge over an existing --errors: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "new.jsonl")); err == nil {
		t.Error("a merge refused for its --errors file still wrote -o")
	}
	if code, _, stderr := runMerge(t, context.Background(), nil, "--force", "-o", out, "--errors", errs, in, in); code != 0 {
		t.Errorf("--force: exit %d\n%s", code, stderr)
	}
	// The output may be one of the inputs: all is read before it is replaced.
	if code, _, stderr := runMerge(t, context.Background(), nil, "--force", "-o", out, out); code != 0 {
		t.Errorf("merging a file into itself: exit %d\n%s", code, stderr)
	}
	if b, _ := os.ReadFile(out); len(splitLines(string(b))) != 1 {
		t.Errorf("merged into itself: %q", b)
	}
}

// TestInterrupt: an interrupted merge exits 130, writes nothing and leaves
// no temporary files behind, whether or not it had spilled.
func TestInterrupt(t *testing.T) {
	run := newBruteRun(3, 2000, 1, 20000)
	var all []string
	for _, f := range run.files {
		all = append(all, f...)
	}
	data := []byte(strings.Join(all, "\n") + "\n")
	for _, memory := range []string{"512MiB", "16KiB"} {
		t.Run(memory, func(t *testing.T) {
			dir := t.TempDir()
			tmp := filepath.Join(dir, "tmp")
			os.Mkdir(tmp, 0o755)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			in := &testbin.InterruptingReader{Data: data, After: len(data) / 2, Cancel: cancel}
			out := filepath.Join(dir, "out.jsonl")
			code, _, stderr := runMerge(t, ctx, in, "--memory", memory, "--temp-dir", tmp, "-o", out)
			if code != cli.ExitInterrupted {
				t.Fatalf("exit %d, want %d\n%s", code, cli.ExitInterrupted, stderr)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("left behind: %v", entries)
			}
			if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
				t.Errorf("spill files left behind: %v", entries)
			}
		})
	}
}
