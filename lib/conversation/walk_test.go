package conversation

import (
	"fmt"
	"strings"
	"testing"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// scripted is a model's answer in a walk test: text, or calls to the
// functions named (with arguments {"n":k}).
type scripted struct {
	text  string
	calls []string
}

// walk regenerates the conversation rec with the answers given in turn,
// and returns the output messages as "role:content" (tool turns with the
// id they answer, answers' calls as call(name#id)), the truncation, and
// the histories each answer was asked for.
func walk(t *testing.T, rec string, maxRounds int, answers ...scripted) ([]string, *record.Truncation, [][]record.Message) {
	t.Helper()
	var p record.Prompt
	if err := record.Decode([]byte(rec), &p); err != nil {
		t.Fatal(err)
	}
	questions, err := IsQuestionList([]byte(rec))
	if err != nil {
		t.Fatal(err)
	}
	c, ok := New(&p, nil, maxRounds, questions)
	if !ok {
		t.Fatalf("%s: nothing to regenerate", rec)
	}
	var asked [][]record.Message
	for i := 0; c.Next(); i++ {
		if i >= len(answers) {
			t.Fatalf("asked for answer %d, only %d scripted; out so far %v", i+1, len(answers), show(c.out))
		}
		asked = append(asked, append([]record.Message(nil), c.Request().Messages...))
		comp := openai.Completion{Text: answers[i].text, FinishReason: "stop"}
		for k, name := range answers[i].calls {
			comp.ToolCalls = append(comp.ToolCalls, record.ToolCall{ID: fmt.Sprintf("new%d_%d", i, k), Type: "function",
				Function: record.FunctionCall{Name: name, Arguments: fmt.Sprintf(`{"n":%d}`, k)}})
		}
		if len(comp.ToolCalls) > 0 {
			comp.FinishReason = "tool_calls"
		}
		a, err := c.NewAnswer(&comp, record.Turn{FinishReason: comp.FinishReason})
		if err != nil {
			t.Fatal(err)
		}
		c.Apply(a)
	}
	if len(asked) != len(answers) {
		t.Fatalf("asked for %d answers, %d scripted: out %v", len(asked), len(answers), show(c.out))
	}
	for i, turn := range c.turns {
		if m := c.out[turn.Message]; m.Role != "assistant" || m.Content != answers[i].text {
			t.Fatalf("turn %d points at message %d %+v", i, turn.Message, m)
		}
	}
	return show(c.out), c.truncated, asked
}

func show(msgs []record.Message) []string {
	var out []string
	for _, m := range msgs {
		s := m.Role + ":" + m.Content
		if m.ToolCallID != "" {
			s += "@" + m.ToolCallID
		}
		if len(m.ToolCalls) > 0 {
			calls, _ := openai.ToolCalls(m.ToolCalls)
			for _, c := range calls {
				s += " call(" + c.Function.Name + "#" + c.ID + ")"
			}
		}
		if m.Weight != nil {
			s += fmt.Sprintf(" w%g", *m.Weight)
		}
		out = append(out, s)
	}
	return out
}

// A conversation record: turns written as "role:content", an assistant
// turn "assistant:call name1,name2" calls those functions (ids c<turn>_<k>),
// a tool turn "tool:name=result" answers the next call of that name (by
// id), "tool:=result" answers without saying which call (no id). The
// role "context" is an assistant turn of weight 0.
func conversation(tools bool, turns ...string) string {
	var msgs []string
	pendingIDs := map[string][]string{}
	for i, t := range turns {
		role, content, _ := strings.Cut(t, ":")
		weight := ""
		if role == "context" {
			role, weight = "assistant", `,"weight":0`
		}
		switch {
		case role == "assistant" && strings.HasPrefix(content, "call "):
			var calls []string
			for k, name := range strings.Split(strings.TrimPrefix(content, "call "), ",") {
				id := fmt.Sprintf("c%d_%d", i, k)
				pendingIDs[name] = append(pendingIDs[name], id)
				calls = append(calls, fmt.Sprintf(`{"id":%q,"type":"function","function":{"name":%q,"arguments":"{}"}}`, id, name))
			}
			msgs = append(msgs, `{"role":"assistant","content":"","tool_calls":[`+strings.Join(calls, ",")+`]`+weight+`}`)
		case role == "tool":
			name, result, _ := strings.Cut(content, "=")
			id := ""
			if ids := pendingIDs[name]; name != "" && len(ids) > 0 {
				id, pendingIDs[name] = ids[0], ids[1:]
			}
			b, _ := json.Marshal(record.Message{Role: "tool", Content: result, ToolCallID: id})
			msgs = append(msgs, string(b))
		default:
			b, _ := json.Marshal(record.Message{Role: role, Content: content})
			msgs = append(msgs, string(b[:len(b)-1])+weight+"}")
		}
	}
	rec := `{"id":"c","messages":[` + strings.Join(msgs, ",") + `]`
	if tools {
		rec += `,"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"g"}}]`
	}
	return rec + "}"
}

// questionList marks a conversation record a list of questions.
func questionList(rec string) string {
	return strings.TrimSuffix(rec, "}") + `,"question_list":true}`
}

func TestWalkRules(t *testing.T) {
	tests := walkRulesCases()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, trunc, _ := walk(t, tt.rec, tt.rounds, tt.answers...)
			if strings.Join(got, " | ") != strings.Join(tt.want, " | ") {
				t.Errorf("got  %v\nwant %v", got, tt.want)
			}
			gotTrunc := ""
			if trunc != nil {
				gotTrunc = fmt.Sprintf("%s/%d", trunc.Reason, trunc.Turn)
				if trunc.Detail == "" {
					t.Error("a truncation without detail")
				}
			}
			if gotTrunc != tt.truncated {
				t.Errorf("truncated %q, want %q", gotTrunc, tt.truncated)
			}
		})
	}
}

