package merge

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

const realData = "../../../shared/data/real"

type fastchatTurn struct {
	From  string `json:"from"`
	Value string `json:"value"`
}

type fastchatConversation struct {
	ID            string         `json:"id"`
	Conversations []fastchatTurn `json:"conversations"`
}

type chatMessage struct {
	Role             string `json:"role"`
	Content          string `json:"content"`
	ReasoningContent string `json:"reasoning_content,omitempty"`
}

// realRun turns the FastChat conversations into a run: each conversation
// without its last answer becomes a prompt record, and that answer comes
// back as the generated one, after failures and cut-off attempts, across
// files. Every 11th prompt never gets a good answer.
type realRun struct {
	convs       []fastchatConversation
	prompts     [][]chatMessage // messages of each prompt record
	promptLines []string
	files       map[string][]string
	reasoning   map[string]string // id -> fabricated reasoning
	unanswered  map[string]bool
}

func loadRealRun(t *testing.T) realRun {
	path := filepath.Join(realData, "fastchat_dummy_conversation.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("real data not available (%v)", err)
	}
	r := realRun{files: map[string][]string{}, reasoning: map[string]string{}, unanswered: map[string]bool{}}
	if err := json.Unmarshal(raw, &r.convs); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	roles := map[string]string{"human": "user", "gpt": "assistant", "system": "system"}
	for i, c := range r.convs {
		turns := c.Conversations
		var msgs []chatMessage
		for _, tn := range turns[:len(turns)-1] {
			msgs = append(msgs, chatMessage{Role: roles[tn.From], Content: tn.Value})
		}
		r.prompts = append(r.prompts, msgs)
		prompt, _ := json.Marshal(struct {
			ID       string        `json:"id"`
			Messages []chatMessage `json:"messages"`
			Source   string        `json:"source"`
		}{c.ID, msgs, "fastchat/dummy"})
		r.promptLines = append(r.promptLines, string(prompt))
		gen := func(text, reasoning, finish string) string {
			out, _ := json.Marshal(map[string]any{"text": text, "reasoning": reasoning, "finish_reason": finish,
				"usage": map[string]int{"prompt_tokens": 10 * len(msgs), "completion_tokens": len(text) / 4, "cached_tokens": 0},
				"model": "test-model", "endpoint": fmt.Sprintf("http://127.0.0.1:%d", 30000+i%8), "latency_ms": 1000 + i, "attempts": 1, "sample": 0})
			return strings.TrimSuffix(string(prompt), "}") + `,"output":` + string(out) + "}"
		}
		answer := turns[len(turns)-1].Value
		reasoning := ""
		if i%3 == 0 {
			reasoning = "The user asked: " + turns[len(turns)-2].Value
			r.reasoning[c.ID] = reasoning
		}
		if i%7 == 0 {
			r.files["run1.errors.jsonl"] = append(r.files["run1.errors.jsonl"], strings.TrimSuffix(string(prompt), "}")+
				`,"error":{"status":503,"message":"server restarting","attempts":5,"retriable":true,"sample":0}}`)
		}
		if i%11 == 0 {
			r.unanswered[c.ID] = true
			r.files["run1.jsonl"] = append(r.files["run1.jsonl"], gen(answer[:len(answer)/2], "", "abort"))
			continue
		}
		if i%5 == 0 {
			r.files["run1.jsonl"] = append(r.files["run1.jsonl"], gen(answer[:len(answer)/2], reasoning, "length"))
			r.files["rerun.jsonl"] = append(r.files["rerun.jsonl"], gen(answer, reasoning, "stop"))
			continue
		}
		r.files["run1.jsonl"] = append(r.files["run1.jsonl"], gen(answer, reasoning, "stop"))
	}
	return r
}

func (r realRun) write(t *testing.T, dir string) (prompts string, inputs []string) {
	prompts = writeLines(t, filepath.Join(dir, "prompts.jsonl"), r.promptLines)
	for _, name := range []string{"run1.jsonl", "run1.errors.jsonl", "rerun.jsonl"} {
		inputs = append(inputs, writeLines(t, filepath.Join(dir, name), r.files[name]))
	}
	return prompts, inputs
}

