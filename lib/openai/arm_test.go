package openai

import (
	"testing"
)

// TestBuilderArm: an arm's params lie over the flags and --extra-body and
// under the record's own params, in every API; ArmSent says what the
// requests send of the arm's keys, and MaxTokens counts the arm's limit.
func TestBuilderArm(t *testing.T) {
	flags := Sampling{MaxTokens: ptr(100), Temperature: ptr(0.6), Seed: ptr(int64(10))}
	arm := `{"chat_template_kwargs":{"enable_thinking":true},"temperature":1.0,"max_tokens":4096,"reasoning_effort":"high"}`
	keys := []string{"chat_template_kwargs", "temperature", "max_tokens", "reasoning_effort"}
	for _, tt := range []struct {
		name, record, extra string
		api                 API
		body, sent          string
		max                 int
	}{
		{name: "chat: the arm over the flags and --extra-body", api: APIChat, extra: `{"chat_template_kwargs":{"enable_thinking":false},"top_p":0.8}`,
			record: `{"id":"a","messages":[{"role":"user","content":"Hi"}]}`,
			body:   `{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_tokens":4096,"temperature":1.0,"seed":11,"chat_template_kwargs":{"enable_thinking":true},"top_p":0.8,"reasoning_effort":"high"}`,
			sent:   `{"chat_template_kwargs":{"enable_thinking":true},"temperature":1.0,"max_tokens":4096,"reasoning_effort":"high"}`, max: 4096},
		{name: "chat: the record's params win, null removes", api: APIChat,
			record: `{"id":"a","messages":[{"role":"user","content":"Hi"}],"params":{"temperature":0.2,"reasoning_effort":null}}`,
			body:   `{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_tokens":4096,"temperature":0.2,"seed":11,"chat_template_kwargs":{"enable_thinking":true}}`,
			sent:   `{"chat_template_kwargs":{"enable_thinking":true},"temperature":0.2,"max_tokens":4096}`, max: 4096},
		{name: "completions", api: APICompletions, record: `{"id":"b","prompt":"Once","params":{"max_tokens":7}}`,
			body: `{"model":"m","prompt":"Once","max_tokens":7,"temperature":1.0,"seed":11,"chat_template_kwargs":{"enable_thinking":true},"reasoning_effort":"high"}`,
			sent: `{"chat_template_kwargs":{"enable_thinking":true},"temperature":1.0,"max_tokens":7,"reasoning_effort":"high"}`, max: 7},
		{name: "generate: into sampling_params under its names", api: APIGenerate, record: `{"id":"b","prompt":"Once"}`,
			body: `{"text":"Once","sampling_params":{"max_new_tokens":4096,"temperature":1.0,"sampling_seed":11,"chat_template_kwargs":{"enable_thinking":true},"reasoning_effort":"high"}}`,
			sent: `{"chat_template_kwargs":{"enable_thinking":true},"temperature":1.0,"max_tokens":4096,"reasoning_effort":"high"}`, max: 4096},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var extra []byte
			if tt.extra != "" {
				extra = []byte(tt.extra)
			}
			base, err := NewBuilder(tt.api, "m", flags, extra)
			if err != nil {
				t.Fatal(err)
			}
			if tt.api == APIGenerate {
				base.SetModel("")
			}
			b := base.WithArm([]byte(arm))
			p, body := bodyOf(t, b, tt.record, 1)
			if string(body) != tt.body {
				t.Errorf("body\n got %s\nwant %s", body, tt.body)
			}
			sent, err := b.ArmSent(p.Params, keys)
			if err != nil || string(sent) != tt.sent {
				t.Errorf("ArmSent %s (%v), want %s", sent, err, tt.sent)
			}
			if got := b.MaxTokens(p); got != tt.max {
				t.Errorf("MaxTokens %d, want %d", got, tt.max)
			}
			// The base builder is untouched.
			if _, plain := bodyOf(t, base, tt.record, 1); string(plain) == string(body) {
				t.Errorf("the base builder sends the arm too: %s", plain)
			}
		})
	}
	b, _ := NewBuilder(APIChat, "m", Sampling{}, nil)
	if b.WithArm(nil) != b {
		t.Error("no arm params: not the builder itself")
	}
	if sent, err := b.WithArm([]byte(`{"top_p":0.5}`)).ArmSent([]byte(`{"top_p":null}`), []string{"top_p"}); sent != nil || err != nil {
		t.Errorf("a key the record removes: ArmSent %s (%v), want nothing", sent, err)
	}
}