// walkRuleCase is one case of TestWalkRules.
type walkRuleCase struct {
	name      string
	rec       string
	rounds    int
	answers   []scripted
	want      []string
	truncated string // reason/turn
}

// walkRulesCases are TestWalkRules's cases.
func walkRulesCases() []walkRuleCase {
	return []walkRuleCase{
		{"plain turns replaced", conversation(false, "system:S", "user:q1", "assistant:a1", "user:q2", "assistant:a2"), 16,
			[]scripted{{text: "A1"}, {text: "A2"}},
			[]string{"system:S", "user:q1", "assistant:A1", "user:q2", "assistant:A2"}, ""},
		{"a last user turn is answered", conversation(false, "user:q1", "assistant:a1", "user:q2"), 16,
			[]scripted{{text: "A1"}, {text: "A2"}},
			[]string{"user:q1", "assistant:A1", "user:q2", "assistant:A2"}, ""},
		{"questions in a row get one answer", conversation(false, "user:q1", "user:q2", "assistant:a"), 16,
			[]scripted{{text: "A"}},
			[]string{"user:q1", "user:q2", "assistant:A"}, ""},
		{"a chat log ending with two questions gets one answer", conversation(false, "user:q1", "assistant:a1", "user:q2", "user:q3"), 16,
			[]scripted{{text: "A1"}, {text: "A2"}},
			[]string{"user:q1", "assistant:A1", "user:q2", "user:q3", "assistant:A2"}, ""},
		{"a question list: each question answered in turn", questionList(conversation(false, "user:q1", "user:q2")), 16,
			[]scripted{{text: "A1"}, {text: "A2"}},
			[]string{"user:q1", "assistant:A1", "user:q2", "assistant:A2"}, ""},
		{"a question list of three after a system turn", questionList(conversation(false, "system:S", "user:q1", "user:q2", "user:q3")), 16,
			[]scripted{{text: "A1"}, {text: "A2"}, {text: "A3"}},
			[]string{"system:S", "user:q1", "assistant:A1", "user:q2", "assistant:A2", "user:q3", "assistant:A3"}, ""},
		{"a question list with an answer recorded: regenerated in its place", questionList(conversation(false, "user:q1", "assistant:a1", "user:q2", "user:q3")), 16,
			[]scripted{{text: "A1"}, {text: "A2"}, {text: "A3"}},
			[]string{"user:q1", "assistant:A1", "user:q2", "assistant:A2", "user:q3", "assistant:A3"}, ""},
		{"a question list whose first answer calls a tool: no result to give, it ends there", questionList(conversation(true, "user:q1", "user:q2")), 16,
			[]scripted{{calls: []string{"f"}}},
			[]string{"user:q1", "assistant: call(f#new0_0)"}, "tool_unpaired/0"},
		{"an opening assistant turn is kept", conversation(false, "assistant:hello", "user:q", "assistant:a"), 16,
			[]scripted{{text: "A"}},
			[]string{"assistant:hello", "user:q", "assistant:A"}, ""},
		{"a call paired with the cached result", conversation(true, "user:q", "assistant:call f", "tool:f=R", "assistant:a", "user:q2", "assistant:b"), 16,
			[]scripted{{calls: []string{"f"}}, {text: "A"}, {text: "B"}},
			[]string{"user:q", "assistant: call(f#new0_0)", "tool:R@new0_0", "assistant:A", "user:q2", "assistant:B"}, ""},
		{"no call where the original called: the exchange is skipped", conversation(true, "user:q", "assistant:call f", "tool:f=R", "assistant:a", "user:q2", "assistant:b"), 16,
			[]scripted{{text: "A"}, {text: "B"}},
			[]string{"user:q", "assistant:A", "user:q2", "assistant:B"}, ""},
		{"a call where the original made none", conversation(true, "user:q", "assistant:a", "user:q2", "assistant:b"), 16,
			[]scripted{{calls: []string{"f"}}},
			[]string{"user:q", "assistant: call(f#new0_0)"}, "tool_unpaired/0"},
		{"another function", conversation(true, "user:q", "assistant:call f", "tool:f=R", "assistant:a"), 16,
			[]scripted{{calls: []string{"g"}}},
			[]string{"user:q", "assistant: call(g#new0_0)"}, "tool_unpaired/0"},
		{"more parallel calls than cached", conversation(true, "user:q", "assistant:call f", "tool:f=R", "assistant:a"), 16,
			[]scripted{{calls: []string{"f", "f"}}},
			[]string{"user:q", "assistant: call(f#new0_0) call(f#new0_1)"}, "tool_unpaired/0"},
		{"parallel calls paired in order, across the original's rounds", conversation(true, "user:q", "assistant:call f,g", "tool:f=R1", "tool:g=R2", "assistant:call f", "tool:f=R3", "assistant:a"), 16,
			[]scripted{{calls: []string{"g", "f"}}, {calls: []string{"f"}}, {text: "A"}},
			[]string{"user:q", "assistant: call(g#new0_0) call(f#new0_1)", "tool:R2@new0_0", "tool:R1@new0_1",
				"assistant: call(f#new1_0)", "tool:R3@new1_0", "assistant:A"}, ""},
		{"one tool turn holding the results of parallel calls, as a list: each call its own", conversation(true, "user:q", "assistant:call f,g", `tool:f=["R1",{"t":2}]`, "assistant:a"), 16,
			[]scripted{{calls: []string{"g", "f"}}, {text: "A"}},
			[]string{"user:q", "assistant: call(g#new0_0) call(f#new0_1)", `tool:{"t":2}@new0_0`, "tool:R1@new0_1", "assistant:A"}, ""},
		{"one tool turn for parallel calls, not a list of as many: it answers each of them", conversation(true, "user:q", "assistant:call f,f", "tool:=R1 and R2", "assistant:a"), 16,
			[]scripted{{calls: []string{"f", "f"}}, {text: "A"}},
			[]string{"user:q", "assistant: call(f#new0_0) call(f#new0_1)", "tool:R1 and R2@new0_0", "tool:R1 and R2@new0_1", "assistant:A"}, ""},
		{"a list in one of several tool turns is a result as it is", conversation(true, "user:q", "assistant:call f,f,f", `tool:f=["x","y"]`, "tool:f=R2", "assistant:a"), 16,
			[]scripted{{calls: []string{"f", "f", "f"}}, {text: "A"}},
			[]string{"user:q", "assistant: call(f#new0_0) call(f#new0_1) call(f#new0_2)", `tool:["x","y"]@new0_0`, "tool:R2@new0_1", "tool:R2@new0_2", "assistant:A"}, ""},
		{"results used up", conversation(true, "user:q", "assistant:call f", "tool:f=R", "assistant:a"), 16,
			[]scripted{{calls: []string{"f"}}, {calls: []string{"f"}}},
			[]string{"user:q", "assistant: call(f#new0_0)", "tool:R@new0_0", "assistant: call(f#new1_0)"}, "tool_unpaired/1"},
		{"results of a later question are not used", conversation(true, "user:q", "assistant:a", "user:q2", "assistant:call f", "tool:f=R", "assistant:b"), 16,
			[]scripted{{calls: []string{"f"}}},
			[]string{"user:q", "assistant: call(f#new0_0)"}, "tool_unpaired/0"},
		{"a result without an id answers the call in its place", conversation(true, "user:q", "assistant:call f", "tool:=R", "assistant:a"), 16,
			[]scripted{{calls: []string{"g"}}},
			[]string{"user:q", "assistant: call(g#new0_0)"}, "tool_unpaired/0"},
		{"a result of no known function pairs with any call", conversation(true, "user:q", "assistant:a", "tool:=R", "assistant:b"), 16,
			[]scripted{{calls: []string{"g"}}, {text: "A"}},
			[]string{"user:q", "assistant: call(g#new0_0)", "tool:R@new0_0", "assistant:A"}, ""},
		{"tool rounds bounded", conversation(true, "user:q", "assistant:call f", "tool:f=R1", "assistant:call f", "tool:f=R2", "assistant:a"), 1,
			[]scripted{{calls: []string{"f"}}, {calls: []string{"f"}}},
			[]string{"user:q", "assistant: call(f#new0_0)", "tool:R1@new0_0", "assistant: call(f#new1_0)"}, "tool_rounds/1"},
		{"a turn of weight 0 is context: kept, not regenerated", conversation(false, "user:q1", "context:a1", "user:q2", "assistant:a2"), 16,
			[]scripted{{text: "A2"}},
			[]string{"user:q1", "assistant:a1 w0", "user:q2", "assistant:A2"}, ""},
		{"a context turn's calls and their results are kept; the next assistant turn is regenerated", conversation(true, "user:q", "context:call f", "tool:f=R", "assistant:a"), 16,
			[]scripted{{text: "A"}},
			[]string{"user:q", "assistant: call(f#c1_0) w0", "tool:R@c1_0", "assistant:A"}, ""},
		{"a context turn inside a regenerated exchange goes with it", conversation(true, "user:q", "assistant:call f", "tool:f=R", "context:a", "user:q2", "assistant:b"), 16,
			[]scripted{{calls: []string{"f"}}, {text: "A"}, {text: "B"}},
			[]string{"user:q", "assistant: call(f#new0_0)", "tool:R@new0_0", "assistant:A", "user:q2", "assistant:B"}, ""},
		{"a context turn before a last question: the question is answered", conversation(false, "user:q1", "context:a1", "user:q2"), 16,
			[]scripted{{text: "A2"}},
			[]string{"user:q1", "assistant:a1 w0", "user:q2", "assistant:A2"}, ""},
		{"a call in the final answer", conversation(true, "user:q"), 16,
			[]scripted{{calls: []string{"f"}}},
			[]string{"user:q", "assistant: call(f#new0_0)"}, "tool_unpaired/0"},
	}
}