// TestTrainingFormatOnRealData: merged answers become training records
// that give back the original conversations exactly.
func TestTrainingFormatOnRealData(t *testing.T) {
	run := loadRealRun(t)
	dir := t.TempDir()
	_, inputs := run.write(t, dir)
	answered := len(run.convs) - len(run.unanswered)

	t.Run("sharegpt", func(t *testing.T) {
		code, stdout, stderr := runMerge(t, context.Background(), nil, append([]string{"--to", "sharegpt"}, inputs...)...)
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr)
		}
		want := map[string][]fastchatTurn{}
		for _, c := range run.convs {
			want[c.ID] = c.Conversations
		}
		lines := splitLines(stdout)
		if len(lines) != answered {
			t.Errorf("%d records, want %d", len(lines), answered)
		}
		for _, l := range lines {
			var rec struct {
				ID            string
				Conversations []fastchatTurn
			}
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatalf("%v: %s", err, l)
			}
			if run.unanswered[rec.ID] {
				t.Errorf("%s has no good answer but was written", rec.ID)
			}
			if !reflect.DeepEqual(rec.Conversations, want[rec.ID]) {
				t.Errorf("%s: conversation differs from the dataset's:\n got  %v\n want %v", rec.ID, rec.Conversations, want[rec.ID])
			}
			delete(want, rec.ID)
		}
		if len(want) != len(run.unanswered) {
			t.Errorf("%d conversations not written, want the %d unanswered", len(want), len(run.unanswered))
		}
		if want := fmt.Sprintf("merge: read %d, unique out %d, replaced %d, missing %d",
			len(run.files["run1.jsonl"])+len(run.files["run1.errors.jsonl"])+len(run.files["rerun.jsonl"]),
			answered, len(run.files["run1.errors.jsonl"])+len(run.files["rerun.jsonl"]), len(run.unanswered)); !strings.Contains(stderr, want) {
			t.Errorf("summary %q lacks %q", stderr, want)
		}
	})

	t.Run("messages with reasoning", func(t *testing.T) {
		code, stdout, stderr := runMerge(t, context.Background(), nil, append([]string{"--to", "messages", "--with-reasoning", "--sort"}, inputs...)...)
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr)
		}
		byID := map[string]int{}
		for i, c := range run.convs {
			byID[c.ID] = i
		}
		lines := splitLines(stdout)
		if len(lines) != answered {
			t.Errorf("%d records, want %d", len(lines), answered)
		}
		prev := ""
		for _, l := range lines {
			var rec struct {
				ID       string
				Messages []chatMessage
			}
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatalf("%v: %s", err, l)
			}
			if rec.ID <= prev {
				t.Errorf("--sort: %s after %s", rec.ID, prev)
			}
			prev = rec.ID
			i := byID[rec.ID]
			turns := run.convs[i].Conversations
			want := append(append([]chatMessage{}, run.prompts[i]...),
				chatMessage{Role: "assistant", Content: turns[len(turns)-1].Value, ReasoningContent: run.reasoning[rec.ID]})
			if !reflect.DeepEqual(rec.Messages, want) {
				t.Errorf("%s:\n got  %+v\n want %+v", rec.ID, rec.Messages, want)
			}
		}
	})
}

