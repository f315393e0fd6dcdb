package openai

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/segmentio/encoding/json"
)

// llmsimGolden is one of llmsim's golden exchanges (testdata/llmsim),
// each written from its server's source.
type llmsimGolden struct {
	Config struct {
		Flavor        string `json:"flavor"`
		ContextLength int    `json:"context_length"`
	} `json:"config"`
	Request struct {
		Body struct {
			MaxTokens *int `json:"max_tokens"`
		} `json:"body"`
	} `json:"request"`
	Status   int             `json:"status"`
	Response json.RawMessage `json:"response"`
}

// Every server's refusal for length, as its source words it, gives the
// context and the counts it states.
func TestParseContextErrorGoldens(t *testing.T) {
	tests := []struct {
		file       string
		prompt     int
		atLeast    bool
		completion int
	}{
		{"error_context.json", 21, false, 0},
		{"error_total_tokens.json", 8, false, 100},
		{"vllm/error_context.json", 17, true, 0},
		{"vllm/error_context_max_tokens.json", 5, true, 60},
		{"vllm/error_max_tokens.json", 0, false, 100},
		{"vllm-0.10.0/error_context.json", 26, false, 0},
		{"vllm-0.10.0/error_context_max_tokens.json", 808, false, 8192},
		{"openai/error_context.json", 26, false, 0},
		{"openai/error_context_max_tokens.json", 8, false, 100},
		{"llamacpp/error_context.json", 26, false, 0},
	}
	for _, tt := range tests {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "llmsim", tt.file))
		if err != nil {
			t.Fatal(err)
		}
		var g llmsimGolden
		if err := json.Unmarshal(b, &g); err != nil {
			t.Fatal(err)
		}
		msg := ErrorMessage(g.Response)
		l, ok := ParseContextError(msg)
		if !ok {
			t.Errorf("%s: %q not read as a refusal for length", tt.file, msg)
			continue
		}
		want := ContextLimit{Context: g.Config.ContextLength, Prompt: tt.prompt, AtLeast: tt.atLeast, Completion: tt.completion}
		if l != want {
			t.Errorf("%s: %+v, want %+v", tt.file, l, want)
		}
	}
	for _, msg := range []string{"", "no second turn here", "Requested token count exceeds nothing", "max_tokens must be at least 1, got 0."} {
		if l, ok := ParseContextError(msg); ok {
			t.Errorf("%q read as %+v", msg, l)
		}
	}
}
