package pipelines_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A run on a failing fleet leaves prompts unanswered; rerun-missing.sh
// lists exactly those, keeps every answer there was byte for byte, says
// (exit 3) when a round could not finish them, and ends with every prompt
// answered once the fleet works again.
func TestRerunMissing(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(repoRoot, demoData)
	// No retries, no endpoint taken out of service: a failure is final.
	noRetry := "INFER_ARGS=--max-tokens " + maxTokens + " --retries 0 --eject-after 1000000"
	gen, kept := filepath.Join(dir, "gen.jsonl"), filepath.Join(dir, "gen.prompts.jsonl")
	final, todo, finalErrors := filepath.Join(dir, "final.jsonl"), filepath.Join(dir, "final.todo.jsonl"), filepath.Join(dir, "final.errors.jsonl")

	// Endpoint 0 answers 500 to everything, the others abort a tenth.
	flaky := startFleet(t, 3, "--time-scale", "500", "--abort-rate", "0.1", "--fault", "0=fail-rate:1,abort-rate:0")
	p := script(t, 2*time.Minute, dir, scriptEnv("ENDPOINTS="+flaky, "EXTRACT_ARGS=--limit 300", noRetry), "generate.sh", data)
	p.must(t, 3)
	ids := keys(readRecords(t, kept))
	first := readRecords(t, gen)
	answered := goodIDs(first)
	missing := without(ids, answered)
	if len(missing) == 0 || len(answered) == 0 {
		t.Fatalf("the flaky run answered %d of %d prompts: the test needs some of each", len(answered), len(ids))
	}
	// infer's own accounting: every prompt is answered or in the errors file.
	assertEachOnce(t, "answers and errors of the flaky run",
		append(keys(first), keys(readRecords(t, filepath.Join(dir, "gen.errors.jsonl")))...), ids)

	t.Run("a round on a fleet that fails everything", func(t *testing.T) {
		down := startFleet(t, 2, "--time-scale", "500", "--fail-rate", "1")
		p := script(t, time.Minute, dir, scriptEnv("ENDPOINTS="+down, "PROMPTS="+kept, noRetry, noLength), "rerun-missing.sh", gen)
		p.must(t, 3)
		assertEachOnce(t, "the to-do list", keys(readRecords(t, todo)), missing)
		assertEachOnce(t, "the merged errors", keys(readRecords(t, finalErrors)), missing)
		assertEachOnce(t, "the merged answers", keys(readRecords(t, final)), answered)
		assertLinesKept(t, first, readRecords(t, final))
	})

	t.Run("rounds on a fleet that fails a third", func(t *testing.T) {
		healthy := startFleet(t, 2, "--time-scale", "500")
		ref := reference(t, healthy) // llmsim's answers are a function of the prompt
		flakier := startFleet(t, 3, "--time-scale", "500", "--fail-rate", "0.3")
		// 20 rounds: a prompt still failing after them has odds of 0.3^20.
		p := script(t, 2*time.Minute, dir, scriptEnv("ENDPOINTS="+flakier, "PROMPTS="+kept, "ROUNDS=20", noRetry, noLength), "rerun-missing.sh", gen)
		p.must(t, 0)
		assertSameAnswers(t, final, ref)
		assertLinesKept(t, first, readRecords(t, final))
		if n := len(readRecords(t, todo)); n != 0 {
			t.Errorf("the to-do list still holds %d prompts", n)
		}
		if n := len(readRecords(t, finalErrors)); n != 0 {
			t.Errorf("the merged errors hold %d records", n)
		}
		// Once everything is answered, a rerun asks for nothing.
		p = script(t, time.Minute, dir, scriptEnv("ENDPOINTS="+flakier, "PROMPTS="+kept, noRetry, noLength), "rerun-missing.sh", gen)
		p.must(t, 0)
		assertSameAnswers(t, final, ref)
	})
}

