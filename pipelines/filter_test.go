package pipelines_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// longTokens lets llmsim's answers end on their own: no natural answer to
// the 300 prompts is this long (cleanAnswers checks), so an answer cut at
// the limit is one llmsim made degenerate.
const longTokens = "16384"

// degenerateRates make a model that degenerates on a fifth of its
// answers, a twentieth each way.
var degenerateRates = []string{"--loop-rate", "0.05", "--empty-rate", "0.05", "--think-residue-rate", "0.05", "--truncate-rate", "0.05"}

// filterReason is the reject reason filter's default checks give each way
// llmsim degenerates: the first check failed, and length is tried before
// loop (a loop runs into the limit). The loop check's own verdict on the
// loops is checked apart.
var filterReason = map[string]string{"loop": "length", "truncate": "length", "empty": "empty", "think_residue": "think_residue"}

// cleanAnswers answers the 300 prompts on a fleet that does not
// degenerate: what llmsim writes for each when nothing goes wrong.
func cleanAnswers(t *testing.T, endpoints string) map[string]string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "clean.jsonl")
	cmd := exec.Command(filepath.Join(binDir, "infer"), "--endpoints", endpoints, "--max-tokens", longTokens, "--progress", "0", "-o", out, prompts)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("infer: %v\n%s", err, b)
	}
	clean := map[string]string{}
	for _, r := range readRecords(t, out) {
		if r.Output == nil || r.Output.FinishReason != "stop" {
			t.Fatalf("the healthy fleet's answer to %s is %+v: the test needs every natural answer under %s tokens", r.ID, r.Output, longTokens)
		}
		clean[r.key()] = r.Output.Text
	}
	assertEachOnce(t, "the healthy fleet's answers", mapKeys(clean), keys(readRecords(t, prompts)))
	return clean
}

// degeneracies tells, from their content, which answers of path llmsim
// made degenerate and how: set against the clean answer, an empty one, one
// with a thinking marker, one cut short of the clean answer, or one that
// ran into the limit on another text (a loop).
func degeneracies(t *testing.T, path string, clean map[string]string) map[string]string {
	t.Helper()
	kinds := map[string]string{}
	for _, r := range readRecords(t, path) {
		o, want := r.Output, clean[r.key()]
		kind := ""
		switch {
		case o == nil:
			t.Fatalf("%s: %s has no answer: %.200s", path, r.ID, r.raw)
		case o.FinishReason == "stop" && o.Text == want:
		case o.FinishReason == "stop" && strings.TrimSpace(o.Text) == "":
			kind = "empty"
		case o.FinishReason == "stop" && strings.Contains(o.Text, " <think>"):
			kind = "think_residue"
		case o.FinishReason == "length" && strings.HasPrefix(want, o.Text):
			kind = "truncate"
		case o.FinishReason == "length":
			kind = "loop"
		default:
			t.Fatalf("%s: the answer to %s is neither llmsim's clean one nor a degeneracy it makes: %.300s", path, r.ID, r.raw)
		}
		if kind != "" {
			kinds[r.key()] = kind
		}
	}
	return kinds
}

