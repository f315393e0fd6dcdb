package llmsim

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

const weatherTools = `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer"},"hourly":{"type":"boolean"}},"required":["city","unit"]}}},
{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":{"query":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}},"filter":{"type":"object","properties":{"max":{"type":"number"}},"required":["max"]}},"required":["query","filter"]}}}]`

type callOut struct {
	ID       string `json:"id"`
	Index    *int   `json:"index"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func toolChat(user string, stream bool) string {
	return `{"model":"` + DefaultModelName + `","messages":[{"role":"user","content":` + quote(user) + `}],"tools":` + weatherTools +
		`,"stream":` + fmt.Sprint(stream) + `}`
}

// checkArgs: the arguments are a JSON object that fits its function's schema.
func checkArgs(t *testing.T, c callOut) {
	t.Helper()
	var args map[string]any
	if err := json.Unmarshal([]byte(c.Function.Arguments), &args); err != nil {
		t.Fatalf("arguments %q: %v", c.Function.Arguments, err)
	}
	switch c.Function.Name {
	case "get_weather":
		if _, ok := args["city"].(string); !ok || !slices.Contains([]any{"celsius", "fahrenheit"}, args["unit"]) {
			t.Errorf("get_weather arguments %v", args)
		}
		if d, ok := args["days"]; ok && d != float64(int(d.(float64))) {
			t.Errorf("days %v is not an integer", d)
		}
	case "search":
		f, ok := args["filter"].(map[string]any)
		if _, isNum := f["max"].(float64); !ok || !isNum {
			t.Errorf("search arguments %v", args)
		}
		if tags, ok := args["tags"]; ok {
			if l, isList := tags.([]any); !isList || len(l) != 1 {
				t.Errorf("tags %v", tags)
			}
		}
	default:
		t.Errorf("called %q, not one of the tools", c.Function.Name)
	}
}

// With --tool-call-rate 1 every flavour answers a request with tools by a
// call (two with --parallel-tool-call-rate 1): finish_reason tool_calls,
// arguments that fit the schema, and a stream that builds the same calls
// from OpenAI-shaped deltas (Ollama: whole calls in one chunk).
func TestToolCalls(t *testing.T) {
	for _, fl := range Flavors {
		t.Run(string(fl), func(t *testing.T) {
			fleet := startFleet(t, Config{Instant: true, Flavor: fl, ToolCallRate: 1, ParallelToolCallRate: 1}, 1)
			base := fleet.URLs()[0]
			s, b := postJSON(t, base+pathChat, toolChat("What is the weather in Paris?", false))
			var a struct {
				Choices []struct {
					Message struct {
						Content   *string   `json:"content"`
						ToolCalls []callOut `json:"tool_calls"`
					} `json:"message"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
				Usage struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			if s != 200 || json.Unmarshal(b, &a) != nil || len(a.Choices) != 1 {
				t.Fatalf("%d %s", s, b)
			}
			ch := a.Choices[0]
			if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 2 || a.Usage.CompletionTokens < 12 {
				t.Fatalf("finish %q, %d calls, %d tokens: %s", ch.FinishReason, len(ch.Message.ToolCalls), a.Usage.CompletionTokens, b)
			}
			if ch.Message.Content != nil && *ch.Message.Content != "" {
				t.Errorf("content %q beside tool calls", *ch.Message.Content)
			}
			for _, c := range ch.Message.ToolCalls {
				checkArgs(t, c)
				if !strings.HasPrefix(c.ID, "call_") {
					t.Errorf("call id %q", c.ID)
				}
			}

			s, b = postJSON(t, base+pathChat, toolChat("What is the weather in Paris?", true))
			events, err := testbin.SSEEvents(b)
			if s != 200 || err != nil {
				t.Fatalf("stream: %d %v %s", s, err, b)
			}
			built := map[int]*callOut{}
			finish := ""
			for _, ev := range events {
				var chunk struct {
					Choices []struct {
						Delta struct {
							ToolCalls []callOut `json:"tool_calls"`
						} `json:"delta"`
						FinishReason *string `json:"finish_reason"`
					} `json:"choices"`
				}
				if string(ev) == `"[DONE]"` || json.Unmarshal(ev, &chunk) != nil || len(chunk.Choices) == 0 {
					continue
				}
				if r := chunk.Choices[0].FinishReason; r != nil {
					finish = *r
				}
				for k, d := range chunk.Choices[0].Delta.ToolCalls {
					i := k
					if d.Index != nil {
						i = *d.Index
					}
					if built[i] == nil {
						if d.ID == "" || d.Function.Name == "" {
							t.Fatalf("call %d opens without id and name: %s", i, ev)
						}
						built[i] = &callOut{ID: d.ID}
						built[i].Function.Name = d.Function.Name
					}
					built[i].Function.Arguments += d.Function.Arguments
				}
			}
			if finish != "tool_calls" || len(built) != 2 {
				t.Fatalf("stream: finish %q, %d calls\n%s", finish, len(built), b)
			}
			for i, want := range ch.Message.ToolCalls {
				if got := built[i]; got.Function.Name != want.Function.Name || got.Function.Arguments != want.Function.Arguments || got.ID != want.ID {
					t.Errorf("streamed call %d %+v, whole answer had %+v", i, *got, want)
				}
			}
		})
	}
}

// The draw: a rate of 0.4 calls tools for about 40% of prompts, the same
// prompt always the same way; no tools, no calls; a conversation that
// carries a call and its result goes on.
func TestToolCallRate(t *testing.T) {
	fleet := startFleet(t, Config{Instant: true, ToolCallRate: 0.4, Seed: 3}, 1)
	base := fleet.URLs()[0]
	calls := 0
	const n = 300
	for i := 0; i < n; i++ {
		_, b := postJSON(t, base+pathChat, toolChat(fmt.Sprintf("question %d", i), false))
		if strings.Contains(string(b), `"finish_reason":"tool_calls"`) {
			calls++
		}
		if i < 5 {
			_, again := postJSON(t, base+pathChat, toolChat(fmt.Sprintf("question %d", i), false))
			if strings.Contains(string(b), `"tool_calls"`) != strings.Contains(string(again), `"tool_calls"`) ||
				strings.Contains(string(b), `"finish_reason":"tool_calls"`) != strings.Contains(string(again), `"finish_reason":"tool_calls"`) {
				t.Errorf("question %d drew differently twice", i)
			}
		}
	}
	if calls < n*30/100 || calls > n*50/100 {
		t.Errorf("%d of %d answers called tools at rate 0.4", calls, n)
	}
	_, b := postJSON(t, base+pathChat, `{"messages":[{"role":"user","content":"question 1"}]}`)
	if strings.Contains(string(b), `"finish_reason":"tool_calls"`) {
		t.Error("a request without tools got a tool call")
	}
	history := `{"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},{"role":"tool","tool_call_id":"call_1","content":"sunny, 21C"}],"tools":` + weatherTools + `}`
	if s, b := postJSON(t, base+pathChat, history); s != 200 {
		t.Errorf("a conversation with a tool result: %d %s", s, b)
	}
}
