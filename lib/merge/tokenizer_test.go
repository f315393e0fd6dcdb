package merge

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
	"tokenmill/lib/tokenizer"
)

// Records without the server's ids become rows with --tokenizer: the
// prompt as the server renders it, the answer as the template writes it
// through its end-of-turn id; --no-reasoning-loss keeps the reasoning in
// the row without loss; a server answer missing its end-of-turn id gets
// it; the manifest names the tokenizer and its template.
func TestTokenRowsWithTokenizer(t *testing.T) {
	dir := testbin.Tokenizers(t, "qwen3")
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	const eot = 151645
	prompt := tok.Encode("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n")
	answer := tok.Encode("<think>\nAdd.\n</think>\n\n4.")
	reasoning := len(tok.Encode("<think>\nAdd.\n</think>\n\n"))
	ids := func(v []int) string { b, _ := json.Marshal(v); return string(b) }
	gen := strings.Join([]string{
		`{"id":"text","messages":[{"role":"user","content":"2+2?"}],"output":{"text":"4.","reasoning":"Add.","finish_reason":"stop","sample":0}}`,
		`{"id":"cut","messages":[{"role":"user","content":"2+2?"}],"output":{"text":"4.","reasoning":"Add.","finish_reason":"length","sample":0}}`,
		`{"id":"server-no-eot","messages":[{"role":"user","content":"2+2?"}],"output":{"text":"4.","reasoning":"Add.","finish_reason":"stop","sample":0,"prompt_token_ids":` + ids(prompt) + `,"token_ids":` + ids(answer) + `}}`,
	}, "\n") + "\n"
	want := slices.Concat(prompt, answer, []int{eot})
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		rows   map[string][]int // id: input_ids
		loss   map[string]int   // id: tokens with loss
		stderr string
	}{
		{name: "reasoning with loss", args: []string{"--tokenizer", dir},
			rows:   map[string][]int{"text": want, "cut": slices.Concat(prompt, answer), "server-no-eot": want},
			loss:   map[string]int{"text": len(answer) + 1, "cut": len(answer), "server-no-eot": len(answer) + 1},
			stderr: "2 events rendered with the tokenizer, 1 answers given their end-of-turn id"},
		{name: "reasoning without loss", args: []string{"--tokenizer", dir, "--no-reasoning-loss"},
			rows: map[string][]int{"text": want, "cut": slices.Concat(prompt, answer), "server-no-eot": want},
			loss: map[string]int{"text": len(answer) + 1 - reasoning, "cut": len(answer) - reasoning, "server-no-eot": len(answer) + 1 - reasoning}},
		{name: "--tokenizer needs --to tokens", args: []string{"--tokenizer", dir, "--to", "messages"}, code: 2, stderr: "--tokenizer goes with --to tokens"},
		{name: "--template-kwargs needs --tokenizer", args: []string{"--template-kwargs", `{"enable_thinking":false}`}, code: 2, stderr: "need --tokenizer DIR"},
		{name: "--template-kwargs must be an object", args: []string{"--tokenizer", dir, "--template-kwargs", `[1]`}, code: 2, stderr: "want a JSON object"},
		{name: "a folder without tokenizer.json", args: []string{"--tokenizer", t.TempDir()}, code: 2, stderr: "no tokenizer.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			if err := os.WriteFile(filepath.Join(work, "gen.jsonl"), []byte(gen), 0o644); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"--to", "tokens", "-o", "rows.jsonl", "gen.jsonl"}, tc.args...)
			if slices.Contains(tc.args, "--to") {
				args = append([]string{"-o", "rows.jsonl", "gen.jsonl"}, tc.args...)
			}
			r := testbin.Run(t, work, nil, nil, "merge", args...)
			if r.Code != tc.code || !strings.Contains(r.Stderr, tc.stderr) {
				t.Fatalf("exit %d, want %d; stderr lacks %q:\n%s", r.Code, tc.code, tc.stderr, r.Stderr)
			}
			if tc.rows == nil {
				return
			}
			data, err := os.ReadFile(filepath.Join(work, "rows.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
				var row struct {
					ID       string `json:"id"`
					InputIDs []int  `json:"input_ids"`
					LossMask []int  `json:"loss_mask"`
				}
				if err := json.Unmarshal([]byte(line), &row); err != nil {
					t.Fatal(err)
				}
				got[row.ID] = true
				loss := 0
				for _, m := range row.LossMask {
					loss += m
				}
				if !slices.Equal(row.InputIDs, tc.rows[row.ID]) || loss != tc.loss[row.ID] {
					t.Errorf("row %s: %q with %d loss tokens; want %q with %d", row.ID, tok.Decode(row.InputIDs), loss, tok.Decode(tc.rows[row.ID]), tc.loss[row.ID])
				}
				// the loss is on the row's last ids: the answer's, reasoning first when it trains
				if !slices.Equal(row.LossMask[len(row.LossMask)-loss:], slices.Repeat([]int{1}, loss)) {
					t.Errorf("row %s: the loss is not on its last %d ids", row.ID, loss)
				}
			}
			if len(got) != len(tc.rows) {
				t.Errorf("rows of %v, want one for each of %d records", got, len(tc.rows))
			}
			var m Manifest
			raw, err := os.ReadFile(filepath.Join(work, "rows.jsonl.manifest.json"))
			if err != nil || json.Unmarshal(raw, &m) != nil || m.Tokenizer == nil {
				t.Fatalf("manifest: %v\n%s", err, raw)
			}
			if m.Tokenizer.ChatTemplateHash != tok.TemplateHash() || m.Tokenizer.TokenizerSHA256 != tok.Hash || m.Counts.Rendered != 2 || m.Counts.EOSAdded != 1 {
				t.Errorf("manifest tokenizer %+v, counts %+v", *m.Tokenizer, m.Counts)
			}
		})
	}
}