// Each round asks with other seeds: round r of rerun-missing.sh passes
// --seed-offset r*K, so no prompt is asked twice with one seed, by the run
// or by any round (llmsim's request log).
func TestRerunMissingSeeds(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(repoRoot, demoData)
	args := "INFER_ARGS=--max-tokens " + maxTokens + " --retries 0 --eject-after 1000000 --seed 100"
	gen, kept := filepath.Join(dir, "gen.jsonl"), filepath.Join(dir, "gen.prompts.jsonl")
	log := filepath.Join(dir, "requests.jsonl")
	flaky, stop := startStoppableFleet(t, 2, "--time-scale", "500", "--fail-rate", "0.5", "--request-log", log)
	script(t, 2*time.Minute, dir, scriptEnv("ENDPOINTS="+flaky, "EXTRACT_ARGS=--limit 60", args+" --samples 2"), "generate.sh", data).must(t, 3)
	p := script(t, 2*time.Minute, dir, scriptEnv("ENDPOINTS="+flaky, "PROMPTS="+kept, "ROUNDS=4", "MERGE_ARGS=--samples 2", args, noLength), "rerun-missing.sh", gen)
	if p.code != 0 && p.code != 3 {
		p.must(t, 0)
	}
	stop()
	seeds := map[string][]int64{} // prompt -> the seeds it was asked with
	for _, r := range seededRequests(t, log) {
		seeds[r.messages] = append(seeds[r.messages], r.seed)
	}
	again := 0
	for prompt, ss := range seeds {
		slices.Sort(ss)
		if len(slices.Compact(slices.Clone(ss))) != len(ss) {
			t.Fatalf("a prompt was asked twice with one seed (%v): %.200s", ss, prompt)
		}
		for _, s := range ss {
			// The run: 100 and 101 (samples 0 and 1); round r: 100+2r+sample.
			if s < 100 || s > 100+2*4+1 {
				t.Fatalf("seed %d is neither the run's nor a round's", s)
			}
		}
		if len(ss) > 2 {
			again++
		}
	}
	if again == 0 {
		t.Fatal("no prompt was asked in more than one round: the test shows nothing")
	}
}

// seededRequest is a request of llmsim's request log: the messages it
// asked about (as JSON) and its seed.
type seededRequest struct {
	messages string
	seed     int64
}

