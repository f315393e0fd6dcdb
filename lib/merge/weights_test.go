package merge

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// weighted is a regenerated conversation whose first answer was kept as
// context (weight 0, not regenerated) and whose later answers, the one
// regenerated with a tool call included, carry no weight; and a single
// answer whose prompt's history has weights.
const (
	weightedConversation = `{"id":"w","messages":[{"role":"user","content":"Q1"},{"role":"assistant","content":"a1","weight":0},{"role":"user","content":"Q2"},{"role":"assistant","content":"a2","weight":1}],` +
		`"output":{"messages":[{"role":"user","content":"Q1"},{"role":"assistant","content":"a1","weight":0},{"role":"user","content":"Q2"},` +
		`{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"r","tool_call_id":"c"},{"role":"assistant","content":"A2"}],` +
		`"turns":[{"message":3,"finish_reason":"stop","usage":{}},{"message":5,"finish_reason":"stop","usage":{}}],"finish_reason":"stop","sample":0}}`
	weightedAnswer = `{"id":"s","messages":[{"role":"user","content":"Q1"},{"role":"assistant","content":"a1","weight":0},{"role":"user","content":"Q2"}],` +
		`"output":{"text":"A2","finish_reason":"stop","sample":0}}`
)

// TestConvertWeights: a turn's weight reaches every training form that
// can hold one, in its one spelling: messages and conversations (OpenAI's
// fine-tuning weight), sharegpt (axolotl's per-turn weight, on both turns
// an assistant turn with text and calls becomes).
func TestConvertWeights(t *testing.T) {
	conv := `[{"role":"user","content":"Q1"},{"role":"assistant","content":"a1","weight":0},{"role":"user","content":"Q2"},` +
		`{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"r","tool_call_id":"c"},{"role":"assistant","content":"A2"}]`
	answer := `[{"role":"user","content":"Q1"},{"role":"assistant","content":"a1","weight":0},{"role":"user","content":"Q2"},{"role":"assistant","content":"A2"}]`
	tests := []struct{ name, in, to, want string }{
		{"conversation as messages", weightedConversation, toMessages, `{"id":"w","messages":` + conv + `}`},
		{"conversation as conversations", weightedConversation, toConversations, `{"id":"w","conversations":` + conv + `}`},
		{"conversation as sharegpt", weightedConversation, toShareGPT, `{"id":"w","conversations":[{"from":"human","value":"Q1"},{"from":"gpt","value":"a1","weight":0},{"from":"human","value":"Q2"},` +
			`{"from":"function_call","value":"{\"name\":\"f\",\"arguments\":{}}"},{"from":"observation","value":"r"},{"from":"gpt","value":"A2"}]}`},
		{"single answer as conversations", weightedAnswer, toConversations, `{"id":"s","conversations":` + answer + `}`},
		{"single answer as sharegpt", weightedAnswer, toShareGPT, `{"id":"s","conversations":[{"from":"human","value":"Q1"},{"from":"gpt","value":"a1","weight":0},{"from":"human","value":"Q2"},{"from":"gpt","value":"A2"}]}`},
		{"a weighted turn with text and calls in sharegpt", `{"id":"t","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"Let me see.","weight":0,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"r","tool_call_id":"c"},{"role":"user","content":"Q2"}],"output":{"text":"A","finish_reason":"stop","sample":0}}`,
			toShareGPT, `{"id":"t","conversations":[{"from":"human","value":"Q"},{"from":"gpt","value":"Let me see.","weight":0},{"from":"function_call","value":"{\"name\":\"f\",\"arguments\":{}}","weight":0},{"from":"observation","value":"r"},{"from":"human","value":"Q2"},{"from":"gpt","value":"A"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &converter{to: tt.to}
			got, rej := c.convert([]byte(tt.in))
			if rej != nil || string(got) != tt.want {
				t.Errorf("got %s %+v\nwant %s", got, rej, tt.want)
			}
		})
	}
}

// TestParquetWeights: the weight column of every Parquet form holds the
// weight where a turn has one and null elsewhere.
func TestParquetWeights(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "gen.jsonl")
	if err := os.WriteFile(in, []byte(weightedConversation+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	type weights struct{ turns, zero, null int }
	count := func(ws []*float64) (w weights) {
		for _, x := range ws {
			w.turns++
			switch {
			case x == nil:
				w.null++
			case *x == 0:
				w.zero++
			}
		}
		return w
	}
	for _, to := range []string{toMessages, toConversations, toShareGPT} {
		t.Run(to, func(t *testing.T) {
			pq := filepath.Join(dir, to+".parquet")
			if code, _, stderr := runMerge(t, context.Background(), nil, "--to", to, "-o", pq, in); code != 0 {
				t.Fatalf("exit %d\n%s", code, stderr)
			}
			var ws []*float64
			switch to {
			case toMessages:
				rows, err := parquet.ReadFile[pqMessagesRow](pq)
				if err != nil || len(rows) != 1 {
					t.Fatalf("%d rows, %v", len(rows), err)
				}
				for _, m := range rows[0].Messages {
					ws = append(ws, m.Weight)
				}
			case toConversations:
				rows, err := parquet.ReadFile[pqConversationsRow](pq)
				if err != nil || len(rows) != 1 {
					t.Fatalf("%d rows, %v", len(rows), err)
				}
				for _, m := range rows[0].Conversations {
					ws = append(ws, m.Weight)
				}
			default:
				rows, err := parquet.ReadFile[pqShareGPTRow](pq)
				if err != nil || len(rows) != 1 {
					t.Fatalf("%d rows, %v", len(rows), err)
				}
				for _, m := range rows[0].Conversations {
					ws = append(ws, m.Weight)
				}
			}
			if got, want := count(ws), (weights{6, 1, 5}); got != want || ws[1] == nil {
				t.Fatalf("weights %+v, want %+v with the second turn's 0", got, want)
			}
		})
	}
}
