package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// run runs the benchmark tool in-process and returns its exit code,
// stdout and stderr.
func run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := &cli.Env{Name: "benchmark", Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr}
	code := cli.Run(context.Background(), env, Description, &Command{}, args)
	return code, stdout.String(), stderr.String()
}

func prompts(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"id":"p%d","messages":[{"role":"user","content":"question number %d"}],"source":"test"}`+"\n", i, i)
	}
	return b.String()
}

func TestGenerations(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "prompts.jsonl")
	const n = 2000
	if err := os.WriteFile(in, []byte(prompts(n)), 0o644); err != nil {
		t.Fatal(err)
	}
	gen := func(name string) (string, string) {
		out, rerun := filepath.Join(dir, name+".jsonl"), filepath.Join(dir, name+".rerun.jsonl")
		code, _, stderr := run(t, "", "generations", "--max-tokens", "200", "--error-rate", "0.05", "--rerun", rerun, "-o", out, in)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		a, _ := os.ReadFile(out)
		b, _ := os.ReadFile(rerun)
		return string(a), string(b)
	}
	first, rerun := gen("a")
	again, rerun2 := gen("b")
	if first != again || rerun != rerun2 {
		t.Fatal("the same prompts gave different records")
	}

	// Every prompt gets exactly one record in the first file, in input
	// order; the rerun answers exactly the errors and some length answers.
	errorIDs, lengthIDs := map[string]bool{}, map[string]bool{}
	lines := strings.Split(strings.TrimSuffix(first, "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("%d records for %d prompts", len(lines), n)
	}
	for i, line := range lines {
		var g record.Generation
		if err := record.Decode([]byte(line), &g); err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, line)
		}
		if want := fmt.Sprintf("p%d", i); g.ID.String() != want || len(g.Messages) != 1 || g.Source != "test" {
			t.Fatalf("line %d: the prompt record is not carried through: %s", i+1, line)
		}
		switch {
		case g.Error != nil:
			errorIDs[g.ID.String()] = true
			if g.Output != nil || g.Error.Status != 503 {
				t.Fatalf("line %d: bad error record %s", i+1, line)
			}
		case g.Output != nil:
			checkAnswer(t, line, g.Output, 200)
			if g.Output.FinishReason == "length" {
				lengthIDs[g.ID.String()] = true
			}
		default:
			t.Fatalf("line %d: neither output nor error: %s", i+1, line)
		}
	}
	if len(errorIDs) < n/40 || len(errorIDs) > n/10 {
		t.Errorf("%d error records of %d at --error-rate 0.05", len(errorIDs), n)
	}
	if len(lengthIDs) == 0 {
		t.Error("no answer reached --max-tokens")
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(rerun, "\n"), "\n") {
		var g record.Generation
		if err := record.Decode([]byte(line), &g); err != nil || g.Output == nil {
			t.Fatalf("rerun: %v: %s", err, line)
		}
		id := g.ID.String()
		if seen[id] || !errorIDs[id] && !lengthIDs[id] {
			t.Fatalf("rerun answers %s, which is repeated or needed no rerun", id)
		}
		seen[id] = true
		if g.Output.FinishReason != "stop" {
			t.Fatalf("a rerun answer finished with %q", g.Output.FinishReason)
		}
		checkAnswer(t, line, g.Output, 200)
	}
	for id := range errorIDs {
		if !seen[id] {
			t.Fatalf("error %s is not answered in the rerun", id)
		}
	}
}

// checkAnswer checks that usage matches the text: a 16-hex-digit digest,
// then one word per completion token.
func checkAnswer(t *testing.T, line string, o *record.Output, maxTokens int) {
	t.Helper()
	words := strings.Fields(o.Text)
	if len(words) < 2 || len(words[0]) != 16 || o.Usage.CompletionTokens != len(words)-1 {
		t.Fatalf("answer text and usage disagree: %s", line)
	}
	if o.Usage.CompletionTokens > maxTokens || (o.FinishReason == "length") != (o.Usage.CompletionTokens == maxTokens) {
		t.Fatalf("finish_reason %q with %d tokens (max %d)", o.FinishReason, o.Usage.CompletionTokens, maxTokens)
	}
}

// TestFilterGens writes filter's benchmark records from a small corpus,
// read again and again until the bytes asked for: every line a
// generation record of one corpus conversation's first question, every id
// once, the same bytes for the same seed.
func TestFilterGens(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.jsonl")
	var b strings.Builder
	for i := range 5 {
		fmt.Fprintf(&b, `{"id":%d,"conversations":[{"from":"human","value":"question %d"},{"from":"gpt","value":"%s"}]}`+"\n", i, i, strings.Repeat("answer words ", 40))
	}
	b.WriteString(`{"id":"no-answer","conversations":[{"from":"human","value":"alone"}]}` + "\n")
	if err := os.WriteFile(corpus, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	gen := func(name, seed string) []byte {
		out := filepath.Join(dir, name)
		code, _, stderr := run(t, "", "filter-gens", "--bytes", "20000", "--seed", seed, "-o", out, corpus)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		data, _ := os.ReadFile(out)
		return data
	}
	first := gen("a.jsonl", "1")
	if string(gen("b.jsonl", "1")) != string(first) {
		t.Fatal("the same seed gave different records")
	}
	if string(gen("c.jsonl", "2")) == string(first) {
		t.Fatal("another seed gave the same records")
	}
	lines := strings.Split(strings.TrimSuffix(string(first), "\n"), "\n")
	last := len(first) - len(lines[len(lines)-1]) - 1
	if len(first) < 20000 || last >= 20000 {
		t.Fatalf("%d bytes, the last record starting at %d: it should stop with the record that reaches 20000", len(first), last)
	}
	ids := map[string]bool{}
	for i, line := range lines {
		var g record.Generation
		if err := record.Decode([]byte(line), &g); err != nil || g.Output == nil || len(g.Messages) != 1 {
			t.Fatalf("line %d: %v: %s", i+1, err, line)
		}
		if ids[g.ID.String()] {
			t.Fatalf("id %s twice", g.ID)
		}
		ids[g.ID.String()] = true
		var q struct{ Messages []struct{ Content string } }
		json.Unmarshal([]byte(line), &q)
		if !strings.HasPrefix(q.Messages[0].Content, "question ") {
			t.Fatalf("line %d: the prompt is not a corpus question: %s", i+1, line)
		}
	}
	// No conversation with an answer: refused, not looped on forever.
	if err := os.WriteFile(corpus, []byte(`{"id":1,"conversations":[{"from":"human","value":"q"}]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run(t, "", "filter-gens", "--bytes", "1000", "-o", filepath.Join(dir, "d.jsonl"), corpus); code != 1 || !strings.Contains(stderr, "no conversation") {
		t.Fatalf("a corpus without answers: exit %d: %s", code, stderr)
	}
}

