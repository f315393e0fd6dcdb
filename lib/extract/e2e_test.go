package extract

import (
	"bytes"
	"compress/gzip"
	"encoding/csv"
	stdjson "encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"tokenmill/internal/testbin"
)

const (
	realData = "../../../shared/data/real"
	ourData  = "../../testdata/extract"
)

func TestMain(m *testing.M) {
	// The binary runs see no TOKENMILL_ variables but the ones a test gives.
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "TOKENMILL_") {
			os.Unsetenv(name)
		}
	}
	testbin.Main(m, "extract", "dedup", "rusage")
}

type result struct {
	stdout []byte
	stderr string
	code   int
	sum    summary
}

// run runs the binary with stdin (nil for none) and args; of the
// TOKENMILL_ variables it sees only the ones given in env (TestMain
// cleared the rest).
func run(t *testing.T, stdin io.Reader, env []string, args ...string) result {
	t.Helper()
	b := testbin.Run(t, "", stdin, env, "extract", args...)
	r := result{stdout: b.Stdout, stderr: b.Stderr, code: b.Code}
	r.sum = parseSummary(r.stderr)
	return r
}

// summary is the last line extract writes on stderr.
type summary struct {
	found                          bool
	read, turns, wrote, rejected   int
	filtered, noPrompt             int
	questionLists                  int
	rejectReasons, filteredReasons map[string]int
}

var summaryRE = regexp.MustCompile(`(?m)^extract: read (\d+)(?: \((\d+) turns\))?, wrote (\d+), rejected (\d+)(?: \(([^)]*)\))?(?:, filtered (\d+) \(([^)]*)\))?(?:, (\d+) messages end no prompt)?(?:, (\d+) question lists? \(infer --regenerate answers each question in turn\))?$`)

func parseSummary(stderr string) summary {
	m := summaryRE.FindAllStringSubmatch(stderr, -1)
	if len(m) == 0 {
		return summary{}
	}
	g := m[len(m)-1]
	atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
	reasons := func(s string) map[string]int {
		out := map[string]int{}
		for _, part := range strings.Split(s, ", ") {
			if f := strings.Fields(part); len(f) == 2 {
				out[f[0]] = atoi(f[1])
			}
		}
		return out
	}
	s := summary{found: true, read: atoi(g[1]), turns: atoi(g[2]), wrote: atoi(g[3]), rejected: atoi(g[4]),
		rejectReasons: reasons(g[5]), filtered: atoi(g[6]), filteredReasons: reasons(g[7]), noPrompt: atoi(g[8]), questionLists: atoi(g[9])}
	if g[2] == "" {
		s.turns = s.read
	}
	return s
}

// checkAccounting asserts that every candidate was written, rejected or
// filtered, that the reasons add up, and that stdout holds exactly the
// records the summary says were written, each a valid prompt record.
func checkAccounting(t *testing.T, r result) {
	t.Helper()
	s := r.sum
	if !s.found {
		t.Fatalf("no summary line on stderr:\n%s", r.stderr)
	}
	if s.turns != s.wrote+s.rejected+s.filtered+s.noPrompt {
		t.Errorf("accounting: %d candidates != wrote %d + rejected %d + filtered %d + ending no prompt %d", s.turns, s.wrote, s.rejected, s.filtered, s.noPrompt)
	}
	sum := func(m map[string]int) (n int) {
		for _, v := range m {
			n += v
		}
		return n
	}
	if sum(s.rejectReasons) != s.rejected || sum(s.filteredReasons) != s.filtered {
		t.Errorf("reasons do not add up: %+v", s)
	}
	lines := outLines(r.stdout)
	if len(lines) != s.wrote {
		t.Errorf("stdout has %d records, summary says wrote %d", len(lines), s.wrote)
	}
	for _, l := range lines {
		checkPrompt(t, l)
	}
	wantCode := 0
	if s.rejected > 0 {
		wantCode = 3
	}
	if r.code != wantCode {
		t.Errorf("exit code %d, want %d with %d rejects; stderr:\n%s", r.code, wantCode, s.rejected, r.stderr)
	}
}

func outLines(b []byte) [][]byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(l) > 0 {
			out = append(out, l)
		}
	}
	return out
}

// prompt is an output record as the tests look at it.
type prompt struct {
	ID       any            `json:"id"`
	Messages []turnOut      `json:"messages"`
	Prompt   *string        `json:"prompt"`
	Tools    any            `json:"tools"`
	Source   string         `json:"source"`
	Meta     map[string]any `json:"meta"`
}

type turnOut struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	ToolCalls any    `json:"tool_calls,omitempty"`
}

func prompts(t *testing.T, out []byte) []prompt { return decodeLines[prompt](t, out) }

// decodeLines decodes each line of out, numbers as json.Number.
func decodeLines[T any](t *testing.T, out []byte) []T {
	t.Helper()
	var vs []T
	for _, l := range outLines(out) {
		var v T
		dec := stdjson.NewDecoder(bytes.NewReader(l))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		vs = append(vs, v)
	}
	return vs
}

