package llmsim

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// thinkAnswer is the part of a chat answer the thinking tests read.
type thinkAnswer struct {
	Choices []struct {
		Message struct {
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
			Reasoning        *string `json:"reasoning"` // current vLLM's name for it
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		CompletionTokens int `json:"completion_tokens"`
		Details          *struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
	} `json:"usage"`
}

// TestThinking: a chat request's chat_template_kwargs.enable_thinking and
// reasoning_effort turn the model's thinking on and off where the
// flavour's templates read them; the reasoning goes in the reasoning field
// with a reasoning parser, stays in the content as one <think> block
// without one, and is counted only by OpenAI; the more effort, the longer.
func TestThinking(t *testing.T) {
	const user = "Why is the sky blue? Explain with care."
	digest := PromptDigest(Prompt{Messages: []Message{{"user", user}}})
	h, err := strconv.ParseUint(digest, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	natural := NaturalLength(h, 0)
	medium, high := ThinkingLength(h, 0, "medium"), ThinkingLength(h, 0, "high")
	if !(high > medium && medium > 0) {
		t.Fatalf("thinking lengths: medium %d, high %d", medium, high)
	}
	const limit = 30000
	if natural+high+2 > limit {
		t.Fatalf("the test prompt's answer (%d) and reasoning (%d) pass max_tokens %d", natural, high, limit)
	}
	for _, tt := range []struct {
		name      string
		flavor    Flavor
		parser    bool
		fields    string
		status    int
		reasoning int  // tokens of reasoning in the reasoning field (or counted, hidden)
		inline    int  // tokens of the think block left in the content
		hidden    bool // reasoning counted in usage, not shown
		partOf    bool // the reasoning is part of the natural length (Config.Reasoning's rule)
	}{
		{name: "nothing said, no parser", flavor: FlavorSGLang, fields: ``},
		{name: "nothing said, parser: as before", flavor: FlavorSGLang, parser: true, fields: ``, reasoning: natural * 2 / 5, partOf: true},
		{name: "on, parser", flavor: FlavorSGLang, parser: true, fields: `"chat_template_kwargs":{"enable_thinking":true}`, reasoning: medium},
		{name: "on, no parser: the block stays in the content", flavor: FlavorSGLang, fields: `"chat_template_kwargs":{"enable_thinking":true}`, inline: medium + 2},
		{name: "off, parser", flavor: FlavorSGLang, parser: true, fields: `"chat_template_kwargs":{"enable_thinking":false}`},
		{name: "DeepSeek's thinking", flavor: FlavorVLLM, parser: true, fields: `"chat_template_kwargs":{"thinking":true}`, reasoning: medium},
		{name: "effort high", flavor: FlavorVLLM, parser: true, fields: `"reasoning_effort":"high"`, reasoning: high},
		{name: "effort in the kwargs", flavor: FlavorSGLang, parser: true, fields: `"chat_template_kwargs":{"reasoning_effort":"high"}`, reasoning: high},
		{name: "off wins over an effort", flavor: FlavorSGLang, parser: true, fields: `"chat_template_kwargs":{"enable_thinking":false},"reasoning_effort":"high"`},
		{name: "unknown effort", flavor: FlavorSGLang, parser: true, fields: `"reasoning_effort":"extreme"`, status: 400},
		{name: "kwargs not an object", flavor: FlavorSGLang, fields: `"chat_template_kwargs":[true]`, status: 400},
		{name: "llama.cpp reads the kwargs", flavor: FlavorLlamaCpp, fields: `"chat_template_kwargs":{"enable_thinking":true}`, inline: medium + 2},
		{name: "llama.cpp ignores the effort", flavor: FlavorLlamaCpp, fields: `"reasoning_effort":"high"`},
		{name: "Ollama 0.6.5 reads neither", flavor: FlavorOllama, fields: `"chat_template_kwargs":{"enable_thinking":true},"reasoning_effort":"high"`},
		{name: "OpenAI hides the reasoning", flavor: FlavorOpenAI, fields: `"reasoning_effort":"high"`, reasoning: high, hidden: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fleet := startFleet(t, Config{Instant: true, Flavor: tt.flavor, Reasoning: tt.parser}, 1)
			body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":%d`, DefaultModelName, user, limit)
			if tt.fields != "" {
				body += "," + tt.fields
			}
			status, b := postJSON(t, fleet.URLs()[0]+pathChat, body+"}")
			want := tt.status
			if want == 0 {
				want = 200
			}
			if status != want {
				t.Fatalf("status %d, want %d: %s", status, want, b)
			}
			if want != 200 {
				return
			}
			var a thinkAnswer
			if err := json.Unmarshal(b, &a); err != nil || len(a.Choices) != 1 {
				t.Fatalf("%v: %s", err, b)
			}
			m := a.Choices[0].Message
			content := ""
			if m.Content != nil {
				content = *m.Content
			}
			answerLen := natural
			if tt.partOf {
				answerLen -= tt.reasoning
			}
			// +1: the end-of-turn id the answer ends with.
			if got, want := a.Usage.CompletionTokens, answerLen+tt.reasoning+tt.inline+1; got != want || a.Choices[0].FinishReason != "stop" {
				t.Errorf("%d tokens (%s), want %d: the answer's %d, reasoning %d, think block %d, end of turn 1", got, a.Choices[0].FinishReason, want, natural, tt.reasoning, tt.inline)
			}
			shown := 0
			if m.Reasoning != nil {
				if m.ReasoningContent != nil || tt.flavor != FlavorVLLM {
					t.Errorf("reasoning in reasoning (as vLLM 0.19 names it) from %s, reasoning_content %v", tt.flavor, m.ReasoningContent != nil)
				}
				m.ReasoningContent = m.Reasoning
			}
			if m.ReasoningContent != nil {
				shown = len(strings.Fields(*m.ReasoningContent))
				if !strings.HasPrefix(*m.ReasoningContent, digest) {
					t.Errorf("reasoning %.40q does not start with the digest", *m.ReasoningContent)
				}
			}
			if tt.hidden {
				if a.Usage.Details == nil || a.Usage.Details.ReasoningTokens != tt.reasoning || shown != 0 {
					t.Errorf("hidden reasoning: details %+v, %d words shown; want %d counted", a.Usage.Details, shown, tt.reasoning)
				}
			} else if shown != tt.reasoning {
				t.Errorf("%d words of reasoning, want %d", shown, tt.reasoning)
			}
			answer := content
			if tt.inline > 0 {
				block, rest, ok := strings.Cut(content, "\n</think>\n\n")
				if !ok || !strings.HasPrefix(block, "<think>\n"+digest) || strings.Count(content, "<think>") != 1 || strings.Contains(rest, "</think>") {
					t.Fatalf("content is not one think block before the answer: %.120q", content)
				}
				if n := len(strings.Fields(strings.TrimPrefix(block, "<think>\n"))); n != tt.inline-2 {
					t.Errorf("think block of %d words, want %d", n, tt.inline-2)
				}
				answer = rest
			} else if strings.Contains(content, "<think>") {
				t.Errorf("think markers in the content: %.120q", content)
			}
			if !strings.HasPrefix(answer, digest) || len(strings.Fields(answer)) != answerLen {
				t.Errorf("the answer has %d words, want %d starting with the digest: %.60q", len(strings.Fields(answer)), answerLen, answer)
			}
		})
	}
}

// TestThinkingCutByLength: thinking counts against max_tokens; an answer
// cut inside its think block ends "length" with the block still open.
func TestThinkingCutByLength(t *testing.T) {
	fleet := startFleet(t, Config{Instant: true}, 1)
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"chat_template_kwargs":{"enable_thinking":true}}`, DefaultModelName)
	status, b := postJSON(t, fleet.URLs()[0]+pathChat, body)
	var a thinkAnswer
	if err := json.Unmarshal(b, &a); status != 200 || err != nil {
		t.Fatalf("%d %v: %s", status, err, b)
	}
	c := *a.Choices[0].Message.Content
	if a.Choices[0].FinishReason != "length" || a.Usage.CompletionTokens != 3 || !strings.HasPrefix(c, "<think>\n") || strings.Contains(c, "</think>") {
		t.Errorf("cut at 3 tokens: %s, %d tokens, content %q", a.Choices[0].FinishReason, a.Usage.CompletionTokens, c)
	}
}
