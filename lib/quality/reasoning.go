package quality

import (
	"fmt"
	"strings"

	"tokenmill/lib/record"
)

// Where an answer's reasoning is (--reasoning). "parsed": the server's
// reasoning parser took it out into reasoning_content, so thinking markers
// left in the text are residue. "inline": the parser was off on purpose
// (some drafter setups train on the raw stream), so the text is expected
// to open with one well-formed think block, which is the reasoning and
// not residue: it must be closed, hold something, and hold no second
// opening marker; markers after it are residue again. A mixture's arms
// (infer --mix) may differ: thinking arms inline, others parsed.

// Reasoning modes.
const (
	ReasoningParsed = "parsed"
	ReasoningInline = "inline"
)

// ReasoningModes is the run's mode and the arms' own.
type ReasoningModes struct {
	Default string            // "" is parsed
	Arms    map[string]string // by output.arm
}

// ParseReasoning reads --reasoning: a mode for the run, ARM=MODE for an
// arm, comma-separated ("inline", "parsed,think=inline").
func ParseReasoning(list string) (ReasoningModes, error) {
	var m ReasoningModes
	for _, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		arm, mode, perArm := strings.Cut(part, "=")
		if !perArm {
			arm, mode = "", part
		}
		arm, mode = strings.TrimSpace(arm), strings.TrimSpace(mode)
		if mode != ReasoningParsed && mode != ReasoningInline {
			return m, fmt.Errorf("--reasoning: %q: want parsed or inline, for the run or as ARM=MODE", part)
		}
		switch {
		case !perArm && m.Default != "":
			return m, fmt.Errorf("--reasoning: two modes for the run (%s and %s)", m.Default, mode)
		case !perArm:
			m.Default = mode
		case arm == "":
			return m, fmt.Errorf("--reasoning: %q: an arm's name before =", part)
		default:
			if m.Arms == nil {
				m.Arms = map[string]string{}
			}
			if _, dup := m.Arms[arm]; dup {
				return m, fmt.Errorf("--reasoning: arm %s given twice", arm)
			}
			m.Arms[arm] = mode
		}
	}
	return m, nil
}

// Inline tells whether answers of arm (output.arm, "" for none) have
// their reasoning inline.
func (m *ReasoningModes) Inline(arm string) bool {
	if mode, ok := m.Arms[arm]; ok && arm != "" {
		return mode == ReasoningInline
	}
	return m.Default == ReasoningInline
}

// SetModes marks the answers of rec inline or not, by the record's arm
// (read from output.arm only when some arm has a mode of its own).
func (c *Checker) SetModes(rec *GenerationView) {
	m := &c.cfg.Reasoning
	arm := ""
	if len(m.Arms) > 0 {
		arm = recordArm(rec.Output)
	}
	inline := m.Inline(arm)
	for i := range rec.Answers {
		rec.Answers[i].Inline = inline
	}
}

// recordArm is output.arm of the raw output object, "" for none.
func recordArm(output []byte) string {
	v, err := record.FieldValue(output, "arm")
	if err != nil || len(v) < 2 || v[0] != '"' {
		return ""
	}
	s, _ := record.Unquote(v, nil)
	return s
}

// thinkBlocks are the opening and closing markers of the think blocks
// reasoning models write (thinkMarkers has their sources).
var thinkBlocks = [][2]string{
	{"<think>", "</think>"}, {"<thinking>", "</thinking>"}, {"<seed:think>", "</seed:think>"},
	{"◁think▷", "◁/think▷"}, {"[THINK]", "[/THINK]"},
}

// SplitThinkBlock splits an inline answer into the reasoning of its
// opening think block and the answer after it; problem says why text is
// not one well-formed block followed by the answer ("" when it is).
func SplitThinkBlock(text string) (reasoning, answer, problem string) {
	t := strings.TrimLeft(text, " \t\r\n")
	for _, b := range thinkBlocks {
		open, close := b[0], b[1]
		if !strings.HasPrefix(t, open) {
			continue
		}
		body := t[len(open):]
		end := strings.Index(body, close)
		switch {
		case end < 0:
			return "", "", fmt.Sprintf("the %s block is never closed (no %s)", open, close)
		case Blank(body[:end]):
			return "", "", fmt.Sprintf("the %s block is empty", open)
		case strings.Contains(body[:end], open):
			return "", "", fmt.Sprintf("a second %s inside the think block", open)
		}
		return strings.TrimSpace(body[:end]), strings.TrimLeft(body[end+len(close):], " \t\r\n"), ""
	}
	return "", "", "no think block at the start of the answer (--reasoning inline expects one)"
}
