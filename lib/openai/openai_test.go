package openai

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/record"
)

func golden(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "openai", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseGolden(t *testing.T) {
	tests := []struct {
		file  string
		parse func([]byte) (Completion, error)
		want  Completion
	}{
		{"chat_sglang.json", ParseChat, Completion{Text: "The capital of France is Paris.", FinishReason: "stop",
			PromptTokens: 36, CompletionTokens: 8, Model: "qwen/qwen2.5-0.5b-instruct"}},
		{"chat_reasoning.json", ParseChat, Completion{Text: "\n\n3 + 5 = 8", Reasoning: "The user asks for 3 + 5. That is 8.", ReasoningField: "reasoning_content",
			FinishReason: "stop", PromptTokens: 14, CompletionTokens: 46, CachedTokens: ptr(4), Model: "Qwen/Qwen3-4B"}},
		{"chat_length.json", ParseChat, Completion{Text: "Once upon a time, in a land far", FinishReason: "length",
			PromptTokens: 20, CompletionTokens: 10, Model: "qwen/qwen2.5-0.5b-instruct"}},
		{"chat_openai.json", ParseChat, Completion{Text: "\n\nHello there, how may I assist you today?", FinishReason: "stop",
			PromptTokens: 9, CompletionTokens: 12, Model: "gpt-4o-mini"}},
		{"completion_sglang.json", ParseCompletion, Completion{Text: " 1. United States - Washington D.C.\n2. Japan - Tokyo\n3. Brazil - Brasilia",
			FinishReason: "length", PromptTokens: 9, CompletionTokens: 32, Model: "qwen/qwen2.5-0.5b-instruct"}},
		{"completion_openai.json", ParseCompletion, Completion{Text: "\n\nThis is indeed a test", FinishReason: "length",
			PromptTokens: 5, CompletionTokens: 7, Model: "gpt-3.5-turbo-instruct"}},
		{"generate_stop.json", ParseGenerate, Completion{Text: " Paris. It is the largest city in France.", FinishReason: "stop",
			PromptTokens: 7, CompletionTokens: 11, CachedTokens: ptr(0)}},
		{"generate_length.json", ParseGenerate, Completion{Text: " Paris. It is located in the north-central part of the country, on the",
			FinishReason: "length", PromptTokens: 7, CompletionTokens: 16, CachedTokens: ptr(6)}},
		{"generate_abort.json", ParseGenerate, Completion{FinishReason: "abort", PromptTokens: 7, CachedTokens: ptr(0), AbortMessage: "Abort in waiting queue"}},
		{"chat_tool_calls_sglang.json", ParseChat, Completion{FinishReason: "tool_calls", PromptTokens: 280, CompletionTokens: 58, Model: "Qwen/Qwen2.5-7B-Instruct",
			ToolCalls: []record.ToolCall{
				{ID: "call_0f3a1b2c4d5e6f708192a3b4", Type: "function", Function: record.FunctionCall{Name: "get_current_weather", Arguments: `{"city": "Boston", "state": "MA", "unit": "fahrenheit"}`}},
				{ID: "call_1a2b3c4d5e6f708192a3b4c5", Type: "function", Function: record.FunctionCall{Name: "get_current_weather", Arguments: `{"city": "Paris", "unit": "celsius"}`}},
			}}},
		{"chat_tool_calls_openai.json", ParseChat, Completion{FinishReason: "tool_calls", PromptTokens: 82, CompletionTokens: 17, Model: "gpt-4o-mini",
			ToolCalls: []record.ToolCall{{ID: "call_abc123", Type: "function", Function: record.FunctionCall{Name: "get_current_weather", Arguments: "{\n\"location\": \"Boston, MA\"\n}"}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := tt.parse(golden(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v (cached %v)\nwant %+v (cached %v)", got, cachedText(got.CachedTokens), tt.want, cachedText(tt.want.CachedTokens))
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name  string
		parse func([]byte) (Completion, error)
		body  string
		want  string
	}{
		{"chat not json", ParseChat, `<html>502 Bad Gateway</html>`, "malformed response body"},
		{"chat no choices", ParseChat, `{"id":"x","choices":[]}`, "no choices"},
		{"completion no choices", ParseCompletion, `{"id":"x"}`, "no choices"},
		{"generate truncated", ParseGenerate, `{"text":"abc","meta_info":{"prompt_tokens":`, "malformed response body"},
		{"chat wrong type", ParseChat, `{"choices":[{"message":{"content":5}}]}`, "malformed response body"},
		// Answers that are not answers.
		{"chat null choice", ParseChat, `{"choices":[null]}`, "the choice is null"},
		{"chat null message", ParseChat, `{"choices":[{"message":null,"finish_reason":"stop"}]}`, "no message"},
		{"chat no message", ParseChat, `{"choices":[{"index":0,"finish_reason":"stop"}]}`, "no message"},
		{"chat null content", ParseChat, `{"choices":[{"message":{"role":"assistant","content":null},"finish_reason":"stop"}]}`, "null content"},
		{"chat no finish", ParseChat, `{"choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":null}]}`, "no finish_reason"},
		{"chat finish left out", ParseChat, `{"choices":[{"message":{"role":"assistant","content":"hi"}}]}`, "no finish_reason"},
		{"chat nameless call", ParseChat, `{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c","function":{"arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`, "without a function name"},
		{"chat bad calls", ParseChat, `{"choices":[{"message":{"content":null,"tool_calls":{"id":"c"}},"finish_reason":"tool_calls"}]}`, "malformed tool_calls"},
		{"completion null choice", ParseCompletion, `{"choices":[null]}`, "the choice is null"},
		{"completion no finish", ParseCompletion, `{"choices":[{"text":"x","finish_reason":null}]}`, "no finish_reason"},
		{"generate no finish", ParseGenerate, `{"text":"abc","meta_info":{"prompt_tokens":3,"finish_reason":null}}`, "no finish_reason"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.parse([]byte(tt.body))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// Answers that are answers though they look thin: an empty text that
// stopped, reasoning cut by the length limit before any content, calls
// whose arguments come as an object.
func TestParseThinAnswers(t *testing.T) {
	tests := []struct {
		name, body string
		want       Completion
	}{
		{"empty stop", `{"choices":[{"message":{"role":"assistant","content":""},"finish_reason":"stop"}]}`, Completion{FinishReason: "stop"}},
		{"reasoning only", `{"choices":[{"message":{"content":null,"reasoning_content":"Let me"},"finish_reason":"length"}]}`,
			Completion{Reasoning: "Let me", ReasoningField: "reasoning_content", FinishReason: "length"}},
		{"current vLLM's reasoning only", `{"choices":[{"message":{"content":null,"reasoning":"Let me"},"finish_reason":"length"}]}`,
			Completion{Reasoning: "Let me", ReasoningField: "reasoning", FinishReason: "length"}},
		{"current vLLM's reasoning, reasoning_content null", `{"choices":[{"message":{"content":"4","reasoning_content":null,"reasoning":"2+2"},"finish_reason":"stop"}]}`,
			Completion{Text: "4", Reasoning: "2+2", ReasoningField: "reasoning", FinishReason: "stop"}},
		{"both, as vLLM sent while it kept the old name", `{"choices":[{"message":{"content":"4","reasoning_content":"2+2","reasoning":"2+2"},"finish_reason":"stop"}]}`,
			Completion{Text: "4", Reasoning: "2+2", ReasoningField: "reasoning_content", FinishReason: "stop"}},
		{"object arguments", `{"choices":[{"message":{"content":"","tool_calls":[{"id":"c1","function":{"name":"f","arguments":{"a": 1, "b":[2]}}}]},"finish_reason":"tool_calls"}]}`,
			Completion{FinishReason: "tool_calls", ToolCalls: []record.ToolCall{{ID: "c1", Type: "function", Function: record.FunctionCall{Name: "f", Arguments: `{"a":1,"b":[2]}`}}}}},
		{"no arguments", `{"choices":[{"message":{"content":null,"tool_calls":[{"type":"function","function":{"name":"now"}}]},"finish_reason":"tool_calls"}]}`,
			Completion{FinishReason: "tool_calls", ToolCalls: []record.ToolCall{{Type: "function", Function: record.FunctionCall{Name: "now", Arguments: "{}"}}}}},
	}
	for _, tt := range tests {
		got, err := ParseChat([]byte(tt.body))
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestServerInfo(t *testing.T) {
	tests := []struct {
		file  string
		slots int
		model string
	}{
		{"server_info.json", 48, "Qwen/Qwen3-32B"},
		{"server_info_dp.json", 80, "Qwen/Qwen3-32B"},
	}
	for _, tt := range tests {
		info, err := ParseServerInfo(golden(t, tt.file))
		if err != nil {
			t.Fatalf("%s: %v", tt.file, err)
		}
		if got := info.Slots(); got != tt.slots {
			t.Errorf("%s: slots %d, want %d", tt.file, got, tt.slots)
		}
		if info.ServedModelName != tt.model {
			t.Errorf("%s: model %q", tt.file, info.ServedModelName)
		}
	}
	var empty ServerInfo
	if empty.Slots() != 0 {
		t.Error("empty server info has slots")
	}
}

func TestErrorMessage(t *testing.T) {
	const ctx = "The input (9001 tokens) is longer than the model's context length (8192 tokens)."
	tests := []struct {
		name string
		body string
		want string
	}{
		{"sglang flat", string(golden(t, "error_sglang.json")), ctx},
		{"sglang native", string(golden(t, "error_native.json")), ctx},
		{"openai nested", string(golden(t, "error_openai.json")), "This model's maximum context length is 8192 tokens. However, your messages resulted in 9001 tokens. Please reduce the length of the messages."},
		{"fastapi detail", string(golden(t, "error_fastapi.json")), "Field required"},
		{"error string", `{"error": "queue full"}`, "queue full"},
		{"detail string", `{"detail": "Not Found"}`, "Not Found"},
		{"plain text", "  Internal Server Error\n", "Internal Server Error"},
		{"empty", "", ""},
		{"object without message", `{"status": 503}`, `{"status": 503}`},
		{"long", strings.Repeat("é", 400), strings.Repeat("é", 256) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ErrorMessage([]byte(tt.body)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMerge(t *testing.T) {
	tests := []struct {
		name      string
		base      string
		overrides []string
		want      string
		err       bool
	}{
		{"no overrides", `{"a":1,"b":"x"}`, nil, `{"a":1,"b":"x"}`, false},
		{"replace keeps order", `{"a":1,"b":2}`, []string{`{"a":3}`}, `{"a":3,"b":2}`, false},
		{"add at end", `{"a":1}`, []string{`{"c":{"d":[1,2]}}`}, `{"a":1,"c":{"d":[1,2]}}`, false},
		{"later wins", `{"a":1}`, []string{`{"a":2}`, `{"a":3}`}, `{"a":3}`, false},
		{"null removes", `{"a":1,"b":2}`, []string{`{"a":null}`}, `{"b":2}`, false},
		{"empty override skipped", `{"a":1}`, []string{``, `  `}, `{"a":1}`, false},
		{"escaped key", `{"a":1}`, []string{`{"q\"k":true}`}, `{"a":1,"q\"k":true}`, false},
		{"bad base", `[1]`, nil, "", true},
		{"bad override", `{"a":1}`, []string{`{"a"}`}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ov [][]byte
			for _, o := range tt.overrides {
				ov = append(ov, []byte(o))
			}
			got, err := Merge([]byte(tt.base), ov...)
			if (err != nil) != tt.err {
				t.Fatalf("err %v", err)
			}
			if !tt.err && string(got) != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
			if !tt.err && !json.Valid(got) {
				t.Errorf("invalid JSON %s", got)
			}
		})
	}
}

func TestRequestShapes(t *testing.T) {
	mt, temp, seed := 512, 0.7, int64(42)
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"chat minimal", ChatRequest{Model: "m", Messages: []Message{{Role: "user", Content: "hi"}}},
			`{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"chat sampling", ChatRequest{Model: "m", Messages: []Message{{Role: "user", Content: "hi"}},
			Sampling: Sampling{MaxTokens: &mt, Temperature: &temp, Seed: &seed, Stop: []string{"\n\n"}}},
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":512,"temperature":0.7,"seed":42,"stop":["\n\n"]}`},
		{"completion", CompletionRequest{Model: "m", Prompt: "Once"},
			`{"model":"m","prompt":"Once"}`},
		{"generate", GenerateRequest{Text: "Once", SamplingParams: GenerateSampling{MaxNewTokens: &mt, SamplingSeed: &seed}},
			`{"text":"Once","sampling_params":{"max_new_tokens":512,"sampling_seed":42}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	for in, want := range map[string]string{"max_tokens": "max_new_tokens", "seed": "sampling_seed", "top_k": "top_k", "min_tokens": "min_new_tokens"} {
		if got := NativeSamplingName(in); got != want {
			t.Errorf("NativeSamplingName(%s) = %s, want %s", in, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"chat_sglang.json", "chat_reasoning.json", "completion_sglang.json", "generate_stop.json",
		"generate_abort.json", "models_sglang.json", "server_info.json", "error_sglang.json", "error_fastapi.json"} {
		f.Add(golden(f, name))
	}
	f.Add([]byte(`{"choices":[{"message":{"content":null},"finish_reason":null}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, parse := range []func([]byte) (Completion, error){ParseChat, ParseCompletion, ParseGenerate} {
			c, err := parse(body)
			if err != nil && !reflect.DeepEqual(c, Completion{}) {
				t.Fatalf("error %v with a non-empty completion %+v", err, c)
			}
		}
		if info, err := ParseServerInfo(body); err == nil && info.Slots() < 0 {
			t.Fatalf("negative slots")
		}
		if msg := ErrorMessage(body); len(msg) > maxErrorText+3 {
			t.Fatalf("unbounded message of %d bytes", len(msg))
		}
		if out, err := Merge(body, []byte(`{"a":1}`)); err == nil && json.Valid(body) && !json.Valid(out) {
			t.Fatalf("merge of valid %q gave invalid %q", body, out)
		}
	})
}

// deref shows a reported count, or none.
func cachedText(p *int) any {
	if p == nil {
		return "none"
	}
	return *p
}

// A body nested past what a record may be is malformed, whatever reads
// it: an answer, an error body, a streamed chunk, token ids. Millions deep
// it would otherwise exhaust the decoder's stack, which no recover catches.
func TestDeepBodies(t *testing.T) {
	deep := []byte(strings.Repeat("[", 3_000_000) + strings.Repeat("]", 3_000_000))
	chat := append(append([]byte(`{"choices":[{"message":{"content":`), deep...), `}}]}`...)
	for _, api := range []API{APIChat, APICompletions, APIGenerate} {
		if _, err := api.Parse(chat); err == nil {
			t.Errorf("%s: parsed", api)
		}
	}
	if msg := ErrorMessage(append(append([]byte(`{"error":`), deep...), '}')); len(msg) == 0 || len(msg) > 2*maxErrorText {
		t.Errorf("error message of a deep body: %d bytes", len(msg))
	}
	for _, kind := range []StreamKind{StreamChat, StreamCompletion, StreamGenerate} {
		dec := StreamDecoder{Kind: kind}
		if _, err := dec.Decode(deep); err == nil {
			t.Errorf("stream %v: decoded", kind)
		}
	}
	if _, _, err := ParseTokenIDs(ShapeVLLM, APIChat, chat); err == nil {
		t.Errorf("token ids: parsed")
	}
}

func TestBadValues(t *testing.T) {
	for _, body := range []string{
		`{"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":-1,"completion_tokens":2}}`,
		`{"choices":[{"message":{"content":null,"tool_calls":[{"function":{"name":"f","arguments":"x"}}]},"finish_reason":"tool_calls"}]}`,
		`{"choices":[{"message":{"content":null,"tool_calls":[{"function":{"name":"f","arguments":7}}]},"finish_reason":"tool_calls"}]}`,
	} {
		if _, err := APIChat.Parse([]byte(body)); !errors.Is(err, ErrNotAnswer) {
			t.Errorf("%s: %v, want ErrNotAnswer", body, err)
		}
	}
	if _, err := APIGenerate.Parse([]byte(`{"text":"x","meta_info":{"prompt_tokens":3,"completion_tokens":-4,"finish_reason":{"type":"stop"}}}`)); !errors.Is(err, ErrNotAnswer) {
		t.Errorf("generate: %v", err)
	}
	if _, _, err := ParseTokenIDs(ShapeVLLM, APIChat, []byte(`{"prompt_token_ids":[1,-2],"choices":[{"token_ids":[3]}]}`)); err == nil {
		t.Errorf("negative prompt id parsed")
	}
	if _, _, err := ParseTokenIDs(ShapeVLLM, APIChat, []byte(`{"prompt_token_ids":[1,2],"choices":[{"token_ids":[3]}]}`)); err != nil {
		t.Errorf("good ids: %v", err)
	}
}
