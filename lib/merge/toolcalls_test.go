package merge

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Records as infer writes them when the model calls tools: finish_reason
// "tool_calls" on a single answer and on a regenerated turn, as SGLang,
// vLLM and OpenAI report it.
const (
	toolsJSON = `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},` +
		`{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"zone":{"type":"string"}}}}}]`
	weatherCall = `{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}`
	timeCall    = `{"id":"call_2","type":"function","function":{"name":"get_time","arguments":"{\"zone\":\"CET\"}"}}`
	turnUsage   = `"usage":{"prompt_tokens":20,"completion_tokens":12},"latency_ms":5,"endpoint":"e","attempts":1`
)

// toolRecords are one record of each shape a tool-calling run ends with,
// keyed by id.
var toolRecords = map[string]string{
	// A single answer that calls a tool.
	"single": `{"id":"single","messages":[{"role":"user","content":"Weather in Paris?"}],"tools":` + toolsJSON +
		`,"output":{"text":"","tool_calls":[` + weatherCall + `],"finish_reason":"tool_calls",` + turnUsage + `,"sample":0}}`,
	// A regenerated conversation whose turns end in tool_calls, then stop.
	"complete": convRecord("complete", `[{"role":"user","content":"Weather in Paris?"},`+
		`{"role":"assistant","content":"","tool_calls":[`+weatherCall+`]},`+
		`{"role":"tool","tool_call_id":"call_1","content":"sunny"},`+
		`{"role":"assistant","content":"It is sunny."}]`, `[1,"tool_calls"],[3,"stop"]`, ""),
	// A complete exchange, then one whose first call was answered and whose
	// second round (two parallel calls) was not: cut to the first exchange.
	"cut": convRecord("cut", `[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello"},`+
		`{"role":"assistant","content":"Hi."},{"role":"user","content":"Weather and time in Paris?"},`+
		`{"role":"assistant","content":"","tool_calls":[`+weatherCall+`]},`+
		`{"role":"tool","tool_call_id":"call_1","content":"sunny"},`+
		`{"role":"assistant","content":"","tool_calls":[`+timeCall+`,`+strings.Replace(timeCall, "call_2", "call_3", 1)+`]}]`,
		`[2,"stop"],[4,"tool_calls"],[6,"tool_calls"]`, "tool_unpaired"),
	// A call past --tool-rounds in the only exchange: nothing complete is left.
	"rounds": convRecord("rounds", `[{"role":"user","content":"Weather in Paris?"},`+
		`{"role":"assistant","content":"","tool_calls":[`+weatherCall+`]},`+
		`{"role":"tool","tool_call_id":"call_1","content":"sunny"},`+
		`{"role":"assistant","content":"","tool_calls":[`+weatherCall+`]}]`, `[1,"tool_calls"],[3,"tool_calls"]`, "tool_rounds"),
	// The context filled: missing unless --keep-truncated, as before.
	"context": convRecord("context", `[{"role":"user","content":"Hello"},{"role":"assistant","content":"Hi."}]`, `[1,"stop"]`, "context_full"),
}

// convRecord is a regenerated conversation: out its output.messages, turns
// its [message, finish] pairs, truncated its truncation reason ("" none).
func convRecord(id, out, turns, truncated string) string {
	var ts []string
	for _, t := range strings.Split(strings.Trim(turns, "[]"), "],[") {
		msg, finish, _ := strings.Cut(t, ",")
		ts = append(ts, fmt.Sprintf(`{"message":%s,"finish_reason":%s,%s}`, msg, finish, turnUsage))
	}
	trunc := ""
	if truncated != "" {
		trunc = fmt.Sprintf(`"truncated":{"reason":%q,"turn":%d,"detail":"d"},`, truncated, len(ts)-1)
	}
	return fmt.Sprintf(`{"id":%q,"messages":%s,"tools":%s,"output":{"messages":%s,"turns":[%s],%s"finish_reason":"stop","model":"m","sample":0}}`,
		id, out, toolsJSON, out, strings.Join(ts, ","), trunc)
}

// toolFiles writes the records (and their prompts) to dir.
func toolFiles(t *testing.T, dir string) (gen, prompts string) {
	t.Helper()
	var recs, ps []string
	for _, id := range []string{"single", "complete", "cut", "rounds", "context"} {
		recs = append(recs, toolRecords[id])
		var v map[string]json.RawMessage
		if err := json.Unmarshal([]byte(toolRecords[id]), &v); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		ps = append(ps, fmt.Sprintf(`{"id":%s,"messages":%s,"tools":%s}`, v["id"], v["messages"], v["tools"]))
	}
	return writeLines(t, filepath.Join(dir, "gen.jsonl"), recs), writeLines(t, filepath.Join(dir, "prompts.jsonl"), ps)
}