// seededRequests reads llmsim's request log, failing on a request that
// carries no seed.
func seededRequests(t *testing.T, log string) []seededRequest {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var out []seededRequest
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r struct {
			Body struct {
				Messages json.RawMessage `json:"messages"`
				Seed     *int64          `json:"seed"`
			} `json:"body"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Body.Seed == nil {
			t.Fatalf("a request without a seed: %v %.200s", err, line)
		}
		out = append(out, seededRequest{string(r.Body.Messages), *r.Body.Seed})
	}
	return out
}

// goodIDs are the ids of records with a stop or length answer.
func goodIDs(recs []record) []string {
	var ids []string
	for _, r := range recs {
		if r.Output != nil && (r.Output.FinishReason == "stop" || r.Output.FinishReason == "length") {
			ids = append(ids, r.key())
		}
	}
	return ids
}

func without(all, some []string) []string {
	var out []string
	for _, s := range all {
		if !slices.Contains(some, s) {
			out = append(out, s)
		}
	}
	return out
}

// assertLinesKept fails unless every good answer of before is in after
// byte for byte.
func assertLinesKept(t *testing.T, before, after []record) {
	t.Helper()
	lines := map[string]string{}
	for _, r := range after {
		lines[r.key()] = r.raw
	}
	for _, r := range before {
		if r.Output != nil && (r.Output.FinishReason == "stop" || r.Output.FinishReason == "length") && lines[r.key()] != r.raw {
			t.Fatalf("the answer to %s changed:\n%.200s\nbecame\n%.200s", r.key(), r.raw, lines[r.key()])
		}
	}
}

// On a model that degenerates on 45% of its answers, each round of
// rerun-missing.sh asks again for exactly the answers filter found unfit
// (the prompts of its to-do list, each once, all unfit in the round
// before), with seeds no earlier round used, and gets new samples: the
// unfit answers fall round after round, and a second run of the script
// goes on counting rounds. At the end every prompt is once in the training file or
// once in the to-do list, never in both.
func TestRerunUnfitFalls(t *testing.T) {
	if testing.Short() {
		t.Skip("rounds of reruns on a simulated fleet: about 20 s")
	}
	dir := t.TempDir()
	data := filepath.Join(repoRoot, demoData)
	log := filepath.Join(dir, "requests.jsonl")
	sick, stop := startStoppableFleet(t, 3, append([]string{"--time-scale", "500", "--request-log", log},
		"--loop-rate", "0.15", "--empty-rate", "0.15", "--think-residue-rate", "0.15")...)
	// A sampling temperature: the request's seed picks the answer.
	args := "INFER_ARGS=--max-tokens " + longTokens + " --seed 100 --temperature 0.8 --retries 0 --eject-after 1000000"
	gen, kept := filepath.Join(dir, "gen.jsonl"), filepath.Join(dir, "gen.prompts.jsonl")
	final, todo := filepath.Join(dir, "final.jsonl"), filepath.Join(dir, "final.todo.jsonl")
	script(t, 2*time.Minute, dir, scriptEnv("ENDPOINTS="+sick, "EXTRACT_ARGS=--limit 120", args), "generate.sh", data).must(t, 0)
	ids := keys(readRecords(t, kept))
	unfit := len(readRecords(t, filepath.Join(dir, "gen.unfit.jsonl")))

	env := scriptEnv("ENDPOINTS="+sick, "PROMPTS="+kept, args)
	first := script(t, 3*time.Minute, dir, append(env, "ROUNDS=3"), "rerun-missing.sh", gen)
	first.must(t, 3)
	left := len(readRecords(t, todo))
	second := script(t, 3*time.Minute, dir, append(env, "ROUNDS=10"), "rerun-missing.sh", gen)
	second.must(t, 0)
	stop()

	// asked[r]: the prompts answered in round r (the seed 100 + r); 0 is
	// generate.sh's run.
	asked := map[int64]map[string]bool{}
	for _, r := range seededRequests(t, log) {
		round := r.seed - 100
		if asked[round] == nil {
			asked[round] = map[string]bool{}
		}
		if asked[round][r.messages] {
			t.Fatalf("round %d asked twice for %.200s", round, r.messages)
		}
		asked[round][r.messages] = true
	}
	said := regexp.MustCompile(`round (\d+) \(seed offset (\d+)\): answering (\d+) prompts`)
	var counts []int // the to-do list of each round, both runs
	for _, m := range said.FindAllStringSubmatch(first.stderr.String()+second.stderr.String(), -1) {
		n, _ := strconv.Atoi(m[3])
		counts = append(counts, n)
		if off, _ := strconv.Atoi(m[2]); len(asked[int64(off)]) != n {
			t.Errorf("round with seed offset %s: %d prompts asked, the to-do list held %d", m[2], len(asked[int64(off)]), n)
		}
	}
	t.Logf("unfit answers: %d after the run, then the rounds' to-do lists %v", unfit, counts)
	if len(asked[0]) != len(ids) || len(counts) < 4 || counts[0] != unfit || counts[3] != left || len(asked) != len(counts)+1 {
		t.Fatalf("run asked %d of %d prompts; rounds %v (want the first %d unfit, the fourth the %d left by the first run's 3); %d seeds used",
			len(asked[0]), len(ids), counts, unfit, left, len(asked))
	}
	for r := 1; r < len(counts); r++ {
		// At these rates 5 unfit answers all come out unfit again with
		// odds of 2%: more than that, and new samples make them fall.
		if counts[r] > counts[r-1] || counts[r] == counts[r-1] && counts[r] >= 5 {
			t.Errorf("round %d asked for %d prompts, round %d for %d: the unfit answers do not fall", r+1, counts[r], r, counts[r-1])
		}
		for prompt := range asked[int64(r+1)] {
			if !asked[int64(r)][prompt] {
				t.Errorf("round %d asked for a prompt round %d answered fit: %.200s", r+1, r, prompt)
			}
		}
	}

	// The training file holds every prompt once: none is left to do.
	train := filepath.Join(dir, "train.jsonl")
	out, err := exec.Command(filepath.Join(binDir, "merge"), "--to", "messages", "-o", train, final).CombinedOutput()
	if err != nil {
		t.Fatalf("merge: %v\n%s", err, out)
	}
	assertEachOnce(t, "the training file and the to-do list", append(keys(readRecords(t, train)), keys(readRecords(t, todo))...), ids)
	if n := len(readRecords(t, todo)); n != 0 {
		t.Errorf("%d prompts still to do after the second run", n)
	}
}