// TestMissingOnRealData: the to-do list is exactly the prompts without a
// good answer, as they were in the prompt file.
func TestMissingOnRealData(t *testing.T) {
	run := loadRealRun(t)
	dir := t.TempDir()
	prompts, inputs := run.write(t, dir)
	code, stdout, stderr := runMerge(t, context.Background(), nil, append([]string{"--prompts", prompts, "--missing"}, inputs...)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	var want []string
	for i, c := range run.convs {
		if run.unanswered[c.ID] {
			want = append(want, run.promptLines[i])
		}
	}
	compareLines(t, "to-do list", splitLines(stdout), want)
	if !strings.Contains(stderr, fmt.Sprintf("missing %d, prompts 500", len(want))) || !strings.HasSuffix(strings.TrimSpace(stderr), fmt.Sprintf("wrote %d to-do lines to stdout", len(want))) {
		t.Errorf("summary: %s", stderr)
	}
	// Rerunning the to-do list and merging again leaves nothing missing.
	var rerun []string
	for _, l := range splitLines(stdout) {
		rerun = append(rerun, strings.TrimSuffix(l, "}")+`,"output":{"text":"done at last","finish_reason":"stop","sample":0}}`)
	}
	inputs = append(inputs, writeLines(t, filepath.Join(dir, "todo-gen.jsonl"), rerun))
	code, stdout, stderr = runMerge(t, context.Background(), nil, append([]string{"--prompts", prompts, "--missing"}, inputs...)...)
	if code != 0 || stdout != "" || !strings.Contains(stderr, "good 500, replaced") || !strings.Contains(stderr, "missing 0") {
		t.Errorf("after the rerun: exit %d, %d to do\n%s", code, len(splitLines(stdout)), stderr)
	}
}

// regenerate makes, from a conversation record of extract --turns all, the
// generation record infer --regenerate writes (CONVERSATION-RECORD shape):
// every assistant turn rewritten, its calls given new ids that the tool
// results are re-paired to. Every 5th conversation has a length turn,
// every 7th is truncated after its first turn.
func regenerate(t *testing.T, i int, line string) (gen string, good bool) {
	t.Helper()
	var rec struct {
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	var msgs []map[string]any
	var turns []map[string]any
	ids := map[string]string{}
	for j, m := range rec.Messages {
		n := map[string]any{}
		for k, v := range m {
			n[k] = v
		}
		switch m["role"] {
		case "assistant":
			if calls, ok := m["tool_calls"].([]any); ok {
				for k, c := range calls {
					call := c.(map[string]any)
					id := fmt.Sprintf("regen_%d_%d", j, k)
					ids[call["id"].(string)] = id
					call["id"] = id
				}
			} else {
				n["content"] = fmt.Sprintf("regenerated %d: %v", j, m["content"])
			}
			n["reasoning_content"] = fmt.Sprintf("thinking before message %d", j)
			finish := "stop"
			if i%5 == 0 && len(turns) == 0 {
				finish = "length"
			}
			turns = append(turns, map[string]any{"message": j, "finish_reason": finish,
				"usage": map[string]int{"prompt_tokens": 100 * (j + 1), "completion_tokens": 20, "cached_tokens": 90 * j}, "latency_ms": 200, "endpoint": "http://127.0.0.1:30000", "attempts": 1})
		case "tool":
			if id, ok := ids[fmt.Sprint(m["tool_call_id"])]; ok {
				n["tool_call_id"] = id
			}
		}
		msgs = append(msgs, n)
	}
	out := map[string]any{"messages": msgs, "turns": turns, "finish_reason": "stop", "model": "m", "endpoint": "http://127.0.0.1:30000",
		"latency_ms": 200 * len(turns), "attempts": 1, "sample": 0}
	if i%7 == 0 && len(turns) > 1 {
		last := turns[0]["message"].(int)
		out["messages"], out["turns"] = msgs[:last+1], turns[:1]
		out["truncated"] = map[string]any{"reason": "context_full", "turn": 1, "detail": "the history no longer fits"}
	}
	o, _ := json.Marshal(out)
	return strings.TrimSuffix(line, "}") + `,"output":` + string(o) + "}", i%5 != 0 && (i%7 != 0 || len(turns) <= 1)
}

// TestConversationsOnRealData: the glaive tool-calling conversations, read
// whole by extract and regenerated, merged into the conversations layout
// as Parquet, read back by extract: the same conversations, tool calls and
// tools; every conversation is written or counted missing.
func TestConversationsOnRealData(t *testing.T) {
	src := filepath.Join(realData, "glaive_toolcall_en_demo.json")
	if _, err := os.Stat(src); err != nil {
		t.Skipf("real data not available (%v)", err)
	}
	r := testbin.Run(t, "", nil, nil, "extract", "--turns", "all", src)
	if r.Code != 0 {
		t.Fatalf("extract: exit %d\n%s", r.Code, r.Stderr)
	}
	var gens []string
	good := 0
	seen := map[string]bool{}
	for i, l := range splitLines(string(r.Stdout)) {
		// The demo file repeats some conversations: one (id, sample) each.
		var rec struct{ ID string }
		if json.Unmarshal([]byte(l), &rec) != nil || seen[rec.ID] {
			continue
		}
		seen[rec.ID] = true
		g, ok := regenerate(t, i, l)
		gens = append(gens, g)
		if ok {
			good++
		}
	}
	dir := t.TempDir()
	in := writeLines(t, filepath.Join(dir, "regen.jsonl"), gens)
	args := []string{"--to", "conversations", "--with-reasoning", "--drop-length", "--errors", filepath.Join(dir, "errors.jsonl"), in}
	code, jsonOut, stderr := runMerge(t, context.Background(), nil, args...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	want := readTraining(t, jsonOut)
	errs, _ := os.ReadFile(filepath.Join(dir, "errors.jsonl"))
	if len(want) != good || len(want)+len(splitLines(string(errs))) != len(gens) || good < 150 {
		t.Fatalf("%d written, %d to --errors, of %d; want %d written", len(want), len(splitLines(string(errs))), len(gens), good)
	}
	calls := 0
	for _, w := range want {
		for _, tn := range w.Conversations {
			calls += len(tn.ToolCalls)
			if tn.Role == "assistant" && tn.ReasoningContent == "" {
				t.Fatalf("%s: an assistant turn without its reasoning", w.ID)
			}
		}
	}
	if calls < 100 {
		t.Errorf("only %d tool calls in the training records", calls)
	}
	pq := filepath.Join(dir, "train.parquet")
	if code, _, stderr := runMerge(t, context.Background(), nil, append(args[:len(args)-3], "-o", pq, in)...); code != 0 {
		t.Fatalf("Parquet: exit %d\n%s", code, stderr)
	}
	checkThroughExtract(t, pq, want, toConversations)
}
