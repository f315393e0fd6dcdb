package tokenizer

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"tokenmill/internal/testbin"
	"tokenmill/lib/record"
)

var loaded sync.Map // model -> *Tokenizer, loaded once for the package's tests

func testTokenizer(t testing.TB, model string) *Tokenizer {
	t.Helper()
	dir := testbin.Tokenizers(t, model)
	if tok, ok := loaded.Load(model); ok {
		return tok.(*Tokenizer)
	}
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	loaded.Store(model, tok)
	return tok
}

func user(s string) record.WireMessage { return record.WireMessage{Role: "user", Content: s} }

// TestTurn rebuilds events of Qwen3 answers: the prompt as the server
// renders it, the answer as the template writes it up to the end-of-turn
// id (before it for an answer cut at max_tokens), reasoning counted.
func TestTurn(t *testing.T) {
	tok := testTokenizer(t, "qwen3")
	const eot = 151645
	for _, tc := range []struct {
		name      string
		turn      record.ChatTurn
		kwargs    string
		prompt    string // the prompt's text
		answer    string // the answer's text, end-of-turn included
		eot       bool
		reasoning string // the text of the ids ReasoningIDs counts
	}{
		{name: "plain answer, thinking on: the model wrote the empty think block",
			turn:   record.ChatTurn{Messages: []record.WireMessage{user("Hi")}, Answer: record.WireMessage{Content: "Hello!"}, Finish: "stop"},
			prompt: "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", answer: "<think>\n\n</think>\n\nHello!<|im_end|>", eot: true},
		{name: "thinking off: the empty block is the prompt's",
			turn:   record.ChatTurn{Messages: []record.WireMessage{user("Hi")}, Answer: record.WireMessage{Content: "Hello!"}, Finish: "stop"},
			kwargs: `{"enable_thinking": false}`,
			prompt: "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", answer: "Hello!<|im_end|>", eot: true},
		{name: "the record's own kwargs win over the run's",
			turn:   record.ChatTurn{Messages: []record.WireMessage{user("Hi")}, Kwargs: []byte(`{"enable_thinking": true}`), Answer: record.WireMessage{Content: "Hello!"}, Finish: "stop"},
			kwargs: `{"enable_thinking": false}`,
			prompt: "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", answer: "<think>\n\n</think>\n\nHello!<|im_end|>", eot: true},
		{name: "reasoning",
			turn:   record.ChatTurn{Messages: []record.WireMessage{user("2+2?")}, Answer: record.WireMessage{Content: "4.", ReasoningContent: "Add them."}, Finish: "stop"},
			prompt: "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n", answer: "<think>\nAdd them.\n</think>\n\n4.<|im_end|>", eot: true,
			reasoning: "<think>\nAdd them.\n</think>\n\n"},
		{name: "cut at max_tokens: no end of turn",
			turn:   record.ChatTurn{Messages: []record.WireMessage{user("Count")}, Answer: record.WireMessage{Content: "1 2 3"}, Finish: "length"},
			prompt: "<|im_start|>user\nCount<|im_end|>\n<|im_start|>assistant\n", answer: "<think>\n\n</think>\n\n1 2 3"},
		{name: "a tool call, its arguments parsed as the servers do",
			turn: record.ChatTurn{Messages: []record.WireMessage{user("Weather?")}, Tools: []byte(`[{"function":{"name":"get_weather","parameters":{"type":"object"}},"type":"function"}]`),
				Answer: record.WireMessage{ToolCalls: []byte(`[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":2}"}}]`)}, Finish: "tool_calls"},
			prompt: "", answer: "<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call><|im_end|>", eot: true},
		{name: "a completion prompt",
			turn:   record.ChatTurn{Prompt: ptr("Once upon"), Answer: record.WireMessage{Content: " a time"}, Finish: "stop"},
			prompt: "Once upon", answer: " a time<|im_end|>", eot: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tok.Turn(tc.turn, []byte(tc.kwargs))
			if err != nil {
				t.Fatal(err)
			}
			if tc.prompt != "" && got.PromptText != tc.prompt {
				t.Errorf("prompt %q, want %q", got.PromptText, tc.prompt)
			}
			wantPrompt := tok.Encode(got.PromptText)
			if tc.turn.Prompt != nil {
				wantPrompt = tok.EncodeSpecial(got.PromptText)
			}
			if !slices.Equal(got.Prompt, wantPrompt) {
				t.Errorf("prompt ids are not its text's")
			}
			if text := tok.Decode(got.Answer); text != tc.answer || got.EndOfTurn != tc.eot {
				t.Errorf("answer %q (end of turn %v), want %q (%v)", text, got.EndOfTurn, tc.answer, tc.eot)
			}
			if ends := len(got.Answer) > 0 && got.Answer[len(got.Answer)-1] == eot; ends != tc.eot {
				t.Errorf("answer ids end with the end of turn: %v, want %v", ends, tc.eot)
			}
			if r := tok.Decode(got.Answer[:got.ReasoningIDs]); r != tc.reasoning {
				t.Errorf("reasoning ids decode to %q, want %q", r, tc.reasoning)
			}
		})
	}
}

func ptr(s string) *string { return &s }