// handwritten turns two clean answers of gen into degenerate answers that
// llmsim does not write: reasoning and no answer (its empty answers have
// no reasoning), and a loop that ends by itself (its loops run into the
// limit). It returns their ids with the reason filter must give.
func handwritten(t *testing.T, gen string, kinds map[string]string) map[string]string {
	t.Helper()
	cases := []struct{ reason, text, reasoning string }{
		{"reasoning_only", "", "I should think about this for a while."},
		{"loop", "Let me explain. " + strings.Repeat("The answer is in the question itself. ", 30), ""},
	}
	want := map[string]string{}
	var out []string
	for _, r := range readRecords(t, gen) {
		line := r.raw
		if _, bad := kinds[r.key()]; !bad && len(want) < len(cases) {
			k := cases[len(want)]
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

// rejected is one record of a filter rejects file.
type rejected struct {
	id, reason, detail, file string
}

func rejectsIn(t *testing.T, path string) []rejected {
	t.Helper()
	var out []rejected
	for _, r := range readRecords(t, path) {
		var v struct {
			Reject struct{ Reason, Detail, File string }
		}
		if err := json.Unmarshal([]byte(r.raw), &v); err != nil || v.Reject.Reason == "" {
			t.Fatalf("%s: a record without a reject (%v): %.200s", path, err, r.raw)
		}
		out = append(out, rejected{r.key(), v.Reject.Reason, v.Reject.Detail, v.Reject.File})
	}
	return out
}

// assertRejects fails unless the rejects list holds exactly the ids of
// want, once each, with the reasons want gives.
func assertRejects(t *testing.T, what string, got []rejected, want map[string]string) {
	t.Helper()
	var ids []string
	for _, r := range got {
		ids = append(ids, r.id)
		if want[r.id] != r.reason {
			t.Errorf("%s: %s rejected as %q (%s), want %q", what, r.id, r.reason, r.detail, want[r.id])
		}
	}
	assertEachOnce(t, what, ids, mapKeys(want))
}

func countKinds(kinds map[string]string) map[string]int {
	n := map[string]int{}
	for _, k := range kinds {
		n[k]++
	}
	return n
}

// TestFilterLoop: the whole loop, generate → filter → merge --missing →
// infer → filter → merge, on a fleet whose model degenerates the ways
// llmsim makes it (loops into the limit, empty answers, thinking markers
// left in, answers cut short). Every degenerate answer is caught by its
// check and sent back, and at every step each prompt is exactly once in
// the answers or in the to-do list: the reruns of a fleet that fails
// everything change nothing, those of a fleet that degenerates otherwise
// fix most and leave the rest to do, and those of a healthy fleet finish
// the run with llmsim's clean answers. The answers llmsim does not write
// degenerate (reasoning only, a loop that stops) are written by hand.
func TestFilterLoop(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(repoRoot, demoData)
	sick := startFleet(t, 3, append([]string{"--time-scale", "500"}, degenerateRates...)...)
	healthy := startFleet(t, 2, "--time-scale", "500")
	clean := cleanAnswers(t, healthy)
	long := "INFER_ARGS=--max-tokens " + longTokens
	env := scriptEnv("ENDPOINTS="+sick, "EXTRACT_ARGS=--limit 300", long)
	gen, kept := filepath.Join(dir, "gen.jsonl"), filepath.Join(dir, "gen.prompts.jsonl")
	fit, unfit := filepath.Join(dir, "gen.fit.jsonl"), filepath.Join(dir, "gen.unfit.jsonl")
	final, todo, finalErrors := filepath.Join(dir, "final.jsonl"), filepath.Join(dir, "final.todo.jsonl"), filepath.Join(dir, "final.errors.jsonl")
	finalUnfit, rerun := filepath.Join(dir, "final.unfit.jsonl"), filepath.Join(dir, "final.rerun.jsonl")
	rerun2 := filepath.Join(dir, "final.rerun2.jsonl")

	script(t, 2*time.Minute, dir, env, "generate.sh", data).must(t, 0)
	ids := keys(readRecords(t, kept))
	assertEachOnce(t, "generate.sh answers", keys(readRecords(t, gen)), ids)
	kinds := degeneracies(t, gen, clean)
	n := countKinds(kinds)
	t.Logf("llmsim degenerated %d of %d answers: %v", len(kinds), len(ids), n)
	for k := range filterReason {
		if n[k] == 0 {
			t.Fatalf("llmsim made no %s answer among %d: the test needs each kind (%v)", k, len(ids), n)
		}
	}
	want := map[string]string{}
	for id, k := range kinds {
		want[id] = filterReason[k]
	}
	assertRejects(t, "filter's rejects", rejectsIn(t, unfit), want)
	assertEachOnce(t, "fit and unfit answers", append(keys(readRecords(t, fit)), keys(readRecords(t, unfit))...), ids)

	// The loop check on its own finds every loop, and only them, by their
	// repeated tail.
	loops := filepath.Join(dir, "loops.jsonl")
	cmd := exec.Command(filepath.Join(binDir, "filter"), "--checks", "loop", "--rejects", loops, "-o", os.DevNull, gen)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("filter --checks loop: %v\n%s", err, b)
	}
	wantLoops := map[string]string{}
	for id, k := range kinds {
		if k == "loop" {
			wantLoops[id] = "loop"
		}
	}
	for _, r := range rejectsIn(t, loops) {
		if !strings.HasPrefix(r.detail, "tail: ") {
			t.Errorf("loop %s found by %q, not by its repeated tail", r.id, r.detail)
		}
	}
	assertRejects(t, "the loop check's rejects", rejectsIn(t, loops), wantLoops)

	// The degenerate answers llmsim does not write, by hand.
	for id, reason := range handwritten(t, gen, kinds) {
		want[id] = reason
	}
	p := script(t, time.Minute, dir, append(env, "RESUME=1"), "generate.sh", data)
	p.must(t, 0)
	assertRejects(t, "filter's rejects, with the hand-written answers", rejectsIn(t, unfit), want)
	summary := fmt.Sprintf("filter: read %d, kept %d, dropped %d (", len(ids), len(ids)-len(want), len(want))
	if !strings.Contains(p.stderr.String(), summary) {
		t.Errorf("no filter summary %q:\n%s", summary, tail(p.stderr.String(), 20))
	}
	unfitIDs := mapKeys(want)

	t.Run("a round on a fleet that fails everything", func(t *testing.T) {
		down := startFleet(t, 2, "--time-scale", "500", "--fail-rate", "1")
		p := script(t, time.Minute, dir, scriptEnv("ENDPOINTS="+down, "PROMPTS="+kept,
			"INFER_ARGS=--max-tokens "+longTokens+" --retries 0 --eject-after 1000000"), "rerun-missing.sh", gen)
		p.must(t, 3)
		assertEachOnce(t, "the to-do list", keys(readRecords(t, todo)), unfitIDs)
		assertEachOnce(t, "the final answers", keys(readRecords(t, final)), without(ids, unfitIDs))
		assertEachOnce(t, "final answers and to-do", append(keys(readRecords(t, final)), keys(readRecords(t, todo))...), ids)
		// Their best record is filter's reject, with its reason.
		assertRejects(t, finalErrors, rejectsIn(t, finalErrors), want)
		for _, r := range readRecords(t, final) {
			if _, bad := want[r.key()]; bad {
				t.Errorf("an unfit answer reached %s: %.200s", final, r.raw)
			}
		}
	})

	var again map[string]string // the prompts whose rerun degenerated too
	t.Run("a round on a fleet that degenerates otherwise", func(t *testing.T) {
		// llmsim draws each degeneracy from the prompt and its seed: under
		// another seed most of the unfit prompts come out clean.
		other := startFleet(t, 3, append([]string{"--time-scale", "500", "--seed", "2"}, degenerateRates...)...)
		p := script(t, 2*time.Minute, dir, scriptEnv("ENDPOINTS="+other, "PROMPTS="+kept, long), "rerun-missing.sh", gen)
		assertEachOnce(t, "the rerun's answers", keys(readRecords(t, rerun)), unfitIDs)
		again = degeneracies(t, rerun, clean)
		t.Logf("rerun: %d of %d prompts degenerated again: %v", len(again), len(unfitIDs), countKinds(again))
		if len(again) == 0 || len(again) == len(unfitIDs) {
			t.Fatalf("%d of %d reruns degenerated: the test needs some of each", len(again), len(unfitIDs))
		}
		p.must(t, 3)
		againIDs := mapKeys(again)
		assertEachOnce(t, "the to-do list", keys(readRecords(t, todo)), againIDs)
		assertEachOnce(t, "the errors", keys(readRecords(t, finalErrors)), againIDs)
		assertEachOnce(t, "the final answers", keys(readRecords(t, final)), without(ids, againIDs))
		for _, r := range readRecords(t, final) {
			if r.Output.FinishReason != "stop" || r.Output.Text != clean[r.key()] {
				t.Errorf("%s: %s is not llmsim's clean answer: %.200s", final, r.ID, r.raw)
			}
		}
		// Each rerun answer that degenerated is caught as the first was.
		var rerunRejects, firstRejects []rejected
		for _, r := range rejectsIn(t, finalUnfit) {
			if filepath.Base(r.file) == filepath.Base(rerun) {
				rerunRejects = append(rerunRejects, r)
			} else {
				firstRejects = append(firstRejects, r)
			}
		}
		wantAgain := map[string]string{}
		for id, k := range again {
			wantAgain[id] = filterReason[k]
		}
		assertRejects(t, "the rerun's rejects", rerunRejects, wantAgain)
		assertRejects(t, "the first run's rejects", firstRejects, want)
	})

	t.Run("a round on a healthy fleet", func(t *testing.T) {
		// infer --resume skips the prompts its file answers, fit or not,
		// so a round after a rerun writes a file of its own, the first
		// rerun being one of the answers.
		env := scriptEnv("ENDPOINTS="+healthy, "PROMPTS="+kept, "RERUN="+rerun2, long)
		p := script(t, 2*time.Minute, dir, env, "rerun-missing.sh", gen, rerun)
		p.must(t, 0)
		assertEachOnce(t, "the second rerun's answers", keys(readRecords(t, rerun2)), mapKeys(again))
		assertSameAnswers(t, final, clean)
		if n := len(readRecords(t, todo)); n != 0 {
			t.Errorf("the to-do list still holds %d prompts", n)
		}
		// Every unfit answer stays on record: the first run's, and the
		// degenerate reruns' (two for their prompts).
		wantN := map[string]int{}
		for _, id := range append(unfitIDs, mapKeys(again)...) {
			wantN[id]++
		}
		gotN := map[string]int{}
		for _, id := range keys(readRecords(t, finalUnfit)) {
			gotN[id]++
		}
		if fmt.Sprint(gotN) != fmt.Sprint(wantN) {
			t.Errorf("final rejects per prompt: %v, want %v", gotN, wantN)
		}
		// A finished run asks for nothing more.
		p = script(t, time.Minute, dir, env, "rerun-missing.sh", gen, rerun)
		p.must(t, 0)
		assertSameAnswers(t, final, clean)
		assertEachOnce(t, "the second rerun's answers", keys(readRecords(t, rerun2)), mapKeys(again))
	})
}
