package extract

import (
	"bytes"
	stdjson "encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// convertCase is one record through Convert. want lists the candidates:
// a prompt record as its exact JSON line, or "reject <reason>" / "filter
// <reason>". In a prompt, "$HASH" stands for the content id of that very
// prompt (record.ContentID of its canonical form), so the test states that
// ids without a dataset id are the hash of what was written.
type convertCase struct {
	name   string
	opts   Options
	in     string
	want   []string
	detail string // a reject's detail must contain this
}

var first, allButLast, each, whole = Options{Turns: TurnsFirst}, Options{Turns: TurnsAllButLast}, Options{Turns: TurnsEach}, Options{Turns: TurnsAll}

// oasstTree is an OpenAssistant tree: a root question, two answers, a
// follow-up question below each, and an answer to one of them.
const oasstTree = `{"message_tree_id":"m1","tree_state":"ready_for_export","prompt":{"message_id":"m1","parent_id":null,"user_id":"u1","text":"What is a prime?","role":"prompter","lang":"en","review_count":3,"rank":null,"synthetic":false,"replies":[` +
	`{"message_id":"m2","parent_id":"m1","text":"A number with two divisors.","role":"assistant","lang":"en","rank":0,"replies":[{"message_id":"m3","parent_id":"m2","text":"Is 1 one?","role":"prompter","lang":"en","replies":[{"message_id":"m4","parent_id":"m3","text":"No.","role":"assistant","lang":"en","replies":[]}]}]},` +
	`{"message_id":"m6","parent_id":"m1","text":"Like 2, 3, 5.","role":"assistant","lang":"en","rank":1,"replies":[{"message_id":"m5","parent_id":"m6","text":"And 9?","role":"prompter","lang":"en","replies":[]}]}]},"origin":"https://open-assistant.io"}`

const fourTurns = `{"id":"a","conversations":[{"from":"human","value":"Hi"},{"from":"gpt","value":"Hello"},{"from":"human","value":"More"},{"from":"gpt","value":"Sure"}]}`

var convertCases = []convertCase{
	// ShareGPT and Infinity-Instruct.
	{name: "sharegpt first", opts: first, in: fourTurns,
		want: []string{`{"id":"a","messages":[{"role":"user","content":"Hi"}]}`}},
	{name: "sharegpt all-but-last", opts: allButLast, in: fourTurns,
		want: []string{`{"id":"a","messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"},{"role":"user","content":"More"}]}`}},
	{name: "sharegpt each", opts: each, in: fourTurns, want: []string{
		`{"id":"a#1","messages":[{"role":"user","content":"Hi"}]}`,
		`{"id":"a#2","messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"},{"role":"user","content":"More"}]}`}},
	{name: "a system turn of the conversation wins over the top-level system", opts: first,
		in:   `{"id":7,"system":"Be brief.","conversations":[{"from":"system","value":"S2"},{"from":"user","value":"Q"},{"from":"assistant","value":"A"}]}`,
		want: []string{`{"id":7,"messages":[{"role":"system","content":"S2"},{"role":"user","content":"Q"}]}`}},
	{name: "the top-level system goes first when the conversation has no system turn", opts: first,
		in:   `{"id":7,"system":"Be brief.","conversations":[{"from":"user","value":"Q"},{"from":"assistant","value":"A"}]}`,
		want: []string{`{"id":7,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Q"}]}`}},
	{name: "a blank system turn leaves the slot to the top-level system", opts: first,
		in:   `{"id":7,"system":"Be brief.","messages":[{"role":"system","content":" "},{"role":"user","content":"Q"}]}`,
		want: []string{`{"id":7,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Q"}]}`}},
	{name: "a system turn later in the conversation does not take the slot", opts: allButLast,
		in:   `{"id":7,"system":"S","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"A"},{"role":"system","content":"S2"},{"role":"user","content":"Q2"}]}`,
		want: []string{`{"id":7,"messages":[{"role":"system","content":"S"},{"role":"user","content":"Q"},{"role":"assistant","content":"A"},{"role":"system","content":"S2"},{"role":"user","content":"Q2"}]}`}},
	{name: "empty system prompts are dropped", opts: first,
		in:   `{"id":"s","system":"","conversations":[{"from":"system","value":" "},{"from":"human","value":"Q"}]}`,
		want: []string{`{"id":"s","messages":[{"role":"user","content":"Q"}]}`}},
	{name: "assistant aliases and capitalised roles", opts: allButLast,
		in:   `{"id":"r","conversations":[{"from":"Human","value":"1"},{"from":"chatgpt","value":"a"},{"from":"user","value":"2"},{"from":"bard","value":"b"},{"from":"human","value":"3"},{"from":"bing","value":"c"},{"from":"USER","value":"4"},{"from":"model","value":"d"},{"from":"human","value":"5"}]}`,
		want: []string{`{"id":"r","messages":[{"role":"user","content":"1"},{"role":"assistant","content":"a"},{"role":"user","content":"2"},{"role":"assistant","content":"b"},{"role":"user","content":"3"},{"role":"assistant","content":"c"},{"role":"user","content":"4"},{"role":"assistant","content":"d"},{"role":"user","content":"5"}]}`}},
	{name: "tool use: function_call, observation, tools", opts: allButLast,
		in:   `{"conversations":[{"from":"human","value":"Weather?"},{"from":"function_call","value":"{\"name\": \"w\"}"},{"from":"observation","value":"{\"t\": 20}"},{"from":"gpt","value":"20C"},{"from":"human","value":"Thanks"},{"from":"gpt","value":"Bye"}],"tools":"[{\"name\": \"w\"}]"}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":"","tool_calls":[{"id":"call_2_1","type":"function","function":{"name":"w","arguments":"{}"}}]},{"role":"tool","content":"{\"t\": 20}","tool_call_id":"call_2_1"},{"role":"assistant","content":"20C"},{"role":"user","content":"Thanks"}],"tools":[{"function":{"name":"w"},"type":"function"}]}`}},
	{name: "empty tools are left out", opts: first,
		in:   `{"id":"t","conversations":[{"from":"human","value":"Q"}],"tools":"[]"}`,
		want: []string{`{"id":"t","messages":[{"role":"user","content":"Q"}]}`}},
	{name: "a greeting before the first user turn is kept", opts: first,
		in:   `{"id":"g","conversations":[{"from":"gpt","value":"Hello!"},{"from":"human","value":"Q"},{"from":"gpt","value":"A"}]}`,
		want: []string{`{"id":"g","messages":[{"role":"assistant","content":"Hello!"},{"role":"user","content":"Q"}]}`}},
	{name: "LMSYS conversation of role/content", opts: first,
		in:   `{"conversation_id":"x","conversation":[{"role":"user","content":"Q"},{"role":"assistant","content":"A"}]}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Q"}]}`}},
	{name: "no user turn", opts: first, in: `{"id":"n","conversations":[{"from":"gpt","value":"A"}]}`,
		want: []string{"reject no_user_turn"}},
	{name: "empty conversation", opts: first, in: `{"id":"e","conversations":[]}`, want: []string{"reject empty"}},
	{name: "blank user turn", opts: first, in: `{"id":"b","conversations":[{"from":"human","value":"   "},{"from":"gpt","value":"A"}]}`,
		want: []string{"reject empty"}},
	{name: "blank escaped user turn", opts: first, in: `{"id":"b","conversations":[{"from":"human","value":"\n\t \r"}]}`,
		want: []string{"reject empty"}},
	{name: "unknown role", opts: first, in: `{"id":"u","conversations":[{"from":"narrator","value":"Once"},{"from":"human","value":"Q"}]}`,
		want: []string{"reject unknown_role"}, detail: `conversations[0]: unknown role "narrator"`},
	{name: "conversations not a list", opts: first, in: `{"id":"l","conversations":"Q"}`, want: []string{"reject unknown_layout"}},
	{name: "two user turns in a row: first is fine", opts: first,
		in:   `{"id":"d","conversations":[{"from":"human","value":"Q1"},{"from":"human","value":"Q2"},{"from":"gpt","value":"A"}]}`,
		want: []string{`{"id":"d","messages":[{"role":"user","content":"Q1"}]}`}},
	{name: "two user turns in a row: all-but-last is unanswered", opts: allButLast,
		in:   `{"id":"d","conversations":[{"from":"human","value":"Q1"},{"from":"human","value":"Q2"},{"from":"gpt","value":"A"}]}`,
		want: []string{"reject unanswered_turn"}, detail: "user turn 1 has no assistant answer before user turn 2"},
	{name: "a blank answer does not count as one", opts: each,
		in:   `{"id":"d","conversations":[{"from":"human","value":"Q1"},{"from":"gpt","value":""},{"from":"human","value":"Q2"}]}`,
		want: []string{`{"id":"d#1","messages":[{"role":"user","content":"Q1"}]}`, "reject unanswered_turn"}},
	{name: "escapes and non-ASCII pass through unchanged", opts: first,
		in:   `{"id":"x","conversations":[{"from":"human","value":"a\"b\\n\u00e9 ü 数据 \ud83d\ude00 \/"}]}`,
		want: []string{`{"id":"x","messages":[{"role":"user","content":"a\"b\\n\u00e9 ü 数据 \ud83d\ude00 \/"}]}`}},
	{name: "invalid UTF-8 is replaced", opts: first, in: "{\"id\":\"v\",\"conversations\":[{\"from\":\"human\",\"value\":\"a\xffb\"}]}",
		want: []string{"{\"id\":\"v\",\"messages\":[{\"role\":\"user\",\"content\":\"a\uFFFDb\"}]}"}},

	// OpenAI messages.
	{name: "openai messages with system", opts: first,
		in:   `{"messages":[{"role":"system","content":"S"},{"role":"user","content":"Q"},{"role":"assistant","content":"A"}]}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"system","content":"S"},{"role":"user","content":"Q"}]}`}},
	{name: "developer role is a system prompt", opts: first,
		in:   `{"id":"dev","messages":[{"role":"developer","content":"S"},{"role":"user","content":"Q"}]}`,
		want: []string{`{"id":"dev","messages":[{"role":"system","content":"S"},{"role":"user","content":"Q"}]}`}},
	{name: "openai tool calls and tool results", opts: allButLast,
		in:   `{"id":"tc","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"r","name":"f"},{"role":"assistant","content":"A"},{"role":"user","content":"Q2"}],"tools":[{"type":"function","function":{"name":"f"}}]}`,
		want: []string{`{"id":"tc","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"r","name":"f"},{"role":"assistant","content":"A"},{"role":"user","content":"Q2"}],"tools":[{"function":{"name":"f"},"type":"function"}]}`}},
	{name: "content parts joined by newlines", opts: first,
		in:   `{"id":"p","messages":[{"role":"user","content":[{"type":"text","text":"a\"1"},{"type":"text","text":"b"}]}]}`,
		want: []string{`{"id":"p","messages":[{"role":"user","content":"a\"1\nb"}]}`}},
	{name: "LLaMA-Factory parts with value", opts: first,
		in:   `{"messages":[{"role":"user","content":[{"type":"text","value":"hi"}],"loss_weight":0.0},{"role":"assistant","content":[{"type":"text","value":"Hello"}],"loss_weight":1.0}]}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"hi"}]}`}},
	{name: "image parts are multimodal", opts: first,
		in:   `{"id":"img","messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"x"}}]}]}`,
		want: []string{"reject multimodal"}},
	{name: "other non-text parts", opts: first,
		in:   `{"id":"f","messages":[{"role":"user","content":[{"type":"text","text":"Summarise"},{"type":"file","file":{"file_id":"x"}}]}]}`,
		want: []string{"reject non_text_content"}},
	{name: "content that is a number", opts: first, in: `{"id":"n","messages":[{"role":"user","content":5}]}`,
		want: []string{"reject unknown_layout"}},
	{name: "message without role", opts: first, in: `{"id":"n","messages":[{"content":"Q"}]}`,
		want: []string{"reject unknown_role"}},

	// Alpaca.
	{name: "alpaca instruction", opts: first, in: `{"instruction":"Describe crepes.","input":"","output":"..."}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Describe crepes."}]}`}},
	{name: "alpaca input appended after a blank line", opts: first,
		in:   `{"instruction":"Translate.","input":"Bonjour \"x\"","output":"Hello"}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Translate.\n\nBonjour \"x\""}]}`}},
	{name: "alpaca blank input is no input", opts: first, in: `{"instruction":"Do.","input":"  \n"}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Do."}]}`}},
	{name: "alpaca with only an input", opts: first, in: `{"instruction":"","input":"Text"}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Text"}]}`}},
	{name: "alpaca empty", opts: first, in: `{"instruction":"","input":""}`, want: []string{"reject empty"}},
	{name: "alpaca system and history, all-but-last", opts: allButLast,
		in:   `{"instruction":"Q2","input":"","system":"S","history":[["Q1","A1"]]}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"system","content":"S"},{"role":"user","content":"Q1"},{"role":"assistant","content":"A1"},{"role":"user","content":"Q2"}]}`}},
	{name: "alpaca history, first turn", opts: first,
		in:   `{"instruction":"Q2","system":"S","history":[["Q1","A1"]]}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"system","content":"S"},{"role":"user","content":"Q1"}]}`}},
	{name: "alpaca history without an answer", opts: allButLast, in: `{"instruction":"Q2","history":[["Q1"]]}`,
		want: []string{"reject unanswered_turn"}},
	{name: "alpaca instruction that is not text", opts: first, in: `{"instruction":["a"]}`, want: []string{"reject unknown_layout"}},

	// MT-Bench.
	{name: "mt-bench first", opts: first, in: `{"question_id":81,"category":"writing","turns":["Q1","Q2"]}`,
		want: []string{`{"id":81,"messages":[{"role":"user","content":"Q1"}],"meta":{"category":"writing"}}`}},
	{name: "mt-bench each: turn 2 has no recorded answer", opts: each, in: `{"question_id":81,"category":"writing","turns":["Q1","Q2"]}`,
		want: []string{`{"id":"81#1","messages":[{"role":"user","content":"Q1"}],"meta":{"category":"writing"}}`, "reject unanswered_turn"}},
	{name: "mt-bench all-but-last", opts: allButLast, in: `{"question_id":81,"turns":["Q1","Q2"]}`,
		want: []string{"reject unanswered_turn"}},
	{name: "mt-bench no turns", opts: first, in: `{"question_id":1,"turns":[]}`, want: []string{"reject empty"}},

	// Plain prompts.
	{name: "prompt", opts: first, in: `{"id":"p1","prompt":"Write a poem."}`,
		want: []string{`{"id":"p1","messages":[{"role":"user","content":"Write a poem."}]}`}},
	{name: "question", opts: first, in: `{"id":"q1","question":"Why?","answer":"Because."}`,
		want: []string{`{"id":"q1","messages":[{"role":"user","content":"Why?"}]}`}},
	{name: "text", opts: first, in: `{"text":"Hello"}`, want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Hello"}]}`}},
	{name: "prompt before question before text", opts: first, in: `{"id":"o","text":"T","question":"Q","prompt":"P"}`,
		want: []string{`{"id":"o","messages":[{"role":"user","content":"P"}]}`}},
	{name: "prompt that is a list of messages", opts: first,
		in:   `{"id":"pm","prompt":[{"role":"user","content":"Q"}],"chosen":[{"role":"assistant","content":"A"}]}`,
		want: []string{`{"id":"pm","messages":[{"role":"user","content":"Q"}]}`}},
	{name: "messages beat a copy of the prompt", opts: first,
		in:   `{"prompt":"Q","prompt_id":"z","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"A"}]}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Q"}]}`}},
	{name: "prompt that is an object", opts: first, in: `{"prompt":{"a":1}}`, want: []string{"reject unknown_layout"}},

	// OpenAI batch requests.
	{name: "batch chat request", opts: first,
		in:   `{"custom_id":"req-1","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"Q"}],"max_tokens":10}}`,
		want: []string{`{"id":"req-1","messages":[{"role":"system","content":"S"},{"role":"user","content":"Q"}]}`}},
	{name: "batch completion request stays a completion", opts: first,
		in:   `{"custom_id":"req-2","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"Once upon"}}`,
		want: []string{`{"id":"req-2","prompt":"Once upon"}`}},
	{name: "batch completion with an empty id", opts: first, in: `{"custom_id":"","body":{"prompt":"Once upon"}}`,
		want: []string{`{"id":"$HASH","prompt":"Once upon"}`}},
	{name: "a body without custom_id is not a batch line", opts: first,
		in:   `{"body":{"text":"mail"},"conversations":[{"from":"human","value":"Q"}]}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Q"}]}`}},
	{name: "batch prompt list", opts: first, in: `{"custom_id":"r","body":{"prompt":["a","b"]}}`, want: []string{"reject unknown_layout"}},
	{name: "batch blank prompt", opts: first, in: `{"custom_id":"r","body":{"prompt":" "}}`, want: []string{"reject empty"}},

	// Records that are not records.
	{name: "malformed JSON", opts: first, in: `{"id":"m","conversations":[`, want: []string{"reject malformed_json"}},
	{name: "trailing data", opts: first, in: `{"prompt":"a"} {"prompt":"b"}`, want: []string{"reject malformed_json"}},
	{name: "not JSON at all", opts: first, in: `hello`, want: []string{"reject malformed_json"}},
	{name: "an array of records", opts: first, in: `[{"prompt":"a"}]`, want: []string{"reject not_an_object"}},
	{name: "an array of messages is a conversation (xtuner's openai lines)", opts: whole, in: `[{"role":"user","content":"Q"},{"role":"assistant","content":"A","loss":false},{"role":"user","content":"Q2"},{"role":"assistant","content":"A2"}]`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"A","weight":0},{"role":"user","content":"Q2"},{"role":"assistant","content":"A2"}]}`}},
	{name: "a string", opts: first, in: `"prompt"`, want: []string{"reject not_an_object"}},
	{name: "unknown layout", opts: first, in: `{"id":1,"foo":"bar"}`, want: []string{"reject unknown_layout"}},

	// Ids.
	{name: "fractional id", opts: first, in: `{"id":1.5,"prompt":"a"}`, want: []string{"reject bad_id"}},
	{name: "object id", opts: first, in: `{"id":{"a":1},"prompt":"a"}`, want: []string{"reject bad_id"}},
	{name: "huge integer id", opts: first, in: `{"id":123456789012345678901234567890,"prompt":"a"}`, want: []string{"reject bad_id"}},
	{name: "null and empty ids mean none", opts: first, in: `{"id":null,"question_id":"","prompt":"a"}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"a"}]}`}},
	{name: "id before question_id before custom_id", opts: first, in: `{"custom_id":"c","question_id":2,"prompt":"a"}`,
		want: []string{`{"id":2,"messages":[{"role":"user","content":"a"}]}`}},
	{name: "id prefix on a string id", opts: Options{IDPrefix: "ii/"}, in: `{"id":"a\"b","prompt":"a"}`,
		want: []string{`{"id":"ii/a\"b","messages":[{"role":"user","content":"a"}]}`}},
	{name: "id prefix on an integer id", opts: Options{IDPrefix: "3m-"}, in: `{"id":-12,"prompt":"a"}`,
		want: []string{`{"id":"3m--12","messages":[{"role":"user","content":"a"}]}`}},
	{name: "id prefix on a content id", opts: Options{IDPrefix: "x-"}, in: `{"prompt":"a"}`,
		want: []string{`{"id":"x-$HASH","messages":[{"role":"user","content":"a"}]}`}},
	{name: "id prefix with each", opts: Options{Turns: TurnsEach, IDPrefix: "p-"}, in: fourTurns, want: []string{
		`{"id":"p-a#1","messages":[{"role":"user","content":"Hi"}]}`,
		`{"id":"p-a#2","messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"},{"role":"user","content":"More"}]}`}},
	{name: "content ids with each need no suffix", opts: each,
		in: `{"conversations":[{"from":"human","value":"Q1"},{"from":"gpt","value":"A"},{"from":"human","value":"Q2"}]}`, want: []string{
			`{"id":"$HASH","messages":[{"role":"user","content":"Q1"}]}`,
			`{"id":"$HASH","messages":[{"role":"user","content":"Q1"},{"role":"assistant","content":"A"},{"role":"user","content":"Q2"}]}`}},
	{name: "id field", opts: Options{IDField: "uuid"}, in: `{"id":"ignored","uuid":"u-1","prompt":"a"}`,
		want: []string{`{"id":"u-1","messages":[{"role":"user","content":"a"}]}`}},
	{name: "id field missing", opts: Options{IDField: "uuid"}, in: `{"id":"ignored","prompt":"a"}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"a"}]}`}},

	// Meta and source.
	{name: "keep fields in order, missing and null ones left out", opts: Options{Keep: []string{"label", "reward", "langdetect", "missing", "id"}, Source: "ii/0625"},
		in:   `{"id":"k","conversations":[{"from":"human","value":"Q"}],"label":{"ability_en":["x"]},"langdetect":"en","reward":null}`,
		want: []string{`{"id":"k","messages":[{"role":"user","content":"Q"}],"source":"ii/0625","meta":{"label":{"ability_en":["x"]},"langdetect":"en","id":"k"}}`}},
	{name: "keep a field extract also reads", opts: Options{Keep: []string{"source", "conversations"}},
		in:   `{"id":"k","source":"orig","conversations":[{"from":"human","value":"Q"}]}`,
		want: []string{`{"id":"k","messages":[{"role":"user","content":"Q"}],"meta":{"source":"orig","conversations":[{"from":"human","value":"Q"}]}}`}},
	{name: "mt-bench category with keep", opts: Options{Keep: []string{"category"}}, in: `{"question_id":1,"category":"math","turns":["Q"]}`,
		want: []string{`{"id":1,"messages":[{"role":"user","content":"Q"}],"meta":{"category":"math"}}`}},

	// Filters.
	{name: "lang kept", opts: Options{Lang: []string{"en", "zh"}}, in: `{"id":"l","langdetect":"zh","prompt":"数据"}`,
		want: []string{`{"id":"l","messages":[{"role":"user","content":"数据"}]}`}},
	{name: "lang filtered", opts: Options{Lang: []string{"en"}}, in: `{"id":"l","langdetect":"zh","prompt":"数据"}`,
		want: []string{"filter lang"}},
	{name: "no langdetect is filtered", opts: Options{Lang: []string{"en"}}, in: `{"id":"l","prompt":"x"}`,
		want: []string{"filter lang"}},
	{name: "rejects come before filters", opts: Options{Lang: []string{"en"}}, in: `{"id":"l","langdetect":"zh","conversations":[]}`,
		want: []string{"reject empty"}},
	{name: "min-chars counts characters, not bytes or escapes", opts: Options{MinChars: 4},
		in: `{"id":"c","prompt":"é\n\ud83d\ude00"}`, want: []string{"filter too_short"}},
	{name: "min-chars inclusive", opts: Options{MinChars: 3}, in: `{"id":"c","prompt":"é\n\ud83d\ude00"}`,
		want: []string{`{"id":"c","messages":[{"role":"user","content":"é\n\ud83d\ude00"}]}`}},
	{name: "max-chars counts every message", opts: Options{Turns: TurnsAllButLast, MaxChars: 5},
		in:   `{"id":"c","system":"ab","conversations":[{"from":"human","value":"cd"},{"from":"gpt","value":"e"},{"from":"human","value":"f"}]}`,
		want: []string{"filter too_long"}},
	{name: "max-chars inclusive", opts: Options{Turns: TurnsAllButLast, MaxChars: 6},
		in:   `{"id":"c","system":"ab","conversations":[{"from":"human","value":"cd"},{"from":"gpt","value":"e"},{"from":"human","value":"f"}]}`,
		want: []string{`{"id":"c","messages":[{"role":"system","content":"ab"},{"role":"user","content":"cd"},{"role":"assistant","content":"e"},{"role":"user","content":"f"}]}`}},
	{name: "filters apply per turn with each", opts: Options{Turns: TurnsEach, MaxChars: 10}, in: fourTurns,
		want: []string{`{"id":"a#1","messages":[{"role":"user","content":"Hi"}]}`, "filter too_long"}},

	// Dolly: the context is the instruction's input.
	{name: "dolly context after the instruction", opts: first,
		in:   `{"instruction":"When did Virgin Australia start operating?","context":"Virgin Australia commenced services on 31 August 2000.","response":"On 31 August 2000.","category":"closed_qa"}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"When did Virgin Australia start operating?\n\nVirgin Australia commenced services on 31 August 2000."}]}`}},
	{name: "dolly empty context, category kept", opts: Options{Keep: []string{"category"}},
		in:   `{"instruction":"Give me three colours.","context":"","response":"Red, green, blue.","category":"brainstorming"}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Give me three colours."}],"meta":{"category":"brainstorming"}}`}},
	{name: "input and context both kept, in that order", opts: first, in: `{"instruction":"I","input":"In","context":"C"}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"I\n\nIn\n\nC"}]}`}},
	{name: "dolly context that is not text", opts: first, in: `{"instruction":"I","context":["C"]}`, want: []string{"reject unknown_layout"}},

	// Preference pairs.
	{name: "HH-RLHF pair", opts: allButLast,
		in:   `{"chosen":"\n\nHuman: What is 2+2?\n\nAssistant: 4.\n\nHuman: And 3+3?\n\nAssistant: 6.","rejected":"\n\nHuman: What is 2+2?\n\nAssistant: 4.\n\nHuman: And 3+3?\n\nAssistant: I don't know."}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"What is 2+2?"},{"role":"assistant","content":"4."},{"role":"user","content":"And 3+3?"}]}`}},
	{name: "HH-RLHF pair, first turn", opts: first,
		in:   `{"chosen":"\n\nHuman: What is 2+2?\n\nAssistant: 4.\n\nHuman: And 3+3?\n\nAssistant: 6.","rejected":"\n\nHuman: What is 2+2?\n\nAssistant: 4.\n\nHuman: And 3+3?\n\nAssistant: I don't know."}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"What is 2+2?"}]}`}},
	{name: "HH-RLHF pair with different prompts", opts: first,
		in:   `{"chosen":"\n\nHuman: Hi\n\nAssistant: Hello","rejected":"\n\nHuman: Hey\n\nAssistant: Go away"}`,
		want: []string{"reject preference_mismatch"}, detail: "differ before their last Assistant: answer"},
	{name: "HH-RLHF text without turns", opts: first, in: `{"chosen":"good","rejected":"bad"}`,
		want: []string{"reject unknown_layout"}},
	{name: "pair of message lists (UltraFeedback, without its messages copy)", opts: first,
		in:   `{"prompt_id":"p1","chosen":[{"role":"user","content":"Name a prime."},{"role":"assistant","content":"7"}],"rejected":[{"role":"user","content":"Name a prime."},{"role":"assistant","content":"8"}],"score_chosen":9.0,"score_rejected":2.0}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Name a prime."}]}`}},
	{name: "pair kept in meta", opts: Options{Keep: []string{"chosen", "rejected"}},
		in:   `{"id":"k","chosen":[{"role":"user","content":"Q"},{"role":"assistant","content":"A"}],"rejected":[{"role":"user","content":"Q"},{"role":"assistant","content":"B"}]}`,
		want: []string{`{"id":"k","messages":[{"role":"user","content":"Q"}],"meta":{"chosen":[{"role":"user","content":"Q"},{"role":"assistant","content":"A"}],"rejected":[{"role":"user","content":"Q"},{"role":"assistant","content":"B"}]}}`}},
	{name: "LLaMA-Factory v1 DPO pair", opts: first,
		in:   `{"chosen_messages":[{"role":"system","content":[{"type":"text","value":"Be exact."}],"loss_weight":0.0},{"role":"user","content":[{"type":"text","value":"Translate: bonjour"}],"loss_weight":0.0},{"role":"assistant","content":[{"type":"text","value":"hello"}],"loss_weight":1.0}],"rejected_messages":[{"role":"system","content":[{"type":"text","value":"Be exact."}],"loss_weight":0.0},{"role":"user","content":[{"type":"text","value":"Translate: bonjour"}],"loss_weight":0.0},{"role":"assistant","content":[{"type":"text","value":"good night"}],"loss_weight":1.0}]}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"system","content":"Be exact."},{"role":"user","content":"Translate: bonjour"}]}`}},
	{name: "pair whose prompts differ", opts: first,
		in:   `{"chosen":[{"role":"user","content":"Q1"},{"role":"assistant","content":"A"}],"rejected":[{"role":"user","content":"Q2"},{"role":"assistant","content":"B"}]}`,
		want: []string{"reject preference_mismatch"}, detail: "differ at turn 1"},
	{name: "pair whose histories differ in length", opts: first,
		in:   `{"chosen":[{"role":"user","content":"Q"},{"role":"assistant","content":"A"}],"rejected":[{"role":"user","content":"Q"},{"role":"assistant","content":"A"},{"role":"user","content":"Q"},{"role":"assistant","content":"B"}]}`,
		want: []string{"reject preference_mismatch"}},
	{name: "pair spelled differently is the same prompt", opts: first,
		in:   `{"chosen":[{"role":"user","content":"caf\u00e9"},{"role":"assistant","content":"A"}],"rejected":[{"from":"human","value":"café"},{"from":"gpt","value":"B"}]}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"caf\u00e9"}]}`}},
	{name: "pair that does not end with an answer", opts: first,
		in:   `{"chosen":[{"role":"user","content":"Q"}],"rejected":[{"role":"user","content":"Q"}]}`,
		want: []string{"reject unknown_layout"}, detail: "does not end with an assistant answer"},
	{name: "an explicit prompt beats the pair", opts: first,
		in:   `{"prompt":"Q","chosen":[{"role":"assistant","content":"A"}],"rejected":[{"role":"assistant","content":"B"}]}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Q"}]}`}},

	// OpenAssistant trees: two branches below the root.
	{name: "oasst tree, first", opts: first, in: oasstTree,
		want: []string{`{"id":"m1","messages":[{"role":"user","content":"What is a prime?"}]}`}},
	{name: "oasst tree, each", opts: each, in: oasstTree, want: []string{
		`{"id":"m1","messages":[{"role":"user","content":"What is a prime?"}]}`,
		`{"id":"m3","messages":[{"role":"user","content":"What is a prime?"},{"role":"assistant","content":"A number with two divisors."},{"role":"user","content":"Is 1 one?"}]}`,
		`{"id":"m5","messages":[{"role":"user","content":"What is a prime?"},{"role":"assistant","content":"Like 2, 3, 5."},{"role":"user","content":"And 9?"}]}`}},
	{name: "oasst tree, all-but-last: the last question of each branch", opts: allButLast, in: oasstTree, want: []string{
		`{"id":"m3","messages":[{"role":"user","content":"What is a prime?"},{"role":"assistant","content":"A number with two divisors."},{"role":"user","content":"Is 1 one?"}]}`,
		`{"id":"m5","messages":[{"role":"user","content":"What is a prime?"},{"role":"assistant","content":"Like 2, 3, 5."},{"role":"user","content":"And 9?"}]}`}},
	{name: "oasst tree, prefix and meta", opts: Options{Turns: TurnsFirst, IDPrefix: "oa/", Keep: []string{"message_tree_id"}}, in: oasstTree,
		want: []string{`{"id":"oa/m1","messages":[{"role":"user","content":"What is a prime?"}],"meta":{"message_tree_id":"m1"}}`}},
	{name: "oasst tree of one message", opts: allButLast,
		in:   `{"message_tree_id":"t","tree_state":"ready_for_export","prompt":{"message_id":"t","parent_id":null,"role":"prompter","text":"Hello?","replies":[]}}`,
		want: []string{`{"id":"t","messages":[{"role":"user","content":"Hello?"}]}`}},
	{name: "oasst tree whose root is an answer", opts: first,
		in:   `{"message_tree_id":"t","prompt":{"message_id":"t","role":"assistant","text":"Hi"}}`,
		want: []string{"reject no_user_turn"}},
	{name: "oasst tree with an unknown role", opts: first,
		in:   `{"message_tree_id":"t","prompt":{"message_id":"t","role":"prompter","text":"Q","replies":[{"message_id":"u","role":"moderator","text":"x"}]}}`,
		want: []string{"reject unknown_role"}, detail: "prompt.replies[0]"},
	{name: "oasst tree without message ids gets hash ids", opts: first,
		in:   `{"prompt":{"role":"prompter","text":"Q"}}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Q"}]}`}},

	// Media: one rule in every layout.
	{name: "LLaVA record", opts: first,
		in:   `{"id":"000000033471","image":"000000033471.jpg","conversations":[{"from":"human","value":"<image>\nWhat are the colors of the bus in the image?"},{"from":"gpt","value":"The bus in the image is white and red."}]}`,
		want: []string{"reject multimodal"}, detail: "the record has image"},
	{name: "LLaMA-Factory images list", opts: first,
		in:   `{"messages":[{"content":"<image>Who are they?","role":"user"},{"content":"They're Kane and Gretzka.","role":"assistant"}],"images":["mllm_demo_data/1.jpg"]}`,
		want: []string{"reject multimodal"}, detail: "images"},
	{name: "LLaMA-Factory audios list", opts: first,
		in:   `{"messages":[{"content":"<audio>What's that sound?","role":"user"},{"content":"Glass shattering.","role":"assistant"}],"audios":["mllm_demo_data/1.mp3"]}`,
		want: []string{"reject multimodal"}},
	{name: "placeholder without its media", opts: first,
		in:   `{"messages":[{"content":"<image>Who are they?","role":"user"}]}`,
		want: []string{"reject multimodal"}, detail: "placeholder <image>"},
	{name: "placeholder at the end of a later turn, HTML-escaped", opts: each,
		in:   `{"id":"p","conversations":[{"from":"human","value":"Hi"},{"from":"gpt","value":"Hello"},{"from":"human","value":"What is this?\n\u003cvideo\u003e \n"}]}`,
		want: []string{"reject multimodal"}, detail: "user turn 2"},
	{name: "a placeholder mentioned in a sentence is text", opts: first,
		in:   `{"id":"h","messages":[{"role":"user","content":"What does the <video> tag do in HTML?"}]}`,
		want: []string{`{"id":"h","messages":[{"role":"user","content":"What does the <video> tag do in HTML?"}]}`}},
	{name: "empty media fields are no media", opts: first,
		in:   `{"id":"e","images":[],"videos":"","audios":null,"messages":[{"role":"user","content":"Q"}]}`,
		want: []string{`{"id":"e","messages":[{"role":"user","content":"Q"}]}`}},
	{name: "LLaMA-Factory v1 image part", opts: first,
		in:   `{"messages":[{"role":"user","content":[{"type":"image_url","value":"data/mllm_demo_data/1.jpg"},{"type":"text","value":"Who are they?"}]},{"role":"assistant","content":[{"type":"text","value":"Kane and Gretzka."}]}]}`,
		want: []string{"reject multimodal"}},
	{name: "audio part", opts: first,
		in:   `{"messages":[{"role":"user","content":[{"type":"text","text":"Transcribe"},{"type":"input_audio","input_audio":{"data":"...","format":"wav"}}]}]}`,
		want: []string{"reject multimodal"}},
	{name: "media in an answer makes the record multimodal too", opts: first,
		in:   `{"messages":[{"role":"user","content":"Draw a cat"},{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"cat.png"}}]}]}`,
		want: []string{"reject multimodal"}},

	// OpenAI batch lines by endpoint.
	{name: "responses: input text and instructions", opts: first,
		in:   `{"custom_id":"r1","method":"POST","url":"/v1/responses","body":{"model":"gpt-4.1","instructions":"Talk like a pirate.","input":"Are semicolons optional in JavaScript?"}}`,
		want: []string{`{"id":"r1","messages":[{"role":"system","content":"Talk like a pirate."},{"role":"user","content":"Are semicolons optional in JavaScript?"}]}`}},
	{name: "responses: message items with parts", opts: allButLast,
		in:   `{"custom_id":"r2","method":"POST","url":"/v1/responses","body":{"model":"m","input":[{"role":"developer","content":"Be brief."},{"type":"message","role":"user","content":[{"type":"input_text","text":"Hi"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello"}]},{"role":"user","content":"Bye"}]}}`,
		want: []string{`{"id":"r2","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"},{"role":"user","content":"Bye"}]}`}},
	{name: "responses: function calls and outputs", opts: allButLast,
		in:   `{"custom_id":"r3","url":"/v1/responses","body":{"input":[{"role":"user","content":"Weather in Paris and Oslo?"},{"type":"function_call","call_id":"c1","name":"w","arguments":"{\"city\":\"Paris\"}"},{"type":"function_call","call_id":"c2","name":"w","arguments":"{\"city\":\"Oslo\"}"},{"type":"function_call_output","call_id":"c1","output":"18"},{"type":"function_call_output","call_id":"c2","output":"9"},{"type":"reasoning","summary":[]},{"role":"assistant","content":"18 and 9."},{"role":"user","content":"Thanks"}],"tools":[{"type":"function","name":"w","parameters":{"type":"object"}}]}}`,
		want: []string{`{"id":"r3","messages":[{"role":"user","content":"Weather in Paris and Oslo?"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"}},{"id":"c2","type":"function","function":{"name":"w","arguments":"{\"city\":\"Oslo\"}"}}]},{"role":"tool","content":"18","tool_call_id":"c1"},{"role":"tool","content":"9","tool_call_id":"c2"},{"role":"assistant","content":"18 and 9."},{"role":"user","content":"Thanks"}],"tools":[{"function":{"name":"w","parameters":{"type":"object"}},"type":"function"}]}`}},
	{name: "responses: an image input", opts: first,
		in:   `{"custom_id":"r4","url":"/v1/responses","body":{"input":[{"role":"user","content":[{"type":"input_text","text":"What is in this image?"},{"type":"input_image","image_url":"https://example.com/a.jpg"}]}]}}`,
		want: []string{"reject multimodal"}},
	{name: "responses: an item that refers to another", opts: first,
		in:   `{"custom_id":"r5","url":"/v1/responses","body":{"input":[{"type":"item_reference","id":"msg_1"},{"role":"user","content":"Q"}]}}`,
		want: []string{"reject unknown_layout"}, detail: "body.input[0]"},
	{name: "completions: a list of one prompt", opts: first,
		in:   `{"custom_id":"c1","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":["Once upon"]}}`,
		want: []string{`{"id":"c1","prompt":"Once upon"}`}},
	{name: "completions: several prompts in one line", opts: first,
		in:   `{"custom_id":"c2","url":"/v1/completions","body":{"prompt":["a","b"]}}`,
		want: []string{"reject unknown_layout"}, detail: "holds 2 prompts"},
	{name: "embeddings line", opts: first,
		in:   `{"custom_id":"e1","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":"The food was delicious."}}`,
		want: []string{"reject embeddings_request"}},
	{name: "moderations line", opts: first,
		in:   `{"custom_id":"m1","url":"/v1/moderations","body":{"input":"text"}}`,
		want: []string{"reject moderations_request"}},
	{name: "an unknown endpoint", opts: first,
		in:   `{"custom_id":"u1","url":"/v1/images/generations","body":{"prompt":"a cat"}}`,
		want: []string{"reject unknown_layout"}, detail: "/v1/images/generations"},
	{name: "input without a url", opts: first, in: `{"custom_id":"n","body":{"input":"Q"}}`,
		want: []string{"reject unknown_layout"}, detail: "without a url"},
	{name: "a chat url with a query and a trailing slash", opts: first,
		in:   `{"custom_id":"q","url":"/v1/chat/completions/?x=1","body":{"messages":[{"role":"user","content":"Q"}]}}`,
		want: []string{`{"id":"q","messages":[{"role":"user","content":"Q"}]}`}},

	// Tools are part of the prompt; empty tools are none.
	{name: "tools in every empty spelling are left out", opts: first,
		in:   `{"id":"t","conversations":[{"from":"human","value":"Q"}],"tools":" [ ] "}`,
		want: []string{`{"id":"t","messages":[{"role":"user","content":"Q"}]}`}},
	{name: "tools given as a JSON string of bare functions are written as OpenAI tools", opts: first,
		in:   `{"conversations":[{"from":"human","value":"Q"}],"tools":"[ {\"name\": \"w\", \"parameters\": {\"type\": \"object\", \"n\": 1.50}} ]"}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Q"}],"tools":[{"function":{"name":"w","parameters":{"n":1.50,"type":"object"}},"type":"function"}]}`}},
	{name: "tools of a plain prompt", opts: first, in: `{"prompt":"Q","tools":[{"type":"function","function":{"name":"w"}}]}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Q"}],"tools":[{"function":{"name":"w"},"type":"function"}]}`}},
	{name: "tools that are not tools", opts: first, in: `{"conversations":[{"from":"human","value":"Q"}],"tools":"get_weather"}`,
		want: []string{"reject bad_tools"}},
	{name: "tool_call_id of a tool message is kept", opts: allButLast,
		in:   `{"id":"tc","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"r","tool_call_id":"c1"},{"role":"assistant","content":"A"},{"role":"user","content":"Q2"}]}`,
		want: []string{`{"id":"tc","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"r","tool_call_id":"c1"},{"role":"assistant","content":"A"},{"role":"user","content":"Q2"}]}`}},

	// tool_calls are checked and written in one shape.
	{name: "arguments given as an object are written as a JSON string", opts: whole,
		in:   `{"id":"a","messages":[{"role":"user","content":"Q"},{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{"b": 1, "a": [2]}},"id":"c1","index":0}]},{"role":"tool","tool_call_id":"c1","content":"r"}]}`,
		want: []string{`{"id":"a","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"b\":1,\"a\":[2]}"}}]},{"role":"tool","content":"r","tool_call_id":"c1"}]}`}},
	{name: "a call without an id gets one, and the tool turn after it answers it", opts: whole,
		in:   `{"id":"a","messages":[{"role":"user","content":"Q"},{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":""}}]},{"role":"tool","content":"r"}]}`,
		want: []string{`{"id":"a","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"","tool_calls":[{"id":"call_2_1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"r","tool_call_id":"call_2_1"}]}`}},
	{name: "a call of another type", opts: whole, in: `{"messages":[{"role":"user","content":"Q"},{"role":"assistant","tool_calls":[{"id":"c","type":"custom","custom":{"name":"f","input":"x"}}]}]}`,
		want: []string{"reject bad_tool_calls"}, detail: `messages[1]: tool_calls[0] has type "custom"; only function calls are read`},
	{name: "a call whose id is a number", opts: whole, in: `{"messages":[{"role":"user","content":"Q"},{"role":"assistant","tool_calls":[{"id":7,"function":{"name":"f"}}]}]}`,
		want: []string{"reject bad_tool_calls"}, detail: "has an id that is not a string"},
	{name: "a call without a function", opts: whole, in: `{"messages":[{"role":"user","content":"Q"},{"role":"assistant","tool_calls":["f()"]}]}`,
		want: []string{"reject bad_tool_calls"}, detail: "tool_calls[0] is a string, not a call"},
	{name: "arguments that are a list", opts: whole, in: `{"messages":[{"role":"user","content":"Q"},{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":"[1]"}}]}]}`,
		want: []string{"reject bad_tool_calls"}, detail: "neither a JSON object nor a string holding one"},
	{name: "malformed tool_calls are rejected in a prompt's history too", opts: allButLast,
		in:   `{"messages":[{"role":"user","content":"Q"},{"role":"assistant","tool_calls":[{"id":"c","function":{}}]},{"role":"user","content":"Q2"}]}`,
		want: []string{"reject bad_tool_calls"}, detail: "has no function name"},
	{name: "tool_calls and a function_call on one turn", opts: whole,
		in:   `{"messages":[{"role":"user","content":"Q"},{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f"}}],"function_call":{"name":"f"}}]}`,
		want: []string{"reject bad_tool_calls"}, detail: "both tool_calls and a function_call"},
	{name: "a single tools object is the one-tool list: the same prompt", opts: first,
		in:   `{"messages":[{"role":"user","content":"Q"}],"tools":{"name":"w","parameters":"{\"type\": \"object\"}"}}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Q"}],"tools":[{"function":{"name":"w","parameters":{"type":"object"}},"type":"function"}]}`}},
	{name: "tool_choice and parallel_tool_calls without tools are left out", opts: first,
		in:   `{"id":"t","messages":[{"role":"user","content":"Q"}],"tool_choice":"auto","parallel_tool_calls":"yes"}`,
		want: []string{`{"id":"t","messages":[{"role":"user","content":"Q"}]}`}},
	{name: "a batch request's tool settings and legacy functions", opts: first,
		in:   `{"custom_id":"b","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"Q"}],"functions":[{"name":"f"}],"function_call":"none","parallel_tool_calls":true}}`,
		want: []string{`{"id":"b","messages":[{"role":"user","content":"Q"}],"tools":[{"function":{"name":"f"},"type":"function"}],"tool_choice":"none","parallel_tool_calls":true}`}},
	{name: "parallel_tool_calls that is not a boolean", opts: first,
		in:   `{"messages":[{"role":"user","content":"Q"}],"tools":[{"name":"f"}],"parallel_tool_calls":1}`,
		want: []string{"reject bad_tools"}, detail: "parallel_tool_calls 1 is not true or false"},

	// Weights: one spelling, on assistant turns.
	{name: "weights in every spelling", opts: whole,
		in:   `{"id":"w","messages":[{"role":"user","content":"Q","weight":0},{"role":"assistant","content":"A","loss":false},{"role":"user","content":"Q2","loss_weight":0.0},{"role":"assistant","content":"B","loss_weight":1.0},{"role":"user","content":"Q3"},{"role":"assistant","content":"C","weight":1e0,"loss":false}]}`,
		want: []string{`{"id":"w","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"A","weight":0},{"role":"user","content":"Q2"},{"role":"assistant","content":"B","weight":1},{"role":"user","content":"Q3"},{"role":"assistant","content":"C","weight":1}]}`}},
	{name: "weights are not part of the id", opts: whole,
		in:   `{"messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"A","weight":0}]}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"A","weight":0}]}`}},
	{name: "a loss that is not a boolean", opts: whole, in: `{"messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"A","loss":"no"}]}`,
		want: []string{"reject bad_weight"}, detail: `loss "no" is not true or false`},

	// Tool calls in the OpenAI shape, and the whole conversation (--turns all).
	{name: "glaive-style conversation, whole", opts: whole,
		in:   `{"conversations":[{"from":"human","value":"Weather in Paris?"},{"from":"function_call","value":"{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"C\"}}"},{"from":"observation","value":"{\"t\": 20}"},{"from":"gpt","value":"20C"},{"from":"human","value":"Thanks"},{"from":"gpt","value":"Bye"}],"system":"S","tools":"[{\"name\": \"w\", \"description\": \"weather\"}]"}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"system","content":"S"},{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":"","tool_calls":[{"id":"call_2_1","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\",\"unit\":\"C\"}"}}]},{"role":"tool","content":"{\"t\": 20}","tool_call_id":"call_2_1"},{"role":"assistant","content":"20C"},{"role":"user","content":"Thanks"},{"role":"assistant","content":"Bye"}],"tools":[{"function":{"description":"weather","name":"w"},"type":"function"}]}`}},
	{name: "parallel calls in one function_call turn, answered in order", opts: whole,
		in:   `{"id":"p","conversations":[{"from":"human","value":"Paris and Oslo?"},{"from":"function_call","value":"[{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"w\", \"arguments\": \"{\\\"city\\\": \\\"Oslo\\\"}\"}]"},{"from":"observation","value":"20"},{"from":"observation","value":"9"},{"from":"gpt","value":"20 and 9"}]}`,
		want: []string{`{"id":"p","messages":[{"role":"user","content":"Paris and Oslo?"},{"role":"assistant","content":"","tool_calls":[{"id":"call_2_1","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"}},{"id":"call_2_2","type":"function","function":{"name":"w","arguments":"{\"city\": \"Oslo\"}"}}]},{"role":"tool","content":"20","tool_call_id":"call_2_1"},{"role":"tool","content":"9","tool_call_id":"call_2_2"},{"role":"assistant","content":"20 and 9"}]}`}},
	{name: "a function_call that is not a call stays text", opts: whole,
		in:   `{"id":"n","conversations":[{"from":"human","value":"Q"},{"from":"function_call","value":"call w now"},{"from":"observation","value":"r"},{"from":"gpt","value":"A"}]}`,
		want: []string{`{"id":"n","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"call w now"},{"role":"tool","content":"r"},{"role":"assistant","content":"A"}]}`}},
	{name: "tool calls in a prompt's history", opts: allButLast,
		in:   `{"id":"h","conversations":[{"from":"human","value":"Q"},{"from":"function_call","value":"{\"name\": \"w\", \"arguments\": {}}"},{"from":"observation","value":"r"},{"from":"gpt","value":"A"},{"from":"human","value":"Q2"},{"from":"gpt","value":"A2"}]}`,
		want: []string{`{"id":"h","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"","tool_calls":[{"id":"call_2_1","type":"function","function":{"name":"w","arguments":"{}"}}]},{"role":"tool","content":"r","tool_call_id":"call_2_1"},{"role":"assistant","content":"A"},{"role":"user","content":"Q2"}]}`}},
	{name: "LLaMA-Factory v1 reasoning and tool_call parts", opts: whole,
		in:   `{"messages":[{"role":"user","content":[{"type":"text","value":"Weather?"}],"loss_weight":0.0},{"role":"assistant","content":[{"type":"reasoning","value":"Need the tool."},{"type":"tool_call","value":"{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\"}}"}],"loss_weight":1.0},{"role":"tool","content":[{"type":"text","value":"20"}],"loss_weight":0.0},{"role":"assistant","content":[{"type":"reasoning","value":"Got it."},{"type":"text","value":"20C"}],"loss_weight":1.0}],"tools":"[{\"name\": \"w\"}]"}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":"","reasoning_content":"Need the tool.","tool_calls":[{"id":"call_2_1","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"}}],"weight":1},{"role":"tool","content":"20","tool_call_id":"call_2_1"},{"role":"assistant","content":"20C","reasoning_content":"Got it.","weight":1}],"tools":[{"function":{"name":"w"},"type":"function"}]}`}},
	{name: "v1 reasoning parts are kept in a prompt's history", opts: allButLast,
		in:   `{"id":"r","messages":[{"role":"user","content":[{"type":"text","value":"Q"}]},{"role":"assistant","content":[{"type":"reasoning","value":"think"},{"type":"text","value":"A"}]},{"role":"user","content":[{"type":"text","value":"Q2"}]}]}`,
		want: []string{`{"id":"r","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"A","reasoning_content":"think"},{"role":"user","content":"Q2"}]}`}},
	{name: "reasoning_content of an OpenAI assistant turn is kept", opts: whole,
		in:   `{"id":"o","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"A","reasoning_content":"because"}]}`,
		want: []string{`{"id":"o","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"A","reasoning_content":"because"}]}`}},
	{name: "a reasoning part in a user turn", opts: first,
		in:   `{"messages":[{"role":"user","content":[{"type":"reasoning","value":"x"}]}]}`,
		want: []string{"reject non_text_content"}},
	{name: "a tool_call part that is not a call", opts: first,
		in:   `{"messages":[{"role":"user","content":"Q"},{"role":"assistant","content":[{"type":"tool_call","value":"w()"}]}]}`,
		want: []string{"reject bad_tool_calls"}, detail: "not a call"},
	{name: "whole alpaca record with its answer", opts: whole, in: `{"instruction":"Add 2 and 2.","input":"","output":"4","system":"S"}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"system","content":"S"},{"role":"user","content":"Add 2 and 2."},{"role":"assistant","content":"4"}]}`}},
	{name: "whole dolly record with its response", opts: whole, in: `{"instruction":"Name a colour.","context":"","response":"Red.","category":"open_qa"}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"Name a colour."},{"role":"assistant","content":"Red."}]}`}},
	{name: "whole preference pair is the chosen conversation", opts: whole,
		in:   `{"id":"pp","chosen":"\n\nHuman: Hi\n\nAssistant: Hello!","rejected":"\n\nHuman: Hi\n\nAssistant: Go away."}`,
		want: []string{`{"id":"pp","messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"}]}`}},
	{name: "whole MT-Bench record: its questions, marked a question list", opts: whole, in: `{"question_id":81,"category":"writing","turns":["Q1","Q2"]}`,
		want: []string{`{"id":81,"messages":[{"role":"user","content":"Q1"},{"role":"user","content":"Q2"}],"question_list":true,"meta":{"category":"writing"}}`}},
	{name: "whole chat log with two questions in a row: not a question list", opts: whole,
		in:   `{"id":"u","messages":[{"role":"user","content":"Q1"},{"role":"user","content":"Q2"},{"role":"assistant","content":"A"}]}`,
		want: []string{`{"id":"u","messages":[{"role":"user","content":"Q1"},{"role":"user","content":"Q2"},{"role":"assistant","content":"A"}]}`}},
	{name: "first turn of an MT-Bench record: not marked", opts: first, in: `{"question_id":81,"turns":["Q1","Q2"]}`,
		want: []string{`{"id":81,"messages":[{"role":"user","content":"Q1"}]}`}},
	{name: "whole conversation with a blank user turn", opts: whole,
		in:   `{"id":"b","conversations":[{"from":"human","value":"Q"},{"from":"gpt","value":"A"},{"from":"human","value":" "},{"from":"gpt","value":"B"}]}`,
		want: []string{"reject empty"}, detail: "user turn 2"},
	{name: "whole completion prompt", opts: whole, in: `{"custom_id":"c","url":"/v1/completions","body":{"prompt":"Once"}}`,
		want: []string{`{"id":"c","prompt":"Once"}`}},
	{name: "oasst tree, whole: one conversation per leaf", opts: whole, in: oasstTree, want: []string{
		`{"id":"m4","messages":[{"role":"user","content":"What is a prime?"},{"role":"assistant","content":"A number with two divisors."},{"role":"user","content":"Is 1 one?"},{"role":"assistant","content":"No."}]}`,
		`{"id":"m5","messages":[{"role":"user","content":"What is a prime?"},{"role":"assistant","content":"Like 2, 3, 5."},{"role":"user","content":"And 9?"}]}`}},

	// Blank ids count as none.
	{name: "an empty id leaves the next id field", opts: first, in: `{"id":"","question_id":5,"prompt":"a"}`,
		want: []string{`{"id":5,"messages":[{"role":"user","content":"a"}]}`}},
	{name: "a white-space id is none, and gets no turn suffix", opts: each, in: `{"id":"  \t","prompt":"a"}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"a"}]}`}},
	{name: "an escaped white-space id is none", opts: first, in: `{"id":"\u0020\n","prompt":"a"}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"a"}]}`}},
	{name: "a blank --id-field is none", opts: Options{IDField: "uuid"}, in: `{"uuid":" ","prompt":"a"}`,
		want: []string{`{"id":"$HASH","messages":[{"role":"user","content":"a"}]}`}},
	{name: "a bad id is shown as written", opts: first, in: `{"id":1e3,"prompt":"a"}`,
		want: []string{"reject bad_id"}, detail: "id 1e3 is neither"},
	{name: "a long bad id is shown cut", opts: first, in: `{"id":[` + strings.Repeat(`"ab",`, 40) + `"c"],"prompt":"a"}`,
		want: []string{"reject bad_id"}, detail: `"ab","ab"...`},

	// Forced formats.
	{name: "forced format without its field", opts: Options{Format: FormatAlpaca}, in: fourTurns,
		want: []string{"reject unknown_layout"}, detail: "no instruction field"},
	{name: "forced format picks among several", opts: Options{Format: FormatPlain}, in: `{"id":"f","instruction":"I","prompt":"P"}`,
		want: []string{`{"id":"f","messages":[{"role":"user","content":"P"}]}`}},
	{name: "auto picks alpaca over plain", opts: first, in: `{"id":"f","instruction":"I","prompt":"P"}`,
		want: []string{`{"id":"f","messages":[{"role":"user","content":"I"}]}`}},
}

