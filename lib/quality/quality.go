// Package quality holds the answer checks that filter applies and stats
// reports: an answer cut at max_tokens, an empty answer, reasoning without
// an answer, thinking markers left in the text, degenerate repetition, an
// answer in another language than its prompt, and broken tool calls. The
// checks are pure functions of an answer; Checker runs a chosen set of
// them in a fixed order, and GenerationView reads the answers out of a generation
// record (one, or one per regenerated assistant turn).
package quality

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Check names, as --checks takes them and as reject reasons.
const (
	CheckLength        = "length"
	CheckEmpty         = "empty"
	CheckReasoningOnly = "reasoning_only"
	CheckThinkResidue  = "think_residue"
	CheckThinkBlock    = "think_block"
	CheckToolCall      = "tool_call"
	CheckLoop          = "loop"
	CheckLang          = "lang"
)

// Checks lists every check in the order they are tried: an answer failing
// several is counted under the first. Cheap and specific first.
var Checks = []string{CheckLength, CheckThinkBlock, CheckReasoningOnly, CheckEmpty, CheckThinkResidue, CheckToolCall, CheckLoop, CheckLang}

// DefaultChecks are the checks run unless --checks says otherwise: all
// but lang, which costs about as much as the rest together and misjudges
// translation prompts (see GUIDE.md, "What filter checks").
var DefaultChecks = []string{CheckLength, CheckThinkBlock, CheckReasoningOnly, CheckEmpty, CheckThinkResidue, CheckToolCall, CheckLoop}

// IsCheck reports whether name is a check.
func IsCheck(name string) bool { return slices.Contains(Checks, name) }

// ParseChecks reads a --checks list: check names, "default" for
// DefaultChecks and "all" for Checks, comma-separated. The result is in
// Checks order, without repeats.
func ParseChecks(list string) ([]string, error) {
	want := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
		case name == "default":
			for _, c := range DefaultChecks {
				want[c] = true
			}
		case name == "all":
			for _, c := range Checks {
				want[c] = true
			}
		case IsCheck(name):
			want[name] = true
		default:
			return nil, fmt.Errorf("unknown check %q (checks: %s; or default, all)", name, strings.Join(Checks, ", "))
		}
	}
	var out []string
	for _, c := range Checks {
		if want[c] {
			out = append(out, c)
		}
	}
	return out, nil
}

// Answer is one answer to check: a single answer's output, or one
// regenerated assistant turn of a conversation.
type Answer struct {
	// Prompt is the text of the user turn answered (for lang, and so that
	// a marker the user wrote is not taken for residue).
	Prompt    string
	Text      string
	Reasoning string
	Finish    string
	// ToolCalls are the calls the turn made; a turn that calls tools may
	// have no text.
	ToolCalls []ToolCall
	// Inline: the server's reasoning parser was off, so the answer's text
	// is expected to open with one think block (--reasoning inline).
	Inline bool
	// prompt, when set, gives Prompt on demand (a single answer's prompt
	// is decoded only when a check needs it).
	prompt *GenerationView
}

// PromptText is the text of the user turn answered.
func (a *Answer) PromptText() string {
	if a.Prompt == "" && a.prompt != nil {
		return a.prompt.lastUserTurn()
	}
	return a.Prompt
}

// Finding is a failed check.
type Finding struct {
	Check  string
	Detail string
}

// Config is the set of checks to run and their settings.
type Config struct {
	Checks []string
	Loop   LoopConfig
	Lang   LangConfig
	// Reasoning says where each answer's reasoning is: parsed (the
	// default) or inline, for the run or per arm (reasoning.go).
	Reasoning ReasoningModes
}

// Checker runs the checks of a Config. It keeps scratch buffers, so use
// one per goroutine.
type Checker struct {
	cfg     Config
	enabled [numChecks]bool
	scratch Scratch
}

// The index of each check in Checks (TestCheckIndexes keeps them so).
const (
	iLength = iota
	iThinkBlock
	iReasoningOnly
	iEmpty
	iThinkResidue
	iToolCall
	iLoop
	iLang
	numChecks
)

func checkIndex(name string) int { return slices.Index(Checks, name) }

// NewChecker checks cfg and returns a Checker for it.
func NewChecker(cfg Config) (*Checker, error) {
	c := &Checker{cfg: cfg}
	for _, name := range cfg.Checks {
		i := checkIndex(name)
		if i < 0 {
			return nil, fmt.Errorf("unknown check %q", name)
		}
		c.enabled[i] = true
	}
	return c, nil
}

// First returns the first check a fails, in Checks order.
func (c *Checker) First(a *Answer, tools Tools) (Finding, bool) {
	var f Finding
	ok := c.run(a, tools, func(found Finding) bool { f = found; return false })
	return f, ok
}

// All appends to dst every check a fails, in Checks order.
func (c *Checker) All(a *Answer, tools Tools, dst []Finding) []Finding {
	c.run(a, tools, func(found Finding) bool { dst = append(dst, found); return true })
	return dst
}

