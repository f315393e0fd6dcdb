package infer

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/ollamaserver"
	"tokenmill/lib/cli"
	"tokenmill/lib/record"
)

// longTest skips t unless TOKENMILL_TEST_LONG=1: a test of a real server,
// or of more than a few seconds (testbin.Long, once the kit has it).
func longTest(t *testing.T) {
	t.Helper()
	if os.Getenv("TOKENMILL_TEST_LONG") != "1" {
		t.Skip("a long test (a real server): TOKENMILL_TEST_LONG=1 runs it")
	}
}

// mixedLengths are n prompts of 10 to 1,500 words, every fifth past 512
// tokens by far.
func mixedLengths(i int) string {
	words := 10 + (i*7919)%300
	if i%5 == 2 {
		words = 300 + (i*104729)%1200
	}
	return strings.Repeat("word ", words)
}

// A context the server never states, on the real Ollama of the tests:
// OLLAMA_CONTEXT_LENGTH=512, which v0.6.5 reports nowhere (infer assumes
// its default of 2,048). The first answer to a prompt Ollama cut gives it
// away (prompt_tokens far below the prompt's estimate, and one request of
// a prompt three times as long confirms 512): the context is learned, said
// once, and from then on no answer to a cut prompt is kept: every prompt
// longer than 512 tokens (counted by a second Ollama that keeps 4,096) is
// prompt_too_long, every answer kept is to its whole prompt, and one whose
// prompt and answer passed 512 is flagged context_shifted.
func TestOllamaUnstatedContext(t *testing.T) {
	longTest(t)
	wide := ollamaserver.Start(t, ollamaserver.Options{Parallel: 4, NumCtx: 4096})
	narrow := ollamaserver.Start(t, ollamaserver.Options{Parallel: 4, Env: []string{"OLLAMA_CONTEXT_LENGTH=512"}})
	s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 50, completion: false, extra: func(i int) string { return "" }})
	// The prompts: one user turn each, of mixed lengths.
	var b strings.Builder
	lines := map[string]string{}
	for i := 0; i < 50; i++ {
		line := fmt.Sprintf(`{"id":%q,"messages":[{"role":"user","content":%q}]}`, idOf(i), mixedLengths(i))
		lines[idOf(i)] = line
		b.WriteString(line + "\n")
	}
	os.WriteFile(s.in, []byte(b.String()), 0o644)
	s.lines = lines

	// Each prompt's true length, from the server that keeps it whole.
	r := runBinary(t, s.args("-e", wide.URL, "--max-tokens", "1")...)
	if r.Code != cli.ExitOK {
		t.Fatalf("the wide server: exit %d\n%s", r.Code, r.Stderr)
	}
	truth := map[string]int{}
	for _, g := range readRecords(t, s.out) {
		truth[g.ID.Text] = g.Output.Usage.PromptTokens
	}

	r = runBinary(t, s.args("-e", narrow.URL, "--max-tokens", "64", "--force")...)
	if r.Code != cli.ExitRejects {
		t.Fatalf("exit %d, want 3 (prompts too long)\n%s", r.Code, r.Stderr)
	}
	if strings.Count(r.Stderr, "says the model's context is 512 tokens, less than the 2048 requests were fitted to") != 1 {
		t.Errorf("the context learned is not said once:\n%s", r.Stderr)
	}
	outs, errs := readRecords(t, s.out), readRecords(t, s.errs())
	if len(outs)+len(errs) != 50 {
		t.Fatalf("%d answers and %d errors for 50 prompts", len(outs), len(errs))
	}
	long, shifted := 0, 0
	for _, g := range outs {
		o, n := g.Output, truth[g.ID.Text]
		if n >= 512 || o.Usage.PromptTokens != n {
			t.Errorf("%s: kept an answer with prompt_tokens %d to a prompt of %d tokens", g.ID.Text, o.Usage.PromptTokens, n)
		}
		if past := o.Usage.PromptTokens+o.Usage.CompletionTokens > 512; past != o.ContextShifted {
			t.Errorf("%s: %d + %d tokens, context_shifted %v", g.ID.Text, o.Usage.PromptTokens, o.Usage.CompletionTokens, o.ContextShifted)
		} else if past {
			shifted++
		}
	}
	for _, g := range errs {
		if n := truth[g.ID.Text]; g.Error.Reason != record.ReasonPromptTooLong || n+32 < 512-8 {
			t.Errorf("%s: error %+v for a prompt of %d tokens", g.ID.Text, g.Error, n)
		}
		long++
	}
	past := 0
	for _, n := range truth {
		if n >= 512 {
			past++
		}
	}
	if past == 0 || long < past {
		t.Errorf("%d prompts longer than the context, %d refused", past, long)
	}
	t.Logf("%d answers (%d flagged context_shifted), %d prompt_too_long of %d longer than 512", len(outs), shifted, long, past)
}

// A model that does not support tools, on the real Ollama: the records
// offering tools fail as tools_unsupported, every record without tools is
// answered; the run exits 3, never 1.
func TestOllamaToolsUnsupported(t *testing.T) {
	longTest(t)
	srv := ollamaserver.Start(t, ollamaserver.Options{Parallel: 4})
	tools := `,"tools":[{"type":"function","function":{"name":"now","description":"the time","parameters":{"type":"object","properties":{}}}}]`
	s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 12, extra: func(i int) string {
		if i%3 == 0 {
			return tools
		}
		return ""
	}})
	r := runBinary(t, s.args("-e", srv.URL, "--max-tokens", "8")...)
	if r.Code != cli.ExitRejects {
		t.Fatalf("exit %d, want 3\n%s", r.Code, r.Stderr)
	}
	outs, errs := readRecords(t, s.out), readRecords(t, s.errs())
	if len(outs) != 8 || len(errs) != 4 {
		t.Fatalf("%d answers and %d errors, want the 8 without tools answered and the 4 with them failed\n%s", len(outs), len(errs), r.Stderr)
	}
	for _, g := range errs {
		if g.Error.Reason != record.ReasonToolsUnsupported || !strings.Contains(g.Error.Message, "does not support tools") || !strings.Contains(s.lines[g.ID.Text], `"tools"`) {
			t.Errorf("%s: %+v", g.ID.Text, g.Error)
		}
	}
}
