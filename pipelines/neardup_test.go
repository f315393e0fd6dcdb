package pipelines_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segmentio/encoding/json"
)

// Near-duplicates and benchmark prompts never reach the training file:
// alpaca's prompts, near-copies of its longer ones (a word added: Jaccard
// above 0.95 on 5-word shingles) and MT-Bench's questions go through
// extract, dedup --near --against MT-Bench, infer --token-ids and merge
// --to tokens; each stage's count is checked against the one before, every
// near-copy is in --clusters beside its original, every MT-Bench question
// in --rejects, and the token rows are exactly the prompts dedup kept.
func TestNearDupReachesTraining(t *testing.T) {
	alpaca, mtbench := realDataFile(t, "alpaca_en_demo.json"), realDataFile(t, "mt_bench_question.jsonl")
	dir := t.TempDir()
	run(t, dir, 0, "extract", "-o", "alpaca.jsonl", alpaca)
	run(t, dir, 0, "extract", "-o", "mtbench.jsonl", mtbench)
	type prompt struct {
		ID       json.RawMessage `json:"id"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	base := readJSONL[prompt](t, filepath.Join(dir, "alpaca.jsonl"))
	bench := readJSONL[prompt](t, filepath.Join(dir, "mtbench.jsonl"))

	// The near-copies, after every original.
	var planted strings.Builder
	copyOf := map[string]string{}
	for _, p := range base {
		last := &p.Messages[len(p.Messages)-1]
		if _, twice := copyOf["near-"+idText(p.ID)]; twice || len(strings.Fields(last.Content)) < 30 {
			continue // an exact copy in alpaca has its original's id: one near-copy of both
		}
		orig := idText(p.ID)
		p.ID = json.RawMessage(`"near-` + orig + `"`)
		last.Content += " Thanks."
		b, _ := json.Marshal(p)
		planted.Write(append(b, '\n'))
		copyOf["near-"+orig] = orig
	}
	if len(copyOf) < 20 {
		t.Fatalf("only %d of alpaca's prompts have 30 words or more", len(copyOf))
	}
	if err := os.WriteFile(filepath.Join(dir, "planted.jsonl"), []byte(planted.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	read := len(base) + len(copyOf) + len(bench)

	summary := run(t, dir, 0, "dedup", "--near", "--against", mtbench, "--clusters", "clusters.jsonl",
		"--rejects", "rejects.jsonl", "--dups", "dups.jsonl", "-o", "prompts.jsonl",
		"alpaca.jsonl", "planted.jsonl", "mtbench.jsonl")
	kept := readJSONL[prompt](t, filepath.Join(dir, "prompts.jsonl"))
	dups := readJSONL[prompt](t, filepath.Join(dir, "dups.jsonl"))
	type cluster struct {
		ID    json.RawMessage `json:"id"`
		DupOf json.RawMessage `json:"dup_of"`
		Sim   float64         `json:"similarity"`
	}
	clusters := readJSONL[cluster](t, filepath.Join(dir, "clusters.jsonl"))
	type reject struct { // the record, with why it was rejected
		ID     json.RawMessage `json:"id"`
		Reject struct {
			Reason string `json:"reason"`
		} `json:"reject"`
	}
	rejects := readJSONL[reject](t, filepath.Join(dir, "rejects.jsonl"))

	// Every input record exactly once: kept, removed (an exact or a near
	// copy) or contaminated. Exact copies in alpaca share their id (extract
	// makes it from the prompt), so ids are counted, not only seen.
	in, out := map[string]int{}, map[string]int{}
	for _, ps := range [][]prompt{base, bench} {
		for _, p := range ps {
			in[idText(p.ID)]++
		}
	}
	for id := range copyOf {
		in[id]++
	}
	where := map[string]string{}
	place := func(stage, id string) {
		out[id]++
		if prev, ok := where[id]; ok && (prev == "--rejects") != (stage == "--rejects") {
			t.Fatalf("%s is in %s and in %s", id, prev, stage)
		}
		if _, ok := where[id]; !ok || stage == "the output" {
			where[id] = stage
		}
	}
	for _, p := range kept {
		place("the output", idText(p.ID))
	}
	for _, p := range dups {
		place("--dups", idText(p.ID))
	}
	for _, r := range rejects {
		if r.Reject.Reason != "contaminated" {
			t.Fatalf("%s rejected as %s", idText(r.ID), r.Reject.Reason)
		}
		place("--rejects", idText(r.ID))
	}
	for id, n := range in {
		if out[id] != n {
			t.Fatalf("%s: %d records read, %d written to the output, --dups and --rejects", id, n, out[id])
		}
	}
	if len(out) != len(in) {
		t.Fatalf("%d ids written, %d read", len(out), len(in))
	}
	for _, p := range bench {
		if id := idText(p.ID); where[id] != "--rejects" {
			t.Errorf("MT-Bench question %s is in %s, not rejected as contaminated", id, where[id])
		}
	}
	near := map[string]cluster{}
	for _, c := range clusters {
		near[idText(c.ID)] = c
	}
	for id, orig := range copyOf {
		if c, ok := near[id]; !ok || idText(c.DupOf) != orig || c.Sim < 0.9 {
			t.Errorf("near-copy %s: clusters say %+v, want dup_of %s at 0.9 or more", id, c, orig)
		}
		if where[orig] != "the output" {
			t.Errorf("the original %s of a near-copy is in %s", orig, where[orig])
		}
	}
	exact := len(dups) - len(clusters)
	if want := fmt.Sprintf("dedup: read %d, kept %d, removed %d ", read, len(kept), exact); !strings.Contains(summary, want) ||
		!strings.Contains(summary, fmt.Sprintf("near-duplicates %d ", len(clusters))) || !strings.Contains(summary, fmt.Sprintf("contaminated %d ", len(bench))) {
		t.Errorf("dedup's summary, want %q, near-duplicates %d, contaminated %d:\n%s", want, len(clusters), len(bench), summary)
	}
	t.Logf("read %d (alpaca %d, near-copies %d, MT-Bench %d): kept %d, exact copies %d, near %d, contaminated %d",
		read, len(base), len(copyOf), len(bench), len(kept), exact, len(clusters), len(rejects))

	// The kept prompts, and only they, become token rows.
	fleet := startFleet(t, 2, "--instant", "--seed", "5", "--chat-template", "chatml")
	run(t, dir, 0, "infer", "-e", fleet, "--max-tokens", "64", "--token-ids", "--progress", "0", "-o", "gen.jsonl", "prompts.jsonl")
	gen := readJSONL[prompt](t, filepath.Join(dir, "gen.jsonl"))
	if len(gen) != len(kept) {
		t.Fatalf("%d answers for %d kept prompts", len(gen), len(kept))
	}
	run(t, dir, 0, "merge", "--to", "tokens", "-o", "rows.jsonl", "gen.jsonl")
	type row struct {
		ID       json.RawMessage `json:"id"`
		InputIDs []int           `json:"input_ids"`
		LossMask []int           `json:"loss_mask"`
	}
	rows := readJSONL[row](t, filepath.Join(dir, "rows.jsonl"))
	if len(rows) != len(kept) {
		t.Fatalf("merge wrote %d token rows for %d kept prompts", len(rows), len(kept))
	}
	for _, r := range rows {
		id := idText(r.ID)
		if where[id] != "the output" {
			t.Fatalf("token row %s: dedup put it in %s", id, where[id])
		}
		if len(r.InputIDs) == 0 || len(r.InputIDs) != len(r.LossMask) {
			t.Fatalf("token row %s: %d ids, %d mask values", id, len(r.InputIDs), len(r.LossMask))
		}
	}
	t.Logf("infer %d answers, merge %d token rows", len(gen), len(rows))
}

// idText is an id as every tool compares it: its text (7 and "7" are one id).
func idText(raw json.RawMessage) string { return strings.Trim(string(raw), `"`) }
