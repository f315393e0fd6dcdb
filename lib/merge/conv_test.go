package merge

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"tokenmill/lib/quality"
	"tokenmill/lib/record"
)

// convFiles are the hand-made regenerated conversations of testdata/merge:
// two runs, their errors and filter's rejects of two answers.
var convFiles = []string{td("conv-a.jsonl"), td("conv-b.jsonl"), td("conv.errors.jsonl"), td("conv.unfit.jsonl")}

// TestConversationGolden merges the hand-made conversations with each
// combination of flags that matters, in memory and spilling.
func TestConversationGolden(t *testing.T) {
	prompts := []string{"--prompts", td("conv-prompts.jsonl"), "--samples", "2"}
	tests := []struct {
		name   string
		args   []string
		errors bool
	}{
		{"conv-default", convFiles, true},
		{"conv-keep-truncated", append([]string{"--keep-truncated", "--sort"}, convFiles...), true},
		{"conv-drop", append([]string{"--drop-length", "--drop-empty"}, convFiles...), true},
		{"conv-prompts", append(prompts, convFiles...), true},
		{"conv-missing", append(append(prompts, "--missing"), convFiles...), false},
		{"conv-messages", append([]string{"--to", "messages", "--with-reasoning"}, convFiles...), false},
		{"conv-sharegpt", append([]string{"--to", "sharegpt", "--with-reasoning", "--keep-truncated", "--sort"}, convFiles...), false},
		{"conv-conversations", append([]string{"--to", "conversations", "--drop-length"}, convFiles...), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runGolden(t, tt.name, tt.args, tt.errors, 0) })
	}
}

// conv is a regenerated conversation for the precedence tests, in the shape
// infer --regenerate writes: turns finishing as finishes, the first
// carrying label as its text, truncated for a reason or complete ("").
func conv(id string, sample int, label, truncated string, finishes ...string) string {
	msgs := []map[string]any{{"role": "system", "content": "S"}}
	var turns []map[string]any
	for i, f := range finishes {
		text := fmt.Sprintf("answer %d", i+1)
		if i == 0 {
			text = label
		}
		msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("question %d", i+1)},
			map[string]any{"role": "assistant", "content": text})
		turns = append(turns, map[string]any{"message": len(msgs) - 1, "finish_reason": f,
			"usage": map[string]int{"prompt_tokens": 10, "completion_tokens": 3}, "latency_ms": 5, "endpoint": "e", "attempts": 1})
	}
	out := map[string]any{"messages": msgs, "turns": turns, "sample": sample, "model": "m", "endpoint": "e", "latency_ms": 5, "attempts": 1}
	if len(finishes) > 0 {
		out["finish_reason"] = finishes[len(finishes)-1]
	}
	if truncated != "" {
		out["truncated"] = map[string]any{"reason": truncated, "turn": len(finishes), "detail": "d"}
	}
	b, _ := json.Marshal(map[string]any{"id": json.RawMessage(id), "messages": msgs, "output": out})
	return string(b)
}

// convError is infer's error record for a conversation it could not
// regenerate.
func convError(id string, sample int, label string) string {
	return fmt.Sprintf(`{"id": %s, "messages": [{"role": "user", "content": "q"}], "error": {"status": 400, "message": %q, "attempts": 1, "retriable": false, "sample": %d, "turns_done": 1, "turn": 1}}`, id, label, sample)
}

// convLabel reads back which record won: the first turn's text, or the
// error's message.
func convLabel(t *testing.T, line string) string {
	t.Helper()
	var v struct {
		Output *struct {
			Messages []struct{ Content string }
			Turns    []struct{ Message int }
		}
		Error *struct{ Message string }
	}
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	switch {
	case v.Error != nil:
		return v.Error.Message
	case v.Output != nil && len(v.Output.Turns) > 0:
		return v.Output.Messages[v.Output.Turns[0].Message].Content
	case v.Output != nil:
		return "(no turn)"
	}
	t.Fatalf("neither a conversation nor an error: %s", line)
	return ""
}

