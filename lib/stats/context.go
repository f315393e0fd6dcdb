package stats

import (
	"fmt"
	"strconv"
	"strings"

	"tokenmill/lib/quantile"
	"tokenmill/lib/record"
)

// Context describes the prompts against the model's context, as infer
// fits requests into it: each request's prompt tokens (a single answer's
// output.usage.prompt_tokens, each regenerated turn's own usage, since a
// conversation's output.usage sums its turns), the requests whose
// max_tokens infer lowered to fit, the prompts it refused as
// prompt_too_long, and the conversations it ended context_full.
type Context struct {
	// Length is the context in tokens: --context-length, or inferred from
	// the lowered requests; 0 when unknown.
	Length int64 `json:"length"`
	// Source is where Length comes from: "--context-length", "inferred"
	// or "unknown".
	Source   string           `json:"source"`
	Inferred *InferredContext `json:"inferred,omitempty"`
	// Answers are the single answers (generation records that are not
	// conversations), Turns the regenerated turns, Refused the error
	// records prompt_too_long (with error.prompt_tokens).
	Answers ContextPrompts `json:"answers"`
	Turns   ContextPrompts `json:"turns"`
	Refused ContextPrompts `json:"refused"`
	// LoweredAnswers counts answers with output.max_tokens, LoweredTurns
	// turns with output.turns[].max_tokens: requests infer sent with
	// max_tokens lowered to what the prompt left of the context.
	LoweredAnswers int64 `json:"lowered_answers"`
	LoweredTurns   int64 `json:"lowered_turns"`
	// ContextFull counts conversations ended because their history no
	// longer fit (output.truncated.reason context_full).
	ContextFull int64 `json:"context_full"`
}

// InferredContext says how an inferred context length was found: infer
// lowers max_tokens to context - prompt - --context-margin - 1, so the
// context is the largest usage.prompt_tokens + max_tokens of a lowered
// request plus Added (infer's default margin, 8, and 1). The prompt's
// tokens infer counted can differ from the server's usage by a few, and
// a run with another --context-margin is off by the difference.
type InferredContext struct {
	Requests   int64 `json:"requests"`
	LargestSum int64 `json:"largest_prompt_plus_max_tokens"`
	Added      int64 `json:"added"`
}

// inferredAdded is infer's default --context-margin (8) and the 1 it
// keeps besides.
const inferredAdded = 9

// ContextPrompts is one kind of request's prompt tokens.
type ContextPrompts struct {
	// Records counted: answers, turns or refusals; PromptTokens covers
	// those carrying a count (usage, or error.prompt_tokens).
	Records      int64            `json:"records"`
	PromptTokens quantile.Summary `json:"prompt_tokens"`
	// Share is PromptTokens as a fraction of Length, when it is known.
	Share *ContextShare `json:"share,omitempty"`
}

// ContextShare is a prompt-token summary divided by the context length,
// with the prompts above half of it and above 90% of it.
type ContextShare struct {
	Mean      float64 `json:"mean"`
	P50       float64 `json:"p50"`
	P90       float64 `json:"p90"`
	P99       float64 `json:"p99"`
	Max       float64 `json:"max"`
	AboveHalf int64   `json:"above_half"`
	Above90   int64   `json:"above_90pct"`
}

// ctxAgg folds the facts' prompt tokens and fitting.
type ctxAgg struct {
	answers, turns        ctxRequests
	refused               int64
	refusedTokens         dist
	contextFull           int64
	inferFrom, largestSum int64
}

// ctxRequests are the answers, or the turns: their prompt tokens and how
// many were lowered.
type ctxRequests struct {
	records, lowered int64
	tokens           dist
}

func (c *ctxAgg) add(f *fact) {
	switch {
	case f.kind == record.KindError:
		if f.tooLong {
			c.refused++
			if f.pTokens > 0 {
				c.refusedTokens.add(f.pTokens)
			}
		}
	case f.conversation:
		if f.truncated == record.TruncContextFull {
			c.contextFull++
		}
		for i := range f.turns {
			t := &f.turns[i]
			c.request(&c.turns, t.usage, t.pTokens, t.maxTokens)
		}
	case f.kind == record.KindGeneration:
		c.request(&c.answers, f.usage, f.pTokens, f.maxTokens)
	}
}

