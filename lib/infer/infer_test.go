package infer

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/llmsim"
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
			fleet := startFleet(t, llmsim.Config{TimeScale: 2000, MaxRunning: 8, Reasoning: tt.reasoning}, 2)
			dir := t.TempDir()
			in, lines := promptSet{n: 60, completion: tt.completion}.write(t, dir, "prompts.jsonl")
			out := filepath.Join(dir, "gen.jsonl")
			args := append([]string{"--endpoints", endpointsFlag(fleet.URLs()), "--api", tt.api, "--max-tokens", "24", "-o", out, in}, fastFlags...)
			res := runInfer(t, 30*time.Second, "", args...)
			if res.code != cli.ExitOK {
				t.Fatalf("exit %d\n%s", res.code, res.stderr)
			}
			acc := checkAPI(t, tt.api == "chat", lines, 1, readRecords(t, out), readRecords(t, filepath.Join(dir, "gen.errors.jsonl")))
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
