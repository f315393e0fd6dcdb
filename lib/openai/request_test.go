package openai

import (
	"errors"
	"strings"
	"testing"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/record"
)

func ptr[T any](v T) *T { return &v }

func TestRequestBodies(t *testing.T) {
	chat := `{"id":"a","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`
	text := `{"id":"b","prompt":"Once upon"}`
	withParams := `{"id":"c","prompt":"Once upon","params":{"max_tokens":7,"seed":50,"top_k":20}}`
	flags := Sampling{MaxTokens: ptr(100), Temperature: ptr(0.6), Seed: ptr(int64(10)), Stop: []string{"END"}}
	tests := []struct {
		name   string
		api    API
		flags  Sampling
		extra  string
		record string
		sample int
		want   string
	}{
		{"chat", APIChat, Sampling{}, "", chat, 0,
			`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`},
		{"chat flags and seed per sample", APIChat, flags, "", chat, 2,
			`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_tokens":100,"temperature":0.6,"seed":12,"stop":["END"]}`},
		{"chat extra body", APIChat, flags, `{"chat_template_kwargs":{"enable_thinking":false},"max_tokens":5}`, chat, 0,
			`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_tokens":5,"temperature":0.6,"seed":10,"stop":["END"],"chat_template_kwargs":{"enable_thinking":false}}`},
		{"chat from prompt text", APIChat, Sampling{}, "", text, 0,
			`{"model":"m","messages":[{"role":"user","content":"Once upon"}]}`},
		{"completions params win", APICompletions, flags, `{"max_tokens":5}`, withParams, 1,
			`{"model":"m","prompt":"Once upon","max_tokens":7,"temperature":0.6,"seed":51,"stop":["END"],"top_k":20}`},
		{"generate", APIGenerate, flags, "", text, 0,
			`{"text":"Once upon","sampling_params":{"max_new_tokens":100,"temperature":0.6,"sampling_seed":10,"stop":["END"]}}`},
		{"generate extra and params", APIGenerate, flags, `{"sampling_params":{"top_k":5,"max_new_tokens":9},"return_logprob":false}`, withParams, 3,
			`{"text":"Once upon","sampling_params":{"max_new_tokens":7,"temperature":0.6,"sampling_seed":53,"stop":["END"],"top_k":20},"return_logprob":false}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var extra []byte
			if tt.extra != "" {
				extra = []byte(tt.extra)
			}
			b, err := NewBuilder(tt.api, "m", tt.flags, extra)
			if err != nil {
				t.Fatal(err)
			}
			_, got := bodyOf(t, b, tt.record, tt.sample)
			if string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// bodyOf decodes the prompt record line, checks it and builds its body
// for sample.
func bodyOf(t *testing.T, b *Builder, line string, sample int) (*record.Prompt, []byte) {
	t.Helper()
	var p record.Prompt
	if err := record.Decode([]byte(line), &p); err != nil {
		t.Fatal(err)
	}
	seed, err := b.Check(&p)
	if err != nil {
		t.Fatal(err)
	}
	body, err := b.Body(&p, seed, sample)
	if err != nil {
		t.Fatal(err)
	}
	return &p, body
}

func TestBuilderChecks(t *testing.T) {
	tests := []struct {
		api    API
		record string
		reason string
	}{
		{APIChat, `{"id":"a"}`, ReasonNoPrompt},
		{APIChat, `{"id":"a","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]}`, ReasonNoUserTurn},
		{APIChat, `{"id":"a","messages":[{"role":"user","content":"q"}],"params":[1]}`, ReasonBadParams},
		{APIChat, `{"id":"a","messages":[{"role":"user","content":"q"}],"params":{"seed":"x"}}`, ReasonBadParams},
		{APICompletions, `{"id":"a","messages":[{"role":"user","content":"q"}]}`, ReasonNeedsPromptText},
		{APIGenerate, `{"id":"a","messages":[{"role":"user","content":"q"}]}`, ReasonNeedsPromptText},
		{APIChat, `{"id":"a","messages":[{"role":"user","content":"q"},{"role":"tool","content":"42"}]}`, ""},
		{APIChat, `{"id":"a","messages":[{"role":"user","content":"q"}],"tools":"not json"}`, ReasonBadTools},
		{APIChat, `{"id":"a","messages":[{"role":"user","content":"q"}],"tools":5}`, ReasonBadTools},
		{APIChat, `{"id":"a","messages":[{"role":"user","content":"q"}],"tools":"[]"}`, ""},
	}
	for _, tt := range tests {
		b, _ := NewBuilder(tt.api, "m", Sampling{}, nil)
		var p record.Prompt
		if err := record.Decode([]byte(tt.record), &p); err != nil {
			t.Fatal(err)
		}
		_, err := b.Check(&p)
		var pe *PromptError
		switch {
		case tt.reason == "" && err != nil:
			t.Errorf("%s: unexpected %v", tt.record, err)
		case tt.reason != "" && (!errors.As(err, &pe) || pe.Reason != tt.reason):
			t.Errorf("%s: got %v, want %s", tt.record, err, tt.reason)
		}
	}
	if _, err := NewBuilder(APIChat, "m", Sampling{}, []byte(`[1]`)); err == nil {
		t.Error("an extra body that is not an object was accepted")
	}
	if _, err := NewBuilder(APIGenerate, "m", Sampling{}, []byte(`{"sampling_params":3}`)); err == nil {
		t.Error("sampling_params that is not an object was accepted")
	}
}

// What a record carries reaches the server: its tools (in the OpenAI
// shape, from any spelling), tool_choice, parallel_tool_calls, the
// history's tool calls and the tool results' tool_call_id (never a turn's
// weight); a top-level system by the one-slot rule; the
// history's reasoning only when asked for; the seed offset and a
// max_tokens chosen to fit the context, over the record's own params.
func TestRequestCarriesTheRecord(t *testing.T) {
	tools := `[{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]`
	conv := `{"id":"t","system":"Top.","tools":` + strconvQuote(tools) + `,"tool_choice":"auto","parallel_tool_calls":false,"messages":[` +
		`{"role":"user","content":"Weather in Paris?"},` +
		`{"role":"assistant","content":"","reasoning_content":"Call it.","tool_calls":[{"id":"call_2_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}],"weight":0},` +
		`{"role":"tool","content":"{\"temp\":21}","tool_call_id":"call_2_1"},` +
		`{"role":"user","content":"And tomorrow?"}],"params":{"max_tokens":50}}`
	wantTools := `"tools":[{"function":{"description":"Weather","name":"get_weather","parameters":{"properties":{"city":{"type":"string"}},"type":"object"}},"type":"function"}],"tool_choice":"auto","parallel_tool_calls":false`
	wantMsgs := `"messages":[{"role":"system","content":"Top."},{"role":"user","content":"Weather in Paris?"},` +
		`{"role":"assistant","content":"","tool_calls":[{"id":"call_2_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
		`{"role":"tool","content":"{\"temp\":21}","tool_call_id":"call_2_1"},{"role":"user","content":"And tomorrow?"}]`
	var p record.Prompt
	if err := record.Decode([]byte(conv), &p); err != nil {
		t.Fatal(err)
	}
	b, _ := NewBuilder(APIChat, "m", Sampling{Seed: ptr(int64(100))}, nil)
	seed, err := b.Check(&p)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := b.Body(&p, seed, 1)
	if want := `{"model":"m",` + wantMsgs + `,` + wantTools + `,"seed":101,"max_tokens":50}`; string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	b.SetSeedOffset(20)
	b.SetHistoryReasoning(true)
	got, _ = b.BodyMax(&p, seed, 1, 30)
	withReasoning := strings.Replace(wantMsgs, `"content":"","tool_calls"`, `"content":"","tool_calls"`, 1)
	withReasoning = strings.Replace(withReasoning, `"arguments":"{\"city\":\"Paris\"}"}}]}`, `"arguments":"{\"city\":\"Paris\"}"}}],"reasoning_content":"Call it."}`, 1)
	if want := `{"model":"m",` + withReasoning + `,` + wantTools + `,"seed":121,"max_tokens":30}`; string(got) != want {
		t.Errorf("with offset, reasoning and a fitted length:\ngot  %s\nwant %s", got, want)
	}

	// A system turn of its own wins over the top-level one.
	own := `{"id":"s","system":"Top.","messages":[{"role":"system","content":"Own."},{"role":"user","content":"q"}]}`
	var q record.Prompt
	if err := record.Decode([]byte(own), &q); err != nil {
		t.Fatal(err)
	}
	got, _ = b.Body(&q, nil, 0)
	if want := `{"model":"m","messages":[{"role":"system","content":"Own."},{"role":"user","content":"q"}],"seed":120}`; string(got) != want {
		t.Errorf("own system turn: got %s", got)
	}
	gen, _ := NewBuilder(APIGenerate, "", Sampling{}, nil)
	text := "go"
	got, _ = gen.BodyMax(&record.Prompt{Prompt: &text}, nil, 0, 9)
	if want := `{"text":"go","sampling_params":{"max_new_tokens":9}}`; string(got) != want {
		t.Errorf("generate with a fitted length: %s", got)
	}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// Any record the checks accept yields a request body that is one valid
// JSON object.
func FuzzRequestBody(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","messages":[{"role":"user","content":"hi"}]}`,
		`{"id":"b","prompt":"x","params":{"max_tokens":3,"seed":9}}`,
		`{"id":"c","prompt":"x","params":{"seed":null,"stop":["\n"]}}`,
	} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, rec []byte, which uint8) {
		api := []API{APIChat, APICompletions, APIGenerate}[int(which)%3]
		b, err := NewBuilder(api, "m", Sampling{Seed: ptr(int64(1))}, []byte(`{"sampling_params":{"top_k":5},"x":1}`))
		if err != nil {
			t.Fatal(err)
		}
		var p record.Prompt
		if record.Decode(rec, &p) != nil {
			return
		}
		seed, err := b.Check(&p)
		if err != nil {
			return
		}
		body, err := b.Body(&p, seed, 2)
		if err != nil {
			return
		}
		if err := ValidObject(body); err != nil {
			t.Fatalf("record %q gave body %q: %v", rec, body, err)
		}
	})
}