// describe renders candidates the way the cases state them.
func describe(t testing.TB, cands []Candidate) []string {
	var out []string
	for _, c := range cands {
		switch {
		case c.Out != nil:
			out = append(out, string(c.Out))
		case c.Filtered:
			out = append(out, "filter "+c.Reason)
		default:
			out = append(out, "reject "+c.Reason)
		}
	}
	return out
}

// resolveHash replaces $HASH in a wanted prompt with its content id.
func resolveHash(t testing.TB, want string) string {
	if !strings.Contains(want, "$HASH") {
		return want
	}
	var p record.Prompt
	if err := stdjson.Unmarshal([]byte(strings.Replace(want, "$HASH", "", 1)), &p); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	return strings.Replace(want, "$HASH", record.ContentID(p.AppendCanonical(nil)), 1)
}

func TestConvert(t *testing.T) {
	for _, tc := range convertCases {
		t.Run(tc.name, func(t *testing.T) {
			x, err := NewExtractor(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			// Twice, to show that nothing of one record leaks into the next.
			for range 2 {
				cands := x.Convert([]byte(tc.in))
				got := describe(t, cands)
				want := make([]string, len(tc.want))
				for i, w := range tc.want {
					want[i] = resolveHash(t, w)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("input %s\ngot\n  %s\nwant\n  %s", tc.in, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
				}
				for _, c := range cands {
					if c.Out == nil && c.Detail == "" {
						t.Errorf("%s without a detail", c.Reason)
					}
					if tc.detail != "" && c.Out == nil && !strings.Contains(c.Detail, tc.detail) {
						t.Errorf("detail %q does not contain %q", c.Detail, tc.detail)
					}
				}
			}
		})
	}
}

func TestNewExtractorRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Format: "csv"},
		{Turns: "last"},
		{MinChars: 10, MaxChars: 5},
	} {
		if _, err := NewExtractor(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

func TestTokenChars(t *testing.T) {
	for _, tc := range []struct {
		tok   string
		chars int
		blank bool
	}{
		{`""`, 0, true},
		{`" \t\n"`, 3, true},
		{`"\n\t\r "`, 4, true},
		{`"abc"`, 3, false},
		{`"é数"`, 2, false},
		{`"\u00e9\""`, 2, false},
		{`"\ud83d\ude00x"`, 2, false},
		{`"\\n"`, 2, false},
		{`"😀"`, 1, false},
		{`"\u0020"`, 1, false}, // an escaped space is text: nobody writes blank prompts this way
	} {
		if got := tokenChars([]byte(tc.tok)); got != tc.chars {
			t.Errorf("tokenChars(%s) = %d, want %d", tc.tok, got, tc.chars)
		}
		if got := blankToken([]byte(tc.tok)); got != tc.blank {
			t.Errorf("blankToken(%s) = %v, want %v", tc.tok, got, tc.blank)
		}
	}
}

// FuzzConvert feeds arbitrary records through detection and conversion
// in every turn mode: whatever comes in, each candidate is a prompt record
// that later stages can read, or a reason.
func FuzzConvert(f *testing.F) {
	for _, tc := range convertCases {
		f.Add([]byte(tc.in), uint8(0))
		f.Add([]byte(tc.in), uint8(2))
		f.Add([]byte(tc.in), uint8(3))
	}
	modes := []string{TurnsFirst, TurnsAllButLast, TurnsEach, TurnsAll}
	extractors := make([]*Extractor, len(modes))
	for i, m := range modes {
		var err error
		if extractors[i], err = NewExtractor(Options{Turns: m, Keep: []string{"label", "id"}, MinChars: 1}); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		x := extractors[int(mode)%len(modes)]
		var cands []Candidate
		for _, c := range x.Convert(data) {
			c.Out = bytes.Clone(c.Out)
			cands = append(cands, c)
		}
		cands = append(cands, x.Flush()...) // a held OpenAssistant message comes out here
		if len(cands) == 0 {
			t.Fatal("no candidate: the record would vanish from the accounting")
		}
		if x.opts.Turns == TurnsFirst && len(cands) != 1 {
			t.Fatalf("%d candidates in mode %s", len(cands), x.opts.Turns)
		}
		for _, c := range cands {
			if c.Out == nil {
				if c.Reason == "" && !c.NoPrompt {
					t.Fatal("neither a prompt nor a reason")
				}
				continue
			}
			checkPrompt(t, c.Out)
		}
	})
}

// checkPrompt asserts that out is a prompt record of the contract.
func checkPrompt(t testing.TB, out []byte) {
	t.Helper()
	if strings.ContainsAny(string(out), "\n\r") || !stdjson.Valid(out) {
		t.Fatalf("not one line of valid JSON: %q", out)
	}
	var p record.Prompt
	if err := record.Decode(out, &p); err != nil {
		t.Fatalf("not a prompt record: %v: %s", err, out)
	}
	if p.ID.IsZero() || !p.HasPrompt() {
		t.Fatalf("no id or no prompt: %s", out)
	}
	if p.Prompt == nil {
		last := p.Messages[len(p.Messages)-1]
		if last.Role == "user" && strings.TrimSpace(last.Content) != "" {
			return
		}
		// A whole conversation (--turns all) may end with its answer.
		for _, m := range p.Messages {
			if m.Role == "user" && strings.TrimSpace(m.Content) != "" {
				return
			}
		}
		t.Fatalf("neither ends with a user turn with text nor holds one: %s", out)
	}
}

// TestConvertForgetsPreviousRecord converts records one after another with
// one Extractor: a field a record lacks must not keep the value the
// previous record gave it (the decoder reuses list elements in place).
func TestConvertForgetsPreviousRecord(t *testing.T) {
	x, err := NewExtractor(Options{Turns: TurnsAllButLast})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct{ in, want string }{
		{`{"id":"1","messages":[{"role":"user","content":"Q","name":"n"},{"role":"assistant","content":"A","tool_calls":[]},{"role":"user","content":"Q2"}]}`,
			`{"id":"1","messages":[{"role":"user","content":"Q","name":"n"},{"role":"assistant","content":"A"},{"role":"user","content":"Q2"}]}`},
		{`{"id":"2","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"A"},{"role":"user","content":"Q2"}]}`,
			`{"id":"2","messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"A"},{"role":"user","content":"Q2"}]}`},
		{`{"id":"3","messages":[{"content":"Q"}]}`, "reject unknown_role"},
		{`{"id":"4","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
			`{"id":"4","messages":[{"role":"user","content":"a\nb"}]}`},
		{`{"id":"5","messages":[{"role":"user","content":[{"type":"text"}]}]}`, "reject unknown_layout"},
	}
	for i, s := range steps {
		if got := describe(t, x.Convert([]byte(s.in))); len(got) != 1 || got[0] != s.want {
			t.Errorf("record %d: got %v, want %s", i+1, got, s.want)
		}
	}
}

// FuzzConvertSequence converts two records, from one file or two, with one
// Extractor and then flushes it, as the command does: whatever they are,
// with --turns first each gives exactly one candidate (a held
// OpenAssistant message one comes later), in other modes at least one, and
// every prompt is a prompt record.
func FuzzConvertSequence(f *testing.F) {
	flat, err := os.ReadFile(filepath.Join(ourData, "oasst.messages.jsonl"))
	if err != nil {
		f.Fatal(err)
	}
	msgs := bytes.Split(bytes.TrimSpace(flat), []byte("\n"))
	for i := 0; i+1 < len(msgs); i++ {
		f.Add(msgs[i], msgs[i+1], false, uint8(i))
	}
	f.Add(msgs[0], []byte(fourTurns), false, uint8(0))
	f.Add(msgs[2], msgs[3], true, uint8(1))
	f.Add(msgs[0], []byte(fourTurns), true, uint8(2))
	f.Add([]byte(oasstTree), msgs[0], false, uint8(2))
	modes := []string{TurnsFirst, TurnsAllButLast, TurnsEach, TurnsAll}
	f.Fuzz(func(t *testing.T, a, b []byte, twoFiles bool, mode uint8) {
		x, err := NewExtractor(Options{Turns: modes[int(mode)%len(modes)], Keep: []string{"lang"}, MaxHeld: 3})
		if err != nil {
			t.Fatal(err)
		}
		fileB := "a"
		if twoFiles {
			fileB = "b"
		}
		n := 0
		check := func(cands []Candidate) {
			for _, c := range cands {
				n++
				switch {
				case c.Out != nil:
					checkPrompt(t, c.Out)
				case c.Reason == "" && !c.NoPrompt:
					t.Fatal("neither a prompt nor a reason")
				}
			}
		}
		check(x.ConvertRecord(jsonl.RawLine{Data: a, File: "a", Line: 1}))
		check(x.ConvertRecord(jsonl.RawLine{Data: b, File: fileB, Line: 2}))
		check(x.Flush())
		if n < 2 || (x.opts.Turns == TurnsFirst && n != 2) {
			t.Fatalf("%d candidates for 2 records in mode %s", n, x.opts.Turns)
		}
	})
}
