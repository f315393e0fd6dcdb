package stats

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

const (
	testdata = "../../testdata/stats"
	realData = "../../../shared/data/real"
)

// run runs the stats command in-process and returns its exit code and
// output.
func run(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	r := testbin.InProcess(context.Background(), "stats", Description, &Command{}, strings.NewReader(stdin), args...)
	return r.Code, string(r.Stdout), r.Stderr
}

// runJSON runs stats --json and decodes the report.
func runJSON(t *testing.T, wantCode int, args ...string) *Report {
	t.Helper()
	code, stdout, stderr := run(t, "", append([]string{"--json"}, args...)...)
	if code != wantCode {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, wantCode, stderr)
	}
	var r Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("--json output does not decode: %v\n%s", err, stdout)
	}
	return &r
}

// sameReport compares two reports field by field through their JSON, with
// a relative tolerance for means and rates.
func sameReport(t *testing.T, got, want *Report) {
	t.Helper()
	var g, w any
	for _, x := range []struct {
		r   *Report
		out *any
	}{{got, &g}, {want, &w}} {
		b, err := json.Marshal(x.r)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, x.out); err != nil {
			t.Fatal(err)
		}
	}
	diffs := diffJSON("", g, w, nil)
	for i, d := range diffs {
		if i == 20 {
			t.Errorf("... %d more differences", len(diffs)-i)
			break
		}
		t.Error(d)
	}
}

func diffJSON(path string, got, want any, out []string) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return append(out, fmt.Sprintf("%s: got %v, want an object", path, got))
		}
		for k := range w {
			out = diffJSON(path+"."+k, g[k], w[k], out)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				out = append(out, fmt.Sprintf("%s.%s: unexpected %v", path, k, g[k]))
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return append(out, fmt.Sprintf("%s: got %v, want %v", path, got, want))
		}
		for i := range w {
			out = diffJSON(fmt.Sprintf("%s[%d]", path, i), g[i], w[i], out)
		}
	case float64:
		g, ok := got.(float64)
		if !ok || math.Abs(g-w) > 1e-9*math.Max(1, math.Abs(w)) {
			return append(out, fmt.Sprintf("%s: got %v, want %v", path, got, w))
		}
	default:
		if !reflect.DeepEqual(got, want) {
			return append(out, fmt.Sprintf("%s: got %v, want %v", path, got, want))
		}
	}
	return out
}

