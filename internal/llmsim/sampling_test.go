package llmsim

import (
	"encoding/json"
	"fmt"
	"testing"
)

// sampled is one answer as the sampling tests compare them: its text and
// how it finished, and the degenerate kind its text shows.
type sampled struct {
	text, finish string
}

func (s sampled) kind() string {
	switch {
	case s.finish == "tool_calls":
		return "tool call"
	case s.text == "":
		return "empty"
	case s.finish == "length":
		return "loop or cut"
	}
	return "none"
}

// ask sends one request of the api for prompt number i with the sampling
// fields given (nil: left out) and reads its answer.
func ask(t *testing.T, base, api string, i int, seed *int64, temperature *float64) sampled {
	t.Helper()
	user := fmt.Sprintf("sampling prompt %d", i)
	body := map[string]any{}
	put := func(m map[string]any, seedName string) {
		if seed != nil {
			m[seedName] = *seed
		}
		if temperature != nil {
			m["temperature"] = *temperature
		}
	}
	path := pathChat
	switch api {
	case "chat":
		body["messages"] = []map[string]string{{"role": "user", "content": user}}
		body["max_tokens"] = 200
		body["tools"] = []map[string]any{{"type": "function", "function": map[string]any{"name": "lookup",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}, "required": []string{"q"}}}}}
		put(body, "seed")
	case "completion":
		path = pathCompletions
		body["prompt"], body["max_tokens"] = user, 200
		put(body, "seed")
	case "generate":
		path = pathGenerate
		sp := map[string]any{"max_new_tokens": 200}
		put(sp, "sampling_seed")
		body["text"], body["sampling_params"] = user, sp
	}
	b, _ := json.Marshal(body)
	status, resp := postJSON(t, base+path, string(b))
	var v struct {
		Choices []struct {
			Text    string `json:"text"`
			Message struct {
				Content   string          `json:"content"`
				ToolCalls json.RawMessage `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Text     string `json:"text"`
		MetaInfo struct {
			FinishReason struct {
				Type string `json:"type"`
			} `json:"finish_reason"`
		} `json:"meta_info"`
	}
	if status != 200 || json.Unmarshal(resp, &v) != nil {
		t.Fatalf("%s: %d %s", api, status, resp)
	}
	if api == "generate" {
		return sampled{v.Text, v.MetaInfo.FinishReason.Type}
	}
	if len(v.Choices) != 1 {
		t.Fatalf("%s: %s", api, resp)
	}
	c := v.Choices[0]
	return sampled{c.Text + c.Message.Content + string(c.Message.ToolCalls), c.FinishReason}
}

// TestRequestSampling: the request's seed picks the answer when it
// samples, degenerate-answer and tool-call draws included: the same seed
// gives the same answer, another seed another, and no seed another each
// time; a greedy request (temperature 0, or none sent to a model whose own
// is 0) answers a prompt alike whatever the seed. The same on the chat,
// completion and /generate APIs; the model's own temperature stands in
// for a request that sends none.
func TestRequestSampling(t *testing.T) {
	rates := Config{Instant: true, LoopRate: 0.2, EmptyRate: 0.2, TruncateRate: 0.1, ToolCallRate: 0.3}
	greedy := startFleet(t, rates, 1).URLs()[0]
	warm := rates
	warm.Temperature = 0.7
	sampling := startFleet(t, warm, 1).URLs()[0]
	seed7, seed8, hot, cold := int64(7), int64(8), 0.8, 0.0
	const n = 40
	for _, api := range []string{"chat", "completion", "generate"} {
		t.Run(api, func(t *testing.T) {
			kindsMoved, textsMoved, unseededMoved := 0, 0, 0
			for i := range n {
				a, again := ask(t, greedy, api, i, &seed7, &hot), ask(t, greedy, api, i, &seed7, &hot)
				if a != again {
					t.Fatalf("prompt %d, seed 7 twice: %+v then %+v", i, a, again)
				}
				if own := ask(t, sampling, api, i, &seed7, nil); own != a {
					t.Fatalf("prompt %d: the model's own temperature with seed 7 gave %+v, temperature 0.8 %+v", i, own, a)
				}
				b := ask(t, greedy, api, i, &seed8, &hot)
				if a.text != b.text {
					textsMoved++
				}
				if a.kind() != b.kind() {
					kindsMoved++
				}
				if x, y := ask(t, greedy, api, i, nil, &hot), ask(t, greedy, api, i, nil, &hot); x.text != y.text {
					unseededMoved++
				}
				g := ask(t, greedy, api, i, nil, nil)
				for _, other := range []sampled{ask(t, greedy, api, i, &seed7, &cold), ask(t, greedy, api, i, &seed8, &cold), ask(t, greedy, api, i, &seed8, nil)} {
					if other != g {
						t.Fatalf("prompt %d: greedy answers differ: %+v and %+v", i, g, other)
					}
				}
			}
			// Only two empty answers are alike: of 40 prompts at these
			// rates, far more than half differ in text, and some in kind.
			if textsMoved < n/2 || kindsMoved == 0 || unseededMoved < n/2 {
				t.Errorf("seeds 7 and 8: %d of %d texts and %d kinds differ; no seed twice: %d texts differ", textsMoved, n, kindsMoved, unseededMoved)
			}
		})
	}
}