// TestToolCallAnswers: an answer that calls tools is complete, in every
// training form, with its calls on the assistant turn and the record's
// tools beside it; a conversation a tool call nobody answered ended is
// written up to its last complete exchange (the summary counts what that
// left out), or missing when no exchange was complete; --keep-truncated
// keeps it whole; --missing lists exactly what is not written. The same
// through the spill files.
func TestToolCallAnswers(t *testing.T) {
	dir := t.TempDir()
	gen, prompts := toolFiles(t, dir)
	for _, tc := range []struct {
		flags   []string
		written []string
		summary string
		turns   map[string]int // id -> turns (messages) of its training record
	}{
		{nil, []string{"single", "complete", "cut"},
			"unique out 3, replaced 0, missing 2, tool-truncated conversations cut to their last complete exchange 1 (left out 2 turns, 3 tool calls), truncated conversations missing 2",
			map[string]int{"single": 2, "complete": 4, "cut": 3}},
		{[]string{"--keep-truncated"}, []string{"single", "complete", "cut", "rounds", "context"},
			"unique out 5, replaced 0, missing 0", map[string]int{"single": 2, "complete": 4, "cut": 7, "rounds": 4, "context": 2}},
	} {
		for _, to := range []string{toMessages, toConversations, toShareGPT} {
			for _, memory := range []string{"512MiB", "1KiB"} {
				name := fmt.Sprintf("%s %s %s", strings.Join(tc.flags, " "), to, memory)
				t.Run(name, func(t *testing.T) {
					args := append([]string{"--to", to, "--memory", memory}, tc.flags...)
					code, stdout, stderr := runMerge(t, context.Background(), nil, append(args, gen)...)
					if code != 0 || !strings.Contains(stderr, "merge: read 5, "+tc.summary) {
						t.Fatalf("exit %d, summary lacks %q:\n%s", code, tc.summary, stderr)
					}
					recs := readTraining(t, stdout)
					checkToolTraining(t, to, recs, tc.written, tc.turns)
					pq := filepath.Join(t.TempDir(), "train.parquet")
					if code, _, stderr := runMerge(t, context.Background(), nil, append(args, "-o", pq, gen)...); code != 0 {
						t.Fatalf("Parquet: exit %d\n%s", code, stderr)
					}
					checkToolTraining(t, to, readParquetTraining(t, to, pq), tc.written, tc.turns)
				})
			}
		}
		t.Run(strings.Join(append(tc.flags, "--missing"), " "), func(t *testing.T) {
			args := append(append([]string{"--prompts", prompts, "--missing"}, tc.flags...), gen)
			code, stdout, stderr := runMerge(t, context.Background(), nil, args...)
			var todo []string
			for _, l := range splitLines(stdout) {
				var v struct{ ID string }
				json.Unmarshal([]byte(l), &v)
				todo = append(todo, v.ID)
			}
			var want []string
			for _, id := range []string{"single", "complete", "cut", "rounds", "context"} {
				if !slices.Contains(tc.written, id) {
					want = append(want, id)
				}
			}
			if code != 0 || !slices.Equal(todo, want) || !strings.HasSuffix(strings.TrimSpace(stderr), fmt.Sprintf("wrote %d to-do lines to stdout", len(want))) {
				t.Fatalf("exit %d, to-do %q, want %q:\n%s", code, todo, want, stderr)
			}
		})
	}
}

// checkToolTraining checks the training records of the tool records: the
// ids written, each one's turns, the calls on the assistant turns and the
// tools beside them.
func checkToolTraining(t *testing.T, to string, recs []jsonTraining, written []string, turns map[string]int) {
	t.Helper()
	var ids []string
	for _, r := range recs {
		id := idText(r.ID)
		ids = append(ids, id)
		ts := r.Messages
		if to != toMessages {
			ts = r.Conversations
		}
		if compactTools(t, r.Tools) == "" || !strings.Contains(compactTools(t, r.Tools), `"name":"get_time"`) {
			t.Errorf("%s: no tools beside the turns: %s", id, r.Tools)
		}
		calls := 0
		for _, m := range ts {
			switch {
			case to == toShareGPT && m.From == "function_call":
				calls++
				if !strings.Contains(m.Value, `"name":"get_`) {
					t.Errorf("%s: a function_call turn without its call: %q", id, m.Value)
				}
			case to != toShareGPT && len(m.ToolCalls) > 0:
				if m.Role != "assistant" || m.ToolCalls[0].Function.Name == "" || m.ToolCalls[0].Function.Arguments == "" {
					t.Errorf("%s: calls on a %q turn: %+v", id, m.Role, m.ToolCalls)
				}
				calls += len(m.ToolCalls)
			}
		}
		if to != toShareGPT && len(ts) != turns[id] {
			t.Errorf("%s: %d turns, want %d: %+v", id, len(ts), turns[id], ts)
		}
		switch {
		case id == "single" && (calls != 1 || to != toShareGPT && ts[len(ts)-1].ToolCalls[0].ID != "call_1"):
			t.Errorf("single: %d calls, want its one on the last turn: %+v", calls, ts)
		case id == "cut" && turns["cut"] == 3 && (calls != 0 || to != toShareGPT && ts[2].Content != "Hi."):
			t.Errorf("cut: not ended at its first exchange: %+v", ts)
		case id == "complete" && calls != 1:
			t.Errorf("complete: %d calls, want 1: %+v", calls, ts)
		}
	}
	if !slices.Equal(ids, written) {
		t.Errorf("wrote %q, want %q", ids, written)
	}
}