// run calls found for each failed check until found returns false; it
// reports whether any check failed.
func (c *Checker) run(a *Answer, tools Tools, found func(Finding) bool) bool {
	failed := false
	report := func(check, detail string) bool {
		failed = true
		return found(Finding{Check: check, Detail: detail})
	}
	if c.enabled[iLength] && Length(a.Finish) {
		if !report(CheckLength, "finish_reason length: cut at max_tokens") {
			return true
		}
	}
	if a.Inline {
		// The think block is the reasoning, the rest the answer; a block
		// that is not one well-formed block leaves the text as it is, for
		// think_residue to see its markers when think_block is off.
		reasoning, answer, problem := SplitThinkBlock(a.Text)
		if problem != "" {
			if c.enabled[iThinkBlock] && !report(CheckThinkBlock, problem) {
				return true
			}
		} else {
			b := *a
			b.Text, b.Reasoning = answer, reasoning+a.Reasoning
			a = &b
		}
	}
	blank := len(a.ToolCalls) == 0 && Blank(a.Text)
	if c.enabled[iReasoningOnly] && blank && !Blank(a.Reasoning) {
		if !report(CheckReasoningOnly, fmt.Sprintf("%d bytes of reasoning and no answer", len(a.Reasoning))) {
			return true
		}
	} else if c.enabled[iEmpty] && blank {
		if !report(CheckEmpty, emptyDetail(a.Text)) {
			return true
		}
	}
	if c.enabled[iThinkResidue] {
		// The prompt is looked at only when a marker is found.
		m, where, ok := ThinkResidue("", a.Text, a.Reasoning)
		if ok {
			m, where, ok = ThinkResidue(a.PromptText(), a.Text, a.Reasoning)
		}
		if ok {
			if !report(CheckThinkResidue, fmt.Sprintf("%s in the %s", m, where)) {
				return true
			}
		}
	}
	if c.enabled[iToolCall] && len(a.ToolCalls) > 0 {
		if d, bad := ToolCallProblem(a.ToolCalls, tools); bad && !report(CheckToolCall, d) {
			return true
		}
	}
	if c.enabled[iLoop] {
		if d, bad := Loop(a.Text, &c.cfg.Loop, &c.scratch); bad && !report(CheckLoop, d) {
			return true
		}
	}
	if c.enabled[iLang] {
		if d, bad := Lang(a.PromptText(), a.Text, &c.cfg.Lang); bad && !report(CheckLang, d) {
			return true
		}
	}
	return failed
}

func emptyDetail(text string) string {
	if text == "" {
		return "no answer text"
	}
	return fmt.Sprintf("answer text is %d bytes of white space", len(text))
}

// Length reports an answer cut at max_tokens.
func Length(finish string) bool { return finish == "length" }

// Blank reports a text that is empty or white space only.
func Blank(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if !isSpace(c) {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			return false
		}
		i += n
	}
	return true
}

// BlankJSON reports whether raw, a JSON value, is null or a string whose
// text is empty or white space only, without decoding it.
func BlankJSON(raw []byte) bool {
	if string(raw) == "null" {
		return true
	}
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return false
	}
	s := raw[1 : len(raw)-1]
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			switch s[i+1] {
			case 'n', 'r', 't', 'f':
				i += 2
				continue
			case 'u':
				if i+6 <= len(s) {
					var r rune
					for _, h := range s[i+2 : i+6] {
						r <<= 4
						switch {
						case h >= '0' && h <= '9':
							r |= rune(h - '0')
						case h >= 'a' && h <= 'f':
							r |= rune(h - 'a' + 10)
						case h >= 'A' && h <= 'F':
							r |= rune(h - 'A' + 10)
						default:
							return false
						}
					}
					if unicode.IsSpace(r) {
						i += 6
						continue
					}
				}
			}
			return false
		case c < utf8.RuneSelf:
			if !isSpace(c) {
				return false
			}
			i++
		default:
			r, n := utf8.DecodeRune(s[i:])
			if !unicode.IsSpace(r) {
				return false
			}
			i += n
		}
	}
	return true
}

// CharsJSON counts the characters of the inside of a valid JSON string
// literal without decoding it: an escape counts as the one character it
// stands for, as the decoded string would.
func CharsJSON(s []byte) int {
	n := 0
	for {
		i := bytes.IndexByte(s, '\\')
		if i < 0 {
			return n + utf8.RuneCount(s)
		}
		n += utf8.RuneCount(s[:i]) + 1
		s = s[i+1:]
		if len(s) == 0 {
			return n
		}
		if s[0] != 'u' || len(s) < 5 {
			s = s[1:]
			continue
		}
		// A surrogate pair written as two escapes is one character.
		hi, _ := strconv.ParseUint(string(s[1:5]), 16, 32)
		s = s[5:]
		if utf16.IsSurrogate(rune(hi)) && len(s) >= 6 && s[0] == '\\' && s[1] == 'u' {
			lo, _ := strconv.ParseUint(string(s[2:6]), 16, 32)
			if utf16.DecodeRune(rune(hi), rune(lo)) != utf8.RuneError {
				s = s[6:]
			}
		}
	}
}
