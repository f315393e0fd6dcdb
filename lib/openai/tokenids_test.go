package openai

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

// Each server's answer holds its ids in its own place; the bodies here are
// written from each server's response models (vLLM
// chat_completion/protocol.py and completion/protocol.py, SGLang
// entrypoints/openai/protocol.py and its /generate, llama.cpp's
// /completion), not from the simulator, so a misreading of either shows.
func TestParseTokenIDs(t *testing.T) {
	cases := []struct {
		name           string
		shape          TokenShape
		api            API
		body           string
		prompt, answer []int32
	}{
		{"vLLM chat: the prompt at the top", ShapeVLLM, APIChat,
			`{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop","stop_reason":null,"token_ids":[9707,151645]}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5},"prompt_logprobs":null,"prompt_token_ids":[151644,872,198]}`,
			[]int32{151644, 872, 198}, []int32{9707, 151645}},
		{"vLLM completion: both in the choice", ShapeVLLM, APICompletions,
			`{"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"index":0,"text":" Paris","logprobs":null,"finish_reason":"length","stop_reason":null,"token_ids":[12095],"prompt_logprobs":null,"prompt_token_ids":[785,6722]}],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3}}`,
			[]int32{785, 6722}, []int32{12095}},
		{"vLLM before 0.10.2: logprobs' tokens", ShapeVLLMLogprobs, APIChat,
			`{"choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"logprobs":{"content":[{"token":"token_id:9707","logprob":-0.1,"bytes":[72,105],"top_logprobs":[]},{"token":"token_id:151645","logprob":0.0,"bytes":null,"top_logprobs":[]}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`,
			nil, []int32{9707, 151645}},
		{"SGLang chat: both in the choice", ShapeSGLang, APIChat,
			`{"id":"x","object":"chat.completion","model":"default","choices":[{"index":0,"message":{"role":"assistant","content":"Hi","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":"stop","matched_stop":151645,"prompt_token_ids":[151644,872,198],"token_ids":[9707,151645]}],"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2}}`,
			[]int32{151644, 872, 198}, []int32{9707, 151645}},
		{"SGLang /generate: output_ids", ShapeSGLang, APIGenerate,
			`{"text":" Paris","output_ids":[12095,13],"meta_info":{"id":"a","finish_reason":{"type":"length","length":2},"prompt_tokens":2,"completion_tokens":2,"cached_tokens":0}}`,
			nil, []int32{12095, 13}},
		{"llama.cpp /completion: tokens", ShapeLlama, APIChat,
			`{"index":0,"content":" Paris","tokens":[12095],"id_slot":0,"stop":true,"model":"m","tokens_predicted":1,"tokens_evaluated":2,"stop_type":"limit","stopping_word":"","tokens_cached":0}`,
			nil, []int32{12095}},
		{"an answer without ids", ShapeVLLM, APIChat,
			`{"choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`,
			nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, a, err := ParseTokenIDs(c.shape, c.api, []byte(c.body))
			if err != nil || !slices.Equal(p, c.prompt) || !slices.Equal(a, c.answer) {
				t.Fatalf("prompt %v, answer %v, err %v; want %v and %v", p, a, err, c.prompt, c.answer)
			}
		})
	}
	if _, _, err := ParseTokenIDs(ShapeVLLMLogprobs, APIChat, []byte(`{"choices":[{"logprobs":{"content":[{"token":"Hi"}]}}]}`)); err == nil {
		t.Error("a logprobs token that is not token_id:N was read")
	}
}

// An answer's ids are whole when both are there and as many as its usage
// counts.
func TestCheckTokenIDs(t *testing.T) {
	c := &Completion{PromptTokens: 3, CompletionTokens: 2}
	for _, x := range []struct {
		prompt, answer []int32
		ok             bool
	}{
		{[]int32{1, 2, 3}, []int32{4, 5}, true},
		{nil, nil, false},
		{[]int32{1, 2, 3}, nil, false},
		{[]int32{1, 2}, []int32{4, 5}, false},
		{[]int32{1, 2, 3}, []int32{4}, false},
	} {
		err := CheckTokenIDs(c, x.prompt, x.answer)
		if (err == nil) != x.ok || err != nil && !errors.Is(err, ErrNoTokenIDs) {
			t.Errorf("%v %v: %v", x.prompt, x.answer, err)
		}
	}
	if err := CheckTokenIDs(&Completion{PromptTokens: 1}, []int32{1}, nil); err != nil {
		t.Errorf("an empty answer has no ids to give: %v", err)
	}
}