// badLines are lines stats must reject, with the reason.
var badLines = []struct{ name, line, reason string }{
	{"not json", `not json`, jsonl.ReasonMalformedJSON},
	{"cut off", `{"id":"x","prompt":"a"`, jsonl.ReasonMalformedJSON},
	{"trailing data", `{"id":"x","prompt":"a"} x`, jsonl.ReasonMalformedJSON},
	{"bad escape", `{"id":"x","prompt":"a\qb"}`, jsonl.ReasonMalformedJSON},
	{"array", `[1,2]`, jsonl.ReasonNotObject},
	{"string", `"text"`, jsonl.ReasonNotObject},
	{"number", `42`, jsonl.ReasonNotObject},
	{"no id", `{"prompt":"a"}`, ReasonMissingID},
	{"null id", `{"id":null,"prompt":"a"}`, ReasonMissingID},
	{"empty id", `{"id":"","prompt":"a"}`, ReasonMissingID},
	{"float id", `{"id":1.5,"prompt":"a"}`, ReasonWrongType},
	{"object id", `{"id":{"a":1},"prompt":"a"}`, ReasonWrongType},
	{"no prompt", `{"id":"x","output":{"text":"a"}}`, ReasonNoPrompt},
	{"output is text", `{"id":"x","prompt":"a","output":"text"}`, ReasonWrongType},
	{"content parts", `{"id":"x","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`, ReasonWrongType},
	{"messages object", `{"id":"x","messages":{"role":"user","content":"a"}}`, ReasonWrongType},
	{"tokens as text", `{"id":"x","prompt":"a","output":{"text":"b","usage":{"completion_tokens":"12"}}}`, ReasonWrongType},
	{"status as text", `{"id":"x","prompt":"a","error":{"status":"400","message":"m"}}`, ReasonWrongType},
	{"negative latency", `{"id":"x","prompt":"a","output":{"text":"b","latency_ms":-1}}`, ReasonBadValue},
	{"negative tokens", `{"id":"x","prompt":"a","output":{"text":"b","usage":{"prompt_tokens":-5}}}`, ReasonBadValue},
	{"a turn past the messages", strings.Replace(convLine, `"message":3`, `"message":4`, 1), ReasonBadValue},
	{"a turn without a message", strings.Replace(convLine, `"message":3`, `"message":null`, 1), ReasonBadValue},
	{"negative cached tokens", strings.Replace(convLine, `"cached_tokens":24`, `"cached_tokens":-1`, 1), ReasonBadValue},
	{"a turn's content as parts", strings.Replace(convLine, `"content":"18C"`, `"content":[{"type":"text","text":"18C"}]`, 1), ReasonWrongType},
	{"negative max_tokens", `{"id":"x","prompt":"a","output":{"text":"b","max_tokens":-1}}`, ReasonBadValue},
	{"max_tokens as text", `{"id":"x","prompt":"a","output":{"text":"b","max_tokens":"12"}}`, ReasonWrongType},
	{"a turn's negative max_tokens", strings.Replace(convLine, `"finish_reason":"length","usage":{"prompt_tokens":30`, `"finish_reason":"length","max_tokens":-3,"usage":{"prompt_tokens":30`, 1), ReasonBadValue},
	{"negative prompt_tokens of a refusal", `{"id":"x","prompt":"a","error":{"status":0,"message":"m","reason":"prompt_too_long","prompt_tokens":-9}}`, ReasonBadValue},
	{"absurd completion tokens", `{"id":"x","prompt":"a","output":{"text":"b","usage":{"completion_tokens":9223372036854775807}}}`, ReasonBadValue},
	{"absurd latency", `{"id":"x","prompt":"a","output":{"text":"b","latency_ms":4294967297}}`, ReasonBadValue},
	{"absurd max_tokens", `{"id":"x","prompt":"a","output":{"text":"b","max_tokens":4294967297}}`, ReasonBadValue},
	{"absurd prompt_tokens of a refusal", `{"id":"x","prompt":"a","error":{"status":0,"message":"m","reason":"prompt_too_long","prompt_tokens":4294967297}}`, ReasonBadValue},
	{"a turn's absurd cached tokens", strings.Replace(convLine, `"cached_tokens":24`, `"cached_tokens":4294967297`, 1), ReasonBadValue},
	{"turns whose tokens add up past the bound", strings.Replace(strings.Replace(convLine, `"prompt_tokens":30`, `"prompt_tokens":4294967000`, 1), `"prompt_tokens":10`, `"prompt_tokens":4294967000`, 1), ReasonBadValue},
	{"turns not a list", `{"id":"c","prompt":"p","output":{"messages":[{"role":"user","content":"q"}],"turns":"none"}}`, ReasonWrongType},
}

func TestParseRejects(t *testing.T) {
	for _, tt := range badLines {
		t.Run(tt.name, func(t *testing.T) {
			var f fact
			err := parse([]byte(tt.line), &f)
			if err == nil {
				t.Fatalf("parse(%s) accepted it", tt.line)
			}
			if err.reason != tt.reason {
				t.Errorf("reason %s (%v), want %s", err.reason, err.err, tt.reason)
			}
		})
	}
}

func TestParseFacts(t *testing.T) {
	tests := []struct {
		name, line string
		want       fact // id and key are checked separately
	}{
		{"chat prompt", `{"id":"a","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"héllo\n"}],"source":"s"}`,
			fact{kind: record.KindPrompt, source: "s", prompt: 14}},
		{"completion prompt, sample", `{"id":7,"prompt":"abc","sample":2}`,
			fact{kind: record.KindPrompt, prompt: 3, sample: 2}},
		{"generation", `{"id":"a","prompt":"p","output":{"text":"\ud83d\ude00!","reasoning":"why","finish_reason":"length","usage":{"prompt_tokens":9,"completion_tokens":4,"cached_tokens":1},"endpoint":"http://e:1","latency_ms":250,"attempts":1,"sample":1}}`,
			fact{kind: record.KindGeneration, prompt: 1, sample: 1, usage: true, pTokens: 9, cTokens: 4, answer: 2,
				hasReas: true, reasoning: 3, finish: "length", endpoint: "http://e:1", latency: 250}},
		{"generation without usage", `{"id":"a","prompt":"p","output":{"text":"ok","finish_reason":"stop"}}`,
			fact{kind: record.KindGeneration, prompt: 1, answer: 2, finish: "stop"}},
		{"error", `{"id":"a","prompt":"p","error":{"status":400,"message":"too long","attempts":1,"endpoint":"http://e:2","retriable":false,"sample":3}}`,
			fact{kind: record.KindError, prompt: 1, sample: 3, status: 400, message: "too long", endpoint: "http://e:2"}},
		{"unknown fields kept out of the way", `{"meta":{"output":{"text":"no"}},"id":"a","x":[1,{"id":2}],"prompt":"p"}`,
			fact{kind: record.KindPrompt, prompt: 1}},
		{"empty messages are a prompt of no characters", `{"id":"a","messages":[]}`,
			fact{kind: record.KindPrompt}},
		{"two turns, one reporting cached tokens", convLine, fact{kind: 1, prompt: 1, sample: 1, usage: true, pTokens: 40, cTokens: 10,
			answer: 11, hasReas: true, reasoning: 16, finish: "length", endpoint: "e", latency: 9, conversation: true,
			turns: []turnFact{{chars: 0, finish: "stop", usage: true, pTokens: 10, cTokens: 4},
				{chars: 11, finish: "length", usage: true, pTokens: 30, cTokens: 6, cached: 24, hasCached: true}}}},
		{"truncated, an empty turn", `{"id":"c","prompt":"p","output":{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":" "}],` +
			`"turns":[{"message":1,"finish_reason":"stop"}],"truncated":{"reason":"tool_unpaired","turn":1}}}`,
			fact{kind: 1, prompt: 1, answer: 1, empty: true, conversation: true, truncated: "tool_unpaired", turns: []turnFact{{chars: 1, finish: "stop"}}}},
		{"truncated without a reason, no turn", `{"id":"c","prompt":"p","output":{"messages":[{"role":"user","content":"q"}],"truncated":{}}}`,
			fact{kind: 1, prompt: 1, conversation: true, truncated: noneName, turns: []turnFact{}}},
		{"empty messages: a single answer", `{"id":"c","prompt":"p","output":{"messages":[],"text":"","finish_reason":"stop"}}`,
			fact{kind: 1, prompt: 1, empty: true, finish: "stop"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f fact
			if err := parse([]byte(tt.line), &f); err != nil {
				t.Fatal(err)
			}
			f.id, f.key = nil, 0
			if !reflect.DeepEqual(f, tt.want) {
				t.Errorf("got  %+v\nwant %+v", f, tt.want)
			}
		})
	}
}

func TestIDKey(t *testing.T) {
	key := func(line string) uint64 {
		var f fact
		if err := parse([]byte(line), &f); err != nil {
			t.Fatal(err)
		}
		return f.key
	}
	same := [][2]string{
		{`{"id":"ab","prompt":""}`, `{"id":"a\u0062","prompt":"x"}`},
		{`{"id":"ab","prompt":"","output":{"text":"x","sample":1}}`, `{"id":"ab","prompt":"","error":{"status":500,"sample":1}}`},
		{`{"id":"ab","prompt":"","sample":0}`, `{"id":"ab","prompt":""}`},
		{`{"id":"1","prompt":""}`, `{"id":1,"prompt":""}`}, // an id is its text, in every tool
	}
	for _, p := range same {
		if key(p[0]) != key(p[1]) {
			t.Errorf("%s and %s should repeat one (id, sample)", p[0], p[1])
		}
	}
	differ := [][2]string{
		{`{"id":"12","prompt":""}`, `{"id":1,"prompt":""}`},
		{`{"id":"ab","prompt":""}`, `{"id":"ab","prompt":"","output":{"text":"x"}}`},
		{`{"id":"ab","prompt":"","output":{"text":"x","sample":0}}`, `{"id":"ab","prompt":"","output":{"text":"x","sample":1}}`},
		{`{"id":"a","prompt":"","sample":11}`, `{"id":"a1","prompt":"","sample":1}`},
	}
	for _, p := range differ {
		if key(p[0]) == key(p[1]) {
			t.Errorf("%s and %s should not repeat one (id, sample)", p[0], p[1])
		}
	}
}