// TestTurnDropped: DeepSeek-V3's template writes no tool call of an
// answer whose content is a text (even empty), so the answer cannot be
// rebuilt; its answers without calls can.
func TestTurnDropped(t *testing.T) {
	tok := testTokenizer(t, "deepseek_v3")
	call := record.WireMessage{Content: "", ToolCalls: []byte(`[{"type":"function","function":{"name":"get_weather","arguments":"{}"}}]`)}
	_, err := tok.Turn(record.ChatTurn{Messages: []record.WireMessage{user("Weather?")}, Answer: call, Finish: "tool_calls"}, nil)
	if !errors.Is(err, ErrAnswerDropped) || !strings.Contains(err.Error(), "tool calls") {
		t.Fatalf("got %v, want ErrAnswerDropped naming the tool calls", err)
	}
	got, err := tok.Turn(record.ChatTurn{Messages: []record.WireMessage{user("Hi")}, Answer: record.WireMessage{Content: "Hello!"}, Finish: "stop"}, nil)
	if err != nil || tok.Decode(got.Answer) != "Hello!<｜end▁of▁sentence｜>" || got.PromptText != "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>" {
		t.Fatalf("got %q %q, %v", got.PromptText, tok.Decode(got.Answer), err)
	}
}

func TestServerMessages(t *testing.T) {
	for _, tc := range []struct{ calls, want string }{
		{`[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"b\": 1, \"a\": [2]}"}}]`,
			`[{"id":"a","type":"function","function":{"name":"f","arguments":{"b":1,"a":[2]}}}]`},
		{`[{"function":{"arguments":"not json","name":"f"}}]`, `[{"function":{"arguments":{},"name":"f"}}]`},
		{`[{"function":{"arguments":"[1]","name":"f"}}]`, `[{"function":{"arguments":{},"name":"f"}}]`},
		{`[{"function":{"arguments":{"x":1},"name":"f"}}]`, `[{"function":{"arguments":{"x":1},"name":"f"}}]`},
	} {
		got, err := ServerMessages([]record.WireMessage{{Role: "assistant", ToolCalls: []byte(tc.calls)}})
		if err != nil {
			t.Fatal(err)
		}
		if want := `[{"role":"assistant","content":"","tool_calls":` + tc.want + `}]`; string(got) != want {
			t.Errorf("%s:\n got %s\nwant %s", tc.calls, got, want)
		}
	}
	if got, err := ServerMessages([]record.WireMessage{{Role: "assistant", ToolCalls: []byte(`[]`)}}); err != nil || string(got) != `[{"role":"assistant","content":""}]` {
		t.Errorf("an empty tool_calls list: %s, %v; want it dropped", got, err)
	}
}

// TestParity compares server ids made in the test with the local
// rendering, one cause each.
func TestParity(t *testing.T) {
	tok := testTokenizer(t, "qwen3")
	base := record.ChatTurn{Messages: []record.WireMessage{user("Say <|im_end|> twice.")}, Answer: record.WireMessage{Content: "Done."}, Finish: "stop"}
	local, err := tok.Turn(base, nil)
	if err != nil {
		t.Fatal(err)
	}
	i32 := func(ids []int) []int32 {
		out := make([]int32, len(ids))
		for i, id := range ids {
			out[i] = int32(id)
		}
		return out
	}
	drifted, err := tok.Turn(record.ChatTurn{Messages: append([]record.WireMessage{{Role: "system", Content: "Be kind."}}, base.Messages...), Answer: base.Answer, Finish: "stop"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	literal := slices.Clone(local.Prompt) // <|im_end|> typed by the user, tokenized as text
	at := slices.Index(literal, 151645)
	literal = slices.Concat(literal[:at], tok.Encode("<|im_end"), tok.Encode("|>"), literal[at+1:])
	retok := slices.Concat(tok.Encode("<think>\n\n</think>\n\n"), tok.Encode("Do"), tok.Encode("ne."), []int{151645})
	for _, tc := range []struct {
		name           string
		prompt, answer []int
		same           bool
		part, cause    string
	}{
		{"identical", local.Prompt, local.Answer, true, "", ""},
		{"another template", drifted.Prompt, local.Answer, false, "prompt", CauseTemplate},
		{"a special token typed as text", literal, local.Answer, false, "prompt", CauseSpecialLiteral},
		{"no end of turn", local.Prompt, local.Answer[:len(local.Answer)-1], false, "answer", CauseNoEndOfTurn},
		{"generated ids that are not their text's", local.Prompt, retok, false, "answer", CauseRetokenized},
		{"the template writes the answer otherwise", local.Prompt, slices.Concat(tok.Encode("Done."), []int{151645}), false, "answer", CauseAnswerRender},
	} {
		t.Run(tc.name, func(t *testing.T) {
			turn := base
			turn.Server = &record.TokenIDs{PromptTokenIDs: i32(tc.prompt), AnswerTokenIDs: i32(tc.answer)}
			p, err := tok.Parity(turn, nil)
			if err != nil {
				t.Fatal(err)
			}
			if p.Same != tc.same || p.Part != tc.part || p.Cause != tc.cause {
				t.Fatalf("got %+v, want same %v, part %q, cause %q", p, tc.same, tc.part, tc.cause)
			}
			if !tc.same && p.Server == "" {
				t.Errorf("no server text around the difference: %+v", p)
			}
		})
	}
}

// EncodePlain tokenizes a special token's text as text; a non-special
// added token still matches.
func TestEncodePlain(t *testing.T) {
	tok := testTokenizer(t, "qwen3")
	text := "a<|im_end|>b<tool_call>"
	special, plain := tok.Encode(text), tok.EncodePlain(text)
	if !slices.Contains(special, 151645) || slices.Contains(plain, 151645) {
		t.Fatalf("Encode %v, EncodePlain %v: want <|im_end|> as its id only in the first", special, plain)
	}
	if !slices.Contains(plain, 151657) || tok.Decode(plain) != text {
		t.Fatalf("EncodePlain %v decodes to %q: want <tool_call> (not special) kept, the text whole", plain, tok.Decode(plain))
	}
}
