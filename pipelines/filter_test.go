package pipelines_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// degenerate rewrites every tenth answer of gen into one the checks must
// catch, as a looping or broken model would have written it, and returns
// the ids rewritten with the reason filter must give.
func degenerate(t *testing.T, gen string) map[string]string {
	t.Helper()
	recs := readRecords(t, gen)
	kinds := []struct{ reason, text, reasoning string }{
		{"loop", "Let me explain. " + strings.Repeat("The answer is in the question itself. ", 30), ""},
		{"empty", " \n", ""},
		{"think_residue", "<think>the user wants an answer</think>\n\nHere it is.", ""},
		{"reasoning_only", "", "I should think about this for a while."},
	}
	want := map[string]string{}
	var out []string
	for i, r := range recs {
		line := r.raw
		if i%10 == 3 {
			k := kinds[len(want)%len(kinds)]
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatal(err)
			}
			o := m["output"].(map[string]any)
			o["text"], o["reasoning"], o["finish_reason"] = k.text, k.reasoning, "stop"
			b, _ := json.Marshal(m)
			line = string(b)
			want[r.key()] = k.reason
		}
		out = append(out, line)
	}
	if err := os.WriteFile(gen, []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return want
}

// rejectReasons maps each id of an unfit file to its reject reason.
func rejectReasons(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l == "" {
			continue
		}
		var r struct {
			ID     json.RawMessage
			Reject struct{ Reason string }
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		got[string(r.ID)] = r.Reject.Reason
	}
	return got
}

// TestFilterLoop: answers that fail the checks go back for regeneration
// and never reach the final file; at every step each prompt is exactly
// once in the answers or in the to-do list.
func TestFilterLoop(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(repoRoot, demoData)
	healthy := startFleet(t, 3, "--time-scale", "500")
	env := scriptEnv("ENDPOINTS="+healthy, "EXTRACT_ARGS=--limit 300", "INFER_ARGS=--max-tokens "+maxTokens, noLength)
	gen, kept := filepath.Join(dir, "gen.jsonl"), filepath.Join(dir, "gen.prompts.jsonl")
	fit, unfit := filepath.Join(dir, "gen.fit.jsonl"), filepath.Join(dir, "gen.unfit.jsonl")
	final, todo, finalErrors := filepath.Join(dir, "final.jsonl"), filepath.Join(dir, "final.todo.jsonl"), filepath.Join(dir, "final.errors.jsonl")

	script(t, 2*time.Minute, dir, env, "generate.sh", data).must(t, 0)
	ids := keys(readRecords(t, kept))
	assertEachOnce(t, "fit answers of llmsim", keys(readRecords(t, fit)), ids)
	if n := len(readRecords(t, unfit)); n != 0 {
		t.Fatalf("%d of llmsim's answers judged unfit", n)
	}

	// The same run, had the model looped or broken down on a tenth.
	bad := degenerate(t, gen)
	p := script(t, time.Minute, dir, append(env, "RESUME=1"), "generate.sh", data)
	p.must(t, 0)
	if got := rejectReasons(t, unfit); len(got) != len(bad) {
		t.Fatalf("%d unfit answers, want %d", len(got), len(bad))
	} else {
		for id, reason := range bad {
			if got[id] != reason {
				t.Errorf("id %s rejected as %q, want %q", id, got[id], reason)
			}
		}
	}
	assertEachOnce(t, "fit and unfit answers", append(keys(readRecords(t, fit)), keys(readRecords(t, unfit))...), ids)
	if !strings.Contains(p.stderr.String(), "filter: read 300, kept 270, dropped 30 (") {
		t.Errorf("no filter summary:\n%s", tail(p.stderr.String(), 20))
	}
	badIDs := mapKeys(bad)

	t.Run("a round on a fleet that fails everything", func(t *testing.T) {
		down := startFleet(t, 2, "--time-scale", "500", "--fail-rate", "1")
		p := script(t, time.Minute, dir, scriptEnv("ENDPOINTS="+down, "PROMPTS="+kept, noLength,
			"INFER_ARGS=--max-tokens "+maxTokens+" --retries 0 --eject-after 1000000"), "rerun-missing.sh", gen)
		p.must(t, 3)
		assertEachOnce(t, "the to-do list", keys(readRecords(t, todo)), badIDs)
		assertEachOnce(t, "the final answers", keys(readRecords(t, final)), without(ids, badIDs))
		assertEachOnce(t, "final answers and to-do", append(keys(readRecords(t, final)), keys(readRecords(t, todo))...), ids)
		// Their best record is filter's reject, with its reason.
		if got := rejectReasons(t, finalErrors); len(got) != len(bad) {
			t.Errorf("%d records in %s, want %d", len(got), finalErrors, len(bad))
		} else {
			for id, reason := range bad {
				if got[id] != reason {
					t.Errorf("%s: id %s has %q, want filter's %q", finalErrors, id, got[id], reason)
				}
			}
		}
		for _, r := range readRecords(t, final) {
			if _, isBad := bad[r.key()]; isBad {
				t.Errorf("an unfit answer reached %s: %.200s", final, r.raw)
			}
		}
	})

	t.Run("rounds on a working fleet", func(t *testing.T) {
		ref := reference(t, healthy)
		p := script(t, 2*time.Minute, dir, scriptEnv("ENDPOINTS="+healthy, "PROMPTS="+kept, "ROUNDS=2", noLength,
			"INFER_ARGS=--max-tokens "+maxTokens), "rerun-missing.sh", gen)
		p.must(t, 0)
		// llmsim answers a prompt the same way every time: the reruns of the
		// degenerate answers are the single-machine run's answers.
		assertSameAnswers(t, final, ref)
		if n := len(readRecords(t, todo)); n != 0 {
			t.Errorf("the to-do list still holds %d prompts", n)
		}
		// The rejects stay on record: the 30 answers of the first run.
		assertEachOnce(t, "final rejects", keys(readRecords(t, filepath.Join(dir, "final.unfit.jsonl"))), badIDs)
		// A finished run asks for nothing more.
		p = script(t, time.Minute, dir, scriptEnv("ENDPOINTS="+healthy, "PROMPTS="+kept, noLength, "INFER_ARGS=--max-tokens "+maxTokens), "rerun-missing.sh", gen)
		p.must(t, 0)
		assertSameAnswers(t, final, ref)
	})
}
