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

	"github.com/parquet-go/parquet-go"

	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
)

// parquetInputs mix regenerated conversations (with tool calls, reasoning,
// samples 0 and 1, a truncated one kept) and single answers.
var parquetInputs = append(append([]string{"--keep-truncated"}, convFiles...), runInputs...)

// jsonTurn is a turn of the JSONL training records, read back.
type jsonTurn struct {
	Role             string     `json:"role"`
	Content          string     `json:"content"`
	ReasoningContent string     `json:"reasoning_content"`
	Name             string     `json:"name"`
	ToolCallID       string     `json:"tool_call_id"`
	ToolCalls        []jsonCall `json:"tool_calls"`
	From             string     `json:"from"`
	Value            string     `json:"value"`
}

type jsonCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type jsonTraining struct {
	ID            json.RawMessage `json:"id"`
	Sample        int64           `json:"sample"`
	Messages      []jsonTurn      `json:"messages"`
	Conversations []jsonTurn      `json:"conversations"`
	Tools         json.RawMessage `json:"tools"`
}

func readTraining(t *testing.T, text string) []jsonTraining {
	t.Helper()
	var out []jsonTraining
	for _, l := range splitLines(text) {
		var r jsonTraining
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		out = append(out, r)
	}
	return out
}

// idText is an id as the Parquet file holds it: a string's text, an
// integer's decimal digits.
func idText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// toJSONTurns puts Parquet turns in the JSONL shape, for comparing.
func toJSONTurns(turns []pqTurn) []jsonTurn {
	out := []jsonTurn{}
	for _, p := range turns {
		j := jsonTurn{Role: p.Role, Content: p.Content, ReasoningContent: deref(p.ReasoningContent), Name: deref(p.Name), ToolCallID: deref(p.ToolCallID)}
		for _, c := range p.ToolCalls {
			jc := jsonCall{ID: c.ID, Type: c.Type}
			jc.Function.Name, jc.Function.Arguments = c.Function.Name, c.Function.Arguments
			j.ToolCalls = append(j.ToolCalls, jc)
		}
		out = append(out, j)
	}
	return out
}

