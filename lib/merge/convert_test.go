package merge

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// TestConvertSystemSlot: a top-level system prompt takes the system slot
// of the training record by the rule every stage follows
// (record.UsesSystem), in both formats; a tool result keeps the call it
// answers, and in ShareGPT the calls are a function_call turn.
func TestConvertSystemSlot(t *testing.T) {
	const out = `"output":{"text":"A","finish_reason":"stop","usage":{},"latency_ms":1,"attempts":1,"sample":0}`
	tests := []struct {
		name, in, messages, sharegpt, reason string
	}{
		{name: "top-level system and no system turn",
			in:       `{"id":"a","system":"S","messages":[{"role":"user","content":"Q"}],` + out + `}`,
			messages: `{"id":"a","messages":[{"role":"system","content":"S"},{"role":"user","content":"Q"},{"role":"assistant","content":"A"}]}`,
			sharegpt: `{"id":"a","conversations":[{"from":"system","value":"S"},{"from":"human","value":"Q"},{"from":"gpt","value":"A"}]}`},
		{name: "a system turn wins",
			in:       `{"id":"b","system":"S","messages":[{"role":"system","content":"T"},{"role":"user","content":"Q"}],` + out + `}`,
			messages: `{"id":"b","messages":[{"role":"system","content":"T"},{"role":"user","content":"Q"},{"role":"assistant","content":"A"}]}`,
			sharegpt: `{"id":"b","conversations":[{"from":"system","value":"T"},{"from":"human","value":"Q"},{"from":"gpt","value":"A"}]}`},
		{name: "a blank top-level system is none",
			in:       `{"id":"c","system":" ","messages":[{"role":"user","content":"Q"}],` + out + `}`,
			messages: `{"id":"c","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"A"}]}`,
			sharegpt: `{"id":"c","conversations":[{"from":"human","value":"Q"},{"from":"gpt","value":"A"}]}`},
		{name: "tool_call_id kept",
			in:       `{"id":"d","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"r","tool_call_id":"c1"}],` + out + `}`,
			messages: `{"id":"d","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"r","tool_call_id":"c1"},{"role":"assistant","content":"A"}]}`,
			sharegpt: `{"id":"d","conversations":[{"from":"human","value":"Q"},{"from":"function_call","value":"{\"name\":\"f\",\"arguments\":{}}"},{"from":"observation","value":"r"},{"from":"gpt","value":"A"}]}`},
		{name: "parallel calls after some text",
			in:       `{"id":"p","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"Checking.","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\": 1}"}},{"id":"b","type":"function","function":{"name":"g","arguments":"not json"}}]},{"role":"tool","content":"1","tool_call_id":"a"},{"role":"tool","content":"2","tool_call_id":"b"}],` + out + `}`,
			messages: `{"id":"p","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"Checking.","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\": 1}"}},{"id":"b","type":"function","function":{"name":"g","arguments":"not json"}}]},{"role":"tool","content":"1","tool_call_id":"a"},{"role":"tool","content":"2","tool_call_id":"b"},{"role":"assistant","content":"A"}]}`,
			sharegpt: `{"id":"p","conversations":[{"from":"human","value":"Q"},{"from":"gpt","value":"Checking."},{"from":"function_call","value":"[{\"name\":\"f\",\"arguments\":{\"x\":1}},{\"name\":\"g\",\"arguments\":\"not json\"}]"},{"from":"observation","value":"1"},{"from":"observation","value":"2"},{"from":"gpt","value":"A"}]}`},
		{name: "a system that is not text", in: `{"id":"e","system":5,"messages":[{"role":"user","content":"Q"}],` + out + `}`, reason: ReasonBadRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conversations := strings.Replace(tt.messages, `"messages":`, `"conversations":`, 1)
			for to, want := range map[string]string{toMessages: tt.messages, toShareGPT: tt.sharegpt, toConversations: conversations} {
				c := &converter{to: to}
				got, rej := c.convert([]byte(tt.in))
				switch {
				case tt.reason != "":
					if rej == nil || rej.reason != tt.reason {
						t.Errorf("--to %s: got %s, %+v; want reject %s", to, got, rej, tt.reason)
					}
				case rej != nil || string(got) != want:
					t.Errorf("--to %s: got %s %+v\nwant %s", to, got, rej, want)
				}
			}
		})
	}
}