// TestConversationPrecedence: which of several regenerated conversations
// for one (id, sample) is written, and which goes to --errors.
func TestConversationPrecedence(t *testing.T) {
	stop, length := "stop", "length"
	tests := []struct {
		name      string
		files     [][]string
		flags     []string
		out, errs string // winning label in output / errors file ("" none)
	}{
		{"complete beats later truncated", [][]string{{conv(`"x"`, 0, "c", "", length, length)}, {conv(`"x"`, 0, "t", "context_full", stop)}}, nil, "c", ""},
		{"complete beats earlier truncated", [][]string{{conv(`"x"`, 0, "t", "tool_unpaired", stop, stop)}, {conv(`"x"`, 0, "c", "", stop, length)}}, nil, "c", ""},
		{"all stop beats a length turn, read before", [][]string{{conv(`"x"`, 0, "s", "", stop, stop), conv(`"x"`, 0, "l", "", stop, length)}}, nil, "s", ""},
		{"all stop beats a length turn, read after", [][]string{{conv(`"x"`, 0, "l", "", length, stop), conv(`"x"`, 0, "s", "", stop, stop)}}, nil, "s", ""},
		{"among equals the last wins", [][]string{{conv(`"x"`, 0, "first", "", stop)}, {conv(`"x"`, 0, "second", "", stop)}}, nil, "second", ""},
		{"among truncated ones all stop wins", [][]string{{conv(`"x"`, 0, "ts", "context_full", stop), conv(`"x"`, 0, "tl", "context_full", length)}}, nil, "", "ts"},
		{"a truncated one is missing by default", [][]string{{conv(`"x"`, 0, "t", "context_full", stop)}}, nil, "", "t"},
		{"a tool-truncated one is written cut", [][]string{{conv(`"x"`, 0, "t", "tool_unpaired", stop)}}, nil, "t", ""},
		{"a cut one beats a context-full one read after", [][]string{{conv(`"x"`, 0, "cut", "tool_rounds", stop), conv(`"x"`, 0, "full", "context_full", stop)}}, nil, "cut", ""},
		{"complete beats a cut one read before", [][]string{{conv(`"x"`, 0, "cut", "tool_unpaired", stop)}, {conv(`"x"`, 0, "c", "", length)}}, nil, "c", ""},
		{"a cut one with a length turn is not good with --drop-length", [][]string{{conv(`"x"`, 0, "cut", "tool_unpaired", length)}}, []string{"--drop-length"}, "", "cut"},
		{"a tool-calls turn is a complete turn", [][]string{{conv(`"x"`, 0, "l", "", stop, length), conv(`"x"`, 0, "tc", "", "tool_calls", stop)}}, nil, "tc", ""},
		{"--keep-truncated writes it", [][]string{{conv(`"x"`, 0, "t", "tool_unpaired", stop)}}, []string{"--keep-truncated"}, "t", ""},
		{"--keep-truncated --drop-length: a length turn is not good", [][]string{{conv(`"x"`, 0, "t", "context_full", length)}}, []string{"--keep-truncated", "--drop-length"}, "", "t"},
		{"an answer beats an error", [][]string{{convError(`"x"`, 0, "e")}, {conv(`"x"`, 0, "t", "context_full", stop)}}, nil, "", "t"},
		{"an error read last does not replace an answer", [][]string{{conv(`"x"`, 0, "c", "", stop)}, {convError(`"x"`, 0, "e")}}, nil, "c", ""},
		{"an error alone goes to --errors", [][]string{{convError(`"x"`, 0, "e1"), convError(`"x"`, 0, "e2")}}, nil, "", "e2"},
		{"--drop-length applies to any turn", [][]string{{conv(`"x"`, 0, "l", "", stop, length, stop)}}, []string{"--drop-length"}, "", "l"},
		{"an aborted turn is no good answer", [][]string{{conv(`"x"`, 0, "a", "", stop, "abort")}}, nil, "", "a"},
		{"an aborted turn ranks below a truncated conversation", [][]string{{conv(`"x"`, 0, "t", "context_full", stop), conv(`"x"`, 0, "a", "", stop, "abort")}}, []string{"--keep-truncated"}, "t", ""},
		{"no regenerated turn is no good answer", [][]string{{conv(`"x"`, 0, "n", "context_full")}, {convError(`"x"`, 0, "e")}}, []string{"--keep-truncated"}, "", "(no turn)"},
		{"--drop-empty applies to any turn", [][]string{{conv(`"x"`, 0, "e", "", stop, stop), strings.Replace(conv(`"x"`, 0, "l", "", stop, length), `"answer 2"`, `" \n"`, 2)}}, []string{"--drop-empty"}, "e", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkWinner(t, tt.files, tt.flags, tt.out, tt.errs, convLabel) })
	}
}

