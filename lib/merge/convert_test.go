package merge

import (
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
			for to, want := range map[string]string{toMessages: tt.messages, toShareGPT: tt.sharegpt} {
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
