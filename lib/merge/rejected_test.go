package merge

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

func promptLine(id string) string {
	return `{"id":"` + id + `","messages":[{"role":"user","content":"question ` + id + `"}]}`
}

func answerLine(id, text, finish string) string {
	out, _ := json.Marshal(map[string]any{"text": text, "finish_reason": finish, "sample": 0})
	return strings.TrimSuffix(promptLine(id), "}") + `,"output":` + string(out) + "}"
}

// unfitLine is what filter --rejects writes: the record byte for byte plus
// its reject field.
func unfitLine(line, reason string) string {
	return strings.TrimSuffix(line, "}") + `,"reject":{"reason":"` + reason + `","detail":"d","file":"gen.jsonl","line":1}}`
}

// TestRejectedAnswers: an answer filter rejected is not good, whether its
// reject record is read before or after it, while another answer for the
// same (id, sample) still wins; --drop-empty drops empty answers. Every
// prompt ends exactly once in the answers or the to-do list.
func TestRejectedAnswers(t *testing.T) {
	dir := t.TempDir()
	genF, unfitF, promptsF := rejectedFiles(t, dir)
	ids := recordIDs
	for _, tc := range []struct {
		name string
		args []string
		todo []string
	}{
		{"rejects after the answers", []string{genF, unfitF}, []string{"p2", "p5", "p6"}},
		{"rejects before the answers", []string{unfitF, genF}, []string{"p2", "p5", "p6"}},
		{"--drop-empty", []string{"--drop-empty", genF, unfitF}, []string{"p2", "p3", "p5", "p6"}},
		{"--drop-length", []string{"--drop-length", genF, unfitF}, []string{"p2", "p4", "p5", "p6"}},
		{"without the rejects", []string{genF}, []string{"p5", "p6"}},
		{"spilled to disk", []string{"--memory", "1KiB", genF, unfitF}, []string{"p2", "p5", "p6"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testbin.Run(t, dir, nil, nil, "merge", append([]string{"--prompts", promptsF, "--missing"}, tc.args...)...)
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			if got := ids(r.Stdout); !slices.Equal(got, tc.todo) {
				t.Errorf("to-do %v, want %v\n%s", got, tc.todo, r.Stderr)
			}
			// The answers and the to-do list hold every prompt once.
			args := slices.DeleteFunc(slices.Clone(tc.args), func(s string) bool { return s == genF || s == unfitF })
			args = append(append([]string{"--prompts", promptsF}, args...), tc.args[len(args):]...)
			a := testbin.Run(t, dir, nil, nil, "merge", args...)
			all := append(ids(a.Stdout), ids(r.Stdout)...)
			slices.Sort(all)
			if want := []string{"p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8"}; !slices.Equal(all, want) {
				t.Errorf("answers %v + to-do %v, want each prompt once", ids(a.Stdout), ids(r.Stdout))
			}
			if !slices.Contains(tc.args, unfitF) {
				return
			}
			if strings.Contains(string(a.Stdout), "the first time") || strings.Contains(string(a.Stdout), "a later unfit one") {
				t.Errorf("a rejected answer was written:\n%s", a.Stdout)
			}
			if !strings.Contains(string(a.Stdout), "the rerun's good answer") || !strings.Contains(string(a.Stdout), "a fit first answer") {
				t.Errorf("a fit answer was lost:\n%s", a.Stdout)
			}
		})
	}

	t.Run("errors file gets the reject record", func(t *testing.T) {
		r := testbin.Run(t, dir, nil, nil, "merge", "--prompts", promptsF, "--force", "-o", "final.jsonl", "--errors", "final.errors.jsonl", genF, unfitF)
		if r.Code != 0 || !strings.Contains(r.Stderr, "bad lines of an earlier stage's rejects skipped 1") {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		errs, _ := os.ReadFile(filepath.Join(dir, "final.errors.jsonl"))
		if got := ids(errs); !slices.Equal(got, []string{"p2", "p5"}) || !strings.Contains(string(errs), `"reason":"loop"`) {
			t.Errorf("errors %v:\n%s", got, errs)
		}
		if !strings.Contains(r.Stderr, "filter rejects 3") {
			t.Errorf("summary: %s", r.Stderr)
		}
	})

	t.Run("a stream holding both", func(t *testing.T) {
		// Read once from a pipe, the rejects are recognised as they come:
		// an answer read before its reject gives way to it.
		cmd := exec.Command("bash", "-c", `cat "$1" "$2" | `+testbin.Path("merge")+` --prompts "$3" --missing`, "sh", genF, unfitF, promptsF)
		r := testbin.Exec(t, cmd)
		if got := ids(r.Stdout); !slices.Contains(got, "p2") || slices.Contains(got, "p7") {
			t.Errorf("to-do %v: p2 (rejected) must be in it, p7 (answered again) not", got)
		}
	})
}

// rejectedFiles writes TestRejectedAnswers's answers, filter's rejects of
// some of them, and the prompts, into dir.
func rejectedFiles(t *testing.T, dir string) (genF, unfitF, promptsF string) {
	loop2 := answerLine("p2", "again and again and again", "stop")
	first7 := answerLine("p7", "a loop, the first time", "stop")
	fit8, unfit8 := answerLine("p8", "a fit first answer", "stop"), answerLine("p8", "a later unfit one", "stop")
	gen := []string{
		answerLine("p1", "a good answer", "stop"),
		loop2,
		answerLine("p3", " \n", "stop"),
		answerLine("p4", "cut at the limit", "length"),
		strings.TrimSuffix(promptLine("p5"), "}") + `,"error":{"status":500,"message":"boom","sample":0}}`,
		first7,
		answerLine("p7", "the rerun's good answer", "stop"),
		fit8, unfit8,
	}
	// filter writes the bad lines it met to the same file, first here.
	unfit := []string{`{"raw":"not json","reject":{"reason":"malformed_json","file":"gen.jsonl","line":9}}`,
		unfitLine(loop2, "loop"), unfitLine(first7, "loop"), unfitLine(unfit8, "loop")}
	var prompts []string
	for _, id := range []string{"p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8"} {
		prompts = append(prompts, promptLine(id))
	}
	write := func(name string, lines []string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("gen.jsonl", gen), write("gen.unfit.jsonl", unfit), write("prompts.jsonl", prompts)
}

// recordIDs are the ids of out's records, in order.
func recordIDs(out []byte) []string {
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct{ ID string }
		if l != "" {
			json.Unmarshal([]byte(l), &r)
			got = append(got, r.ID)
		}
	}
	return got
}