// Each answer is asked for with the history regenerated so far: the
// earlier answers in place of the originals, the original's turns after
// the point left out; a top-level system prompt takes the system slot
// unless a system turn of the record's own does.
func TestWalkHistories(t *testing.T) {
	rec := `{"id":"h","system":"Top","messages":[{"role":"user","content":"q1"},{"role":"assistant","content":"a1","reasoning_content":"r"},{"role":"user","content":"q2"},{"role":"assistant","content":"a2"}]}`
	_, _, asked := walk(t, rec, 16, scripted{text: "A1"}, scripted{text: "A2"})
	want := []string{"system:Top | user:q1", "system:Top | user:q1 | assistant:A1 | user:q2"}
	for i, h := range asked {
		if got := strings.Join(show(h), " | "); got != want[i] {
			t.Errorf("answer %d asked with %q, want %q", i, got, want[i])
		}
	}
	// A question list: each question asked with the answers before it.
	_, _, asked = walk(t, questionList(conversation(false, "user:q1", "user:q2", "user:q3")), 16, scripted{text: "A1"}, scripted{text: "A2"}, scripted{text: "A3"})
	want = []string{"user:q1", "user:q1 | assistant:A1 | user:q2", "user:q1 | assistant:A1 | user:q2 | assistant:A2 | user:q3"}
	for i, h := range asked {
		if got := strings.Join(show(h), " | "); got != want[i] {
			t.Errorf("question list: answer %d asked with %q, want %q", i, got, want[i])
		}
	}
	own := `{"id":"h","system":"Top","messages":[{"role":"system","content":"Own"},{"role":"user","content":"q1"}]}`
	got, _, _ := walk(t, own, 16, scripted{text: "A"})
	if strings.Join(got, " | ") != "system:Own | user:q1 | assistant:A" {
		t.Errorf("own system turn: %v", got)
	}
}

