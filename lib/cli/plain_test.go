package cli

import "testing"

// What the JSON decoders say, put in the record's terms: the messages the
// stages showed before, each with a Go type or a decoder's words in it.
func TestPlain(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`json: cannot unmarshal "\"x\"}" into Go struct field dedup.rawPrompt.messages of type []dedup.rawMessage`,
			`"messages" should be a list, not a string`},
		{`json: cannot unmarshal "1,\"content\":\"x\"}]}" into Go struct field dedup.rawPrompt[]dedup.rawMessagededup.rawMessage.messages.0.role of type string`,
			`"messages.0.role" should be a string, not a number`},
		{`json: cannot unmarshal "\"Say\",hi" into Go value of type stats.lineView`, `a string of the wrong kind`},
		{`messages is not a list of turns: cannot unmarshal "\"x\"" into Go value of type []extract.turn`,
			`messages is not a list of turns: a string where a list is expected`},
		{`json: cannot unmarshal string into Go struct field Usage.usage.prompt_tokens of type int`,
			`"usage.prompt_tokens" should be an integer, not a string`},
		{`json: cannot unmarshal "[1]" into Go struct field infer.promptLine.id of type record.ID`, `"id" cannot be a list`},
		{`json: invalid character 'i' looking for beginning of value: instruction,output`, `not valid JSON (unexpected 'i'): instruction,output`},
		{`json: expected 'true' but found invalid token: tru}`, `not valid JSON (near "tru}")`},
		{`unexpected end of JSON input`, `not valid JSON (it ends too early)`},
		{`cannot read /tmp/nope.json: no such file or directory`, `cannot read /tmp/nope.json: no such file or directory`},
		{`cannot read data.json: json: cannot unmarshal "[1]" into Go struct field infer.promptLine.id of type record.ID`,
			`cannot read data.json: "id" cannot be a list`},
		{`no_user_turn: the last message is not from the user`, `no_user_turn: the last message is not from the user`},
	} {
		if got := Plain(tt.in); got != tt.want {
			t.Errorf("Plain(%q)\n = %q\nwant %q", tt.in, got, tt.want)
		}
	}
}
