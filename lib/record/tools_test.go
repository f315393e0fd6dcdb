package record

import (
	"errors"
	"fmt"
	"testing"

	"github.com/segmentio/encoding/json"
)

var toolsSeeds = []string{``, `null`, `" [ ] "`, `[{"name":"f","min":1e3}]`, `"[{\"name\": \"f\"}]"`,
	`[{"type":"function","name":"f"}]`, `[{"type":"web_search_preview"}]`, `{"a":1}`, `"[] []"`, `[1,"x",null]`}

// FuzzCanonicalTools: whatever the value, it is refused, or has no tools,
// or gives valid JSON that is its own canonical form.
func FuzzCanonicalTools(f *testing.F) {
	for _, s := range toolsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, ok, err := AppendCanonicalTools(nil, raw)
		if err != nil || !ok {
			if len(out) != 0 {
				t.Fatalf("no tools, but %q appended", out)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("%q gave invalid JSON %q", raw, out)
		}
		again, ok, err := AppendCanonicalTools(nil, out)
		if err != nil || !ok || string(again) != string(out) {
			t.Fatalf("canonical form %q is not canonical: %q, %v, %v", out, again, ok, err)
		}
	})
}

func TestCanonicalTools(t *testing.T) {
	fn := `{"function":{"description":"d","name":"f","parameters":{"properties":{"x":{"type":"number"}},"type":"object"}},"type":"function"}`
	tests := []struct {
		name, raw, want string // want "" means no tools; "!" a bad value
	}{
		{"absent", ``, ""},
		{"null", `null`, ""},
		{"empty list", `[]`, ""},
		{"spaced empty list", ` [ ] `, ""},
		{"empty object", `{}`, ""},
		{"empty string", `""`, ""},
		{"blank string", `" \n "`, ""},
		{"empty list in a string", `"[]"`, ""},
		{"spaced empty list in a string", `" [ ] "`, ""},
		{"null in a string", `"null"`, ""},
		{"OpenAI shape, keys sorted", `[{"function":{"parameters":{"type":"object","properties":{"x":{"type":"number"}}},"name":"f","description":"d"},"type":"function"}]`, "[" + fn + "]"},
		{"a JSON string of bare functions (glaive)", `"[{\"name\": \"f\", \"description\": \"d\", \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"number\"}}}}]"`, "[" + fn + "]"},
		{"the Responses API's flat form", `[{"type":"function","name":"f","description":"d","parameters":{"type":"object","properties":{"x":{"type":"number"}}}}]`, "[" + fn + "]"},
		{"numbers as written", `[{"name":"f","min":1e3,"max":10.50}]`, `[{"function":{"max":10.50,"min":1e3,"name":"f"},"type":"function"}]`},
		{"built-in tools kept", `[{"type":"web_search_preview"}]`, `[{"type":"web_search_preview"}]`},
		{"order of tools kept", `[{"name":"b"},{"name":"a"}]`, `[{"function":{"name":"b"},"type":"function"},{"function":{"name":"a"},"type":"function"}]`},
		{"non-ASCII and HTML characters as they are", `[{"name":"f","description":"<é>"}]`, `[{"function":{"description":"<é>","name":"f"},"type":"function"}]`},
		{"a single tool object is the list of that one tool", `{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"x":{"type":"number"}}}}}`, "[" + fn + "]"},
		{"a single bare function object", `{"name":"f","description":"d","parameters":{"type":"object","properties":{"x":{"type":"number"}}}}`, "[" + fn + "]"},
		{"a single tool object in a JSON string", `"{\"name\": \"f\", \"description\": \"d\", \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"number\"}}}}"`, "[" + fn + "]"},
		{"parameters as a JSON string are the schema", `[{"type":"function","function":{"name":"f","description":"d","parameters":"{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"number\"}}}"}}]`, "[" + fn + "]"},
		{"parameters as a JSON string, bare function", `[{"name":"f","description":"d","parameters":" {\"properties\":{\"x\":{\"type\":\"number\"}},\"type\":\"object\"} "}]`, "[" + fn + "]"},
		{"parameters as a string that is not a schema are kept", `[{"name":"f","parameters":"none"}]`, `[{"function":{"name":"f","parameters":"none"},"type":"function"}]`},
		{"a number", `5`, "!"},
		{"a string that is not JSON", `"get_weather"`, "!"},
		{"a string holding a string", `"\"x\""`, "!"},
		{"broken JSON in a string", `"[{\"name\": "`, "!"},
		{"trailing data in a string", `"[] []"`, "!"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := AppendCanonicalTools([]byte("x"), []byte(tt.raw))
			switch {
			case tt.want == "!":
				if !errors.Is(err, ErrBadTools) || string(got) != "x" {
					t.Fatalf("got %s, %v, %v; want ErrBadTools", got, ok, err)
				}
			case tt.want == "":
				if err != nil || ok || string(got) != "x" {
					t.Fatalf("got %s, %v, %v; want no tools", got, ok, err)
				}
			default:
				if err != nil || !ok || string(got) != "x"+tt.want {
					t.Fatalf("got %s, %v, %v\nwant %s", got, ok, err, tt.want)
				}
			}
		})
	}
}