// Records with nothing to regenerate are told apart.
func TestWalkNothingToDo(t *testing.T) {
	for _, rec := range []string{
		conversation(false, "system:S", "assistant:hello"),
		conversation(false, "user:q", "assistant:a", "tool:=x"),
		conversation(false, "system:S"),
	} {
		var p record.Prompt
		if err := record.Decode([]byte(rec), &p); err != nil {
			t.Fatal(err)
		}
		if _, ok := New(&p, nil, 16, false); ok && !strings.Contains(rec, `"user"`) {
			t.Errorf("%s: said to have something to regenerate", rec)
		}
	}
	// Answers that are all context leave nothing to regenerate.
	var ctx record.Prompt
	record.Decode([]byte(conversation(false, "user:q", "context:a", "tool:=x")), &ctx)
	if _, ok := New(&ctx, nil, 16, false); ok {
		t.Error("a conversation whose only answer has weight 0 was said to have something to regenerate")
	}
	// A conversation whose user turn is answered has something to do.
	var p record.Prompt
	record.Decode([]byte(conversation(false, "user:q", "assistant:a", "tool:=x")), &p)
	if _, ok := New(&p, nil, 16, false); !ok {
		t.Error("an answered user turn has nothing to regenerate")
	}
}

// Questions in a row followed by another role: nothing to regenerate in a
// chat log, each question but the last to answer in a question list.
func TestWalkQuestionListNothingElse(t *testing.T) {
	var p record.Prompt
	record.Decode([]byte(conversation(false, "user:q1", "user:q2", "system:S")), &p)
	if _, ok := New(&p, nil, 16, false); ok {
		t.Error("a chat log of questions that ends with a system turn was said to have something to regenerate")
	}
	c, ok := New(&p, nil, 16, true)
	if !ok {
		t.Fatal("a question list was said to have nothing to regenerate")
	}
	if !c.Next() || len(c.Request().Messages) != 1 {
		t.Fatalf("the first question was not asked alone: %v", show(c.Request().Messages))
	}
}