// writeInputs spreads lines over a plain and a gzip file, with the bad
// lines among them, and returns the file names, the valid records with
// their locations, and the bytes the reader will count.
func writeInputs(t *testing.T, rng *rand.Rand, lines [][]byte, bad []string) ([]string, []located, int64) {
	t.Helper()
	dir := t.TempDir()
	names := []string{filepath.Join(dir, "gen.jsonl"), filepath.Join(dir, "gen.errors.jsonl.gz")}
	var bufs [2]bytes.Buffer
	var valid []located
	var lineNo [2]int64
	for i, line := range lines {
		f := i * 2 / len(lines)
		if len(bad) > 0 && rng.IntN(20) == 0 {
			lineNo[f]++
			bufs[f].WriteString(bad[0] + "\n")
			bad = bad[1:]
		}
		if rng.IntN(50) == 0 {
			lineNo[f]++
			bufs[f].WriteString("  \r\n") // blank lines are skipped, not rejected
		}
		lineNo[f]++
		bufs[f].Write(line)
		bufs[f].WriteString("\n")
		valid = append(valid, located{line: line, file: names[f], no: lineNo[f]})
	}
	for _, b := range bad {
		bufs[1].WriteString(b + "\n")
	}
	if err := os.WriteFile(names[0], bufs[0].Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(bufs[1].Bytes())
	zw.Close()
	if err := os.WriteFile(names[1], gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return names, valid, int64(bufs[0].Len() + bufs[1].Len())
}

// TestReportMatchesBruteForce checks every figure of the report on random
// records against the naive computation in oracle_test.go, with every
// worker count giving the same report.
func TestReportMatchesBruteForce(t *testing.T) {
	tests := []struct {
		name          string
		seed          uint64
		records, pool int
		top           int
		wall          string
		wallSeconds   float64
		withBad       bool
		context       int64 // --context-length; 0: not given
	}{
		{"few ids, many repeats", 1, 400, 40, 10, "", 0, false, 0},
		{"mostly distinct", 2, 3000, 100000, 3, "1h", 3600, true, 4096},
		{"one record", 3, 1, 10, 10, "90s", 90, false, 0},
		{"with rejects", 4, 1500, 500, 100, "", 0, true, 32768},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(tt.seed, 99))
			lines := make([][]byte, tt.records)
			for i := range lines {
				lines[i] = randomRecord(rng, tt.pool, 3)
			}
			var bad []string
			wantReasons := map[string]int64{}
			if tt.withBad {
				for _, b := range badLines {
					bad = append(bad, b.line)
					wantReasons[b.reason]++
				}
			}
			files, valid, size := writeInputs(t, rng, lines, bad)
			want := expect(valid, tt.top, tt.wallSeconds, tt.context)
			want.Inputs, want.Bytes, want.Rejected = files, size, int64(len(bad))
			want.RejectReasons = counts(wantReasons) // only sorts them

			wantCode := 0
			if len(bad) > 0 {
				wantCode = 3
			}
			var first *Report
			for _, workers := range []string{"1", "2", "5"} {
				args := append([]string{"--workers", workers, "--top", fmt.Sprint(tt.top)}, files...)
				if tt.wall != "" {
					args = append(args, "--wall", tt.wall)
				}
				if tt.context > 0 {
					args = append(args, "--context-length", fmt.Sprint(tt.context))
				}
				got := runJSON(t, wantCode, args...)
				sameReport(t, got, want)
				if first == nil {
					first = got
				} else if !reflect.DeepEqual(got, first) {
					t.Errorf("--workers %s gives another report than --workers 1", workers)
				}
			}
		})
	}
}

// TestRealData turns the real datasets into the three kinds of records
// (alpaca answers as generations, FastChat conversations as chat prompts,
// MT-bench questions as errors) and checks the report against the naive
// computation.
func TestRealData(t *testing.T) {
	if _, err := os.Stat(realData); err != nil {
		t.Skipf("real data not found at %s: %v", realData, err)
	}
	var lines [][]byte
	add := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, b)
	}
	endpoints := []string{"http://127.0.0.1:30000", "http://127.0.0.1:30001", "http://127.0.0.1:30002"}

	var alpaca []struct{ Instruction, Input, Output string }
	readJSON(t, "alpaca_en_demo.json", &alpaca)
	for i, a := range alpaca {
		prompt := a.Instruction
		if a.Input != "" {
			prompt += "\n\n" + a.Input
		}
		words := len(strings.Fields(a.Output))
		finish := "stop"
		if words > 300 {
			finish = "length"
		}
		add(map[string]any{"id": i, "source": "alpaca",
			"messages": []map[string]string{{"role": "user", "content": prompt}},
			"output": map[string]any{"text": a.Output, "finish_reason": finish, "endpoint": endpoints[i%3],
				"usage":      map[string]int{"prompt_tokens": len(strings.Fields(prompt)), "completion_tokens": words},
				"latency_ms": 20*words + 100*(i%3), "sample": 0}})
	}
	var fastchat []struct {
		ID            string `json:"id"`
		Conversations []struct{ From, Value string }
	}
	readJSON(t, "fastchat_dummy_conversation.json", &fastchat)
	for _, c := range fastchat {
		var msgs []map[string]string
		for _, turn := range c.Conversations {
			role := map[string]string{"human": "user", "gpt": "assistant"}[turn.From]
			msgs = append(msgs, map[string]string{"role": role, "content": turn.Value})
		}
		if n := len(msgs); n > 1 && msgs[n-1]["role"] == "assistant" {
			msgs = msgs[:n-1] // a prompt ends with the user's turn
		}
		add(map[string]any{"id": c.ID, "source": "fastchat", "messages": msgs})
	}
	data, err := os.ReadFile(filepath.Join(realData, "mt_bench_question.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var q struct {
			QuestionID int      `json:"question_id"`
			Category   string   `json:"category"`
			Turns      []string `json:"turns"`
		}
		if err := json.Unmarshal(line, &q); err != nil {
			t.Fatal(err)
		}
		add(map[string]any{"id": q.QuestionID, "source": q.Category, "prompt": q.Turns[0],
			"error": map[string]any{"status": 400, "endpoint": endpoints[q.QuestionID%3],
				"message": fmt.Sprintf("The input (%d tokens) is longer than the model's context length (64 tokens).", len(q.Turns[0]))}})
	}

	var buf bytes.Buffer
	var valid []located
	path := filepath.Join(t.TempDir(), "real.jsonl")
	for i, l := range lines {
		buf.Write(append(l, '\n'))
		valid = append(valid, located{line: l, file: path, no: int64(i + 1)})
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	got := runJSON(t, 0, "--wall", "10m", path)
	want := expect(valid, 10, 600, 0)
	want.Inputs, want.Bytes, want.RejectReasons = []string{path}, int64(buf.Len()), []Count{}
	sameReport(t, got, want)
	if got.Records != 999+500+80 || got.Kinds.Generation != 999 || got.Kinds.Prompt != 500 || got.Kinds.Error != 80 {
		t.Errorf("records %d, kinds %+v; want 1579 = 999 generations + 500 prompts + 80 errors", got.Records, got.Kinds)
	}
}

func readJSON(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(realData, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// TestGolden pins the JSON schema and the text layout on a hand-made file.
func TestGolden(t *testing.T) {
	input := filepath.Join(testdata, "mixed.jsonl")
	convs := filepath.Join(testdata, "conversations.jsonl")
	fitted := filepath.Join(testdata, "context.jsonl")
	for _, tt := range []struct {
		golden string
		args   []string
		code   int
	}{
		{"mixed.json", []string{"--json", "--wall", "1h", input}, 3}, // the file has bad lines
		{"mixed.txt", []string{"--wall", "1h", input}, 3},
		{"mixed.nowall.txt", []string{"--top", "2", input}, 3},
		{"conversations.json", []string{"--json", convs}, 0},
		{"conversations.txt", []string{"--checks", "default", convs}, 0},
		{"context.json", []string{"--json", "--context-length", "4096", fitted}, 0},
		{"context.txt", []string{"--context-length", "4096", fitted}, 0},
		{"context.inferred.txt", []string{fitted}, 0},
		{"arms.txt", []string{"--wall", "10m", filepath.Join(testdata, "arms.jsonl")}, 0},
		{"arms.json", []string{"--json", filepath.Join(testdata, "arms.jsonl")}, 0},
	} {
		t.Run(tt.golden, func(t *testing.T) {
			code, stdout, stderr := run(t, "", tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			testbin.CheckGolden(t, filepath.Join(testdata, tt.golden), []byte(stdout))
		})
	}
}

// TestBadLines checks that bad lines are reported with file and line,
// counted by reason, written to --rejects, and that the report still
// covers the good records.
func TestBadLines(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	var buf bytes.Buffer
	good := `{"id":"ok","prompt":"abc","output":{"text":"fine","finish_reason":"stop"}}`
	buf.WriteString(good + "\n")
	for _, b := range badLines {
		buf.WriteString(b.line + "\n")
	}
	buf.WriteString(good + "\n")
	if err := os.WriteFile(input, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	rejectsPath := filepath.Join(dir, "rejects.jsonl")
	code, stdout, stderr := run(t, "", "--rejects", rejectsPath, input)
	if code != cli.ExitRejects {
		t.Fatalf("exit %d, want %d", code, cli.ExitRejects)
	}
	if !strings.HasPrefix(stdout, "2 records from 1 input") || !strings.Contains(stdout, "ids seen twice: 1 record") {
		t.Errorf("the report should cover the two good records:\n%s", stdout)
	}
	if !strings.Contains(stderr, fmt.Sprintf("rejected %d (", len(badLines))) {
		t.Errorf("stderr lacks the reject summary:\n%s", stderr)
	}
	if want := fmt.Sprintf("stats: %s:2: %s", input, badLines[0].reason); !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}

	data, err := os.ReadFile(rejectsPath)
	if err != nil {
		t.Fatal(err)
	}
	rejected := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	if len(rejected) != len(badLines) {
		t.Fatalf("%d rejects written, want %d:\n%s", len(rejected), len(badLines), data)
	}
	for i, line := range rejected {
		var r struct {
			Raw    *string       `json:"raw"`
			Reject record.Reject `json:"reject"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("reject %d is not JSON: %v\n%s", i, err, line)
		}
		want := record.Reject{Reason: badLines[i].reason, File: input, Line: int64(i + 2)}
		r.Reject.Detail = ""
		if r.Reject != want {
			t.Errorf("reject %d: %+v, want %+v", i, r.Reject, want)
		}
		object := json.Valid([]byte(badLines[i].line)) && strings.HasPrefix(badLines[i].line, "{")
		if object == (r.Raw != nil) {
			t.Errorf("reject %d: raw %v for %s: only lines that are not JSON objects are wrapped in raw", i, r.Raw, badLines[i].line)
		}
	}
}

// TestTruncatedInput: a cut-off gzip file is reported as unreadable after
// its readable records have been counted, and the next file is still read.
func TestTruncatedInput(t *testing.T) {
	dir := t.TempDir()
	var plain bytes.Buffer
	rng := rand.New(rand.NewPCG(7, 7))
	for range 2000 {
		plain.Write(randomRecord(rng, 1000, 20))
		plain.WriteByte('\n')
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(plain.Bytes())
	zw.Close()
	cut := filepath.Join(dir, "cut.jsonl.gz")
	if err := os.WriteFile(cut, gz.Bytes()[:gz.Len()/2], 0o644); err != nil {
		t.Fatal(err)
	}
	whole := filepath.Join(dir, "whole.jsonl")
	if err := os.WriteFile(whole, []byte(`{"id":"last","prompt":"x"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := runJSON(t, 3, cut, whole)
	if got.Rejected != 1 || len(got.RejectReasons) != 1 || got.RejectReasons[0].Name != jsonl.ReasonUnreadable {
		t.Errorf("rejects %d %+v, want one unreadable", got.Rejected, got.RejectReasons)
	}
	if got.Records < 100 || got.Records >= 2001 {
		t.Errorf("%d records counted; want the readable part of the cut file plus the next file", got.Records)
	}
	if k := got.Kinds; k.Prompt+k.Generation+k.Error != got.Records {
		t.Errorf("kinds %+v do not add up to %d records", k, got.Records)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--plot", "x.gif", "in.jsonl"},
		{"--plot", "noextension"},
		{"--top", "-1"},
		{"--wall", "-5m"},
		{"--workers", "-2"},
		{"--rejects", "-"},
		{"--no-such-flag"},
	} {
		code, _, stderr := run(t, "", args...)
		if code != cli.ExitUsage {
			t.Errorf("stats %v: exit %d, want %d; stderr:\n%s", args, code, cli.ExitUsage, stderr)
		}
	}
}

func TestStdinAndEmptyInput(t *testing.T) {
	code, stdout, _ := run(t, `{"id":1,"prompt":"four"}`+"\n", "--json")
	if code != 0 || !strings.Contains(stdout, `"inputs": [`+"\n"+`    "-"`) || !strings.Contains(stdout, `"prompt": 1`) {
		t.Errorf("exit %d, report from stdin:\n%s", code, stdout)
	}
	code, stdout, _ = run(t, "")
	if code != 0 || !strings.HasPrefix(stdout, "0 records from 1 input") {
		t.Errorf("exit %d, report of nothing:\n%s", code, stdout)
	}
}

// TestInterrupted: cancelling the run folds what was read, marks the report
// interrupted and does not wait for a reader stuck on a quiet stdin.
func TestInterrupted(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	defer pr.Close()
	ctx, cancel := context.WithCancelCause(context.Background())
	var out, errOut bytes.Buffer
	env := &cli.Env{Name: "stats", Stdin: pr, Stdout: &out, Stderr: &errOut}
	done := make(chan error, 1)
	go func() { done <- (&Command{JSON: true, Top: 10}).Run(ctx, env) }()
	pw.WriteString(`{"id":1,"prompt":"x"}` + "\n")
	cancel(cli.ErrInterrupted)
	select {
	case err := <-done:
		if err != cli.ErrInterrupted {
			t.Errorf("Run returned %v, want %v", err, cli.ErrInterrupted)
		}
	case <-waitLimit():
		t.Fatal("Run did not return within 10 s of the cancellation")
	}
	var r Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || !r.Interrupted {
		t.Errorf("report %s (%v): want one marked interrupted", out.String(), err)
	}
}

// waitBound bounds every wait in these tests.
const waitBound = 10 * time.Second

func waitLimit() <-chan time.Time { return time.After(waitBound) }

// TestNamesSurviveBufferReuse: names counted from records (finish reasons,
// sources, endpoints) must not alias input buffers that later batches
// reuse. Many batches of long records with few distinct names make every
// buffer be reused while the names are still counted.
func TestNamesSurviveBufferReuse(t *testing.T) {
	var in strings.Builder
	const n = 6000
	filler := strings.Repeat("word ", 400)
	for i := 0; i < n; i++ {
		fin := "stop"
		if i%7 == 0 {
			fin = "length"
		}
		fmt.Fprintf(&in, `{"id":%d,"messages":[{"role":"user","content":"q"}],"source":"src%d",`+
			`"output":{"text":%q,"finish_reason":%q,"endpoint":"http://e:%d","latency_ms":5,"usage":{"prompt_tokens":1,"completion_tokens":2}}}`+"\n",
			i, i%3, filler, fin, 30000+i%2)
	}
	for _, workers := range []string{"1", "2"} {
		code, stdout, stderr := run(t, in.String(), "--json", "--workers", workers)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var r Report
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatal(err)
		}
		wantLength := int64((n + 6) / 7)
		want := []Count{{"stop", n - wantLength}, {"length", wantLength}}
		if fmt.Sprint(r.FinishReasons) != fmt.Sprint(want) {
			t.Fatalf("workers %s: finish reasons %v, want %v", workers, r.FinishReasons, want)
		}
		var names []string
		for _, s := range r.Sources {
			names = append(names, s.Source)
		}
		slices.Sort(names)
		if fmt.Sprint(names) != "[src0 src1 src2]" {
			t.Fatalf("workers %s: sources %v", workers, names)
		}
	}
}
