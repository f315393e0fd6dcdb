package merge

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

// Records for the --for cases: a single answer with reasoning and an
// integer id; one whose prompt has a history (an answer the model did
// not write); a regenerated conversation whose first answer was kept as
// context (weight 0) and whose last exchange calls a tool; one with a
// system prompt and two answers; MT-Bench's two questions in a row; an
// answer before the first question; a role no trainer knows.
const (
	forSingle  = `{"id":81,"messages":[{"role":"user","content":"Q"}],"output":{"text":"A","reasoning":"R","finish_reason":"stop","sample":0}}`
	forHistory = `{"id":"h","messages":[{"role":"user","content":"Q1"},{"role":"assistant","content":"a1"},{"role":"user","content":"Q2"}],"output":{"text":"A2","finish_reason":"stop","sample":0}}`
	forSystem  = `{"id":"s","messages":[{"role":"system","content":"S"},{"role":"user","content":"Q1"},{"role":"assistant","content":"a1"},{"role":"user","content":"Q2"},{"role":"assistant","content":"a2"}],` +
		`"output":{"messages":[{"role":"system","content":"S"},{"role":"user","content":"Q1"},{"role":"assistant","content":"A1","reasoning_content":"R1"},{"role":"user","content":"Q2"},{"role":"assistant","content":"A2","reasoning_content":"R2"}],` +
		`"turns":[{"message":2,"finish_reason":"stop"},{"message":4,"finish_reason":"stop"}],"finish_reason":"stop","sample":0}}`
	forTwoQuestions = `{"id":"mt-81","messages":[{"role":"user","content":"Q1"},{"role":"user","content":"Q2"}],` +
		`"output":{"messages":[{"role":"user","content":"Q1"},{"role":"user","content":"Q2"},{"role":"assistant","content":"A"}],"turns":[{"message":2,"finish_reason":"stop"}],"finish_reason":"stop","sample":0}}`
	forLeading = `{"id":"l","messages":[{"role":"assistant","content":"Hi, ask me."},{"role":"user","content":"Q"}],` +
		`"output":{"messages":[{"role":"assistant","content":"Hi, ask me."},{"role":"user","content":"Q"},{"role":"assistant","content":"A"}],"turns":[{"message":2,"finish_reason":"stop"}],"finish_reason":"stop","sample":0}}`
	forDeveloper = `{"id":"d","messages":[{"role":"developer","content":"D"},{"role":"user","content":"Q"}],"output":{"text":"A","finish_reason":"stop","sample":0}}`
)