// The mark: true, false, null or absent; anything else is an error.
func TestIsQuestionList(t *testing.T) {
	for rec, want := range map[string]string{
		`{"id":1,"messages":[],"question_list":true}`:         "true",
		`{"id":1,"question_list":false,"messages":[]}`:        "false",
		`{"id":1,"question_list":null}`:                       "false",
		`{"id":1,"messages":[{"role":"user"}]}`:               "false",
		`{"id":1,"meta":{"question_list":true}}`:              "false",
		`{"id":1,"question_list":"true"}`:                     "error",
		`{"id":1,"question_list":1}`:                          "error",
		`{"id":1,"question_list":true,"question_list":false}`: "false",
	} {
		q, err := IsQuestionList([]byte(rec))
		got := fmt.Sprint(q)
		if err != nil {
			got = "error"
			if !strings.Contains(err.Error(), QuestionListField) {
				t.Errorf("%s: error %q does not name the field", rec, err)
			}
		}
		if got != want {
			t.Errorf("%s: %s, want %s", rec, got, want)
		}
	}
}

// A question list resumed from the journal after its first answer: the
// second question is asked next, with the journaled answer in its
// history; a journal with more turns than the list has answers does not
// fit it.
func TestWalkQuestionListReplay(t *testing.T) {
	rec := questionList(conversation(false, "user:q1", "user:q2"))
	var p record.Prompt
	if err := record.Decode([]byte(rec), &p); err != nil {
		t.Fatal(err)
	}
	line := func(turn int, text string) JournalLine {
		return JournalLine{Turn: turn, Answer: record.Message{Role: "assistant", Content: text}, Meta: record.Turn{FinishReason: "stop", Endpoint: "e"}}
	}
	c, _ := New(&p, nil, 16, true)
	if _, err := c.Replay([]JournalLine{line(0, "A1")}); err != nil {
		t.Fatal(err)
	}
	if !c.Next() {
		t.Fatal("the second question was not asked after the first answer was replayed")
	}
	if got := strings.Join(show(c.Request().Messages), " | "); got != "user:q1 | assistant:A1 | user:q2" {
		t.Fatalf("the second question asked with %q", got)
	}
	a, _ := c.NewAnswer(&openai.Completion{Text: "A2", FinishReason: "stop"}, record.Turn{FinishReason: "stop"})
	c.Apply(a)
	if c.Next() {
		t.Fatal("a third answer asked of a list of two questions")
	}
	if o := c.Output(0, "m"); c.Replayed() != 1 || len(o.Turns) != 2 || o.Turns[0].Message != 1 || o.Turns[1].Message != 3 {
		t.Fatalf("replayed %d, turns %+v", c.Replayed(), o.Turns)
	}
	c, _ = New(&p, nil, 16, true)
	if _, err := c.Replay([]JournalLine{line(0, "A1"), line(1, "A2"), line(2, "A3")}); err == nil {
		t.Fatal("three journaled answers replayed onto two questions")
	}
}