// compactTools is a tools value as compact JSON text (Parquet holds the
// text; JSONL the list, or in sharegpt the text).
func compactTools(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// TestParquet writes each training format as Parquet and as JSONL from the
// same inputs, and reads the Parquet file back with parquet-go into Go
// structs: the same records, row for row; its schema is golden. The
// messages and conversations files are also read back by extract, which
// must find the same conversations.
func TestParquet(t *testing.T) {
	for _, to := range []string{toMessages, toConversations, toShareGPT} {
		t.Run(to, func(t *testing.T) {
			dir := t.TempDir()
			pq := filepath.Join(dir, "train.parquet")
			args := append([]string{"--to", to, "--with-reasoning", "--sort"}, parquetInputs...)
			code, jsonOut, stderr := runMerge(t, context.Background(), nil, args...)
			if code != 0 {
				t.Fatalf("JSONL: exit %d\n%s", code, stderr)
			}
			if code, _, stderr = runMerge(t, context.Background(), nil, append(args, "-o", pq)...); code != 0 {
				t.Fatalf("Parquet: exit %d\n%s", code, stderr)
			}
			want := readTraining(t, jsonOut)
			pf := openParquet(t, pq)
			for _, c := range pf.Metadata().RowGroups[0].Columns {
				if c.MetaData.Codec.String() != "ZSTD" {
					t.Errorf("column %v compressed with %v, want ZSTD", c.MetaData.PathInSchema, c.MetaData.Codec)
				}
			}
			testbin.CheckGolden(t, td("parquet-"+to+".schema.golden"), []byte(pf.Schema().String()+"\n"))
			type row struct {
				id     string
				sample int64
				turns  []jsonTurn
				tools  string
			}
			var got []row
			for _, r := range readParquetTraining(t, to, pq) {
				turns := r.Messages
				if to != toMessages {
					turns = r.Conversations
				}
				if turns == nil {
					turns = []jsonTurn{}
				}
				got = append(got, row{idText(r.ID), r.Sample, turns, compactTools(t, r.Tools)})
			}
			if len(got) != len(want) || len(want) < 20 {
				t.Fatalf("%d Parquet rows, %d JSONL records", len(got), len(want))
			}
			sawCalls, sawReasoning, sawSample := false, false, false
			for i, w := range want {
				turns := w.Messages
				if to != toMessages {
					turns = w.Conversations
				}
				if turns == nil {
					turns = []jsonTurn{}
				}
				g := got[i]
				if g.id != idText(w.ID) || g.sample != w.Sample || !reflect.DeepEqual(g.turns, turns) || g.tools != compactTools(t, w.Tools) {
					t.Errorf("row %d:\n got  %+v\n want %+v", i, g, w)
				}
				for _, tn := range turns {
					sawCalls = sawCalls || len(tn.ToolCalls) > 0 || tn.From == "function_call"
					sawReasoning = sawReasoning || tn.ReasoningContent != "" || strings.HasPrefix(tn.Value, "<think>")
				}
				sawSample = sawSample || w.Sample > 0
			}
			if !sawCalls || !sawReasoning || !sawSample {
				t.Errorf("the inputs exercise too little: tool calls %v, reasoning %v, sample 1 %v", sawCalls, sawReasoning, sawSample)
			}
			if to != toShareGPT {
				checkThroughExtract(t, pq, want, to)
			}
		})
	}
}

// openParquet opens a Parquet file for the test's life.
func openParquet(t *testing.T, path string) *parquet.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	return pf
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// checkThroughExtract reads the Parquet file with the project's extract,
// as a dataset of Hugging Face list<struct> conversations, and compares
// the conversations it finds with the JSONL training records.
func checkThroughExtract(t *testing.T, pq string, want []jsonTraining, to string) {
	t.Helper()
	r := testbin.Run(t, "", nil, nil, "extract", "--turns", "all", pq)
	if r.Code != 0 {
		t.Fatalf("extract: exit %d\n%s", r.Code, r.Stderr)
	}
	got := readTraining(t, string(r.Stdout))
	// extract gives one record per conversation; its samples share an id.
	if len(got) != len(want) {
		t.Fatalf("extract read %d conversations, want %d\n%s", len(got), len(want), r.Stderr)
	}
	for i, w := range want {
		turns := w.Messages
		if to == toConversations {
			turns = w.Conversations
		}
		if idText(got[i].ID) != idText(w.ID) || !reflect.DeepEqual(got[i].Messages, turns) || compactTools(t, got[i].Tools) != compactTools(t, w.Tools) {
			t.Errorf("extract, record %d:\n got  %+v\n want %+v", i, got[i], w)
		}
	}
}

// TestParquetRowGroups: a row group ends after maxGroupRows rows, or once
// its records reach the byte budget (an eighth of --memory, at least
// 1 MiB), so memory stays bounded however large the file.
func TestParquetRowGroups(t *testing.T) {
	dir := t.TempDir()
	const n = 25000
	lines := make([]string, n)
	for i := range lines {
		lines[i] = answer(fmt.Sprintf(`"r%05d"`, i), 0, "stop", fmt.Sprintf("answer %d %s", i, strings.Repeat("x", i%200)))
	}
	in := writeLines(t, filepath.Join(dir, "gen.jsonl"), lines)
	var size int64
	for _, l := range lines {
		size += int64(len(l))
	}
	for _, tt := range []struct {
		memory    string
		maxBytes  int64
		minGroups int
	}{
		{"512MiB", maxGroupBytes, n / maxGroupRows},
		{"8MiB", minGroupBytes, 2},
	} {
		t.Run(tt.memory, func(t *testing.T) {
			pq := filepath.Join(t.TempDir(), "t.parquet")
			code, _, stderr := runMerge(t, context.Background(), nil, "--memory", tt.memory, "--to", "messages", "-o", pq, in)
			if code != 0 {
				t.Fatalf("exit %d\n%s", code, stderr)
			}
			groups := openParquet(t, pq).RowGroups()
			var rows int64
			for _, g := range groups {
				if g.NumRows() > maxGroupRows {
					t.Errorf("a row group of %d rows", g.NumRows())
				}
				rows += g.NumRows()
			}
			if rows != n || len(groups) <= tt.minGroups {
				t.Errorf("%d rows in %d row groups, want %d rows in more than %d", rows, len(groups), n, tt.minGroups)
			}
			// A group's records (the training records, somewhat smaller
			// than the inputs) stay within the budget plus one record.
			if perGroup := size / int64(len(groups)); perGroup > tt.maxBytes+int64(len(lines[n-1])) {
				t.Errorf("%d bytes of input per row group, over the budget %d", perGroup, tt.maxBytes)
			}
		})
	}
}

// TestParquetRefusals: Parquet is for training records; a refusal comes
// before any write, and a merge that fails leaves no Parquet file.
func TestParquetRefusals(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "old.parquet")
	if err := os.WriteFile(existing, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	pq := filepath.Join(dir, "t.parquet")
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"generation records", []string{"-o", pq}, cli.ExitUsage, "Parquet holds training records"},
		{"the to-do list", []string{"--prompts", td("conv-prompts.jsonl"), "--missing", "-o", pq}, cli.ExitUsage, "--missing writes the prompts to rerun, as JSON Lines for infer: name a .jsonl file"},
		{"errors as Parquet", []string{"--to", "messages", "--errors", pq}, cli.ExitUsage, "not Parquet"},
		{"an existing file", []string{"--to", "messages", "-o", existing}, cli.ExitUsage, "already exists"},
		{"a failed spill", []string{"--to", "messages", "--memory", "1KiB", "--temp-dir", filepath.Join(dir, "missing"), "-o", pq}, cli.ExitFailure, "spill file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runMerge(t, context.Background(), nil, append(tt.args, runInputs...)...)
			if code != tt.code || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("exit %d, want %d with %q:\n%s", code, tt.code, tt.stderr, stderr)
			}
			if _, err := os.Stat(pq); err == nil {
				t.Errorf("%s was written", pq)
			}
			if b, _ := os.ReadFile(existing); string(b) != "keep me" {
				t.Errorf("%s was changed", existing)
			}
			left, _ := filepath.Glob(filepath.Join(dir, "*.tmp-*"))
			if len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
}