func needRealData(t *testing.T) {
	if _, err := os.Stat(realData); err != nil {
		t.Skipf("real datasets not found at %s: %v", realData, err)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := stdjson.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
}

func readJSONL[T any](t *testing.T, path string) []T {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []T
	for _, l := range outLines(data) {
		var v T
		if err := stdjson.Unmarshal(l, &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

type shareGPTRecord struct {
	ID            any `json:"id"`
	Conversations []struct {
		From  string `json:"from"`
		Value string `json:"value"`
	} `json:"conversations"`
	Tools string `json:"tools"`
}

// expectedTurns is what each turn mode should give for a ShareGPT
// conversation whose turns alternate, stated from the dataset itself.
func expectedTurns(t *testing.T, rec shareGPTRecord, mode string) [][]turnOut {
	roles := map[string]string{"human": "user", "gpt": "assistant", "function_call": "assistant", "observation": "tool"}
	var msgs []turnOut
	var users []int
	for _, c := range rec.Conversations {
		role, ok := roles[c.From]
		if !ok {
			t.Fatalf("unexpected role %q in the dataset", c.From)
		}
		if role == "user" {
			users = append(users, len(msgs))
		}
		content := c.Value
		if c.From == "function_call" {
			content = "" // the call goes in tool_calls
		}
		msgs = append(msgs, turnOut{Role: role, Content: content})
	}
	switch mode {
	case TurnsFirst:
		return [][]turnOut{msgs[:users[0]+1]}
	case TurnsAllButLast:
		return [][]turnOut{msgs[:users[len(users)-1]+1]}
	}
	var out [][]turnOut
	for _, u := range users {
		out = append(out, msgs[:u+1])
	}
	return out
}

// openAITools is glaive's tools (a JSON string of a list of functions) in
// the OpenAI shape, decoded as prompts decodes records.
func openAITools(t *testing.T, tools string) any {
	t.Helper()
	var fns []map[string]any
	dec := stdjson.NewDecoder(strings.NewReader(tools))
	dec.UseNumber()
	if err := dec.Decode(&fns); err != nil {
		t.Fatal(err)
	}
	out := make([]any, len(fns))
	for i, f := range fns {
		out[i] = map[string]any{"type": "function", "function": f}
	}
	return out
}

func sameMessages(a, b []turnOut) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Role != b[i].Role || a[i].Content != b[i].Content {
			return false
		}
	}
	return true
}

func TestRealFastChat(t *testing.T) {
	needRealData(t)
	path := filepath.Join(realData, "fastchat_dummy_conversation.json")
	var source []shareGPTRecord
	readJSON(t, path, &source)
	if len(source) != 500 {
		t.Fatalf("the dataset has %d records, its README says 500", len(source))
	}
	for _, mode := range []string{TurnsFirst, TurnsAllButLast, TurnsEach} {
		t.Run(mode, func(t *testing.T) {
			r := run(t, nil, nil, "--turns", mode, path)
			checkAccounting(t, r)
			got := prompts(t, r.stdout)
			i := 0
			for _, rec := range source {
				for n, want := range expectedTurns(t, rec, mode) {
					if i >= len(got) {
						t.Fatalf("only %d prompts", len(got))
					}
					wantID := rec.ID
					if mode == TurnsEach {
						wantID = fmt.Sprintf("%v#%d", rec.ID, n+1)
					}
					if got[i].ID != wantID || !sameMessages(got[i].Messages, want) {
						t.Fatalf("prompt %d: got %v %v, want %v %v", i, got[i].ID, got[i].Messages, wantID, want)
					}
					i++
				}
			}
			if i != len(got) || r.sum.rejected != 0 {
				t.Fatalf("%d prompts, expected %d; summary %+v", len(got), i, r.sum)
			}
			if mode == TurnsFirst {
				if len(got) != 500 {
					t.Fatalf("%d prompts, want 500", len(got))
				}
				distinct := map[string]bool{}
				for _, p := range got {
					distinct[p.Messages[0].Content] = true
				}
				if len(distinct) != 52 {
					t.Errorf("%d distinct first turns, the README says 52", len(distinct))
				}
			}
		})
	}
}

func TestRealAlpaca(t *testing.T) {
	needRealData(t)
	path := filepath.Join(realData, "alpaca_en_demo.json")
	var source []struct{ Instruction, Input string }
	readJSON(t, path, &source)
	r := run(t, nil, nil, path)
	checkAccounting(t, r)
	got := prompts(t, r.stdout)
	if len(got) != 999 || len(source) != 999 {
		t.Fatalf("%d prompts from %d records, want 999", len(got), len(source))
	}
	withInput, ids := 0, map[any]bool{}
	for i, rec := range source {
		want := rec.Instruction
		if rec.Input != "" {
			withInput++
			want += "\n\n" + rec.Input
		}
		if len(got[i].Messages) != 1 || got[i].Messages[0].Content != want || got[i].Messages[0].Role != "user" {
			t.Fatalf("record %d: got %+v, want one user turn %q", i+1, got[i].Messages, want)
		}
		ids[got[i].ID] = true
	}
	if withInput != 412 {
		t.Errorf("%d records with an input, the README says 412", withInput)
	}
	// Ids are content hashes, so the 14 repeated prompts share ids.
	if len(ids) != 985 {
		t.Errorf("%d distinct ids, want 985 (one per distinct instruction+input)", len(ids))
	}
	again := run(t, nil, nil, path)
	if !bytes.Equal(again.stdout, r.stdout) {
		t.Error("a second run gives different output: ids are not stable")
	}
}

func TestRealGlaiveToolCalls(t *testing.T) {
	needRealData(t)
	path := filepath.Join(realData, "glaive_toolcall_en_demo.json")
	var source []shareGPTRecord
	readJSON(t, path, &source)
	for _, mode := range []string{TurnsFirst, TurnsAllButLast} {
		t.Run(mode, func(t *testing.T) {
			r := run(t, nil, nil, "--turns", mode, path)
			checkAccounting(t, r)
			got := prompts(t, r.stdout)
			if len(got) != 300 || len(source) != 300 {
				t.Fatalf("%d prompts from %d records, want 300", len(got), len(source))
			}
			toolRoles := 0
			for i, rec := range source {
				want := expectedTurns(t, rec, mode)[0]
				if !sameMessages(got[i].Messages, want) {
					t.Fatalf("record %d: got %v, want %v", i+1, got[i].Messages, want)
				}
				for _, m := range got[i].Messages {
					if m.Role == "tool" {
						toolRoles++
					}
				}
				hasTools := rec.Tools != "" && rec.Tools != "[]"
				if (got[i].Tools != nil) != hasTools || (hasTools && !reflect.DeepEqual(got[i].Tools, openAITools(t, rec.Tools))) {
					t.Fatalf("record %d: tools %v, dataset has %q", i+1, got[i].Tools, rec.Tools)
				}
			}
			if mode == TurnsAllButLast && toolRoles == 0 {
				t.Error("no observation turn came out as a tool message")
			}
		})
	}
}

func TestRealContentParts(t *testing.T) {
	needRealData(t)
	path := filepath.Join(realData, "v1_sft_demo.jsonl")
	type part struct{ Type, Value string }
	source := readJSONL[struct {
		Messages []struct {
			Role       string
			Content    []part
			LossWeight *float64 `json:"loss_weight"`
		}
	}](t, path)
	r := run(t, nil, nil, path)
	checkAccounting(t, r)
	got := prompts(t, r.stdout)
	if len(got) != 500 || len(source) != 500 {
		t.Fatalf("%d prompts from %d records, want 500", len(got), len(source))
	}
	for i, rec := range source {
		var texts []string
		for _, p := range rec.Messages[0].Content {
			texts = append(texts, p.Value)
		}
		if rec.Messages[0].Role != "user" || len(got[i].Messages) != 1 || got[i].Messages[0].Content != strings.Join(texts, "\n") {
			t.Fatalf("record %d: got %+v from %+v", i+1, got[i].Messages, rec.Messages[0])
		}
	}
	// Whole, every message of every record.
	r = run(t, nil, nil, "--turns", "all", path)
	checkAccounting(t, r)
	whole := conversations(t, r.stdout)
	if len(whole) != 500 {
		t.Fatalf("--turns all: %d conversations from 500 records", len(whole))
	}
	weighted := 0
	for i, rec := range source {
		if len(whole[i].Messages) != len(rec.Messages) {
			t.Fatalf("record %d: %d messages, want %d", i+1, len(whole[i].Messages), len(rec.Messages))
		}
		for k, m := range rec.Messages {
			var texts []string
			for _, p := range m.Content {
				texts = append(texts, p.Value)
			}
			if g := whole[i].Messages[k]; g.Role != m.Role || g.Content != strings.Join(texts, "\n") {
				t.Fatalf("record %d message %d: got %+v from %+v", i+1, k+1, g, m)
			}
			// loss_weight is kept as the turn's weight on assistant
			// turns, the turns that are trained.
			wantWeight := m.LossWeight
			if m.Role != "assistant" {
				wantWeight = nil
			} else {
				weighted++
			}
			if g := whole[i].Messages[k].Weight; (g == nil) != (wantWeight == nil) || (g != nil && *g != *wantWeight) {
				t.Fatalf("record %d message %d: weight %v, dataset's loss_weight %v", i+1, k+1, g, m.LossWeight)
			}
		}
	}
	if weighted == 0 {
		t.Fatal("no assistant turn with a loss_weight: the weights were not exercised")
	}
}

func TestRealMTBench(t *testing.T) {
	needRealData(t)
	path := filepath.Join(realData, "mt_bench_question.jsonl")
	source := readJSONL[struct {
		QuestionID int `json:"question_id"`
		Category   string
		Turns      []string
	}](t, path)
	if len(source) != 80 {
		t.Fatalf("%d questions, the README says 80", len(source))
	}
	for _, q := range source {
		if len(q.Turns) != 2 {
			t.Fatalf("question %d has %d turns; the expectations below assume 2", q.QuestionID, len(q.Turns))
		}
	}
	tests := []struct {
		mode            string
		wrote, rejected int
		suffix          string
	}{
		{TurnsFirst, 80, 0, ""},
		// The second question follows an answer the dataset does not
		// have, so it cannot be asked: rejected, never sent half-made.
		{TurnsEach, 80, 80, "#1"},
		{TurnsAllButLast, 0, 80, ""},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			rejects := filepath.Join(t.TempDir(), "rejects.jsonl")
			r := run(t, nil, nil, "--turns", tt.mode, "--rejects", rejects, path)
			checkAccounting(t, r)
			if r.sum.wrote != tt.wrote || r.sum.rejected != tt.rejected || r.sum.rejectReasons["unanswered_turn"] != tt.rejected {
				t.Fatalf("summary %+v, want wrote %d, rejected %d unanswered_turn", r.sum, tt.wrote, tt.rejected)
			}
			for i, p := range prompts(t, r.stdout) {
				q := source[i]
				wantID := any(stdjson.Number(strconv.Itoa(q.QuestionID)))
				if tt.suffix != "" {
					wantID = fmt.Sprint(q.QuestionID, tt.suffix)
				}
				if p.ID != wantID || len(p.Messages) != 1 || p.Messages[0].Content != q.Turns[0] || p.Meta["category"] != q.Category {
					t.Fatalf("question %d: got %+v", q.QuestionID, p)
				}
			}
			rejected := readJSONL[struct {
				QuestionID int `json:"question_id"`
				Reject     struct {
					Reason, File string
					Line         int
				}
			}](t, rejects)
			if len(rejected) != tt.rejected {
				t.Fatalf("%d records in the rejects file, want %d", len(rejected), tt.rejected)
			}
			for i, rj := range rejected {
				if rj.QuestionID != source[i].QuestionID || rj.Reject.Reason != "unanswered_turn" || rj.Reject.File != path || rj.Reject.Line != i+1 {
					t.Fatalf("reject %d: %+v", i, rj)
				}
			}
		})
	}
}