// TestConvertConversation: a regenerated conversation replaces the
// prompt's in every format, up to its last regenerated turn; each
// assistant turn keeps its tool calls, and with --with-reasoning its
// reasoning; tools come along.
func TestConvertConversation(t *testing.T) {
	const prompt = `"messages":[{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":"old"}]`
	const tools = `"tools":"[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{}}}]"`
	call := `[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]`
	regenerated := `[{"role":"system","content":"S"},{"role":"user","content":"Weather in Paris?"},` +
		`{"role":"assistant","content":null,"reasoning_content":"R1","tool_calls":` + call + `},` +
		`{"role":"tool","tool_call_id":"call_1","content":"18C"},` +
		`{"role":"assistant","content":"It is 18C.","reasoning_content":"R2"},` +
		`{"role":"user","content":"Thanks"}]`
	turns := `[{"message":2,"finish_reason":"stop","usage":{"prompt_tokens":5,"completion_tokens":3}},{"message":4,"finish_reason":"stop","usage":{"prompt_tokens":9,"completion_tokens":4,"cached_tokens":5}}]`
	rec := func(id string, sample int, extra string) string {
		return `{"id":` + id + `,` + prompt + `,` + tools + extra + `,"output":{"messages":` + regenerated + `,"turns":` + turns +
			`,"truncated":{"reason":"context_full","turn":2,"detail":"d"},"finish_reason":"stop","sample":` + strconv.Itoa(sample) + `}}`
	}
	const canon = `[{"function":{"name":"get_weather","parameters":{}},"type":"function"}]`
	plain := `[{"role":"system","content":"S"},{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":"","tool_calls":` + call +
		`},{"role":"tool","content":"18C","tool_call_id":"call_1"},{"role":"assistant","content":"It is 18C."}]`
	reasoned := `[{"role":"system","content":"S"},{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":"","reasoning_content":"R1","tool_calls":` + call +
		`},{"role":"tool","content":"18C","tool_call_id":"call_1"},{"role":"assistant","content":"It is 18C.","reasoning_content":"R2"}]`
	gptCall := `{"from":"function_call","value":"{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}"}`
	tests := []struct {
		name, in, to string
		reasoning    bool
		want         string
	}{
		{"messages", rec(`"a"`, 0, ""), toMessages, false, `{"id":"a","messages":` + plain + `,"tools":` + canon + `}`},
		{"messages with reasoning, sample 1", rec(`"a"`, 1, ""), toMessages, true, `{"id":"a","sample":1,"messages":` + reasoned + `,"tools":` + canon + `}`},
		{"conversations", rec(`7`, 0, ""), toConversations, false, `{"id":"7","conversations":` + plain + `,"tools":` + canon + `}`},
		{"conversations with reasoning", rec(`7`, 1, ""), toConversations, true, `{"id":"7","sample":1,"conversations":` + reasoned + `,"tools":` + canon + `}`},
		{"sharegpt", rec(`"a"`, 0, ""), toShareGPT, false, `{"id":"a","conversations":[{"from":"system","value":"S"},{"from":"human","value":"Weather in Paris?"},` +
			gptCall + `,{"from":"observation","value":"18C"},{"from":"gpt","value":"It is 18C."}],"tools":` + quoteJSON(canon) + `}`},
		{"sharegpt with reasoning", rec(`"a"`, 0, ""), toShareGPT, true, `{"id":"a","conversations":[{"from":"system","value":"S"},{"from":"human","value":"Weather in Paris?"},` +
			`{"from":"gpt","value":"<think>\nR1\n</think>\n\n"},` + gptCall + `,{"from":"observation","value":"18C"},{"from":"gpt","value":"<think>\nR2\n</think>\n\nIt is 18C."}],"tools":` + quoteJSON(canon) + `}`},
		{"a top-level system does not replace the conversation's", rec(`"a"`, 0, `,"system":"T"`), toMessages, false, `{"id":"a","messages":` + plain + `,"tools":` + canon + `}`},
		{"a single answer's tool calls", `{"id":"s","messages":[{"role":"user","content":"Q"}],"output":{"text":"","tool_calls":` + call + `,"finish_reason":"stop","sample":0}}`, toConversations, false,
			`{"id":"s","conversations":[{"role":"user","content":"Q"},{"role":"assistant","content":"","tool_calls":` + call + `}]}`},
		{"a single answer in sharegpt with its call", `{"id":"s","messages":[{"role":"user","content":"Q"}],"output":{"text":"","reasoning":"R","tool_calls":` + call + `,"finish_reason":"stop","sample":0}}`, toShareGPT, true,
			`{"id":"s","conversations":[{"from":"human","value":"Q"},{"from":"gpt","value":"<think>\nR\n</think>\n\n"},` + gptCall + `]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &converter{to: tt.to, withReasoning: tt.reasoning}
			got, rej := c.convert([]byte(tt.in))
			if rej != nil || string(got) != tt.want {
				t.Errorf("got %s %+v\nwant %s", got, rej, tt.want)
			}
		})
	}
	// Bad parts of a conversation are rejected where they are read.
	for _, bad := range []string{
		strings.Replace(rec(`"a"`, 0, ""), `"tools":"[`, `"tools":"nope[`, 1),
		strings.Replace(rec(`"a"`, 0, ""), `"turns":[`, `"turns":[{"message":9},`, 1),
	} {
		c := &converter{to: toMessages}
		if got, rej := c.convert([]byte(bad)); rej == nil || rej.reason != ReasonBadRecord {
			t.Errorf("%s: got %s %+v, want bad_record", bad, got, rej)
		}
	}
}

func quoteJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestKeptTurns: a conversation a tool call nobody answered ended keeps
// its turns up to its last complete exchange (the last turn that made no
// call), unless --keep-truncated; any other keeps all its turns.
func TestKeptTurns(t *testing.T) {
	const call, noCall = `[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]`, `[]`
	tests := []struct {
		name   string
		calls  []string // tool_calls of the assistant message of each turn
		reason string   // output.truncated.reason, "" for none
		keep   bool     // --keep-truncated
		want   int      // turns kept
	}{
		{"complete", []string{noCall, call, noCall}, "", false, 3},
		{"complete, ending on a call", []string{noCall, call}, "", false, 2},
		{"context full is not cut", []string{noCall, call}, "context_full", false, 2},
		{"unpaired call cut to the last complete exchange", []string{noCall, call, call}, "tool_unpaired", false, 1},
		{"tool rounds cut the same way", []string{call, noCall, call}, "tool_rounds", false, 2},
		{"nothing complete", []string{call, call}, "tool_unpaired", false, 0},
		{"null calls are none", []string{`null`, call}, "tool_unpaired", false, 1},
		{"--keep-truncated keeps all", []string{noCall, call, call}, "tool_unpaired", true, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &converter{keepTruncated: tt.keep}
			out := &c.gen.Output
			for i, calls := range tt.calls {
				out.Messages = append(out.Messages, convMessage{Role: "user"}, convMessage{Role: "assistant", ToolCalls: []byte(calls)})
				out.Turns = append(out.Turns, regeneratedTurn{Message: 2*i + 1})
			}
			if tt.reason != "" {
				out.Truncated = &convTruncation{Reason: tt.reason}
			}
			if got := c.keptTurns(); len(got) != tt.want {
				t.Errorf("kept %d turns, want %d", len(got), tt.want)
			}
		})
	}
}