func TestCanonicalCoversTools(t *testing.T) {
	canon := func(line string) string {
		var p Prompt
		if err := Decode([]byte(line), &p); err != nil {
			t.Fatal(err)
		}
		return string(p.AppendCanonical(nil))
	}
	bare := canon(`{"messages":[{"role":"user","content":"hi"}]}`)
	if canon(`{"messages":[{"role":"user","content":"hi"}],"tools":"[]"}`) != bare {
		t.Error("empty tools changed the canonical form")
	}
	a := canon(`{"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"a"}]}`)
	b := canon(`{"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"b"}]}`)
	if a == bare || a == b {
		t.Error("tools do not tell prompts apart")
	}
	if canon(`{"prompt":"hi","tools":[{"name":"a"}]}`) == canon(`{"prompt":"hi"}`) {
		t.Error("tools do not tell completion prompts apart")
	}
	if canon(`{"messages":[{"role":"tool","content":"r","tool_call_id":"1"}]}`) == canon(`{"messages":[{"role":"tool","content":"r","tool_call_id":"2"}]}`) {
		t.Error("tool_call_id does not tell prompts apart")
	}
	var p Prompt
	Decode([]byte(`{"messages":[{"role":"user","content":"hi"}],"tools":"get_weather"}`), &p)
	if _, err := p.AppendCanonicalStrict(nil); !errors.Is(err, ErrBadTools) {
		t.Errorf("strict canonical form of bad tools: %v", err)
	}
}

func TestUsesSystem(t *testing.T) {
	user := []Message{{Role: "user", Content: "q"}}
	sys := []Message{{Role: "system", Content: "s"}, {Role: "user", Content: "q"}}
	for _, tt := range []struct {
		system string
		msgs   []Message
		want   bool
	}{
		{"S", user, true},
		{"S", sys, false},
		{"S", nil, true},
		{"", user, false},
		{" \t\r\n", user, false},
		{"S", []Message{{Role: "assistant", Content: "hi"}, {Role: "system", Content: "s"}}, true},
	} {
		if got := UsesSystem(tt.system, tt.msgs); got != tt.want {
			t.Errorf("UsesSystem(%q, %v) = %v, want %v", tt.system, tt.msgs, got, tt.want)
		}
	}
}

// Every call of an answer gets an id of its own: one without gets
// call_<m>_<k>, one repeating an earlier call's id is re-addressed the
// same way (and counted), and a made-up id never takes one a later call
// already has.
func TestAddressCalls(t *testing.T) {
	call := func(id string) ToolCall { return ToolCall{ID: id, Type: "function", Function: FunctionCall{Name: "f"}} }
	for _, tt := range []struct {
		in          []string
		want        []string
		readdressed int
	}{
		{[]string{"a", "b"}, []string{"a", "b"}, 0},
		{[]string{"", ""}, []string{"call_3_1", "call_3_2"}, 0},
		{[]string{"x", "x", "x"}, []string{"x", "call_3_2", "call_3_3"}, 2},
		{[]string{"", "call_3_1"}, []string{"call_3_1", "call_3_2"}, 1},
		{[]string{"call_3_2", "call_3_2"}, []string{"call_3_2", "call_3_2_2"}, 1},
		{nil, nil, 0},
	} {
		var calls []ToolCall
		for _, id := range tt.in {
			calls = append(calls, call(id))
		}
		n := AddressCalls(calls, 3)
		var got []string
		for _, c := range calls {
			got = append(got, c.ID)
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) || n != tt.readdressed {
			t.Errorf("%q: got %q (%d re-addressed), want %q (%d)", tt.in, got, n, tt.want, tt.readdressed)
		}
	}
}