// TestPagesReadsEveryValue: the pages command reads every value of the
// columns named, no more, counted against the same file's rows as the
// reader builds them.
func TestPagesReadsEveryValue(t *testing.T) {
	file := testbin.RealData(t, "ii_0625_style.parquet")
	// What the columns hold, from the rows as JSON: one id, langdetect and
	// source a row, a from and a value a turn.
	r := jsonl.NewReader(context.Background(), nil, []string{file}, nil, jsonl.Options{})
	defer r.Close()
	var rows, turns, textBytes int64
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var row struct {
			ID            string `json:"id"`
			Conversations []struct {
				From  string `json:"from"`
				Value string `json:"value"`
			} `json:"conversations"`
			Langdetect string `json:"langdetect"`
			Source     string `json:"source"`
		}
		if err := json.Unmarshal(rec.Data, &row); err != nil {
			t.Fatalf("row %d: %v", rec.Line, err)
		}
		rows++
		turns += int64(len(row.Conversations))
		textBytes += int64(len(row.ID) + len(row.Langdetect) + len(row.Source))
		for _, c := range row.Conversations {
			textBytes += int64(len(c.From) + len(c.Value))
		}
	}
	for _, c := range []struct {
		columns           []string
		leaves            int
		values, textBytes int64
	}{
		{[]string{"id", "conversations", "langdetect", "source"}, 5, 3*rows + 2*turns, textBytes},
		{[]string{"id"}, 1, rows, -1},
	} {
		var out bytes.Buffer
		cmd := PagesCmd{Columns: c.columns, File: file}
		if err := cmd.Run(context.Background(), &cli.Env{Stdout: &out}); err != nil {
			t.Fatal(err)
		}
		var got struct {
			Rows, Columns, Values int64
			ValueBytes            int64 `json:"value_bytes"`
		}
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v", out.Bytes(), err)
		}
		if got.Rows != rows || got.Columns != int64(c.leaves) || got.Values != c.values || (c.textBytes >= 0 && got.ValueBytes != c.textBytes) {
			t.Errorf("%v: got %+v; want %d rows, %d columns, %d values, %d bytes", c.columns, got, rows, c.leaves, c.values, c.textBytes)
		}
	}
	if rows != 500 || turns < 2*rows {
		t.Errorf("the file read as %d rows of %d turns", rows, turns)
	}
	// Refused, writing nothing: a column the file lacks, a pipe, a file
	// that is not Parquet.
	pipe := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(pipe, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cmd  PagesCmd
		want string
	}{
		{PagesCmd{Columns: []string{"no_such"}, File: file}, "no column is named"},
		{PagesCmd{File: pipe}, "not a regular file"},
		{PagesCmd{File: "main_test.go"}, "magic header"},
	} {
		var out bytes.Buffer
		if err := c.cmd.Run(context.Background(), &cli.Env{Stdout: &out}); err == nil || !strings.Contains(err.Error(), c.want) || out.Len() > 0 {
			t.Errorf("%s: %v (want %q), wrote %q", c.cmd.File, err, c.want, out.Bytes())
		}
	}
}
