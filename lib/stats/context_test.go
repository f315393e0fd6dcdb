package stats

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"tokenmill/lib/quantile"
)

// TestContextReport: the context section's exact figures on hand-made
// files, with the context given, inferred and unknown.
func TestContextReport(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, lines ...string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	fitted := filepath.Join(testdata, "context.jsonl")
	// The answers of context.jsonl: prompt tokens 100, 1000, 2500, 3800
	// and 4000 (the last three lowered to 4087 - prompt) and one without
	// usage; the turns 500, 2100, 3000, 3900 and 200 (the middle three
	// lowered); refusals of 4070 and 9000 tokens and one without a count.
	answers := quantile.Summary{Count: 5, Mean: 2280, P50: 2500, P90: 4000, P99: 4000, Max: 4000}
	turns := quantile.Summary{Count: 5, Mean: 1940, P50: 2100, P90: 3900, P99: 3900, Max: 3900}
	refused := quantile.Summary{Count: 2, Mean: 6535, P50: 4070, P90: 9000, P99: 9000, Max: 9000}
	plain := write("plain.jsonl",
		`{"id":1,"prompt":"p","output":{"text":"a","usage":{"prompt_tokens":3000,"completion_tokens":5}}}`,
		`{"id":2,"prompt":"p","output":{"text":"a","usage":{"prompt_tokens":1000,"completion_tokens":5}}}`,
		`{"id":3,"prompt":"p","error":{"status":400,"message":"too long"}}`)
	tests := []struct {
		name    string
		env     string // TOKENMILL_STATS_CONTEXT_LENGTH
		args    []string
		length  int64
		source  string
		answers quantile.Summary
		// above 50% and 90% of the context: answers, turns, refused
		shares   []contextShare
		lowered  [2]int64 // answers, turns
		records  [3]int64 // answers, turns, refused
		full     int64
		inferred *InferredContext
	}{
		{name: "given", args: []string{"--context-length", "4096", fitted}, length: 4096, source: "--context-length",
			answers: answers, shares: []contextShare{{3, 2}, {3, 1}, {2, 2}}, lowered: [2]int64{3, 3}, records: [3]int64{6, 5, 3}, full: 1},
		{name: "given larger", args: []string{"--context-length", "8192", fitted}, length: 8192, source: "--context-length",
			answers: answers, shares: []contextShare{{0, 0}, {0, 0}, {1, 1}}, lowered: [2]int64{3, 3}, records: [3]int64{6, 5, 3}, full: 1},
		{name: "inferred", args: []string{fitted}, length: 4096, source: "inferred",
			answers: answers, shares: []contextShare{{3, 2}, {3, 1}, {2, 2}}, lowered: [2]int64{3, 3}, records: [3]int64{6, 5, 3}, full: 1,
			inferred: &InferredContext{Requests: 6, LargestSum: 4087, Added: 9}},
		{name: "unknown", args: []string{plain}, source: "unknown",
			answers: quantile.Summary{Count: 2, Mean: 2000, P50: 1000, P90: 3000, P99: 3000, Max: 3000}, records: [3]int64{2, 0, 0}},
		{name: "from the environment", env: "4096", args: []string{plain}, length: 4096, source: "--context-length",
			answers: quantile.Summary{Count: 2, Mean: 2000, P50: 1000, P90: 3000, P99: 3000, Max: 3000}, records: [3]int64{2, 0, 0},
			shares: []contextShare{{1, 0}, {0, 0}, {0, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("TOKENMILL_STATS_CONTEXT_LENGTH", tt.env)
			}
			c := runJSON(t, 0, tt.args...).Context
			if c == nil {
				t.Fatal("no context section")
			}
			if c.Length != tt.length || c.Source != tt.source || !reflect.DeepEqual(c.Inferred, tt.inferred) {
				t.Errorf("context %d from %s (%+v), want %d from %s (%+v)", c.Length, c.Source, c.Inferred, tt.length, tt.source, tt.inferred)
			}
			if c.Answers.PromptTokens != tt.answers {
				t.Errorf("answers' prompt tokens %+v, want %+v", c.Answers.PromptTokens, tt.answers)
			}
			if tt.records == [3]int64{6, 5, 3} && (c.Turns.PromptTokens != turns || c.Refused.PromptTokens != refused) {
				t.Errorf("turns %+v, refused %+v; want %+v, %+v", c.Turns.PromptTokens, c.Refused.PromptTokens, turns, refused)
			}
			if got := [3]int64{c.Answers.Records, c.Turns.Records, c.Refused.Records}; got != tt.records {
				t.Errorf("records %v, want %v", got, tt.records)
			}
			if got := [2]int64{c.LoweredAnswers, c.LoweredTurns}; got != tt.lowered || c.ContextFull != tt.full {
				t.Errorf("lowered %v, context_full %d; want %v, %d", got, c.ContextFull, tt.lowered, tt.full)
			}
			checkShares(t, c, tt.length, tt.shares)
		})
	}

	t.Run("text", func(t *testing.T) { checkContextText(t, plain, fitted) })

	// Prompt records alone: no context section.
	prompts := write("prompts.jsonl", `{"id":1,"prompt":"p"}`)
	if r := runJSON(t, 0, "--context-length", "4096", prompts); r.Context != nil {
		t.Errorf("a context section without answers or errors: %+v", r.Context)
	}
	if code, stdout, _ := run(t, "", prompts); strings.Contains(stdout, "context") {
		t.Errorf("exit %d, a context section without answers or errors:\n%s", code, stdout)
	}
}

// contextShare is the prompts above 50% and 90% of the context.
type contextShare struct{ half, ninety int64 }

// checkShares checks the answers', turns' and refusals' shares of the
// context (none when shares is nil).
func checkShares(t *testing.T, c *Context, length int64, shares []contextShare) {
	t.Helper()
	for i, p := range []*ContextPrompts{&c.Answers, &c.Turns, &c.Refused} {
		if shares == nil {
			if p.Share != nil {
				t.Errorf("row %d: a share of an unknown context: %+v", i, p.Share)
			}
			continue
		}
		s, l := p.Share, float64(length)
		if s == nil {
			t.Fatalf("row %d: no share of the %d-token context", i, length)
		}
		if got := (contextShare{s.AboveHalf, s.Above90}); got != shares[i] {
			t.Errorf("row %d: above 50%% and 90%%: %v, want %v", i, got, shares[i])
		}
		if s.P50 != p.PromptTokens.P50/l || s.Max != p.PromptTokens.Max/l {
			t.Errorf("row %d: share %+v of %+v over %d", i, s, p.PromptTokens, length)
		}
	}
}

// checkContextText checks the context section of the text report.
func checkContextText(t *testing.T, plain, fitted string) {
	for _, x := range []struct {
		args []string
		want []string
	}{
		{[]string{plain}, []string{"context: unknown (no lowered max_tokens to infer it from; --context-length N shows prompts as a share of it)",
			"max_tokens lowered to fit: 0 of 2 answers (output.max_tokens)\nrefused as too long for the context (error.reason prompt_too_long): 0 prompts\n"}},
		{[]string{fitted}, []string{"context: about 4,096 tokens, inferred: the largest usage.prompt_tokens + max_tokens of 6 lowered requests (4,087) + 9",
			"max_tokens lowered to fit: 3 of 6 answers (output.max_tokens), 3 of 5 turns (turns[].max_tokens)", "conversations ended context_full: 1"}},
	} {
		code, stdout, stderr := run(t, "", x.args...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		for _, w := range x.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("%v: the report lacks %q:\n%s", x.args, w, stdout)
			}
		}
	}
}
