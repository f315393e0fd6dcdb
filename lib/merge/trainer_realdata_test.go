package merge

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

// The generation records of a run over the real datasets, made here:
// FastChat's conversations as single answers to their last question (the
// earlier turns the prompt's history), and again whole through extract
// --turns all, every 4th with its first answer given weight 0 (kept as
// context by the regeneration); glaive's tool-calling conversations
// through extract --turns all; Alpaca's and MT-Bench's first questions
// (MT-Bench's integer ids kept) and MT-Bench's conversations (two
// questions in a row, one answer).
type trainerRun struct {
	lines []string
	cases []genCase // one per line
}

// genCase is what the test knows of a generation record: its turns as
// merge lays them out, the model's own answers marked.
type genCase struct {
	id    string
	turns []caseTurn
	tools bool
}

type caseTurn struct {
	role, content, reasoning string
	calls                    int
	own, weight0             bool
}

func absReal(t *testing.T, file string) string {
	t.Helper()
	p, err := filepath.Abs(testbin.RealData(t, file))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// extractLines runs the extract binary.
func extractLines(t *testing.T, args ...string) []string {
	t.Helper()
	r := testbin.Run(t, "", nil, nil, "extract", args...)
	if r.Code != 0 {
		t.Fatalf("extract %v: exit %d\n%s", args, r.Code, r.Stderr)
	}
	return splitLines(string(r.Stdout))
}

// answerLast is the prompt record l with a made-up answer to its last
// question (and reasoning, if asked).
func answerLast(t *testing.T, l string, reasoning bool) string {
	var rec map[string]any
	if err := json.Unmarshal([]byte(l), &rec); err != nil {
		t.Fatal(err)
	}
	msgs := rec["messages"].([]any)
	q := msgs[len(msgs)-1].(map[string]any)["content"].(string)
	out := map[string]any{"text": "Answer to: " + q[:min(len(q), 60)], "finish_reason": "stop", "sample": 0, "model": "m"}
	if reasoning {
		out["reasoning"] = "Let me see: " + q[:min(len(q), 30)]
	}
	o, _ := json.Marshal(out)
	return strings.TrimSuffix(l, "}") + `,"output":` + string(o) + "}"
}

func loadTrainerRun(t *testing.T) trainerRun {
	t.Helper()
	var run trainerRun
	seen := map[string]bool{}
	add := func(line string) {
		c := describeGen(t, line)
		if seen[c.id] {
			return // one record per (id, sample): the demo files repeat some
		}
		seen[c.id] = true
		run.lines = append(run.lines, line)
		run.cases = append(run.cases, c)
	}

	// FastChat as single answers to the last question.
	fastchat := absReal(t, "fastchat_dummy_conversation.json")
	raw, err := os.ReadFile(fastchat)
	if err != nil {
		t.Fatal(err)
	}
	var convs []map[string]any
	if err := json.Unmarshal(raw, &convs); err != nil {
		t.Fatal(err)
	}
	roles := map[string]string{"human": "user", "gpt": "assistant", "system": "system"}
	for i, c := range convs {
		turns := c["conversations"].([]any)
		var msgs []map[string]string
		if i%10 == 0 {
			msgs = append(msgs, map[string]string{"role": "system", "content": "You are a helpful assistant."})
		}
		for _, x := range turns[:len(turns)-1] {
			tn := x.(map[string]any)
			msgs = append(msgs, map[string]string{"role": roles[tn["from"].(string)], "content": tn["value"].(string)})
		}
		out := map[string]any{"text": turns[len(turns)-1].(map[string]any)["value"], "finish_reason": "stop", "sample": 0, "model": "m"}
		if i%3 == 0 {
			out["reasoning"] = fmt.Sprintf("Thinking about %s.", c["id"])
		}
		b, _ := json.Marshal(map[string]any{"id": "fc-" + c["id"].(string), "messages": msgs, "output": out})
		add(string(b))
	}

	// FastChat whole, every 4th conversation of several answers with its
	// first answer of weight 0, as a dataset marks a turn not to train on.
	for i, c := range convs {
		turns := c["conversations"].([]any)
		gpt := 0
		for _, x := range turns {
			if x.(map[string]any)["from"] == "gpt" {
				gpt++
			}
		}
		if i%4 == 0 && gpt > 1 {
			for _, x := range turns {
				if tn := x.(map[string]any); tn["from"] == "gpt" {
					tn["weight"] = 0
					break
				}
			}
		}
	}
	weighted := filepath.Join(t.TempDir(), "fastchat-weighted.json")
	b, _ := json.Marshal(convs)
	if err := os.WriteFile(weighted, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, l := range extractLines(t, "--turns", "all", "--id-prefix", "fcw-", weighted) {
		add(regenerateKeeping(t, l, i%2 == 0))
	}
	// glaive's tool-calling conversations, regenerated.
	for i, l := range extractLines(t, "--turns", "all", "--id-prefix", "gl-", absReal(t, "glaive_toolcall_en_demo.json")) {
		add(regenerateKeeping(t, l, i%3 != 0))
	}
	// Alpaca's and MT-Bench's first questions, answered.
	for i, l := range extractLines(t, "--id-prefix", "al-", absReal(t, "alpaca_en_demo.json")) {
		add(answerLast(t, l, i%2 == 1))
	}
	mtbench := absReal(t, "mt_bench_question.jsonl")
	for i, l := range extractLines(t, mtbench) {
		add(answerLast(t, l, i%2 == 0))
	}
	for i, l := range extractLines(t, "--turns", "all", "--id-prefix", "mt-", mtbench) {
		add(regenerateKeeping(t, l, i%2 == 0))
	}
	return run
}

// regenerateKeeping makes, from a conversation record of extract --turns
// all, the generation record infer --regenerate writes: every assistant
// turn after the first user turn and not of weight 0 regenerated (its
// calls given new ids the tool results are re-paired to), those kept as
// they were, and a final answer after a conversation that ends with a
// question (MT-Bench's two questions get one).
func regenerateKeeping(t *testing.T, line string, reasoning bool) string {
	t.Helper()
	var rec struct {
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	var msgs, turns []map[string]any
	ids := map[string]string{}
	seenUser := false
	answer := func(j int, m map[string]any) {
		if reasoning {
			m["reasoning_content"] = fmt.Sprintf("thinking before message %d", j)
		}
		finish := "stop"
		if _, ok := m["tool_calls"]; ok {
			finish = "tool_calls"
		}
		turns = append(turns, map[string]any{"message": j, "finish_reason": finish, "usage": map[string]int{"prompt_tokens": 10, "completion_tokens": 5}})
	}
	for j, m := range rec.Messages {
		n := maps.Clone(m)
		switch m["role"] {
		case "user":
			seenUser = true
		case "assistant":
			if w, ok := m["weight"].(float64); !seenUser || (ok && w == 0) {
				break // kept as it was
			}
			delete(n, "reasoning_content")
			if calls, ok := m["tool_calls"].([]any); ok {
				var fresh []any
				for k, c := range calls {
					call := maps.Clone(c.(map[string]any))
					id := fmt.Sprintf("regen_%d_%d", j, k)
					ids[call["id"].(string)] = id
					call["id"] = id
					fresh = append(fresh, call)
				}
				n["tool_calls"] = fresh
			} else {
				n["content"] = fmt.Sprintf("regenerated %d: %v", j, m["content"])
			}
			answer(j, n)
		case "tool":
			if id, ok := ids[fmt.Sprint(m["tool_call_id"])]; ok {
				n["tool_call_id"] = id
			}
		}
		msgs = append(msgs, n)
	}
	if last := msgs[len(msgs)-1]; last["role"] != "assistant" {
		n := map[string]any{"role": "assistant", "content": fmt.Sprintf("final answer %d", len(msgs))}
		answer(len(msgs), n)
		msgs = append(msgs, n)
	}
	out := map[string]any{"messages": msgs, "turns": turns, "finish_reason": "stop", "model": "m", "sample": 0}
	o, _ := json.Marshal(out)
	return strings.TrimSuffix(line, "}") + `,"output":` + string(o) + "}"
}

// describeGen reads a generation record as the test understands it: the
// prompt's messages then the answer, or the regenerated conversation up
// to its last turn; own marks the answers the model wrote.
func describeGen(t *testing.T, line string) genCase {
	t.Helper()
	var g struct {
		ID       json.RawMessage  `json:"id"`
		Messages []map[string]any `json:"messages"`
		Tools    json.RawMessage  `json:"tools"`
		Output   struct {
			Text      string           `json:"text"`
			Reasoning string           `json:"reasoning"`
			ToolCalls []any            `json:"tool_calls"`
			Messages  []map[string]any `json:"messages"`
			Turns     []struct {
				Message int `json:"message"`
			} `json:"turns"`
		} `json:"output"`
	}
	if err := json.Unmarshal([]byte(line), &g); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	c := genCase{id: strings.Trim(string(g.ID), `"`), tools: len(g.Tools) > 0 && string(g.Tools) != "null" && string(g.Tools) != "[]"}
	turn := func(m map[string]any, own bool) caseTurn {
		ct := caseTurn{role: str(m["role"]), content: str(m["content"]), reasoning: str(m["reasoning_content"]), own: own}
		calls, _ := m["tool_calls"].([]any)
		ct.calls = len(calls)
		w, ok := m["weight"].(float64)
		ct.weight0 = ok && w == 0
		return ct
	}
	if len(g.Output.Messages) > 0 {
		own := map[int]bool{}
		last := 0
		for _, tu := range g.Output.Turns {
			own[tu.Message] = true
			last = max(last, tu.Message)
		}
		for j, m := range g.Output.Messages[:last+1] {
			c.turns = append(c.turns, turn(m, own[j]))
		}
		return c
	}
	for _, m := range g.Messages {
		c.turns = append(c.turns, turn(m, false))
	}
	c.turns = append(c.turns, caseTurn{role: "assistant", content: g.Output.Text, reasoning: g.Output.Reasoning, calls: len(g.Output.ToolCalls), own: true})
	return c
}

// wantFor is the test's own account of what --for trainer does with a
// record: the reason it is refused, or "" and the answers it trains on.
func (c genCase) wantFor(trainer string) (reason string, answers []caseTurn, context int) {
	toolTurns, system := false, false
	for _, tn := range c.turns {
		toolTurns = toolTurns || tn.role == "tool" || tn.calls > 0
		system = system || tn.role == "system"
	}
	if (trainer == forModelOpt || trainer == forEAGLE) && toolTurns {
		return ReasonToolTurnsUnsupported, nil, 0
	}
	if (trainer == forModelOpt || trainer == forEAGLE) && c.tools {
		return ReasonToolsUnsupported, nil, 0
	}
	if trainer == forEAGLE && system {
		return ReasonSystemUnsupported, nil, 0
	}
	for j, tn := range c.turns {
		switch {
		case tn.role != "assistant":
		case tn.own:
			answers = append(answers, tn)
		case trainer == forSpecForge, trainer == forSpeculators && j == 0:
			context++
		default:
			return ReasonContextTurn, nil, 0
		}
	}
	prev := ""
	for j, tn := range c.turns {
		switch trainer {
		case forSpecForge:
			if j == 0 && tn.role == "system" {
				continue
			}
			if prev == "" && tn.role != "user" || tn.role == "assistant" && prev != "user" && prev != "tool" || tn.role == "tool" && prev != "assistant" && prev != "tool" {
				return ReasonTurnOrder, nil, 0
			}
		case forEAGLE:
			if tn.role != [2]string{"user", "assistant"}[j%2] {
				return ReasonTurnOrder, nil, 0
			}
		}
		prev = tn.role
	}
	return "", answers, context
}

// TestForOnRealData: merge --for each trainer, through the built binary,
// over the real datasets' run (single answers with and without a
// history, regenerated conversations with tools, reasoning and turns of
// weight 0, integer and string ids): every file loads in the reader that
// follows the trainer's loader, and trains on exactly the model's own
// answers of the records it carries, never on a turn kept as context;
// every other record is rejected with its reason; the summary counts
// match.
func TestForOnRealData(t *testing.T) {
	run := loadTrainerRun(t)
	dir := t.TempDir()
	gen := writeLines(t, filepath.Join(dir, "gen.jsonl"), run.lines)
	weighted, tools := 0, 0
	for _, c := range run.cases {
		for _, tn := range c.turns {
			if tn.weight0 {
				weighted++
			}
			tools += tn.calls
		}
	}
	if weighted < 20 || tools < 100 || len(run.cases) < 2000 {
		t.Fatalf("the run has %d records, %d turns of weight 0, %d tool calls: the test shows less than it should", len(run.cases), weighted, tools)
	}
	for _, tc := range []struct {
		trainer   string
		reasoning bool
	}{
		{forSpecForge, true}, {forSpecForge, false},
		{forSpeculators, true}, {forSpeculators, false},
		{forModelOpt, true}, {forEAGLE, true}, {forEAGLE, false},
	} {
		t.Run(fmt.Sprintf("%s reasoning %v", tc.trainer, tc.reasoning), func(t *testing.T) {
			out, rej := filepath.Join(dir, tc.trainer+".jsonl"), filepath.Join(dir, tc.trainer+".rejects.jsonl")
			base := []string{"--for", tc.trainer, "--force"}
			if tc.reasoning {
				base = append(base, "--with-reasoning")
			}
			r := testbin.Run(t, dir, nil, nil, "merge", append(slices.Clone(base), "--rejects", rej, "-o", out, gen)...)

			w := run.expectFor(tc.trainer, tc.reasoning)
			wantRejects, want := w.rejects, w.trained
			records, answers, context, rows, lines := w.records, w.answers, w.context, w.rows, w.lines
			// The run shows every reason the trainer has.
			for _, reason := range map[string][]string{
				forSpeculators: {ReasonContextTurn},
				forModelOpt:    {ReasonContextTurn, ReasonToolTurnsUnsupported, ReasonToolsUnsupported},
				forEAGLE:       {ReasonContextTurn, ReasonToolTurnsUnsupported, ReasonToolsUnsupported, ReasonSystemUnsupported, ReasonTurnOrder},
			}[tc.trainer] {
				if wantRejects[reason] == 0 {
					t.Fatalf("no record of the run is %s: the test shows less than it should", reason)
				}
			}
			if tc.trainer == forSpecForge && (context == 0 || rows <= records) {
				t.Fatalf("%d turns kept as context, %d rows of %d records: the test shows less than it should", context, rows, records)
			}
			wantCode := 0
			if len(wantRejects) > 0 {
				wantCode = 3
			}
			if r.Code != wantCode {
				t.Fatalf("exit %d, want %d\n%s", r.Code, wantCode, r.Stderr)
			}
			summary := fmt.Sprintf("--for %s: %d records as %d lines, %d training rows, %d answers trained on, %d assistant turns kept as context (not trained on)",
				tc.trainer, records, lines, rows, answers, context)
			if !strings.Contains(r.Stderr, summary) {
				t.Errorf("summary lacks %q:\n%s", summary, r.Stderr)
			}
			t.Logf("%d records in: %s; rejects %v", len(run.cases), summary, wantRejects)

			if gotRejects := rejectReasons(t, rej); !maps.Equal(gotRejects, wantRejects) {
				t.Errorf("rejects %v, want %v", gotRejects, wantRejects)
			}

			data, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(splitLines(string(data))); n != lines {
				t.Errorf("%d lines, want %d", n, lines)
			}
			loaded, err := loaders[tc.trainer](data)
			if err != nil {
				t.Fatalf("the trainer's loader refuses the file: %v", err)
			}
			if len(loaded) != rows {
				t.Errorf("the loader makes %d rows, want %d", len(loaded), rows)
			}
			if tc.reasoning {
				checkSameFile(t, dir, slices.Clone(base), gen, out, data, wantCode)
			}
			checkTrained(t, loaded, want)
		})
	}
}

// checkSameFile runs merge with base again on gen, spilled to temporary
// files and from stdin: the file is data whatever the path its records
// take.
func checkSameFile(t *testing.T, dir string, base []string, gen, out string, data []byte, wantCode int) {
	t.Helper()
	for _, how := range []string{"spilled", "stdin"} {
		args := append(slices.Clone(base), "-o", out+".again", gen)
		var stdin *os.File
		if how == "spilled" {
			args = append(args, "--memory", "64KiB", "--workers", "3")
		} else {
			var err error
			if stdin, err = os.Open(gen); err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			args[len(args)-1] = "-"
		}
		r := testbin.Run(t, dir, stdin, nil, "merge", args...)
		if got := readFileString(t, out+".again"); r.Code != wantCode || got != string(data) {
			t.Errorf("%s: exit %d, the file differs (%d bytes, want %d)\n%s", how, r.Code, len(got), len(data), r.Stderr)
		}
		if how == "spilled" && !spilledClause.MatchString(r.Stderr) {
			t.Errorf("--memory 64KiB did not spill:\n%s", r.Stderr)
		}
	}
}

// forWant is what merge --for must make of a run: the rejects by reason,
// the answers trained on (by answerKey), and the counts of its summary.
type forWant struct {
	rejects, trained                       map[string]int
	records, answers, context, rows, lines int
}

// expectFor is what merge --for trainer (--with-reasoning or not) must
// make of the run, record by record.
func (run trainerRun) expectFor(trainer string, reasoning bool) forWant {
	w := forWant{rejects: map[string]int{}, trained: map[string]int{}}
	for _, c := range run.cases {
		reason, ans, ctx := c.wantFor(trainer)
		if reason != "" {
			w.rejects[reason]++
			continue
		}
		w.records++
		w.answers += len(ans)
		w.context += ctx
		for _, a := range ans {
			if !reasoning {
				a.reasoning = ""
			}
			w.trained[answerKey(c.id, loadedTurn{Role: "assistant", Content: a.content, Reasoning: a.reasoning, Calls: a.calls})]++
		}
	}
	w.lines = w.records
	switch trainer {
	case forSpecForge:
		w.rows, w.lines = w.answers, w.answers
	case forSpeculators:
		w.rows = w.answers
	default:
		w.rows = w.records
	}
	return w
}

// rejectReasons counts the rejects file's records by reason.
func rejectReasons(t *testing.T, path string) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, l := range splitLines(readFileString(t, path)) {
		var v struct{ Reject struct{ Reason string } }
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatal(err)
		}
		got[v.Reject.Reason]++
	}
	return got
}

// checkTrained compares the answers the loader trains on with want.
func checkTrained(t *testing.T, loaded []trainRow, want map[string]int) {
	t.Helper()
	got := map[string]int{}
	for _, row := range loaded {
		for _, tn := range row.trainedTurns() {
			got[answerKey(row.ID, tn)]++
		}
	}
	if maps.Equal(got, want) {
		return
	}
	g, w := sortedKeys(got), sortedKeys(want)
	var extra, lacking []string
	for _, k := range g {
		if !slices.Contains(w, k) {
			extra = append(extra, k)
		}
	}
	for _, k := range w {
		if !slices.Contains(g, k) {
			lacking = append(lacking, k)
		}
	}
	t.Errorf("the loader trains on %d answers, want %d; not meant (first 3): %q; left out (first 3): %q",
		len(g), len(w), extra[:min(3, len(extra))], lacking[:min(3, len(lacking))])
}

func readFileString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