// TestConvertFor: each trainer's shape of each kind of record, or the
// reason it is refused, with and without --with-reasoning.
func TestConvertFor(t *testing.T) {
	call := `{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}`
	tests := []struct {
		name, trainer, in string
		reasoning         bool
		want              string // the meta line and the rows, or the reject reason
	}{
		{"specforge single", forSpecForge, forSingle, true,
			`{"rows":1,"answers":1,"context":0}` + "\n" + `{"id":"81","conversations":[{"role":"user","content":"Q"},{"role":"assistant","content":"A","reasoning_content":"R"}],"tools":"[]"}`},
		{"specforge single without reasoning", forSpecForge, forSingle, false,
			`{"rows":1,"answers":1,"context":0}` + "\n" + `{"id":"81","conversations":[{"role":"user","content":"Q"},{"role":"assistant","content":"A"}],"tools":"[]"}`},
		{"specforge history", forSpecForge, forHistory, true,
			`{"rows":1,"answers":1,"context":1}` + "\n" + `{"id":"h","conversations":[{"role":"user","content":"Q1"},{"role":"assistant","content":"a1"},{"role":"user","content":"Q2"},{"role":"assistant","content":"A2"}],"tools":"[]"}`},
		{"specforge weight 0 and a tool call: a row per answer", forSpecForge, weightedConversation, true,
			`{"rows":2,"answers":2,"context":1}` + "\n" +
				`{"id":"w","conversations":[{"role":"user","content":"Q1"},{"role":"assistant","content":"a1"},{"role":"user","content":"Q2"},{"role":"assistant","content":"","tool_calls":[` + call + `]}],"tools":"[]"}` + "\n" +
				`{"id":"w","conversations":[{"role":"user","content":"Q1"},{"role":"assistant","content":"a1"},{"role":"user","content":"Q2"},{"role":"assistant","content":"","tool_calls":[` + call + `]},{"role":"tool","content":"r","tool_call_id":"c"},{"role":"assistant","content":"A2"}],"tools":"[]"}`},
		{"specforge: earlier answers without their reasoning", forSpecForge, forSystem, true,
			`{"rows":2,"answers":2,"context":0}` + "\n" +
				`{"id":"s","conversations":[{"role":"system","content":"S"},{"role":"user","content":"Q1"},{"role":"assistant","content":"A1","reasoning_content":"R1"}],"tools":"[]"}` + "\n" +
				`{"id":"s","conversations":[{"role":"system","content":"S"},{"role":"user","content":"Q1"},{"role":"assistant","content":"A1"},{"role":"user","content":"Q2"},{"role":"assistant","content":"A2","reasoning_content":"R2"}],"tools":"[]"}`},
		{"specforge two questions", forSpecForge, forTwoQuestions, false,
			`{"rows":1,"answers":1,"context":0}` + "\n" + `{"id":"mt-81","conversations":[{"role":"user","content":"Q1"},{"role":"user","content":"Q2"},{"role":"assistant","content":"A"}],"tools":"[]"}`},
		{"specforge leading answer", forSpecForge, forLeading, false, ReasonTurnOrder},
		{"specforge developer role", forSpecForge, forDeveloper, false, ReasonRoleUnsupported},
		{"speculators single", forSpeculators, forSingle, true,
			`{"rows":1,"answers":1,"context":0}` + "\n" + `{"id":"81","conversations":[{"role":"user","content":"Q"},{"role":"assistant","content":"A","reasoning_content":"R"}],"tools":""}`},
		{"speculators system, reasoning on every answer", forSpeculators, forSystem, true,
			`{"rows":2,"answers":2,"context":0}` + "\n" + `{"id":"s","conversations":[{"role":"system","content":"S"},{"role":"user","content":"Q1"},{"role":"assistant","content":"A1","reasoning_content":"R1"},{"role":"user","content":"Q2"},{"role":"assistant","content":"A2","reasoning_content":"R2"}],"tools":""}`},
		{"speculators tools", forSpeculators, toolRecords["complete"], false,
			`{"rows":2,"answers":2,"context":0}` + "\n" + `{"id":"complete","conversations":[{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":"","tool_calls":[` + weatherCall + `]},{"role":"tool","content":"sunny","tool_call_id":"call_1"},{"role":"assistant","content":"It is sunny."}],"tools":` + quoteJSON(canonicalTools(t)) + `}`},
		{"speculators history", forSpeculators, forHistory, false, ReasonContextTurn},
		{"speculators weight 0", forSpeculators, weightedConversation, false, ReasonContextTurn},
		{"speculators leading answer: not a row", forSpeculators, forLeading, false,
			`{"rows":1,"answers":1,"context":1}` + "\n" + `{"id":"l","conversations":[{"role":"assistant","content":"Hi, ask me."},{"role":"user","content":"Q"},{"role":"assistant","content":"A"}],"tools":""}`},
		{"modelopt single, reasoning inline", forModelOpt, forSingle, true,
			`{"rows":1,"answers":1,"context":0}` + "\n" + `{"id":"81","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"\u003cthink\u003e\nR\n\u003c/think\u003e\n\nA"}]}`},
		{"modelopt system", forModelOpt, forSystem, false,
			`{"rows":1,"answers":2,"context":0}` + "\n" + `{"id":"s","messages":[{"role":"system","content":"S"},{"role":"user","content":"Q1"},{"role":"assistant","content":"A1"},{"role":"user","content":"Q2"},{"role":"assistant","content":"A2"}]}`},
		{"modelopt tool turns", forModelOpt, toolRecords["complete"], false, ReasonToolTurnsUnsupported},
		{"modelopt tools without calls", forModelOpt, strings.Replace(forSingle, `"output"`, `"tools":`+toolsJSON+`,"output"`, 1), false, ReasonToolsUnsupported},
		{"modelopt history", forModelOpt, forHistory, false, ReasonContextTurn},
		{"modelopt weight 0 with a tool call: tools first", forModelOpt, weightedConversation, false, ReasonToolTurnsUnsupported},
		{"eagle single", forEAGLE, forSingle, true,
			`{"rows":1,"answers":1,"context":0}` + "\n" + `{"id":"81","conversations":[{"from":"human","value":"Q"},{"from":"gpt","value":"\u003cthink\u003e\nR\n\u003c/think\u003e\n\nA"}]}`},
		{"eagle system", forEAGLE, forSystem, true, ReasonSystemUnsupported},
		{"eagle tool turns", forEAGLE, toolRecords["single"], false, ReasonToolTurnsUnsupported},
		{"eagle two questions", forEAGLE, forTwoQuestions, false, ReasonTurnOrder},
		{"eagle history", forEAGLE, forHistory, false, ReasonContextTurn},
		{"eagle leading answer", forEAGLE, forLeading, false, ReasonContextTurn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &converter{to: trainerForms[tt.trainer], trainer: tt.trainer, withReasoning: tt.reasoning}
			got, rej := c.convert([]byte(tt.in))
			if !strings.HasPrefix(tt.want, "{") {
				if rej == nil || rej.reason != tt.want {
					t.Fatalf("got %s %+v, want the reject %s", got, rej, tt.want)
				}
				return
			}
			if rej != nil || string(got) != tt.want {
				t.Fatalf("got %s %+v\nwant %s", got, rej, tt.want)
			}
			// What the test wrote loads in the trainer's reader.
			_, rows, _ := strings.Cut(string(got), "\n")
			if _, err := loaders[tt.trainer]([]byte(rows)); err != nil {
				t.Errorf("the loader refuses it: %v", err)
			}
		})
	}
}