// request counts one request into r; a lowered one with its prompt's
// tokens is also a clue to the context.
func (c *ctxAgg) request(r *ctxRequests, usage bool, prompt, maxTokens int64) {
	r.records++
	if usage {
		r.tokens.add(prompt)
	}
	if maxTokens <= 0 {
		return
	}
	r.lowered++
	if usage && prompt > 0 {
		c.inferFrom++
		c.largestSum = max(c.largestSum, prompt+maxTokens)
	}
}

// report builds the figures; length is --context-length (0: not given).
func (c *ctxAgg) report(length int64) *Context {
	r := &Context{Length: length, Source: "--context-length",
		LoweredAnswers: c.answers.lowered, LoweredTurns: c.turns.lowered, ContextFull: c.contextFull}
	switch {
	case length > 0:
	case c.inferFrom > 0:
		r.Length, r.Source = c.largestSum+inferredAdded, "inferred"
		r.Inferred = &InferredContext{Requests: c.inferFrom, LargestSum: c.largestSum, Added: inferredAdded}
	default:
		r.Source = "unknown"
	}
	r.Answers = promptsOf(c.answers.records, c.answers.tokens, r.Length)
	r.Turns = promptsOf(c.turns.records, c.turns.tokens, r.Length)
	r.Refused = promptsOf(c.refused, c.refusedTokens, r.Length)
	return r
}

func promptsOf(records int64, d dist, length int64) ContextPrompts {
	values := d.floats()
	p := ContextPrompts{Records: records, PromptTokens: quantile.Summarize(values)}
	if length <= 0 {
		return p
	}
	l, s := float64(length), p.PromptTokens
	share := &ContextShare{Mean: s.Mean / l, P50: s.P50 / l, P90: s.P90 / l, P99: s.P99 / l, Max: s.Max / l}
	for _, v := range values {
		if v > l/2 {
			share.AboveHalf++
		}
		if v > 0.9*l {
			share.Above90++
		}
	}
	p.Share = share
	return p
}

// writeContext is the text report's context section.
func writeContext(b *strings.Builder, c *Context, conversations bool) {
	switch c.Source {
	case "unknown":
		b.WriteString("context: unknown (no lowered max_tokens to infer it from; --context-length N shows prompts as a share of it)\n")
	case "inferred":
		fmt.Fprintf(b, "context: about %s tokens, inferred: the largest usage.prompt_tokens + max_tokens of %s (%s) + %d (infer's default --context-margin 8, and 1); --context-length N states it\n",
			num(c.Length), plural(c.Inferred.Requests, "lowered request"), num(c.Inferred.LargestSum), c.Inferred.Added)
	default:
		fmt.Fprintf(b, "context: %s tokens (--context-length)\n", num(c.Length))
	}
	known := c.Length > 0
	t := table{align: "lrrrrrr", header: []string{"prompt tokens", "count", "mean", "p50", "p90", "p99", "max"}}
	if known {
		t.align += "rr"
		t.header = append(t.header, ">50% ctx", ">90% ctx")
	}
	rows := []struct {
		name string
		p    *ContextPrompts
	}{{"answers", &c.Answers}, {"turns", &c.Turns}, {"refused (prompt_too_long)", &c.Refused}}
	for _, x := range rows {
		if x.name == "turns" && !conversations {
			continue
		}
		s := x.p.PromptTokens
		cells := lengthRow(namedDist{x.name, &Distribution{Summary: s}})
		if !known {
			t.add(cells...)
			continue
		}
		if s.Count == 0 {
			t.add(append(cells, "-", "-")...)
			continue
		}
		sh := x.p.Share
		t.add(append(cells, num(sh.AboveHalf), num(sh.Above90))...)
		t.add("  of the context", "", share(sh.Mean), share(sh.P50), share(sh.P90), share(sh.P99), share(sh.Max),
			percent(sh.AboveHalf, int64(s.Count)), percent(sh.Above90, int64(s.Count)))
	}
	t.write(b)
	fmt.Fprintf(b, "max_tokens lowered to fit: %s of %s (output.max_tokens)", num(c.LoweredAnswers), plural(c.Answers.Records, "answer"))
	if conversations {
		fmt.Fprintf(b, ", %s of %s (turns[].max_tokens)", num(c.LoweredTurns), plural(c.Turns.Records, "turn"))
	}
	fmt.Fprintf(b, "\nrefused as too long for the context (error.reason prompt_too_long): %s\n", plural(c.Refused.Records, "prompt"))
	if conversations {
		fmt.Fprintf(b, "conversations ended context_full: %s\n", num(c.ContextFull))
	}
	b.WriteByte('\n')
}

// share writes a fraction as a percentage.
func share(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }
