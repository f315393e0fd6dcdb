package merge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

// Generation records with token ids, written as infer --token-ids writes
// them.
const (
	servedA  = `"served_by":{"model":"M","server":"vllm","version":"0.11.0"}`
	servedB  = `"served_by":{"model":"M","server":"sglang","version":"0.5.4","chat_template_hash":"aa","chat_template_from":"chat_template, /get_server_info"}`
	sampling = `"sampling":{"max_tokens":64,"seed":3,"temperature":0.7}`
)

func tokSingle(id string, prompt, answer string, extra string) string {
	return fmt.Sprintf(`{"id":%q,"messages":[{"role":"user","content":"q"}],"output":{"text":"a","finish_reason":"stop","usage":{"prompt_tokens":0,"completion_tokens":0},"latency_ms":1,"attempts":1,"sample":0,"prompt_token_ids":%s,"token_ids":%s,%s%s}}`, id, prompt, answer, servedA, extra)
}

// conv is a regenerated conversation: turns of (prompt ids, answer ids),
// each answer's message with reasoning when reasoning is set, and the
// last answer calling a tool nobody answered when cut is set.
func tokConv(id string, turns [][2]string, reasoning, cut bool) string {
	msgs := []string{`{"role":"user","content":"q0"}`}
	var ts []string
	for k, tu := range turns {
		m := `{"role":"assistant","content":"a"`
		if reasoning {
			m += `,"reasoning_content":"r"`
		}
		if cut && k == len(turns)-1 {
			m += `,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]`
		}
		msgs = append(msgs, m+"}")
		ts = append(ts, fmt.Sprintf(`{"message":%d,"finish_reason":"stop","usage":{"prompt_tokens":0,"completion_tokens":0},"latency_ms":1,"attempts":1,"prompt_token_ids":%s,"token_ids":%s}`, len(msgs)-1, tu[0], tu[1]))
		if k < len(turns)-1 {
			msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"q%d"}`, k+1))
		}
	}
	trunc := ""
	if cut {
		trunc = `,"truncated":{"reason":"tool_unpaired","turn":` + fmt.Sprint(len(turns)-1) + `}`
	}
	return fmt.Sprintf(`{"id":%q,"messages":[{"role":"user","content":"q0"}],"output":{"messages":[%s],"turns":[%s]%s,"finish_reason":"stop","usage":{"prompt_tokens":0,"completion_tokens":0},"latency_ms":1,"attempts":1,"sample":0,%s}}`,
		id, strings.Join(msgs, ","), strings.Join(ts, ","), trunc, servedB)
}

// Each kind of record becomes its rows: a single answer one row with loss
// on its answer; a prefix-consistent conversation one row with loss on
// every answer's span; one that is not, a row per turn, counted by why;
// a tool-truncated one up to its last complete exchange; a record without
// ids rejected.
func TestTokenRows(t *testing.T) {
	cases := []struct {
		name    string
		in      []string
		rows    []string
		code    int
		summary string
	}{
		{"single answer", []string{tokSingle("s", "[1,2,3]", "[4,5]", "")},
			[]string{`{"id":"s","sample":0,"turn":0,"input_ids":[1,2,3,4,5],"loss_mask":[0,0,0,1,1],"num_prompt_tokens":3,"num_answer_tokens":2}`}, 0,
			"token rows 1 (1 events: 1 single answers, 0 conversations as one row, 0 as a row per turn; 5 tokens, 2 with loss)"},
		{"prefix-consistent conversation", []string{tokConv("c", [][2]string{{"[1,2]", "[3,4]"}, {"[1,2,3,4,9,9]", "[5]"}}, false, false)},
			[]string{`{"id":"c","sample":0,"turn":null,"input_ids":[1,2,3,4,9,9,5],"loss_mask":[0,0,1,1,0,0,1],"num_prompt_tokens":4,"num_answer_tokens":3}`}, 0,
			"token rows 1 (2 events: 0 single answers, 1 conversations as one row, 0 as a row per turn; 7 tokens, 3 with loss)"},
		{"reasoning left out", []string{tokConv("r", [][2]string{{"[1,2]", "[3,4]"}, {"[1,2,4,9]", "[5]"}}, true, false)},
			[]string{`{"id":"r","sample":0,"turn":0,"input_ids":[1,2,3,4],"loss_mask":[0,0,1,1],"num_prompt_tokens":2,"num_answer_tokens":2}`,
				`{"id":"r","sample":0,"turn":1,"input_ids":[1,2,4,9,5],"loss_mask":[0,0,0,0,1],"num_prompt_tokens":4,"num_answer_tokens":1}`}, 0,
			"1 as a row per turn, not prefix-consistent: reasoning left out of the history 1; 9 tokens, 3 with loss)"},
		{"a reasoned answer re-tokenized", []string{tokConv("t", [][2]string{{"[1,2]", "[3,4]"}, {"[1,2,9,9]", "[5]"}}, true, false)},
			[]string{`{"id":"t","sample":0,"turn":0,"input_ids":[1,2,3,4],"loss_mask":[0,0,1,1],"num_prompt_tokens":2,"num_answer_tokens":2}`,
				`{"id":"t","sample":0,"turn":1,"input_ids":[1,2,9,9,5],"loss_mask":[0,0,0,0,1],"num_prompt_tokens":4,"num_answer_tokens":1}`}, 0,
			"1 as a row per turn, not prefix-consistent: answer re-tokenized 1; 9 tokens, 3 with loss)"},
		{"answer re-tokenized", []string{tokConv("x", [][2]string{{"[1,2]", "[3,4]"}, {"[1,2,3,7,9]", "[5]"}}, false, false)},
			[]string{`{"id":"x","sample":0,"turn":0,"input_ids":[1,2,3,4],"loss_mask":[0,0,1,1],"num_prompt_tokens":2,"num_answer_tokens":2}`,
				`{"id":"x","sample":0,"turn":1,"input_ids":[1,2,3,7,9,5],"loss_mask":[0,0,0,0,0,1],"num_prompt_tokens":5,"num_answer_tokens":1}`}, 0,
			"not prefix-consistent: answer re-tokenized 1"},
		{"history re-rendered", []string{tokConv("h", [][2]string{{"[1,2]", "[3]"}, {"[8,2,3,9]", "[5]"}}, false, false)},
			[]string{`{"id":"h","sample":0,"turn":0,"input_ids":[1,2,3],"loss_mask":[0,0,1],"num_prompt_tokens":2,"num_answer_tokens":1}`,
				`{"id":"h","sample":0,"turn":1,"input_ids":[8,2,3,9,5],"loss_mask":[0,0,0,0,1],"num_prompt_tokens":4,"num_answer_tokens":1}`}, 0,
			"not prefix-consistent: history re-rendered 1"},
		{"tool-truncated cut to its complete exchange", []string{tokConv("t", [][2]string{{"[1]", "[2]"}, {"[1,2,3]", "[4]"}, {"[1,2,3,4,5]", "[6,6]"}}, false, true)},
			[]string{`{"id":"t","sample":0,"turn":null,"input_ids":[1,2,3,4],"loss_mask":[0,1,0,1],"num_prompt_tokens":2,"num_answer_tokens":2}`}, 0,
			"tool-truncated conversations cut to their last complete exchange 1"},
		{"no ids", []string{`{"id":"n","messages":[{"role":"user","content":"q"}],"output":{"text":"a","finish_reason":"stop","usage":{"prompt_tokens":1,"completion_tokens":1},"latency_ms":1,"attempts":1,"sample":0}}`},
			nil, 3, "no_token_ids"},
		{"the better record's rows", []string{
			strings.Replace(tokSingle("p", "[1]", "[2]", ""), `"stop"`, `"length"`, 1), tokSingle("p", "[1]", "[3]", "")},
			[]string{`{"id":"p","sample":0,"turn":0,"input_ids":[1,3],"loss_mask":[0,1],"num_prompt_tokens":1,"num_answer_tokens":1}`}, 0,
			"token rows 1 (1 events"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			in := writeLines(t, filepath.Join(dir, "gen.jsonl"), c.in)
			out := filepath.Join(dir, "rows.jsonl")
			code, _, stderr := runMerge(t, context.Background(), nil, "--to", "tokens", "-o", out, in)
			if code != c.code || !strings.Contains(stderr, c.summary) {
				t.Fatalf("exit %d (want %d), stderr:\n%s\nwant %q", code, c.code, stderr, c.summary)
			}
			got, _ := os.ReadFile(out)
			if !reflect.DeepEqual(splitLines(string(got)), c.rows) {
				t.Fatalf("rows:\n%s\nwant:\n%s", got, strings.Join(c.rows, "\n"))
			}
		})
	}
}

// The manifest names what produced the rows and counts them as written,
// with the inputs' checksums; rows of another model or chat template are
// refused, nothing written, unless --allow-mixed.
func TestTokenManifest(t *testing.T) {
	dir := t.TempDir()
	a := writeLines(t, filepath.Join(dir, "a.jsonl"), []string{tokSingle("s1", "[1,2]", "[3]", ","+sampling), tokSingle("s2", "[1]", "[3,4]", ","+sampling)})
	b := writeLines(t, filepath.Join(dir, "b.jsonl"), []string{tokConv("c", [][2]string{{"[1,2]", "[3,4]"}, {"[1,2,3,4,9]", "[5]"}}, false, false)})
	out := filepath.Join(dir, "rows.jsonl")
	if code, _, stderr := runMerge(t, context.Background(), nil, "--to", "tokens", "-o", out, a, b); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var m Manifest
	raw, err := os.ReadFile(ManifestPath(out))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	sum := func(p string) string {
		b, _ := os.ReadFile(p)
		h := sha256.Sum256(b)
		return hex.EncodeToString(h[:])
	}
	if m.Schema != ManifestSchema || m.Format != "jsonl" || !reflect.DeepEqual(m.Models, []string{"M"}) || m.Mixed {
		t.Fatalf("manifest head: %s", raw)
	}
	if want := []ManifestServer{{"sglang", "0.5.4", 1}, {"vllm", "0.11.0", 2}}; !reflect.DeepEqual(m.Servers, want) {
		t.Errorf("servers %+v, want %+v", m.Servers, want)
	}
	if want := []ManifestTmpl{{"aa", "chat_template, /get_server_info", 1}}; !reflect.DeepEqual(m.ChatTemplates, want) {
		t.Errorf("templates %+v", m.ChatTemplates)
	}
	var settings bytes.Buffer
	if len(m.Sampling) == 1 {
		json.Compact(&settings, m.Sampling[0].Settings)
	}
	if len(m.Sampling) != 1 || settings.String() != `{"max_tokens":64,"temperature":0.7}` || m.Sampling[0].Records != 2 || m.Sampling[0].Seeded != 2 {
		t.Errorf("sampling %s", raw)
	}
	c := m.Counts
	if c.Records != 3 || c.Rows != 3 || c.Events != 4 || c.SingleAnswers != 2 || c.WholeRows != 1 || c.InputTokens != 3+3+6 || c.LossTokens != 1+2+3 {
		t.Errorf("counts %+v", c)
	}
	if len(m.Inputs) != 2 || m.Inputs[0].Path != a || m.Inputs[0].SHA256 != sum(a) || m.Inputs[1].SHA256 != sum(b) {
		t.Errorf("inputs %+v", m.Inputs)
	}

	other := writeLines(t, filepath.Join(dir, "other.jsonl"), []string{strings.Replace(tokSingle("o", "[1]", "[2]", ""), `"model":"M"`, `"model":"N"`, 1)})
	otherTemplate := writeLines(t, filepath.Join(dir, "tmpl.jsonl"), []string{strings.Replace(tokConv("d", [][2]string{{"[1]", "[2]"}}, false, false), `"aa"`, `"bb"`, 1)})
	for _, mix := range []string{other, otherTemplate} {
		mixed := filepath.Join(dir, "mixed.jsonl")
		code, _, stderr := runMerge(t, context.Background(), nil, "--to", "tokens", "-o", mixed, b, mix)
		if code != 2 || !strings.Contains(stderr, "--allow-mixed") {
			t.Fatalf("mixed: exit %d: %s", code, stderr)
		}
		for _, p := range []string{mixed, ManifestPath(mixed)} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Fatalf("%s written by a refused merge", p)
			}
		}
		if code, _, stderr := runMerge(t, context.Background(), nil, "--to", "tokens", "--allow-mixed", "-o", mixed, b, mix); code != 0 {
			t.Fatalf("--allow-mixed: exit %d: %s", code, stderr)
		}
		raw, _ := os.ReadFile(ManifestPath(mixed))
		if !strings.Contains(string(raw), `"mixed": true`) {
			t.Fatalf("manifest of a mixed file: %s", raw)
		}
		os.Remove(mixed)
		os.Remove(ManifestPath(mixed))
	}
}

// The Parquet file holds the JSONL rows, read back by a reader written
// apart from the writer's library: list<int32> columns for the ids and
// the mask, a null turn for a conversation's one row.
func TestTokenParquetRoundTrip(t *testing.T) {
	dir := t.TempDir()
	var lines []string
	for i := 0; i < 300; i++ {
		lines = append(lines, tokSingle(fmt.Sprintf("s%03d", i), fmt.Sprintf("[%d,2,3]", i), fmt.Sprintf("[%d,%d]", i*7, 151645), ""))
	}
	lines = append(lines, tokConv("c", [][2]string{{"[1,2]", "[3,4]"}, {"[1,2,3,4,9,9]", "[5]"}}, false, false),
		tokConv("r", [][2]string{{"[1,2]", "[3,4]"}, {"[1,2,9,9]", "[5]"}}, true, false))
	in := writeLines(t, filepath.Join(dir, "gen.jsonl"), lines)
	jl, pq := filepath.Join(dir, "rows.jsonl"), filepath.Join(dir, "rows.parquet")
	for _, out := range []string{jl, pq} {
		if code, _, stderr := runMerge(t, context.Background(), nil, "--to", "tokens", "--memory", "64MiB", "-o", out, in); code != 0 {
			t.Fatalf("%s: exit %d: %s", out, code, stderr)
		}
	}
	cols, n, err := readParquetColumns(pq)
	if err != nil {
		t.Fatal(err)
	}
	for name, typ := range map[string]int64{"input_ids.list.element": 1, "loss_mask.list.element": 1, "turn": 1, "sample": 2, "id": 6} {
		if c := cols[name]; c == nil || c.leaf.typ != typ {
			t.Fatalf("column %s missing or not of physical type %d: %+v", name, typ, c)
		}
	}
	ids, masks, turns := cols["input_ids.list.element"].rows(), cols["loss_mask.list.element"].rows(), cols["turn"].rows()
	names, samples := cols["id"].rows(), cols["sample"].rows()
	prompt, answer := cols["num_prompt_tokens"].rows(), cols["num_answer_tokens"].rows()
	raw, _ := os.ReadFile(jl)
	want := splitLines(string(raw))
	if int(n) != len(want) || len(ids) != len(want) {
		t.Fatalf("%d rows (%d read), want %d", n, len(ids), len(want))
	}
	for i, line := range want {
		var r struct {
			ID              string  `json:"id"`
			Sample          int64   `json:"sample"`
			Turn            *int64  `json:"turn"`
			InputIDs        []int64 `json:"input_ids"`
			LossMask        []int64 `json:"loss_mask"`
			NumPromptTokens int64   `json:"num_prompt_tokens"`
			NumAnswerTokens int64   `json:"num_answer_tokens"`
		}
		json.Unmarshal([]byte(line), &r)
		var turn any
		if r.Turn != nil {
			turn = *r.Turn
		}
		got := []any{names[i], samples[i], turns[i], ids[i], masks[i], prompt[i], answer[i]}
		if exp := []any{r.ID, r.Sample, turn, r.InputIDs, r.LossMask, r.NumPromptTokens, r.NumAnswerTokens}; !reflect.DeepEqual(got, exp) {
			t.Fatalf("row %d: parquet %v, jsonl %v", i, got, exp)
		}
	}
}

// Without a tokenizer, merge tells from the server's ids whether they
// hold the end-of-turn id: answers the model ended that share their last
// id have it; answers whose last ids differ come from a server that
// leaves it out; a few without it beside many with it are named.
func TestTokenRowsEndOfTurn(t *testing.T) {
	answers := func(n, without int, lastOf func(i int) int) []string {
		var lines []string
		for i := 0; i < n; i++ {
			last := 999
			if i < without {
				last = lastOf(i)
			}
			lines = append(lines, tokSingle(fmt.Sprintf("a%02d", i), "[1,2]", fmt.Sprintf("[7,%d]", last), ""))
		}
		return lines
	}
	for _, tc := range []struct {
		name    string
		lines   []string
		summary string
		id      *int32
		without int64
	}{
		{"every answer ends with one id", answers(25, 0, nil), "every answer the model ended ends with id 999", ptr32(999), 0},
		{"two lack it", answers(25, 2, func(i int) int { return 10 + i }), "2 of 25 answers the model ended lack the end-of-turn id 999", ptr32(999), 2},
		{"a server that leaves it out", answers(25, 25, func(i int) int { return 10 + i }), "the 25 answers the model ended share no last id: the server's ids lack the end-of-turn id", nil, 25},
		{"too few to tell", answers(5, 5, func(i int) int { return 10 + i }), "", nil, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "gen.jsonl")
			if err := os.WriteFile(in, []byte(strings.Join(tc.lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			r := testbin.Run(t, dir, nil, nil, "merge", "--to", "tokens", "-o", "rows.jsonl", in)
			if r.Code != 0 || tc.summary != "" && !strings.Contains(r.Stderr, tc.summary) || tc.summary == "" && strings.Contains(r.Stderr, "end-of-turn") {
				t.Fatalf("exit %d; stderr:\n%s\nwant %q", r.Code, r.Stderr, tc.summary)
			}
			var m Manifest
			raw, err := os.ReadFile(filepath.Join(dir, "rows.jsonl.manifest.json"))
			if err != nil || json.Unmarshal(raw, &m) != nil || m.Counts.EndOfTurn == nil {
				t.Fatalf("manifest: %v %s", err, raw)
			}
			e := m.Counts.EndOfTurn
			if (e.ID == nil) != (tc.id == nil) || e.ID != nil && *e.ID != *tc.id || e.Without != tc.without || e.Ended != int64(len(tc.lines)) {
				t.Errorf("manifest end_of_turn %+v, want id %v, %d without", *e, tc.id, tc.without)
			}
		})
	}
}

func ptr32(v int32) *int32 { return &v }

// A server's ids no tokenizer gives never reach a row: a negative one
// always, one past the vocabulary with --tokenizer.
func TestTokenRowsBadIDs(t *testing.T) {
	qwen := testbin.Tokenizers(t, "qwen3")
	for _, tc := range []struct {
		name string
		args []string
		line string
	}{
		{"negative", nil, tokSingle("n", "[1,2]", "[3,-4]", "")},
		{"past the vocabulary", []string{"--tokenizer", qwen}, tokSingle("v", "[1,2]", "[3,999999]", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "gen.jsonl")
			if err := os.WriteFile(in, []byte(tc.line+"\n"+tokSingle("ok", "[1,2]", "[3,4]", "")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			r := testbin.Run(t, dir, nil, nil, "merge", append([]string{"--to", "tokens", "-o", "rows.jsonl", in}, tc.args...)...)
			rows, _ := os.ReadFile(filepath.Join(dir, "rows.jsonl"))
			if r.Code != 3 || !strings.Contains(r.Stderr, "bad_token_ids 1") || strings.Count(string(rows), "\n") != 1 || !strings.Contains(string(rows), `"id":"ok"`) {
				t.Fatalf("exit %d, rows %s\n%s", r.Code, rows, r.Stderr)
			}
		})
	}
}
