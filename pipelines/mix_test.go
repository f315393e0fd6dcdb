package pipelines_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
	"tokenmill/lib/mix"
)

// pipelineMix is a thinking arm and a high-effort arm, whose answers the
// servers return with the think block in the content (their reasoning
// parser is off), and an arm with thinking off.
const pipelineMix = `arms:
  - name: think
    weight: 2
    params:
      chat_template_kwargs: {enable_thinking: true}
      temperature: 0.6
      max_tokens: 6000
  - name: no_think
    weight: 2
    params:
      chat_template_kwargs: {enable_thinking: false}
      temperature: 0.7
  - name: effort_high
    weight: 1
    params: {reasoning_effort: high, max_tokens: 12000}
`

// armRecord is what the mixture test reads of a record at any stage.
type armRecord struct {
	ID     json.RawMessage `json:"id"`
	Arm    *string         `json:"arm"` // a training record's
	Output *struct {
		Arm       string          `json:"arm"`
		ArmParams json.RawMessage `json:"arm_params"`
		Sample    int             `json:"sample"`
		Text      string          `json:"text"`
	} `json:"output"`
	Sample   int `json:"sample"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

func readArmRecords(t *testing.T, path string) []armRecord {
	t.Helper()
	return readJSONL[armRecord](t, path)
}

// byArm counts answers by arm, each (id, sample) once.
func byArm(t *testing.T, what string, recs []armRecord, seen map[string]string) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, r := range recs {
		arm, sample := "", r.Sample
		if r.Output != nil {
			arm, sample = r.Output.Arm, r.Output.Sample
		} else if r.Arm != nil {
			arm = *r.Arm
		}
		key := fmt.Sprintf("%s/%d", r.ID, sample)
		if prev, dup := seen[key]; dup {
			t.Fatalf("%s: %s twice (also in %s)", what, key, prev)
		}
		seen[key] = what
		n[arm]++
	}
	return n
}

// A mixed run from a real dataset to the training file: alpaca's prompts
// through extract and dedup, infer --mix --token-ids with two samples
// each, filter with the reasoning inline for the thinking arms only, and
// merge into chat records and token rows. Every stage is counted, by arm
// from infer on: infer gives each (id, sample) the mixture's arm, stats
// counts the same, every answer is kept or rejected exactly once, and
// what merge writes carries the arm, one training record and one token
// row per kept answer, the chat records with --soft-switch the Qwen3
// switch of their arm.
func TestMixReachesTraining(t *testing.T) {
	if testing.Short() && !testbin.IsLong() {
		t.Skip("-short: TOKENMILL_TEST_LONG=1 runs it anyway")
	}
	alpaca := realDataFile(t, "alpaca_en_demo.json")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mix.yaml"), []byte(pipelineMix), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := mix.Load(filepath.Join(dir, "mix.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// No --reasoning: the think blocks stay in the content; a few answers
	// keep thinking markers where they should not.
	// A tokenizer and chat template, for the token ids.
	fleet := startFleet(t, 2, "--instant", "--seed", "5", "--think-residue-rate", "0.05", "--chat-template", "chatml")

	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(readFile(t, alpaca)), &raw); err != nil {
		t.Fatal(err)
	}
	summary := run(t, dir, 0, "extract", "-o", "extracted.jsonl", alpaca)
	extracted := len(readArmRecords(t, filepath.Join(dir, "extracted.jsonl")))
	if want := fmt.Sprintf("extract: read %d, wrote %d, rejected 0", len(raw), extracted); extracted != len(raw) || !strings.Contains(summary, want) {
		t.Fatalf("extract wrote %d of alpaca's %d rows; summary:\n%s", extracted, len(raw), summary)
	}
	summary = run(t, dir, 0, "dedup", "-o", "prompts.jsonl", "extracted.jsonl")
	prompts := len(readArmRecords(t, filepath.Join(dir, "prompts.jsonl")))
	if want := fmt.Sprintf("dedup: read %d, kept %d, removed %d ", extracted, prompts, extracted-prompts); prompts < 900 || !strings.Contains(summary, want) {
		t.Fatalf("%d prompts from alpaca's demo; summary:\n%s", prompts, summary)
	}

	summary = run(t, dir, 0, "infer", "-e", fleet, "--mix", "mix.yaml", "--seed", "3", "--samples", "2", "--max-tokens", "4000", "--token-ids", "--progress", "0", "-o", "gen.jsonl", "prompts.jsonl")
	gen := readArmRecords(t, filepath.Join(dir, "gen.jsonl"))
	generated := byArm(t, "gen.jsonl", gen, map[string]string{})
	if len(gen) != 2*prompts {
		t.Fatalf("%d answers for %d prompts and 2 samples", len(gen), prompts)
	}
	for _, r := range gen {
		var id string
		json.Unmarshal(r.ID, &id)
		if want := m.Arms[m.Pick(3, id, r.Output.Sample)].Name; r.Output.Arm != want {
			t.Fatalf("%s sample %d: arm %s, the mixture gives %s", r.ID, r.Output.Sample, r.Output.Arm, want)
		}
		inline := strings.HasPrefix(r.Output.Text, "<think>\n")
		if thinks := r.Output.Arm != "no_think"; inline != thinks {
			t.Fatalf("%s (%s): the answer opens with a think block: %v", r.ID, r.Output.Arm, inline)
		}
	}
	t.Logf("alpaca %d rows, extracted %d, prompts %d, answers by arm %v", len(raw), extracted, prompts, generated)
	for _, a := range m.Arms {
		if share := float64(generated[a.Name]) / float64(len(gen)); share < m.Share(m.Index(a.Name))-0.04 || share > m.Share(m.Index(a.Name))+0.04 {
			t.Errorf("arm %s has %.1f%% of the answers, its weight %.1f%%", a.Name, 100*share, 100*m.Share(m.Index(a.Name)))
		}
	}
	if !strings.Contains(summary, fmt.Sprintf("arms: think %s answers", thousands(generated["think"]))) {
		t.Errorf("infer's summary:\n%s", summary)
	}

	// stats counts the same arms.
	var rep struct {
		Arms []struct {
			Arm     string `json:"arm"`
			Answers int    `json:"answers"`
		} `json:"arms"`
	}
	out := runStdout(t, dir, "stats", "--json", "gen.jsonl")
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	for _, a := range rep.Arms {
		if a.Answers != generated[a.Arm] {
			t.Errorf("stats: arm %s %d answers, infer wrote %d", a.Arm, a.Answers, generated[a.Arm])
		}
	}
	if len(rep.Arms) != len(m.Arms) {
		t.Errorf("stats reports arms %+v", rep.Arms)
	}

	// The parser was off for the thinking arms: taken as parsed, all their
	// answers would be residue.
	summary = run(t, dir, 0, "filter", "--rejects", "parsed.unfit.jsonl", "-o", "parsed.fit.jsonl", "gen.jsonl")
	parsedSeen := map[string]string{}
	parsedKept := byArm(t, "parsed.fit.jsonl", readArmRecords(t, filepath.Join(dir, "parsed.fit.jsonl")), parsedSeen)
	byArm(t, "parsed.unfit.jsonl", readArmRecords(t, filepath.Join(dir, "parsed.unfit.jsonl")), parsedSeen)
	if len(parsedSeen) != len(gen) || parsedKept["think"]+parsedKept["effort_high"] != 0 {
		t.Fatalf("filter --reasoning parsed decided %d of %d answers, kept %v: no thinking arm's answer should pass", len(parsedSeen), len(gen), parsedKept)
	}
	// Every thinking answer not cut at its length is residue.
	if residue := summaryInt(t, summary, "think_residue"); residue < generated["think"]+generated["effort_high"]-summaryInt(t, summary, "length") {
		t.Errorf("filter --reasoning parsed: think_residue %d of %d thinking answers:\n%s", residue, generated["think"]+generated["effort_high"], summary)
	}
	summary = run(t, dir, 0, "filter", "--reasoning", "parsed,think=inline,effort_high=inline", "--rejects", "unfit.jsonl", "-o", "fit.jsonl", "gen.jsonl")
	seen := map[string]string{}
	kept := byArm(t, "fit.jsonl", readArmRecords(t, filepath.Join(dir, "fit.jsonl")), seen)
	dropped := byArm(t, "unfit.jsonl", readArmRecords(t, filepath.Join(dir, "unfit.jsonl")), seen)
	for _, a := range m.Arms {
		if kept[a.Name]+dropped[a.Name] != generated[a.Name] || kept[a.Name] == 0 {
			t.Errorf("arm %s: filter kept %d and dropped %d of %d", a.Name, kept[a.Name], dropped[a.Name], generated[a.Name])
		}
	}
	if len(seen) != len(gen) || summaryInt(t, summary, "think_residue") == 0 || summaryInt(t, summary, "length") == 0 {
		t.Errorf("filter decided %d of %d answers; residue and length drops expected:\n%s", len(seen), len(gen), summary)
	}
	t.Logf("filter kept %v, dropped %v", kept, dropped)

	// merge: one training record per kept answer, with its arm; the soft
	// switch as the arm set enable_thinking.
	run(t, dir, 0, "merge", "--to", "messages", "--soft-switch", "-o", "train.jsonl", "fit.jsonl")
	train := readArmRecords(t, filepath.Join(dir, "train.jsonl"))
	trained := byArm(t, "train.jsonl", train, map[string]string{})
	for _, a := range m.Arms {
		if trained[a.Name] != kept[a.Name] {
			t.Errorf("arm %s: merge wrote %d training records, filter kept %d", a.Name, trained[a.Name], kept[a.Name])
		}
	}
	for _, r := range train {
		sys := ""
		if len(r.Messages) > 0 && r.Messages[0].Role == "system" {
			sys = r.Messages[0].Content
		}
		want := map[string]string{"think": "/think", "no_think": "/no_think", "effort_high": ""}[*r.Arm]
		switch {
		case want == "" && strings.HasSuffix(sys, "think"):
			t.Fatalf("%s (%s): system %q, no switch wanted", r.ID, *r.Arm, sys)
		case want != "" && !strings.HasSuffix(sys, want):
			t.Fatalf("%s (%s): system %q, want it to end with %s", r.ID, *r.Arm, sys, want)
		}
	}

	// Token rows: one per kept answer, with its arm.
	summary = run(t, dir, 0, "merge", "--to", "tokens", "-o", "rows.jsonl", "fit.jsonl")
	rows := readArmRecords(t, filepath.Join(dir, "rows.jsonl"))
	inRows := byArm(t, "rows.jsonl", rows, map[string]string{})
	for _, a := range m.Arms {
		if inRows[a.Name] != kept[a.Name] {
			t.Errorf("arm %s: merge --to tokens wrote %d rows, filter kept %d", a.Name, inRows[a.Name], kept[a.Name])
		}
	}
	if len(rows) != len(train) || !strings.Contains(summary, "token rows "+thousands(len(rows))+" (") {
		t.Errorf("%d token rows for %d training records:\n%s", len(rows), len(train), summary)
	}
	t.Logf("merge wrote %d training records and %d token rows", len(train), len(rows))
}

// runStdout runs a tokenmill binary in dir, failing the test unless it
// exits 0, and returns its stdout.
func runStdout(t *testing.T, dir, tool string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, tool), args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", tool, strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}