// MT-Bench's records as whole conversations (--turns all): each its two
// questions, marked a question list (so that infer --regenerate answers
// the first before it asks the second), counted in the summary.
func TestRealMTBenchQuestionLists(t *testing.T) {
	needRealData(t)
	path := filepath.Join(realData, "mt_bench_question.jsonl")
	source := readJSONL[struct {
		QuestionID int `json:"question_id"`
		Category   string
		Turns      []string
	}](t, path)
	r := run(t, nil, nil, "--turns", "all", path)
	checkAccounting(t, r)
	if r.sum.wrote != 80 || r.sum.rejected != 0 || r.sum.questionLists != 80 {
		t.Fatalf("summary %+v, want 80 written, 80 question lists", r.sum)
	}
	got := decodeLines[struct {
		prompt
		QuestionList *bool `json:"question_list"`
	}](t, r.stdout)
	if len(got) != len(source) {
		t.Fatalf("%d records for %d questions", len(got), len(source))
	}
	for i, p := range got {
		q := source[i]
		if p.ID != stdjson.Number(strconv.Itoa(q.QuestionID)) || p.QuestionList == nil || !*p.QuestionList || p.Meta["category"] != q.Category ||
			len(p.Messages) != 2 || p.Messages[0].Role != "user" || p.Messages[0].Content != q.Turns[0] || p.Messages[1].Role != "user" || p.Messages[1].Content != q.Turns[1] {
			t.Fatalf("question %d: got %+v (question_list %v)", q.QuestionID, p.prompt, p.QuestionList)
		}
	}
	// Every other real dataset is a chat log or single prompts: nothing
	// there is a question list.
	for _, f := range []string{"fastchat_dummy_conversation.json", "glaive_toolcall_en_demo.json", "alpaca_en_demo.json", "v1_sft_demo.jsonl"} {
		r := run(t, nil, nil, "--turns", "all", filepath.Join(realData, f))
		if r.sum.questionLists != 0 || bytes.Contains(r.stdout, []byte(`"question_list"`)) {
			t.Errorf("%s: %d question lists", f, r.sum.questionLists)
		}
	}
}

