package merge

import (
	"path/filepath"
	"testing"

	"tokenmill/internal/testbin"
)

// TestTrainingFormsOneTypePerField: every training form merge writes
// loads under Arrow's one-type-per-column rule on the real datasets' run,
// which mixes MT-Bench's integer ids with string ids: the ids come out as
// strings ("81"), and no other field changes type between records.
func TestTrainingFormsOneTypePerField(t *testing.T) {
	run := loadTrainerRun(t)
	dir := t.TempDir()
	gen := writeLines(t, filepath.Join(dir, "gen.jsonl"), run.lines)
	for _, args := range [][]string{
		{"--to", "messages", "--with-reasoning"},
		{"--to", "conversations", "--with-reasoning"},
		{"--to", "sharegpt", "--with-reasoning"},
		{"--for", forSpecForge}, {"--for", forSpeculators}, {"--for", forModelOpt}, {"--for", forEAGLE},
		{"--to", "tokens", "--tokenizer", testbin.Tokenizers(t, "qwen3")},
	} {
		r := testbin.Run(t, dir, nil, nil, "merge", append(args, gen)...)
		if r.Code != 0 && r.Code != 3 {
			t.Fatalf("%v: exit %d\n%s", args, r.Code, r.Stderr)
		}
		rows, err := arrowLoad(r.Stdout)
		if err != nil {
			t.Errorf("%v: load_dataset(\"json\") refuses it: %v", args, err)
			continue
		}
		ints := 0
		for _, row := range rows {
			id, ok := row["id"].(string)
			if !ok {
				t.Fatalf("%v: id %v is not a string", args, row["id"])
			}
			if id == "81" {
				ints++
			}
		}
		if ints == 0 {
			t.Errorf("%v: MT-Bench's question 81 is not among the ids as \"81\"", args)
		}
	}
}
