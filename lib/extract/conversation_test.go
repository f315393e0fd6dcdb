package extract

import (
	"bytes"
	stdjson "encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	"tokenmill/internal/corpus"
)

// conversationOut is a conversation record (--turns all) as the tests
// read it.
type conversationOut struct {
	ID       any `json:"id"`
	Messages []struct {
		Role       string   `json:"role"`
		Content    string   `json:"content"`
		Reasoning  string   `json:"reasoning_content"`
		ToolCallID string   `json:"tool_call_id"`
		Weight     *float64 `json:"weight"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools any `json:"tools"`
}

func conversations(t *testing.T, out []byte) []conversationOut {
	return decodeLines[conversationOut](t, out)
}

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(t *testing.T, a, b string) bool {
	var va, vb any
	if err := stdjson.Unmarshal([]byte(a), &va); err != nil {
		t.Fatalf("%v: %s", err, a)
	}
	if err := stdjson.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return reflect.DeepEqual(va, vb)
}

// TestRealGlaiveConversations: every glaive conversation as one record,
// its function_call turns as OpenAI tool calls and its observations as
// tool turns that answer them, stated turn by turn from the dataset.
func TestRealGlaiveConversations(t *testing.T) {
	needRealData(t)
	path := filepath.Join(realData, "glaive_toolcall_en_demo.json")
	var source []shareGPTRecord
	readJSON(t, path, &source)
	r := run(t, nil, nil, "--turns", "all", path)
	checkAccounting(t, r)
	got := conversations(t, r.stdout)
	if len(got) != 300 || len(source) != 300 || r.sum.rejected != 0 {
		t.Fatalf("%d conversations from %d records (%d rejected), want 300", len(got), len(source), r.sum.rejected)
	}
	roles := map[string]string{"human": "user", "gpt": "assistant", "function_call": "assistant", "observation": "tool"}
	calls, toolTurns, withCalls := 0, 0, 0
	for i, rec := range source {
		c := got[i]
		if len(c.Messages) != len(rec.Conversations) {
			t.Fatalf("record %d: %d messages for %d turns", i+1, len(c.Messages), len(rec.Conversations))
		}
		hasTools := rec.Tools != "" && rec.Tools != "[]"
		if (c.Tools != nil) != hasTools || (hasTools && !reflect.DeepEqual(c.Tools, openAITools(t, rec.Tools))) {
			t.Fatalf("record %d: tools %v, dataset has %q", i+1, c.Tools, rec.Tools)
		}
		answered := map[string]bool{} // call ids made so far: answered yet?
		var lastCall string
		for k, turn := range rec.Conversations {
			m := c.Messages[k]
			if m.Role != roles[turn.From] {
				t.Fatalf("record %d turn %d: role %s for %s", i+1, k+1, m.Role, turn.From)
			}
			switch turn.From {
			case "function_call":
				var want struct {
					Name      string
					Arguments stdjson.RawMessage
				}
				if err := stdjson.Unmarshal([]byte(turn.Value), &want); err != nil {
					t.Fatal(err)
				}
				if m.Content != "" || len(m.ToolCalls) != 1 {
					t.Fatalf("record %d turn %d: %+v for the call %s", i+1, k+1, m, turn.Value)
				}
				tc := m.ToolCalls[0]
				if tc.ID != fmt.Sprintf("call_%d_1", k+1) || tc.Type != "function" || tc.Function.Name != want.Name || !sameJSON(t, tc.Function.Arguments, string(want.Arguments)) {
					t.Fatalf("record %d turn %d: call %+v for %s", i+1, k+1, tc, turn.Value)
				}
				answered[tc.ID], lastCall = false, tc.ID
				calls++
			case "observation":
				if m.Content != turn.Value || m.ToolCallID != lastCall {
					t.Fatalf("record %d turn %d: tool turn %+v does not answer %q", i+1, k+1, m, lastCall)
				}
				if done, made := answered[m.ToolCallID]; !made || done {
					t.Fatalf("record %d turn %d: tool_call_id %q matches no preceding unanswered call", i+1, k+1, m.ToolCallID)
				}
				answered[m.ToolCallID] = true
				toolTurns++
			default:
				if m.Content != turn.Value || len(m.ToolCalls) != 0 || m.ToolCallID != "" {
					t.Fatalf("record %d turn %d: %+v for %q", i+1, k+1, m, turn.Value)
				}
			}
		}
		if len(answered) > 0 {
			withCalls++
		}
	}
	// Counted from the dataset's own turns above: 211 function_call turns
	// of one call each, each answered by one observation, in 153 of the
	// 300 conversations.
	if calls != 211 || toolTurns != 211 || withCalls != 153 {
		t.Fatalf("%d tool calls, %d tool turns, %d conversations with calls; the dataset has 211, 211, 153", calls, toolTurns, withCalls)
	}
}

// corpusConversations is n conversations of the corpus tool's
// --conversations output for seed.
func corpusConversations(n int, seed uint64) []byte {
	g := corpus.NewConversations(seed)
	var out []byte
	for range n {
		out = append(corpus.AppendConversation(out, g.Next()), '\n')
	}
	return out
}

// TestCorpusConversations: synthetic multi-turn conversations through the
// binary. --turns all gives one record each, whose tool calls and tool
// turns are exactly the corpus's function calls and observations, each
// tool turn answering the call before it; --turns each gives one prompt
// per question.
func TestCorpusConversations(t *testing.T) {
	const n = 1500
	data := corpusConversations(n, 21)
	g := corpus.NewConversations(21)
	var humans int
	for range n {
		for _, turn := range g.Next().Conversations {
			if turn.From == "human" {
				humans++
			}
		}
	}
	want := g.Counts()
	r := run(t, bytes.NewReader(data), nil, "--turns", "all")
	checkAccounting(t, r)
	got := conversations(t, r.stdout)
	if len(got) != n || r.sum.rejected != 0 {
		t.Fatalf("%d conversations, %d rejected; want %d", len(got), r.sum.rejected, n)
	}
	var turns, calls, toolTurns, withTools int64
	for i, c := range got {
		turns += int64(len(c.Messages))
		if c.Tools != nil {
			withTools++
		}
		ids := map[string]bool{}
		for k, m := range c.Messages {
			for _, tc := range m.ToolCalls {
				ids[tc.ID] = true
				calls++
			}
			if m.Role == "tool" {
				prev := c.Messages[k-1].ToolCalls
				if len(prev) != 1 || prev[0].ID != m.ToolCallID || !ids[m.ToolCallID] {
					t.Fatalf("conversation %d message %d: tool_call_id %q does not answer the call before it", i, k+1, m.ToolCallID)
				}
				toolTurns++
			}
		}
	}
	// The system prompt is a message of its own in the records.
	if turns != want.Turns+want.WithSystem || calls != want.Calls || toolTurns != want.Observations || withTools != want.WithTools {
		t.Fatalf("%d messages, %d calls, %d tool turns, %d with tools; the corpus made %+v", turns, calls, toolTurns, withTools, want)
	}
	each := run(t, bytes.NewReader(data), nil, "--turns", "each")
	checkAccounting(t, each)
	if each.sum.turns != humans || each.sum.wrote != humans {
		t.Fatalf("--turns each: %+v, want %d prompts, one per question", each.sum, humans)
	}
}