func canonicalTools(t *testing.T) string {
	c := &converter{to: toConversations}
	got, rej := c.convert([]byte(toolRecords["complete"]))
	if rej != nil {
		t.Fatal(rej.detail)
	}
	_, after, _ := strings.Cut(string(got), `"tools":`)
	return strings.TrimSuffix(after, "}")
}

// TestLoaderReaders: the readers refuse what the trainers' loaders refuse
// or mistrain on, the shapes the text forms had before --for: mixed id
// types, sharegpt's tool turns (EAGLE's KeyError, speculators' assistant
// turns), a turn order EAGLE asserts against, a SpecForge column that
// would become a template keyword.
func TestLoaderReaders(t *testing.T) {
	tests := []struct {
		name, trainer, data, err string
	}{
		{"integer and string ids", forSpeculators, `{"id":81,"conversations":[]}` + "\n" + `{"id":"a","conversations":[]}`, "changed from int64 to string"},
		{"a list and a string", forSpeculators, `{"id":"a","conversations":[],"tools":[]}` + "\n" + `{"id":"b","conversations":[],"tools":"[]"}`, "changed from list to string"},
		{"nested", forModelOpt, `{"messages":[{"role":"user","content":"q"}]}` + "\n" + `{"messages":[{"role":"user","content":["q"]}]}`, "/messages/[]/content) changed from string to list"},
		{"sharegpt tool turns in EAGLE", forEAGLE, `{"id":"a","conversations":[{"from":"human","value":"q"},{"from":"function_call","value":"{}"}]}`, "KeyError"},
		{"two questions in EAGLE", forEAGLE, `{"id":"a","conversations":[{"from":"human","value":"q"},{"from":"human","value":"q2"},{"from":"gpt","value":"a"}]}`, "AssertionError"},
		{"sharegpt tool turns in speculators", forSpeculators, `{"conversations":[{"from":"human","value":"q"},{"from":"function_call","value":"{}"}]}`, "maps role"},
		{"SpecForge keyword column", forSpecForge, `{"id":"a","sample":1,"conversations":[{"role":"user","content":"q"}]}`, "keyword"},
		{"ModelOpt reasoning field", forModelOpt, `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a","reasoning_content":"r"}]}`, "do not render"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loaders[tt.trainer]([]byte(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("got %v, want an error with %q", err, tt.err)
			}
		})
	}
	if rows, err := arrowLoad([]byte(`{"w":1,"x":null}` + "\n" + `{"w":0.5,"x":"s","y":{"a":1}}` + "\n" + `{"y":{"b":"c"}}`)); err != nil || len(rows) != 3 {
		t.Errorf("nulls, an integer column taking floats and struct fields by union load: %d rows, %v", len(rows), err)
	}
}

// TestForUsage: --for's combinations with other flags, and its
// environment variable.
func TestForUsage(t *testing.T) {
	dir := t.TempDir()
	gen := writeLines(t, filepath.Join(dir, "gen.jsonl"), []string{forSingle})
	for _, tt := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"--for", "specforge", "--to", "messages"}, 2, "--for specforge writes what specforge reads, --to conversations: --to messages contradicts it"},
		{[]string{"--for", "eagle", "--to", "tokens"}, 2, "--to tokens contradicts it"},
		{[]string{"--for", "modelopt", "--to", "messages"}, 0, "--for modelopt: 1 records"},
		{[]string{"--for", "speculators", "-o", filepath.Join(dir, "x.parquet")}, 2, "not a local Parquet file"},
		{[]string{"--for", "eagle", "--soft-switch"}, 2, "EAGLE's loader reads none"},
		{[]string{"--for", "specforge", "--missing", "--prompts", gen}, 2, "does not go with --for"},
		{[]string{"--for", "axolotl"}, 2, "--for must be one of"},
	} {
		code, _, stderr := runMerge(t, context.Background(), nil, append(tt.args, gen)...)
		if code != tt.code || !strings.Contains(stderr, tt.stderr) {
			t.Errorf("%v: exit %d, want %d with %q:\n%s", tt.args, code, tt.code, tt.stderr, stderr)
		}
	}
	r := testbin.Run(t, dir, nil, []string{"TOKENMILL_MERGE_FOR=eagle"}, "merge", gen)
	if r.Code != 0 || string(r.Stdout) != `{"id":"81","conversations":[{"from":"human","value":"Q"},{"from":"gpt","value":"A"}]}`+"\n" {
		t.Errorf("TOKENMILL_MERGE_FOR=eagle: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}