func TestRealParquet(t *testing.T) {
	needRealData(t)
	fromJSON := prompts(t, run(t, nil, nil, filepath.Join(realData, "fastchat_dummy_conversation.json")).stdout)
	tests := []struct {
		file string
		id   func(i int) any
	}{
		{"ii_0625_style.parquet", func(i int) any { return fromJSON[i].ID }},
		{"ii_3m_style.parquet", func(i int) any { return stdjson.Number(strconv.Itoa(i + 1)) }},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			r := run(t, nil, nil, "--keep", "label,langdetect,source", filepath.Join(realData, tt.file))
			checkAccounting(t, r)
			got := prompts(t, r.stdout)
			if len(got) != 500 || len(fromJSON) != 500 {
				t.Fatalf("%d prompts, want 500 like the JSON source (%d)", len(got), len(fromJSON))
			}
			for i := range got {
				if got[i].ID != tt.id(i) || !sameMessages(got[i].Messages, fromJSON[i].Messages) {
					t.Fatalf("row %d: got %v %v, want %v %v", i+1, got[i].ID, got[i].Messages, tt.id(i), fromJSON[i].Messages)
				}
				if got[i].Meta["source"] != "fastchat_dummy" {
					t.Fatalf("row %d: meta %v lacks the dataset's source", i+1, got[i].Meta)
				}
				if tt.file == "ii_0625_style.parquet" && (got[i].Meta["langdetect"] != "en" || got[i].Meta["label"] == nil) {
					t.Fatalf("row %d: meta %v lacks label and langdetect", i+1, got[i].Meta)
				}
			}
		})
	}
}

// realCounts is what --turns first gives for each file of the real data.
var realCounts = map[string]int{
	"alpaca_en_demo.json":              999,
	"fastchat_dummy_conversation.json": 500,
	"glaive_toolcall_en_demo.json":     300,
	"ii_0625_style.parquet":            500,
	"ii_3m_style.parquet":              500,
	"mt_bench_question.jsonl":          80,
	"v1_sft_demo.jsonl":                500,
}

// TestRealAllFiles reads every file of the real data in one run, in the
// order given, and each file alone.
func TestRealAllFiles(t *testing.T) {
	needRealData(t)
	entries, err := os.ReadDir(realData)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	total := 0
	for _, e := range entries {
		if e.Name() == "README.md" {
			continue
		}
		n, ok := realCounts[e.Name()]
		if !ok {
			t.Errorf("%s has no expectation here: add one", e.Name())
			continue
		}
		files = append(files, filepath.Join(realData, e.Name()))
		total += n
	}
	var separately [][]byte
	for _, f := range files {
		r := run(t, nil, nil, f)
		checkAccounting(t, r)
		if r.sum.wrote != realCounts[filepath.Base(f)] || r.sum.read != r.sum.wrote {
			t.Errorf("%s: summary %+v, want %d prompts", f, r.sum, realCounts[filepath.Base(f)])
		}
		separately = append(separately, r.stdout)
	}
	r := run(t, nil, nil, files...)
	checkAccounting(t, r)
	if r.sum.wrote != total || r.sum.read != total {
		t.Errorf("all files: summary %+v, want %d", r.sum, total)
	}
	if !bytes.Equal(r.stdout, bytes.Join(separately, nil)) {
		t.Error("one run over all files differs from the files run one by one, in order")
	}
}