// A chat request becomes llama.cpp's /completion of the same answer, and
// a /generate request sends the ids of its text.
func TestTokenRequestBodies(t *testing.T) {
	body, err := LlamaCompletionBody([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":20,"temperature":0.5,"seed":7,"stream":false}`), []int32{1, 2})
	if err != nil || string(body) != `{"n_predict":20,"prompt":[1,2],"return_tokens":true,"seed":7,"temperature":0.5}` {
		t.Errorf("llama.cpp body %s (%v)", body, err)
	}
	gen, err := GenerateIDsBody([]byte(`{"text":"hi","sampling_params":{"max_new_tokens":4}}`), []int32{5})
	if err != nil || string(gen) != `{"sampling_params":{"max_new_tokens":4},"input_ids":[5]}` {
		t.Errorf("/generate body %s (%v)", gen, err)
	}
	if s := SamplingOf([]byte(`{"model":"m","messages":[],"temperature":0.7,"seed":3,"max_tokens":9,"tools":[]}`)); string(s) != `{"max_tokens":9,"seed":3,"temperature":0.7}` {
		t.Errorf("sampling %s", s)
	}
	if s := SamplingOf([]byte(`{"text":"x","sampling_params":{"max_new_tokens":4,"sampling_seed":1}}`)); string(s) != `{"max_new_tokens":4,"sampling_seed":1}` {
		t.Errorf("/generate sampling %s", s)
	}
	c, err := ParseLlamaCompletion([]byte(`{"content":" Paris","tokens":[12095],"stop":true,"model":"m","tokens_predicted":1,"tokens_evaluated":2,"stop_type":"eos","timings":{"cache_n":1}}`))
	if err != nil || c.Text != " Paris" || c.FinishReason != "stop" || c.PromptTokens != 2 || c.CompletionTokens != 1 || c.CachedTokens == nil || *c.CachedTokens != 1 {
		t.Errorf("llama.cpp answer %+v (%v)", c, err)
	}
}

// FuzzParseTokenIDs: any body, read in any shape, gives ids or an error,
// never a panic, and no ids beside an error.
func FuzzParseTokenIDs(f *testing.F) {
	for _, seed := range []string{
		`{"choices":[{"token_ids":[1,2],"prompt_token_ids":[3]}],"prompt_token_ids":[4]}`,
		`{"choices":[{"logprobs":{"content":[{"token":"token_id:7"},{"token":"token_id:-1"}]}}]}`,
		`{"output_ids":[5,6],"tokens":[8]}`, `{"choices":[null]}`, `[]`, `{"choices":[{"token_ids":"x"}]}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, s := range []TokenShape{ShapeVLLM, ShapeVLLMLogprobs, ShapeSGLang, ShapeLlama} {
			for _, a := range []API{APIChat, APICompletions, APIGenerate} {
				p, ans, err := ParseTokenIDs(s, a, []byte(body))
				if err != nil && (p != nil || ans != nil) {
					t.Fatalf("ids beside an error: %v %v %v", p, ans, err)
				}
			}
		}
	})
}

// FuzzParseChatTokenIDs: where the one reading of a chat answer succeeds,
// it gives what ParseChat and ParseTokenIDs give, for SGLang's and vLLM's
// shapes; where it fails, so does one of them (the caller reads with both
// then).
func FuzzParseChatTokenIDs(f *testing.F) {
	for _, seed := range []string{
		`{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop","stop_reason":null,"token_ids":[9707,151645]}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5},"prompt_logprobs":null,"prompt_token_ids":[151644,872,198]}`,
		`{"id":"x","object":"chat.completion","model":"default","choices":[{"index":0,"message":{"role":"assistant","content":"Hi","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":"stop","matched_stop":151645,"prompt_token_ids":[151644,872,198],"token_ids":[9707,151645]}],"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}}`,
		`{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls","token_ids":[1]}],"prompt_token_ids":[2]}`,
		`{"choices":[{"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop","token_ids":"x"}]}`,
		`{"choices":[{"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop","logprobs":{"content":[{"token":7}]}}]}`,
		`{"choices":[{"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"tokens":"x"}`,
		`{"choices":[{"message":null,"finish_reason":"stop"}]}`, `{"choices":[null]}`, `{"choices":[]}`, `[]`, `{`,
		`{"choices":[{"message":{"role":"assistant","content":"Hi"}}]}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, s := range []TokenShape{ShapeSGLang, ShapeVLLM} {
			c, p, a, err := ParseChatTokenIDs(s, []byte(body))
			c2, err2 := ParseChat([]byte(body))
			var p2, a2 []int32
			var idErr error
			if err2 == nil {
				p2, a2, idErr = ParseTokenIDs(s, APIChat, []byte(body))
			}
			if err != nil {
				if err2 == nil && idErr == nil {
					t.Fatalf("shape %d: one reading failed (%v) where both read it", s, err)
				}
				continue
			}
			if err2 != nil || idErr != nil {
				t.Fatalf("shape %d: one reading read it where the two failed (%v, %v)", s, err2, idErr)
			}
			if !reflect.DeepEqual(c, c2) || !slices.Equal(p, p2) || !slices.Equal(a, a2) {
				t.Fatalf("shape %d: one reading gave %+v %v %v, the two %+v %v %v", s, c, p, a, c2, p2, a2)
			}
		}
	})
}
