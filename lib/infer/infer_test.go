package infer

import (
	"strings"
	"testing"

	"tokenmill/internal/llmsim"
	"tokenmill/lib/cli"
)

func TestAPIVariants(t *testing.T) {
	tests := []struct {
		name       string
		api        string
		completion bool
		reasoning  bool
	}{
		{"chat", "chat", false, false},
		{"chat with reasoning_content", "chat", false, true},
		{"completions", "completions", true, false},
		{"generate", "generate", true, false},
		{"chat from prompt text", "chat", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t, llmsim.Config{TimeScale: 2000, MaxRunning: 8, Reasoning: tt.reasoning}, 2, promptSet{n: 60, completion: tt.completion})
			res := runWant(t, cli.ExitOK, s.args("--api", tt.api, "--max-tokens", "24")...)
			acc := checkAPI(t, tt.api == "chat", s.lines, 1, readRecords(t, s.out), readRecords(t, s.errs()))
			if acc.ok != 60 || acc.failed != 0 {
				t.Fatalf("ok %d failed %d", acc.ok, acc.failed)
			}
			for _, g := range acc.outputs {
				o := g.Output
				if o.Usage.PromptTokens <= 0 || o.Usage.CompletionTokens <= 0 || o.Usage.CompletionTokens > 24 {
					t.Fatalf("usage %+v", o.Usage)
				}
				if o.Model != llmsim.DefaultModelName {
					t.Fatalf("model %q, want the one /v1/models names", o.Model)
				}
				if (o.Reasoning != "") != tt.reasoning {
					t.Fatalf("reasoning %q with reasoning=%v", o.Reasoning, tt.reasoning)
				}
				if o.FinishReason != "stop" && o.FinishReason != "length" {
					t.Fatalf("finish_reason %q", o.FinishReason)
				}
			}
			if !strings.Contains(res.stderr, "ok 60, failed 0") {
				t.Errorf("summary does not account for the run:\n%s", res.stderr)
			}
		})
	}
}
