package filter

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

// idsGen is a fit single answer with token ids: a prompt of p ids and an
// answer of a ids.
func idsGen(id string, p, a int) string {
	return fmt.Sprintf(`{"id":%q,"messages":[{"role":"user","content":"Why is the sky blue?"}],"output":{"text":%q,"finish_reason":"stop","usage":{"prompt_tokens":%d,"completion_tokens":%d},"latency_ms":1,"attempts":1,"sample":0,"prompt_token_ids":%s,"token_ids":%s}}`,
		id, goodText, p, a, ids(1, p), ids(100, a))
}

func ids(from, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprint(from + i)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// idsConv is a fit regenerated conversation of two turns, prefix-consistent
// or not: its rows are one of 10+20+3+5 tokens (loss 25), or two.
func idsConv(id string, consistent bool) string {
	p1, a1 := ids(1, 10), ids(100, 20)
	p2 := strings.TrimSuffix(p1, "]") + "," + strings.TrimPrefix(a1, "[")
	p2 = strings.TrimSuffix(p2, "]") + ",7,7,7]"
	if !consistent {
		p2 = "[9," + strings.TrimPrefix(p2, "[")
	}
	return fmt.Sprintf(`{"id":%q,"messages":[{"role":"user","content":"q"}],"output":{"messages":[{"role":"user","content":"Why is the sky blue?"},{"role":"assistant","content":%q},{"role":"user","content":"And the sea?"},{"role":"assistant","content":%q}],`+
		`"turns":[{"message":1,"finish_reason":"stop","usage":{"prompt_tokens":10,"completion_tokens":20},"prompt_token_ids":%s,"token_ids":%s},{"message":3,"finish_reason":"stop","usage":{"prompt_tokens":33,"completion_tokens":5},"prompt_token_ids":%s,"token_ids":%s}],`+
		`"finish_reason":"stop","usage":{"prompt_tokens":43,"completion_tokens":25},"latency_ms":1,"attempts":1,"sample":0}}`, id, goodText, goodText, p1, a1, p2, ids(200, 5))
}

// The training window drops, counted on the ids, the records whose rows a
// trainer of max_length N would cut, and those with fewer than M tokens to
// learn from; a record without ids cannot be counted and is dropped too.
func TestFilterTrainingWindow(t *testing.T) {
	lines := []string{
		idsGen("short", 10, 20),             // one row of 30, loss 20
		idsGen("long", 60, 50),              // one row of 110
		idsGen("tiny", 10, 2),               // loss 2
		idsConv("whole", true),              // one row of 33+5 = 38, loss 25
		idsConv("per-turn", false),          // rows of 30 and 34+5 = 39, loss 25
		gen("no-ids", goodText, "", "stop"), // no ids
	}
	cases := []struct {
		flags   []string
		kept    []string
		reasons map[string]string
		summary string
	}{
		{[]string{"--max-train-tokens", "100", "--min-loss-tokens", "5"}, []string{"short", "whole", "per-turn"},
			map[string]string{"long": ReasonTooLong, "tiny": ReasonFewLoss, "no-ids": ReasonNoTokenIDs},
			"read 6, kept 3, dropped 3 (no_token_ids 1, too_few_loss_tokens 1, too_long_for_training 1)"},
		// The consistent conversation's one row is 38 tokens; the other's
		// second row, its history re-rendered, 39.
		{[]string{"--max-train-tokens", "38"}, []string{"short", "tiny", "whole"},
			map[string]string{"long": ReasonTooLong, "per-turn": ReasonTooLong, "no-ids": ReasonNoTokenIDs},
			"dropped 3 (too_long_for_training 2, no_token_ids 1)"},
		{[]string{"--min-loss-tokens", "21"}, []string{"long", "whole", "per-turn"},
			map[string]string{"short": ReasonFewLoss, "tiny": ReasonFewLoss, "no-ids": ReasonNoTokenIDs},
			"dropped 3 (too_few_loss_tokens 2, no_token_ids 1)"},
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "gen.jsonl")
	os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	for _, c := range cases {
		t.Run(strings.Join(c.flags, " "), func(t *testing.T) {
			unfit := filepath.Join(t.TempDir(), "unfit.jsonl")
			r := testbin.Run(t, dir, nil, nil, "filter", append(c.flags, "--rejects", unfit, in)...)
			if r.Code != 0 || !strings.Contains(r.Stderr, c.summary) {
				t.Fatalf("exit %d, stderr:\n%s\nwant %q", r.Code, r.Stderr, c.summary)
			}
			var kept []string
			for _, line := range strings.Split(strings.TrimSpace(string(r.Stdout)), "\n") {
				var rec struct{ ID string }
				json.Unmarshal([]byte(line), &rec)
				kept = append(kept, rec.ID)
			}
			if strings.Join(kept, ",") != strings.Join(c.kept, ",") {
				t.Fatalf("kept %v, want %v", kept, c.kept)
			}
			got := map[string]string{}
			for _, line := range readLines(t, unfit) {
				var rec struct {
					ID     string
					Reject struct{ Reason string }
				}
				json.Unmarshal([]byte(line), &rec)
				got[rec.ID] = rec.Reject.Reason
			}
			if fmt.Sprint(got) != fmt.Sprint(c.reasons) {
				t.Fatalf("rejected %v, want %v", got, c.reasons)
			}
		})
	}
}