// TestConversationParse: how merge ranks a regenerated conversation, and
// which ones it rejects.
func TestConversationParse(t *testing.T) {
	for _, tt := range convParseCases {
		t.Run(tt.name, func(t *testing.T) {
			p, rej := parseRecord([]byte(tt.line))
			switch {
			case tt.reject != "":
				if rej == nil || rej.reason != ReasonBadRecord || !strings.Contains(rej.detail, tt.reject) {
					t.Errorf("got %+v, rank %d; want a bad_record naming %q", rej, p.rank, tt.reject)
				}
			case rej != nil:
				t.Errorf("rejected: %s %s", rej.reason, rej.detail)
			case p.rank != tt.rank || p.sample != tt.sample || p.conversation == tt.single:
				t.Errorf("rank %d sample %d conversation %v, want rank %d sample %d", p.rank, p.sample, p.conversation, tt.rank, tt.sample)
			}
		})
	}
}

var convParseCases = []struct {
	name   string
	line   string
	rank   uint8
	sample int
	reject string // a substring of the bad_record detail
	single bool   // not a conversation after all
}{
	{name: "complete, all stop", line: conv(`"a"`, 0, "x", "", "stop", "stop"), rank: rankStop},
	{name: "complete, a length turn", line: conv(`"a"`, 1, "x", "", "length", "stop"), rank: rankLength, sample: 1},
	{name: "complete, an unknown finish", line: conv(`"a"`, 0, "x", "", "stop", "content_filter"), rank: rankAbort},
	{name: "truncated, all stop", line: conv(`"a"`, 0, "x", "tool_unpaired", "stop"), rank: rankTruncStop},
	{name: "truncated, a length turn", line: conv(`"a"`, 0, "x", "context_full", "stop", "length"), rank: rankTruncLength},
	{name: "truncated before any turn", line: conv(`"a"`, 0, "x", "context_full"), rank: rankAbort},
	{name: "a turn without a finish", line: `{"id":"a","output":{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"x"}],"turns":[{"message":1}]}}`, rank: rankAbort},
	{name: "no turns at all", line: `{"id":"a","output":{"messages":[{"role":"user","content":"q"}],"finish_reason":"stop"}}`, rank: rankAbort},
	{name: "the output's own finish_reason is not what counts", line: `{"id":"a","output":{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"x"}],"turns":[{"message":1,"finish_reason":"length"}],"finish_reason":"stop"}}`, rank: rankLength},
	{name: "empty messages: a single answer", line: `{"id":"a","output":{"messages":[],"text":"x","finish_reason":"stop"}}`, rank: rankStop, single: true},
	{name: "a turn past the messages", line: `{"id":"a","output":{"messages":[{"role":"user","content":"q"}],"turns":[{"message":1,"finish_reason":"stop"}]}}`, reject: "turns[0].message is not an index"},
	{name: "a turn without a message", line: `{"id":"a","output":{"messages":[{"role":"user","content":"q"}],"turns":[{"finish_reason":"stop"}]}}`, reject: "turns[0].message is not an index"},
	{name: "a turn on a user message", line: `{"id":"a","output":{"messages":[{"role":"user","content":"q"}],"turns":[{"message":0,"finish_reason":"stop"}]}}`, reject: `points at a "user" message`},
	{name: "messages not a list", line: `{"id":"a","output":{"messages":{"role":"user"},"turns":[]}}`, reject: "messages"},
	{name: "turns not a list", line: `{"id":"a","output":{"messages":[{"role":"user","content":"q"}],"turns":"none"}}`, reject: "turns"},
	{name: "a fractional message index", line: `{"id":"a","output":{"messages":[{"role":"assistant","content":"q"}],"turns":[{"message":0.5}]}}`, reject: "turns"},
	{name: "truncated not an object", line: `{"id":"a","output":{"messages":[{"role":"assistant","content":"q"}],"turns":[{"message":0,"finish_reason":"stop"}],"truncated":"context_full"}}`, reject: "truncated must be an object"},
}

