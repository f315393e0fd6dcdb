package stats

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"tokenmill/lib/quantile"
	"tokenmill/lib/record"
)

// The arms of a sampling mixture (infer --mix): records carry their arm
// in output.arm (error.arm), and the report breaks answers, tokens,
// lengths, finish reasons and throughput down by it, since thinking arms
// answer far longer than the others.

// maxArms bounds the arms reported; more are counted under "(other)".
const maxArms = 1000

// Arm is one arm's figures; "(none)" gathers the records without an arm.
type Arm struct {
	Arm     string `json:"arm"`
	Answers int64  `json:"answers"`
	Errors  int64  `json:"errors"`
	// Share is the arm's share of the answers.
	Share            float64 `json:"share"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	// MeanAnswerTokens and MeanAnswerChars are over the arm's answers (with
	// a usage, for tokens).
	MeanAnswerTokens float64 `json:"mean_answer_tokens"`
	MeanAnswerChars  float64 `json:"mean_answer_chars"`
	// AnswerTokens are the answers' completion tokens (usage), AnswerChars
	// and ReasoningChars their text's and reasoning's characters, as
	// distributions; empty for "(none)", which is counted, not distributed.
	AnswerTokens   quantile.Summary `json:"answer_tokens"`
	AnswerChars    quantile.Summary `json:"answer_chars"`
	ReasoningChars quantile.Summary `json:"reasoning_chars"`
	// WithReasoning counts the answers that carry reasoning.
	WithReasoning int64   `json:"with_reasoning"`
	FinishReasons []Count `json:"finish_reasons"`
	// TokPerSecPerRequest is completion tokens over the summed latency of
	// the arm's answers; TokPerSec, with --wall, its completion tokens over
	// the run's duration (its part of the fleet's output).
	TokPerSecPerRequest float64  `json:"tok_per_s_per_request"`
	TokPerSec           *float64 `json:"tok_per_s,omitempty"`
}

type armAgg struct {
	answers, errors               int64
	prompt, completion, chars     int64
	withUsage, withReasoning      int64
	tokenDist, charDist, reasDist dist
	finish                        map[string]*int64
	timedTokens, timedMS          int64
}

// addArm counts f under its arm. Records without an arm are counted
// under "(none)" but not distributed (no length percentiles), so an input
// without arms costs no memory for them; the section appears only when a
// record names an arm.
func (a *aggregator) addArm(f *fact) {
	if f.kind == record.KindPrompt {
		return
	}
	if f.arm == "" {
		a.countArm(&a.noArm, f, false)
		return
	}
	if a.arms == nil {
		a.arms = map[string]*armAgg{}
	}
	a.countArm(bounded(a.arms, f.arm, maxArms, func() *armAgg { return &armAgg{} }), f, true)
}

func (a *aggregator) countArm(g *armAgg, f *fact, distribute bool) {
	if g.finish == nil {
		g.finish = map[string]*int64{}
	}
	if f.kind == record.KindError {
		g.errors++
		return
	}
	g.answers++
	g.prompt += f.pTokens
	g.completion += f.cTokens
	g.chars += int64(f.answer)
	if f.usage {
		g.withUsage++
	}
	if f.hasReas {
		g.withReasoning++
	}
	if distribute {
		if f.usage {
			g.tokenDist.add(f.cTokens)
		}
		g.charDist.add(int64(f.answer))
		if f.hasReas {
			g.reasDist.add(int64(f.reasoning))
		}
	}
	*bounded(g.finish, f.finish, maxFinish, func() *int64 { return new(int64) })++
	if f.latency > 0 {
		g.timedTokens += f.cTokens
		g.timedMS += f.latency
	}
}

// armsReport lists the arms, in name order with "(none)" last.
func (a *aggregator) armsReport(wallSeconds float64) []Arm {
	if a.arms == nil {
		return nil
	}
	all := map[string]*armAgg{}
	for name, g := range a.arms {
		all[name] = g
	}
	if a.noArm.answers+a.noArm.errors > 0 {
		all[noneName] = &a.noArm
	}
	var answers int64
	for _, g := range all {
		answers += g.answers
	}
	out := make([]Arm, 0, len(all))
	for name, g := range all {
		arm := Arm{Arm: name, Answers: g.answers, Errors: g.errors, Share: ratio(float64(g.answers), float64(answers)),
			PromptTokens: g.prompt, CompletionTokens: g.completion,
			AnswerTokens: quantile.Summarize(g.tokenDist.floats()), AnswerChars: quantile.Summarize(g.charDist.floats()),
			ReasoningChars: quantile.Summarize(g.reasDist.floats()), WithReasoning: g.withReasoning,
			MeanAnswerTokens:    ratio(float64(g.completion), float64(g.withUsage)),
			MeanAnswerChars:     ratio(float64(g.chars), float64(g.answers)),
			FinishReasons:       counts(derefCounts(g.finish)),
			TokPerSecPerRequest: ratio(float64(g.timedTokens), float64(g.timedMS)/1000)}
		if wallSeconds > 0 {
			tps := float64(g.completion) / wallSeconds
			arm.TokPerSec = &tps
		}
		out = append(out, arm)
	}
	last := func(s string) bool { return s == noneName || s == otherName }
	slices.SortFunc(out, func(x, y Arm) int {
		return cmp.Or(cmp.Compare(b2i(last(x.Arm)), b2i(last(y.Arm))), strings.Compare(x.Arm, y.Arm))
	})
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// writeArms writes the arms' two tables: answers and lengths, then finish
// reasons and speed.
func writeArms(b *strings.Builder, arms []Arm, wall float64) {
	t := table{align: "lrrrrrrrrrrr", header: []string{"arm", "answers", "%", "errors", "completion tok", "mean tok", "p50", "p90", "p99", "max", "mean chars", "reasoning"}}
	for _, a := range arms {
		tok := a.AnswerTokens
		cells := []string{a.Arm, num(a.Answers), pct(a.Share), num(a.Errors), num(a.CompletionTokens), strconv.FormatFloat(a.MeanAnswerTokens, 'f', 1, 64)}
		if tok.Count > 0 {
			cells = append(cells, numf(tok.P50), numf(tok.P90), numf(tok.P99), numf(tok.Max))
		} else {
			cells = append(cells, "-", "-", "-", "-")
		}
		cells = append(cells, strconv.FormatFloat(a.MeanAnswerChars, 'f', 1, 64), percent(a.WithReasoning, a.Answers))
		t.add(cells...)
	}
	t.write(b)
	names := []string{}
	for _, a := range arms {
		for _, c := range a.FinishReasons {
			if !slices.Contains(names, c.Name) {
				names = append(names, c.Name)
			}
		}
	}
	slices.SortFunc(names, func(x, y string) int { return cmp.Or(cmp.Compare(finishRank(x), finishRank(y)), strings.Compare(x, y)) })
	f := table{align: "l", header: []string{"arm"}}
	for _, n := range names {
		f.align += "r"
		f.header = append(f.header, n)
	}
	f.align += "r"
	f.header = append(f.header, "tok/s/req")
	if wall > 0 {
		f.align += "r"
		f.header = append(f.header, "tok/s")
	}
	for _, a := range arms {
		cells := []string{a.Arm}
		for _, n := range names {
			var k int64
			for _, c := range a.FinishReasons {
				if c.Name == n {
					k = c.Count
				}
			}
			cells = append(cells, percent(k, a.Answers))
		}
		speed := "-"
		if a.TokPerSecPerRequest > 0 {
			speed = strconv.FormatFloat(a.TokPerSecPerRequest, 'f', 1, 64)
		}
		cells = append(cells, speed)
		if wall > 0 {
			cells = append(cells, strconv.FormatFloat(*a.TokPerSec, 'f', 1, 64))
		}
		f.add(cells...)
	}
	f.write(b)
	b.WriteString("arms: output.arm of infer --mix; tok: completion tokens per answer; reasoning: answers with reasoning; finish reasons: % of the arm's answers; (none): records without an arm, not distributed\n\n")
}

// finishRank orders the finish reasons' columns: the usual ones first.
func finishRank(name string) int {
	switch name {
	case record.FinishStop:
		return 0
	case record.FinishToolCalls:
		return 1
	case record.FinishLength:
		return 2
	case record.FinishAbort:
		return 3
	}
	return 4
}

// pct writes a share from 0 to 1 as a percentage.
func pct(x float64) string { return strconv.FormatFloat(100*x, 'f', 1, 64) + "%" }
