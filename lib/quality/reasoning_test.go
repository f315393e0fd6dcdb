package quality

import (
	"strings"
	"testing"
)

func TestParseReasoning(t *testing.T) {
	for _, tt := range []struct {
		in, err string
		arm     string
		inline  bool
	}{
		{in: "", arm: "", inline: false},
		{in: "parsed", arm: "x", inline: false},
		{in: "inline", arm: "x", inline: true},
		{in: "parsed,think=inline", arm: "think", inline: true},
		{in: "parsed,think=inline", arm: "no_think", inline: false},
		{in: "parsed,think=inline", arm: "", inline: false},
		{in: "inline,no_think=parsed", arm: "no_think", inline: false},
		{in: "think=inline", arm: "other", inline: false},
		{in: " inline , a = parsed ", arm: "a", inline: false},
		{in: "raw", err: `"raw": want parsed or inline`},
		{in: "inline,parsed", err: "two modes for the run"},
		{in: "=inline", err: "an arm's name before ="},
		{in: "a=inline,a=parsed", err: "arm a given twice"},
		{in: "a=raw", err: `"a=raw": want parsed or inline`},
	} {
		m, err := ParseReasoning(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: error %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || m.Inline(tt.arm) != tt.inline {
			t.Errorf("%q: arm %q inline %v (%v), want %v", tt.in, tt.arm, m.Inline(tt.arm), err, tt.inline)
		}
	}
}

const inlineAnswer = "Plants catch sunlight with their green leaves and use it, with water and air, to make their own food."

// TestReasoningModes: the same answers judged with the reasoning parsed
// and inline. Parsed, any marker in the text is residue; inline, the
// text must open with one closed, non-empty think block, which is the
// reasoning, and markers after it are residue.
func TestReasoningModes(t *testing.T) {
	for _, tt := range []struct {
		name, text, reasoning string
		finish                string
		parsed, inline        string // the first check failed, "" none
		detail                string // in inline mode
	}{
		{name: "a block, then the answer", text: "<think>\nLeaves hold chlorophyll.\n</think>\n\n" + inlineAnswer,
			parsed: "think_residue", inline: ""},
		{name: "white space before the block", text: "\n <think>Leaves.</think>" + inlineAnswer, parsed: "think_residue", inline: ""},
		{name: "other models' blocks", text: "[THINK]Leaves.[/THINK]" + inlineAnswer, parsed: "think_residue", inline: ""},
		{name: "seed-oss", text: "<seed:think>Leaves.</seed:think>" + inlineAnswer, parsed: "think_residue", inline: ""},
		{name: "no block", text: inlineAnswer, parsed: "", inline: "think_block", detail: "no think block at the start"},
		{name: "a block later in the text", text: "So. <think>Leaves.</think>" + inlineAnswer, parsed: "think_residue", inline: "think_block", detail: "no think block at the start"},
		{name: "never closed", text: "<think>Leaves and leaves and leaves", parsed: "think_residue", inline: "think_block", detail: "never closed (no </think>)"},
		{name: "empty block", text: "<think>\n\n</think>\n\n" + inlineAnswer, parsed: "think_residue", inline: "think_block", detail: "the <think> block is empty"},
		{name: "nested opening", text: "<think>Leaves <think>more</think>" + inlineAnswer, parsed: "think_residue", inline: "think_block", detail: "a second <think> inside"},
		{name: "a second block after", text: "<think>Leaves.</think>" + inlineAnswer + " <think>again</think>", parsed: "think_residue", inline: "think_residue", detail: "<think> in the answer"},
		{name: "a stray close after", text: "<think>Leaves.</think>" + inlineAnswer + "</think>", parsed: "think_residue", inline: "think_residue", detail: "</think> in the answer"},
		{name: "reasoning and no answer", text: "<think>Leaves hold chlorophyll.</think>\n\n", parsed: "think_residue", inline: "reasoning_only", detail: "bytes of reasoning and no answer"},
		{name: "cut inside the block", text: "<think>Leaves hold", finish: "length", parsed: "length", inline: "length"},
		{name: "empty", text: "", parsed: "empty", inline: "think_block"},
		{name: "a loop after the block", text: "<think>Leaves.</think>Plants make food from light. " + strings.Repeat("They use light to make food. ", 40),
			parsed: "think_residue", inline: "loop"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewChecker(Config{Checks: DefaultChecks, Loop: DefaultLoop})
			if err != nil {
				t.Fatal(err)
			}
			finish := tt.finish
			if finish == "" {
				finish = "stop"
			}
			for _, mode := range []struct {
				inline bool
				want   string
			}{{false, tt.parsed}, {true, tt.inline}} {
				a := Answer{Prompt: "How do plants make food?", Text: tt.text, Reasoning: tt.reasoning, Finish: finish, Inline: mode.inline}
				f, bad := c.First(&a, nil)
				got := ""
				if bad {
					got = f.Check
				}
				if got != mode.want {
					t.Errorf("inline %v: first failed %q (%s), want %q", mode.inline, got, f.Detail, mode.want)
				}
				if mode.inline && tt.detail != "" && !strings.Contains(f.Detail, tt.detail) {
					t.Errorf("inline: detail %q, want %q", f.Detail, tt.detail)
				}
				if a.Text != tt.text {
					t.Errorf("the answer was changed: %q", a.Text)
				}
			}
		})
	}
	// With think_block off, a malformed block is left to think_residue.
	c, _ := NewChecker(Config{Checks: []string{CheckThinkResidue}})
	a := Answer{Text: "<think>never closed", Finish: "stop", Inline: true}
	if f, bad := c.First(&a, nil); !bad || f.Check != CheckThinkResidue {
		t.Errorf("think_block off: %+v %v, want think_residue", f, bad)
	}
}

// TestSetModes: per-arm modes follow output.arm; without per-arm modes
// the record is not read for it.
func TestSetModes(t *testing.T) {
	modes, _ := ParseReasoning("parsed,think=inline")
	c, _ := NewChecker(Config{Checks: DefaultChecks, Loop: DefaultLoop, Reasoning: modes})
	for _, tt := range []struct {
		line   string
		inline bool
	}{
		{`{"id":"a","messages":[{"role":"user","content":"x"}],"output":{"text":"t","finish_reason":"stop","arm":"think"}}`, true},
		{`{"id":"a","messages":[{"role":"user","content":"x"}],"output":{"text":"t","finish_reason":"stop","arm":"no_think"}}`, false},
		{`{"id":"a","messages":[{"role":"user","content":"x"}],"output":{"text":"t","finish_reason":"stop"}}`, false},
		{`{"id":"a","messages":[{"role":"user","content":"x"}],"output":{"text":"t","finish_reason":"stop","arm":"th\u0069nk"}}`, true},
		{`{"id":"a","messages":[{"role":"user","content":"x"}],"output":{"text":"t","finish_reason":"stop","arm":7}}`, false},
	} {
		var rec GenerationView
		if err := rec.Parse([]byte(tt.line)); err != nil {
			t.Fatal(err)
		}
		c.SetModes(&rec)
		if rec.Answers[0].Inline != tt.inline {
			t.Errorf("%s: inline %v, want %v", tt.line, rec.Answers[0].Inline, tt.inline)
		}
	}
}