// TestConversationAccounting: over the hand-made conversations, with every
// flag combination, each (id, sample) of the prompt file ends up exactly
// once: in the output, in the errors file, or never answered; and the
// to-do list is exactly the prompts' keys without a good answer.
func TestConversationAccounting(t *testing.T) {
	prompts := td("conv-prompts.jsonl")
	keysOf := func(lines []string) []string {
		var keys []string
		for _, l := range lines {
			var v struct {
				ID     json.RawMessage
				Sample int
				Output *struct{ Sample int }
				Error  *struct{ Sample int }
			}
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatalf("%v: %s", err, l)
			}
			s := v.Sample
			switch {
			case v.Output != nil:
				s = v.Output.Sample
			case v.Error != nil:
				s = v.Error.Sample
			}
			keys = append(keys, fmt.Sprintf("%s/%d", v.ID, s))
		}
		return keys
	}
	raw, err := os.ReadFile(prompts)
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, k := range keysOf(splitLines(string(raw))) {
		id, _, _ := strings.Cut(k, "/")
		all = append(all, id+"/0", id+"/1")
	}
	for _, flags := range [][]string{nil, {"--keep-truncated"}, {"--drop-length", "--drop-empty"}, {"--keep-truncated", "--drop-length"}} {
		t.Run(strings.Join(append([]string{"flags"}, flags...), " "), func(t *testing.T) {
			dir := t.TempDir()
			errsPath := filepath.Join(dir, "errors.jsonl")
			base := append([]string{"--prompts", prompts, "--samples", "2"}, flags...)
			code, stdout, summary := runMerge(t, context.Background(), nil, append(append(base, "--errors", errsPath), convFiles...)...)
			if code != 0 {
				t.Fatalf("exit %d\n%s", code, summary)
			}
			errs, _ := os.ReadFile(errsPath)
			out, failed := keysOf(splitLines(stdout)), keysOf(splitLines(string(errs)))
			code, todo, stderr := runMerge(t, context.Background(), nil, append(append(base, "--missing"), convFiles...)...)
			if code != 0 {
				t.Fatalf("--missing: exit %d\n%s", code, stderr)
			}
			missing := keysOf(splitLines(todo))
			seen := map[string]string{}
			for _, c := range []struct {
				where string
				keys  []string
			}{{"output", out}, {"errors", failed}} {
				for _, k := range c.keys {
					if w, dup := seen[k]; dup {
						t.Errorf("%s is in %s and %s", k, w, c.where)
					}
					seen[k] = c.where
				}
			}
			for _, k := range all {
				good := seen[k] == "output"
				if good == slices.Contains(missing, k) {
					t.Errorf("%s: in the output %v, in the to-do list %v", k, good, slices.Contains(missing, k))
				}
			}
			if len(out)+len(missing) != len(all) || len(out) == 0 || len(failed) == 0 {
				t.Errorf("%d good + %d to do != %d keys (errors %d)", len(out), len(missing), len(all), len(failed))
			}
			if want := fmt.Sprintf("unique out %d, replaced 8, missing %d,", len(out), len(missing)); !strings.Contains(summary, want) {
				t.Errorf("summary lacks %q:\n%s", want, summary)
			}
		})
	}
}

// FuzzConversationParse: on every regenerated conversation that both
// merge and filter's reader (lib/quality) accept, they see the same turns,
// and merge's rank follows from their finish reasons and the truncation.
func FuzzConversationParse(f *testing.F) {
	for _, c := range convParseCases {
		f.Add([]byte(c.line))
	}
	seedLines(f, convFiles...)
	f.Fuzz(func(t *testing.T, data []byte) {
		p, rej := parseRecord(data)
		if rej != nil {
			if rej.reason == "" {
				t.Fatalf("rejected without a reason: %q", data)
			}
			return
		}
		if p.rank > rankStop {
			t.Fatalf("rank %d", p.rank)
		}
		var q quality.GenerationView
		if q.Parse(data) != nil || q.Kind != record.KindGeneration {
			return // filter's reader is stricter about the turns' fields
		}
		out, _ := record.FieldValue(data, "output")
		msgs, _ := record.FieldValue(out, "messages")
		if q.Conversation != isConversation(msgs) {
			return // field names in another case: filter reads them, merge (exactly as spelled) does not
		}
		if q.Conversation != p.conversation {
			t.Fatalf("%q: filter says conversation %v, merge %v", data, q.Conversation, p.conversation)
		}
		if !p.conversation || p.rank == rankRejected {
			return // a single answer, or filter's reject of an answer
		}
		worst := rankStop
		for _, a := range q.Answers {
			switch a.Finish {
			case record.FinishStop, record.FinishToolCalls:
			case record.FinishLength:
				worst = min(worst, rankLength)
			default:
				worst = rankAbort
			}
		}
		cut := false
		if out != nil {
			if v, _ := record.FieldValue(out, "truncated"); v != nil && string(v) != "null" {
				cut = true
			}
		}
		want := worst
		switch {
		case len(q.Answers) == 0 || worst == rankAbort:
			want = rankAbort
		case cut && worst == rankStop:
			want = rankTruncStop
		case cut:
			want = rankTruncLength
		}
		if p.rank != want {
			t.Fatalf("%q: %d turns, worst %d, truncated %v: merge ranks %d, want %d", data, len(q.Answers), worst, cut, p.rank, want)
		}
	})
}
