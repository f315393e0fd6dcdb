package stats

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// convLine is a regenerated conversation in the shape infer --regenerate
// writes: two turns, the first a tool call.
const convLine = `{"id":"c","messages":[{"role":"user","content":"q"}],"output":{"messages":[` +
	`{"role":"user","content":"Weather?"},` +
	`{"role":"assistant","content":"","reasoning_content":"look it up","tool_calls":[{"id":"x","type":"function","function":{"name":"w","arguments":"{}"}}]},` +
	`{"role":"tool","tool_call_id":"x","content":"18C"},` +
	`{"role":"assistant","content":"It is 18\u00b0C.","reasoning_content":"say it"}],` +
	`"turns":[{"message":1,"finish_reason":"stop","usage":{"prompt_tokens":10,"completion_tokens":4}},` +
	`{"message":3,"finish_reason":"length","usage":{"prompt_tokens":30,"completion_tokens":6,"cached_tokens":24}}],` +
	`"finish_reason":"length","usage":{"prompt_tokens":40,"completion_tokens":10},"endpoint":"e","latency_ms":9,"attempts":1,"sample":1}}`

// TestConversationsReport: the conversations section, checked against a
// computation by the standard decoder over the hand-made conversations.
func TestConversationsReport(t *testing.T) {
	input := filepath.Join(testdata, "conversations.jsonl")
	raw, err := os.ReadFile(input)
	if err != nil {
		t.Fatal(err)
	}
	var records, truncated, turns, reporting, cached, prompt int64
	reasons, finishes := map[string]int64{}, map[string]int64{}
	var maxTurns int
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var v struct {
			Output *struct {
				Messages  []map[string]any
				Truncated *struct{ Reason string }
				Turns     []struct {
					FinishReason string `json:"finish_reason"`
					Usage        map[string]int64
				}
			}
		}
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatal(err)
		}
		if v.Output == nil || len(v.Output.Messages) == 0 {
			continue
		}
		records++
		if v.Output.Truncated != nil {
			truncated++
			reasons[v.Output.Truncated.Reason]++
		}
		maxTurns = max(maxTurns, len(v.Output.Turns))
		for _, tn := range v.Output.Turns {
			turns++
			finishes[tn.FinishReason]++
			if c, ok := tn.Usage["cached_tokens"]; ok {
				reporting++
				cached += c
				prompt += tn.Usage["prompt_tokens"]
			}
		}
	}
	r := runJSON(t, 0, input)
	c := r.Conversations
	if c == nil {
		t.Fatal("no conversations section")
	}
	rate := float64(cached) / float64(prompt)
	want := PrefixCache{TurnsReporting: reporting, CachedTokens: cached, PromptTokens: prompt, HitRate: &rate}
	if c.Records != records || c.Truncated != truncated || c.Complete != records-truncated || c.Turns.Count != int(records) ||
		c.TurnAnswerChars.Count != int(turns) || c.TurnCompletionTokens.Count != int(turns) || int(c.Turns.Max) != maxTurns ||
		!reflect.DeepEqual(c.PrefixCache, want) {
		t.Errorf("got %+v\nwant records %d truncated %d turns %d (max %d) prefix cache %+v", c, records, truncated, turns, maxTurns, want)
	}
	for _, x := range []struct {
		got  []Count
		want map[string]int64
	}{{c.TruncatedByReason, reasons}, {c.TurnFinishReasons, finishes}} {
		m := map[string]int64{}
		for _, n := range x.got {
			m[n.Name] = n.Count
		}
		if !equalCounts(m, x.want) {
			t.Errorf("got %v, want %v", m, x.want)
		}
	}
	if reporting == 0 || reporting == turns || truncated < 2 || len(reasons) < 2 {
		t.Fatalf("the hand-made conversations exercise too little: %d of %d turns report cached tokens, %d truncated", reporting, turns, truncated)
	}

	// A server that never reports cached tokens: "not reported", null.
	dir := t.TempDir()
	quiet := filepath.Join(dir, "quiet.jsonl")
	if err := os.WriteFile(quiet, []byte(strings.Replace(convLine, `,"cached_tokens":24`, "", 1)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ := run(t, "", quiet)
	if code != 0 || !strings.Contains(stdout, "prefix cache: not reported") || !strings.Contains(stdout, "regenerated conversations: 1, 1 complete, 0 truncated") {
		t.Errorf("exit %d:\n%s", code, stdout)
	}
	if r := runJSON(t, 0, quiet); r.Conversations.PrefixCache.HitRate != nil || r.Conversations.PrefixCache.TurnsReporting != 0 {
		t.Errorf("hit rate %v without any report", r.Conversations.PrefixCache)
	}
	// No conversation at all: no section, in either report.
	if r := runJSON(t, 3, filepath.Join(testdata, "mixed.jsonl")); r.Conversations != nil {
		t.Errorf("a conversations section for single answers: %+v", r.Conversations)
	}
	// --checks checks every turn.
	if r := runJSON(t, 0, "--checks", "default", input); r.Checks == nil || r.Checks.Answers != turns+1 {
		t.Errorf("checks: %+v, want %d answers (the turns and one single answer)", r.Checks, turns+1)
	}
}