// readParquetTraining reads a Parquet training file back in the JSONL
// shape.
func readParquetTraining(t *testing.T, to, pq string) []jsonTraining {
	t.Helper()
	var out []jsonTraining
	tools := func(s *string) json.RawMessage {
		if s == nil {
			return nil
		}
		return json.RawMessage(*s)
	}
	id := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	switch to {
	case toMessages:
		rows, err := parquet.ReadFile[pqMessagesRow](pq)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			out = append(out, jsonTraining{ID: id(r.ID), Sample: r.Sample, Messages: toJSONTurns(r.Messages), Tools: tools(r.Tools)})
		}
	case toConversations:
		rows, err := parquet.ReadFile[pqConversationsRow](pq)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			out = append(out, jsonTraining{ID: id(r.ID), Sample: r.Sample, Conversations: toJSONTurns(r.Conversations), Tools: tools(r.Tools)})
		}
	default:
		rows, err := parquet.ReadFile[pqShareGPTRow](pq)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			var turns []jsonTurn
			for _, c := range r.Conversations {
				turns = append(turns, jsonTurn{From: c.From, Value: c.Value})
			}
			out = append(out, jsonTraining{ID: id(r.ID), Sample: r.Sample, Conversations: turns, Tools: tools(r.Tools)})
		}
	}
	return out
}