func compress(t *testing.T, kind string, data []byte) []byte {
	var buf bytes.Buffer
	switch kind {
	case "gz":
		w := gzip.NewWriter(&buf)
		w.Write(data)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	case "zst":
		w, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// TestCompressedAndStdin reads the same data compressed (under names that
// do not say so, since content decides), and from stdin.
func TestCompressedAndStdin(t *testing.T) {
	needRealData(t)
	dir := t.TempDir()
	for _, name := range []string{"fastchat_dummy_conversation.json", "mt_bench_question.jsonl", "ii_0625_style.parquet"} {
		path := filepath.Join(realData, name)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want := run(t, nil, nil, path)
		checkAccounting(t, want)
		for _, kind := range []string{"gz", "zst"} {
			c := filepath.Join(dir, name+"."+kind)
			if err := os.WriteFile(c, compress(t, kind, data), 0o644); err != nil {
				t.Fatal(err)
			}
			plainName := filepath.Join(dir, kind+"-no-suffix")
			if err := os.WriteFile(plainName, compress(t, kind, data), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{c, plainName} {
				if got := run(t, nil, nil, p); !bytes.Equal(got.stdout, want.stdout) || got.code != 0 {
					t.Errorf("%s as %s: exit %d, output differs: %s", name, p, got.code, got.stderr)
				}
			}
			if got := run(t, bytes.NewReader(compress(t, kind, data)), nil); !bytes.Equal(got.stdout, want.stdout) {
				t.Errorf("%s compressed with %s on stdin: output differs: %s", name, kind, got.stderr)
			}
		}
		if got := run(t, bytes.NewReader(data), nil, "-"); !bytes.Equal(got.stdout, want.stdout) {
			t.Errorf("%s on stdin ('-'): output differs: %s", name, got.stderr)
		}
	}
}

// TestDamagedInputs: a bad line in the middle, a truncated gzip file, and
// a file named .parquet that is not one. The good records still come out,
// every problem is reported with its file (and line), and the run exits 3.
func TestDamagedInputs(t *testing.T) {
	dir := t.TempDir()
	good := func(i int) string {
		return fmt.Sprintf(`{"id":"r%d","conversations":[{"from":"human","value":"question %d %s"},{"from":"gpt","value":"answer"}]}`,
			i, i, strings.Repeat("padding ", 20))
	}
	var lines []string
	for i := 1; i <= 2000; i++ {
		lines = append(lines, good(i))
	}
	middle := append(append(append([]string{}, lines[:4]...), `{"id":"bad","conversations":[{"from":"human"`), lines[4:8]...)
	middlePath := filepath.Join(dir, "middle.jsonl")
	if err := os.WriteFile(middlePath, []byte(strings.Join(middle, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gz := compress(t, "gz", []byte(strings.Join(lines, "\n")+"\n"))
	truncPath := filepath.Join(dir, "truncated.jsonl.gz")
	if err := os.WriteFile(truncPath, gz[:len(gz)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	fakePath := filepath.Join(dir, "fake.parquet")
	if err := os.WriteFile(fakePath, []byte(lines[0]+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	after := filepath.Join(dir, "after.jsonl")
	if err := os.WriteFile(after, []byte(good(9999)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("bad line in the middle", func(t *testing.T) {
		r := run(t, nil, nil, middlePath, after)
		checkAccounting(t, r)
		if r.sum.wrote != 9 || r.sum.rejectReasons["malformed_json"] != 1 || r.sum.rejected != 1 {
			t.Fatalf("summary %+v, want 9 written and 1 malformed_json", r.sum)
		}
		if !strings.Contains(r.stderr, middlePath+":5: malformed_json") {
			t.Errorf("stderr does not name %s:5:\n%s", middlePath, r.stderr)
		}
	})
	t.Run("truncated gzip", func(t *testing.T) {
		rejects := filepath.Join(dir, "trunc-rejects.jsonl")
		r := run(t, nil, nil, "--rejects", rejects, truncPath, after)
		checkAccounting(t, r)
		got := prompts(t, r.stdout)
		if r.sum.rejected != 1 || r.sum.rejectReasons["unreadable"] != 1 || len(got) < 2 {
			t.Fatalf("summary %+v, want the records before the cut and one unreadable", r.sum)
		}
		// Every record before the cut, in order, then the next file.
		for i, p := range got[:len(got)-1] {
			if p.ID != fmt.Sprint("r", i+1) {
				t.Fatalf("record %d has id %v", i+1, p.ID)
			}
		}
		if got[len(got)-1].ID != "r9999" {
			t.Error("the file after the truncated one was not read")
		}
		wantAt := fmt.Sprintf("%s:%d: unreadable", truncPath, len(got))
		if !strings.Contains(r.stderr, wantAt) || !strings.Contains(r.stderr, "truncated") {
			t.Errorf("stderr does not say %q and why:\n%s", wantAt, r.stderr)
		}
		rj := readJSONL[struct{ Reject struct{ Reason, File string } }](t, rejects)
		if len(rj) != 1 || rj[0].Reject.Reason != "unreadable" || rj[0].Reject.File != truncPath {
			t.Errorf("rejects file: %+v", rj)
		}
	})
	t.Run("not parquet", func(t *testing.T) {
		r := run(t, nil, nil, fakePath, after)
		checkAccounting(t, r)
		if r.sum.wrote != 1 || r.sum.rejectReasons["unreadable"] != 1 {
			t.Fatalf("summary %+v, want the next file's record and one unreadable", r.sum)
		}
		if !strings.Contains(r.stderr, fakePath+":") || !strings.Contains(r.stderr, "Parquet") {
			t.Errorf("stderr does not name %s as bad Parquet:\n%s", fakePath, r.stderr)
		}
	})
	// A file that is not there is a mistake in the call, found before
	// anything is read or written: exit 2, naming it.
	t.Run("missing file", func(t *testing.T) {
		missing := filepath.Join(dir, "nope.jsonl")
		r := run(t, nil, nil, after, missing)
		if r.code != 2 || len(r.stdout) != 0 || !strings.Contains(r.stderr, "cannot read "+missing+": no such file") {
			t.Fatalf("exit %d, %d bytes out; want 2 and nothing out, naming the file; stderr:\n%s", r.code, len(r.stdout), r.stderr)
		}
	})
}

// TestGolden runs our own samples through every turn mode and a run with
// every option, against golden stdout, stderr and rejects files.
func TestGolden(t *testing.T) {
	inputs := []string{filepath.Join(ourData, "mixed.jsonl"), filepath.Join(ourData, "array.json")}
	tests := []struct {
		name string
		args []string
	}{
		{"first", []string{"--turns", "first"}},
		{"all-but-last", []string{"--turns", "all-but-last"}},
		{"each", []string{"--turns", "each"}},
		{"all", []string{"--turns", "all"}},
		{"options", []string{"--keep", "langdetect,label", "--source", "demo", "--id-prefix", "t-", "--lang", "en", "--max-chars", "40"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rejects := filepath.Join(t.TempDir(), "rejects.jsonl")
			r := run(t, nil, nil, append(append(tt.args, "--rejects", rejects), inputs...)...)
			checkAccounting(t, r)
			rj, err := os.ReadFile(rejects)
			if err != nil {
				t.Fatal(err)
			}
			for suffix, got := range map[string][]byte{".out": r.stdout, ".err": []byte(r.stderr), ".rejects": rj} {
				testbin.CheckGolden(t, filepath.Join(ourData, "golden", tt.name+suffix), got)
			}
		})
	}
}

func TestOptions(t *testing.T) {
	needRealData(t)
	fastchat := filepath.Join(realData, "fastchat_dummy_conversation.json")
	var source []shareGPTRecord
	readJSON(t, fastchat, &source)

	t.Run("limit", func(t *testing.T) {
		r := run(t, nil, nil, "--limit", "7", fastchat)
		checkAccounting(t, r)
		if r.sum.wrote != 7 || r.sum.read != 7 {
			t.Errorf("summary %+v, want read 7, wrote 7", r.sum)
		}
		r = run(t, nil, nil, "--limit", "3", "--turns", "each", fastchat)
		checkAccounting(t, r)
		if r.sum.wrote != 3 {
			t.Errorf("each: summary %+v, want wrote 3", r.sum)
		}
	})
	t.Run("min-chars", func(t *testing.T) {
		const min = 20
		want := 0
		for _, rec := range source {
			if len([]rune(rec.Conversations[0].Value)) >= min {
				want++
			}
		}
		r := run(t, nil, nil, "--min-chars", strconv.Itoa(min), fastchat)
		checkAccounting(t, r)
		if r.sum.wrote != want || r.sum.filteredReasons["too_short"] != 500-want || want == 0 || want == 500 {
			t.Errorf("summary %+v, want %d written, %d too_short", r.sum, want, 500-want)
		}
	})
	t.Run("lang", func(t *testing.T) {
		parquetFile := filepath.Join(realData, "ii_0625_style.parquet")
		r := run(t, nil, nil, "--lang", "zh", parquetFile)
		checkAccounting(t, r)
		if r.sum.wrote != 0 || r.sum.filteredReasons["lang"] != 500 || r.code != 0 {
			t.Errorf("summary %+v (exit %d), want all 500 filtered by lang and exit 0", r.sum, r.code)
		}
		r = run(t, nil, nil, "--lang", "zh,en", parquetFile)
		if r.sum.wrote != 500 {
			t.Errorf("zh,en: summary %+v, want all 500", r.sum)
		}
	})
	t.Run("environment", func(t *testing.T) {
		flagRun := run(t, nil, nil, "--turns", "each", "--id-prefix", "x-", fastchat)
		envRun := run(t, nil, []string{"TOKENMILL_EXTRACT_TURNS=each", "TOKENMILL_EXTRACT_ID_PREFIX=x-"}, fastchat)
		if !bytes.Equal(flagRun.stdout, envRun.stdout) || flagRun.sum.wrote <= 500 {
			t.Error("TOKENMILL_EXTRACT_* variables do not act like the flags")
		}
	})
	t.Run("output file", func(t *testing.T) {
		plain := run(t, nil, nil, fastchat)
		for _, name := range []string{"out.jsonl", "out.jsonl.gz", "out.jsonl.zst"} {
			out := filepath.Join(t.TempDir(), "sub", name)
			r := run(t, nil, nil, "-o", out, fastchat)
			if r.code != 0 || len(r.stdout) != 0 {
				t.Fatalf("%s: exit %d, %d bytes on stdout", name, r.code, len(r.stdout))
			}
			back := run(t, nil, nil, "--format", "openai", out) // reading our own output back
			if back.sum.wrote != 500 || back.code != 0 {
				t.Fatalf("%s: read back %+v", name, back.sum)
			}
			if name == "out.jsonl" {
				data, _ := os.ReadFile(out)
				if !bytes.Equal(data, plain.stdout) {
					t.Error("-o writes something else than stdout")
				}
			}
		}
	})
	t.Run("usage errors", func(t *testing.T) {
		for _, args := range [][]string{
			{"--min-chars", "10", "--max-chars", "5"},
			{"--format", "csv"},
			{"--turns", "last"},
			{"--limit", "-1"},
			{"--no-such-flag"},
		} {
			if r := run(t, nil, nil, append(args, fastchat)...); r.code != 2 || len(r.stdout) != 0 {
				t.Errorf("%v: exit %d, want 2 and no output; stderr:\n%s", args, r.code, r.stderr)
			}
		}
	})
	t.Run("help", func(t *testing.T) {
		r := run(t, nil, nil, "--help")
		if r.code != 0 || !strings.Contains(string(r.stdout), "extract data/0625/*.parquet | dedup | infer --endpoints 127.0.0.1:30000-30007 -o gen.jsonl") {
			t.Errorf("--help (exit %d) lacks the example pipeline:\n%s", r.code, r.stdout)
		}
		if r := run(t, nil, nil, "--version"); r.code != 0 || !strings.Contains(string(r.stdout), "extract") {
			t.Errorf("--version: exit %d, %q", r.code, r.stdout)
		}
	})
}

// TestWriteFailure: records that cannot be written make a runtime
// failure (exit 1), not a silent success.
func TestWriteFailure(t *testing.T) {
	needRealData(t)
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	defer full.Close()
	cmd := testbin.Command("extract", filepath.Join(realData, "alpaca_en_demo.json"))
	cmd.Stdout = full
	if r := testbin.Exec(t, cmd); r.Code != 1 || !strings.Contains(r.Stderr, "no space") {
		t.Errorf("writing to a full disk: exit %d, stderr:\n%s", r.Code, r.Stderr)
	}
}

// TestInterrupt: SIGINT stops reading; what was extracted is flushed, the
// summary says how much, and the exit code is 130.
func TestInterrupt(t *testing.T) {
	p := testbin.Start(t, "extract", "--progress", "20ms")
	for i := range 10 {
		fmt.Fprintf(p.Stdin, `{"id":%d,"prompt":"p%d"}`+"\n", i, i)
	}
	// Wait (bounded) until the progress report shows the ten records read.
	p.WaitFor(t, 20*time.Second, "read 10, wrote 10")
	p.Signal(t, syscall.SIGINT)
	// Once the signal is taken, one more line wakes the blocked read; the
	// loop then stops, whether or not that record made it through.
	p.WaitFor(t, 20*time.Second, "interrupted")
	fmt.Fprintln(p.Stdin, `{"id":10,"prompt":"p10"}`)
	p.Stdin.Close()
	r := p.Wait(t, 20*time.Second)
	if r.Code != 130 {
		t.Fatalf("exit %d, want 130; stderr:\n%s", r.Code, r.Stderr)
	}
	s := parseSummary(r.Stderr)
	if n := len(outLines(r.Stdout)); !s.found || s.wrote < 10 || s.wrote > 11 || n != s.wrote || s.read != s.wrote {
		t.Errorf("summary %+v and %d records on stdout, want the 10 read before the signal (or 11) flushed and counted", s, n)
	}
	if want := fmt.Sprintf("extract: interrupted after %d records: output incomplete (stdout holds the records decided before the interrupt)\n", s.read); !strings.HasSuffix(r.Stderr, want) {
		t.Errorf("stderr does not end with %q:\n%s", want, r.Stderr)
	}
}

// TestClosedPipeEndsQuietly: SIGPIPE keeps Go's default, so
// `extract big | head -1` ends extract at once by the signal, with no
// error message, instead of reading on or complaining.
func TestClosedPipeEndsQuietly(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.jsonl")
	var b strings.Builder
	for i := range 200_000 {
		fmt.Fprintf(&b, `{"id":%d,"prompt":"prompt number %d"}`+"\n", i, i)
	}
	if err := os.WriteFile(big, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`%q %q | head -n 1; echo "status ${PIPESTATUS[0]}" >&2`, testbin.Path("extract"), big)
	r := testbin.Exec(t, exec.Command("bash", "-c", script))
	if lines := strings.Count(string(r.Stdout), "\n"); lines != 1 {
		t.Errorf("head printed %d lines, want 1", lines)
	}
	// 141 = 128 + SIGPIPE: killed by the signal, not exiting on an error.
	if !strings.Contains(r.Stderr, "status 141") || strings.Contains(r.Stderr, "extract:") {
		t.Errorf("extract did not end quietly by SIGPIPE; stderr:\n%s", r.Stderr)
	}
}

// TestSecondSignalExitsAtOnce: a tool stuck after the first SIGINT (here,
// blocked on a quiet stdin) exits 130 at the second one, without waiting.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	p := testbin.Start(t, "extract", "--progress", "20ms")
	fmt.Fprintln(p.Stdin, `{"id":1,"prompt":"p1"}`)
	p.WaitFor(t, 20*time.Second, "read 1, wrote 1")
	p.Signal(t, syscall.SIGINT)
	p.WaitFor(t, 20*time.Second, "interrupted")
	p.Signal(t, syscall.SIGINT) // stdin stays open: only the signal can end it
	r := p.Wait(t, 20*time.Second)
	if r.Code != 130 || !strings.Contains(r.Stderr, "interrupted twice") {
		t.Fatalf("exit %d, want 130 with the second signal noted; stderr:\n%s", r.Code, r.Stderr)
	}
}

// CSV and TSV, files of our own: a header row, the columns read by the
// JSON layouts' rules (instruction/input/output/system as alpaca,
// question or prompt as plain), quoted fields with commas, quotes and
// line breaks, gzip and zstd by content, --csv-delimiter for a ';' file
// whose name says nothing, and a row of the wrong length rejected by
// line while the rest goes on. Every row ends up once: written or
// rejected.
func TestCSV(t *testing.T) {
	dir := t.TempDir()
	alpaca := filepath.Join(ourData, "csv", "alpaca.csv")
	raw, err := os.ReadFile(alpaca)
	if err != nil {
		t.Fatal(err)
	}
	gz, zst := filepath.Join(dir, "alpaca.csv.gz"), filepath.Join(dir, "alpaca.zst")
	os.WriteFile(gz, compress(t, "gz", raw), 0o644)
	os.WriteFile(zst, compress(t, "zst", raw), 0o644)
	for _, in := range []string{alpaca, gz, zst} {
		r := run(t, nil, nil, "--turns", "all", in)
		if r.code != 3 || r.sum.wrote != 4 || r.sum.rejected != 2 || r.sum.rejectReasons["malformed_csv"] != 1 || r.sum.rejectReasons["empty"] != 1 {
			t.Fatalf("%s: exit %d, %+v; want 4 written, one empty and one malformed_csv\n%s", in, r.code, r.sum, r.stderr)
		}
		if !strings.Contains(r.stderr, ":8: malformed_csv: 6 fields where the header has 5") {
			t.Errorf("%s: the long row is not named by its line:\n%s", in, r.stderr)
		}
		got := prompts(t, r.stdout)
		want := []struct {
			id   string
			msgs []turnOut
		}{
			{"a1", []turnOut{{Role: "user", Content: "Give three tips for staying healthy."}, {Role: "assistant", Content: "1. Eat well.\n2. Exercise.\n3. Sleep."}}},
			{"a2", []turnOut{{Role: "system", Content: "You are a translator."}, {Role: "user", Content: "Translate to French\n\nThe cat sleeps, quietly."}, {Role: "assistant", Content: "Le chat dort tranquillement."}}},
			{"a3", []turnOut{{Role: "user", Content: `Explain "recursion" in one line.`}, {Role: "assistant", Content: "A function that calls itself."}}},
			{"a6", []turnOut{{Role: "user", Content: "Name a prime number."}, {Role: "assistant", Content: "2"}}},
		}
		for i, w := range want {
			if i >= len(got) || fmt.Sprint(got[i].ID) != w.id || fmt.Sprint(got[i].Messages) != fmt.Sprint(w.msgs) {
				t.Errorf("%s: record %d: %+v, want %s %v", in, i, got[min(i, len(got)-1)], w.id, w.msgs)
			}
		}
	}

	r := run(t, nil, nil, filepath.Join(ourData, "csv", "qa.tsv"))
	if got := prompts(t, r.stdout); r.code != 0 || len(got) != 2 || fmt.Sprint(got[0].Messages) != fmt.Sprint([]turnOut{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "What is 2+2?"}}) {
		t.Errorf("TSV: exit %d, %+v\n%s", r.code, got, r.stderr)
	}
	// A file named .txt: read as CSV only with the delimiter named.
	semi := filepath.Join(ourData, "csv", "semicolon.txt")
	r = run(t, nil, nil, "--csv-delimiter", ";", semi)
	if got := prompts(t, r.stdout); r.code != 0 || len(got) != 2 || got[1].Messages[0].Content != "Name a colour" {
		t.Errorf("--csv-delimiter ';': exit %d, %+v\n%s", r.code, got, r.stderr)
	}
	// CSV on stdin, known by its header row.
	r = run(t, strings.NewReader("prompt,source\nSay hello.,mine\n"), nil)
	if got := prompts(t, r.stdout); r.code != 0 || len(got) != 1 || got[0].Messages[0].Content != "Say hello." {
		t.Errorf("CSV on stdin: exit %d, %+v\n%s", r.code, got, r.stderr)
	}
	if r := run(t, nil, nil, "--csv-delimiter", "ab", semi); r.code != 2 || !strings.Contains(r.stderr, "--csv-delimiter") {
		t.Errorf("a two-character delimiter: exit %d\n%s", r.code, r.stderr)
	}
}

// A real dataset (LLaMA-Factory's alpaca_en_demo) written as CSV the way
// pandas' to_csv does gives the very prompts its JSON does.
func TestCSVOfARealDataset(t *testing.T) {
	path := testbin.RealData(t, "alpaca_en_demo.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]string
	if err := stdjson.Unmarshal(data, &rows); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	w := csv.NewWriter(&b)
	cols := []string{"instruction", "input", "output"}
	w.Write(cols)
	for _, row := range rows {
		w.Write([]string{row["instruction"], row["input"], row["output"]})
	}
	w.Flush()
	in := filepath.Join(t.TempDir(), "alpaca_en_demo.csv")
	os.WriteFile(in, []byte(b.String()), 0o644)
	fromJSON, fromCSV := run(t, nil, nil, "--turns", "all", path), run(t, nil, nil, "--turns", "all", in)
	if fromCSV.code != fromJSON.code || fromCSV.sum.wrote != len(rows) || fromJSON.sum.wrote != len(rows) {
		t.Fatalf("JSON: exit %d %+v; CSV: exit %d %+v; %d rows", fromJSON.code, fromJSON.sum, fromCSV.code, fromCSV.sum, len(rows))
	}
	if string(fromCSV.stdout) != string(fromJSON.stdout) {
		t.Errorf("the CSV's prompts differ from the JSON's")
	}
}
