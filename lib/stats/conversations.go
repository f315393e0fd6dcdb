package stats

import (
	"fmt"
	"strconv"
	"strings"
)

// Conversations describes the regenerated conversations (generation
// records with output.messages, from infer --regenerate). Their records
// count in the other figures too, each as one answer: its turns' text and
// reasoning summed, output.usage as written (summed over the turns).
type Conversations struct {
	Records   int64 `json:"records"`
	Complete  int64 `json:"complete"`
	Truncated int64 `json:"truncated"`
	// TruncatedByReason counts truncated conversations by
	// output.truncated.reason (tool_unpaired, context_full, ...).
	TruncatedByReason []Count `json:"truncated_by_reason"`
	// Turns is the number of regenerated turns per conversation.
	Turns Distribution `json:"turns"`
	// TurnAnswerChars is the length of each regenerated turn's content;
	// TurnCompletionTokens its usage.completion_tokens (turns with usage).
	TurnAnswerChars      Distribution `json:"turn_answer_chars"`
	TurnCompletionTokens Distribution `json:"turn_completion_tokens"`
	// TurnFinishReasons counts the turns by finish_reason.
	TurnFinishReasons []Count     `json:"turn_finish_reasons"`
	PrefixCache       PrefixCache `json:"prefix_cache"`
}

// PrefixCache is how much of the turns' prompts the servers found in
// their prefix cache, over the turns whose usage reports cached_tokens
// (a server that does not say leaves it out). A turn's prompt is the
// conversation so far, so a server that keeps the prefix serves most of it
// from cache.
type PrefixCache struct {
	TurnsReporting int64 `json:"turns_reporting"`
	CachedTokens   int64 `json:"cached_tokens"`
	PromptTokens   int64 `json:"prompt_tokens"`
	// HitRate is cached_tokens / prompt_tokens over those turns; null when
	// no turn reports cached_tokens.
	HitRate *float64 `json:"hit_rate"`
}

// convAgg folds the conversations' facts.
type convAgg struct {
	records, truncated      int64
	byReason, finish        map[string]*int64
	turns, chars, tokens    dist
	reporting               int64
	cachedTokens, cachedOff int64 // cached tokens, and the prompt tokens of the turns reporting them
}

func newConvAgg() *convAgg {
	return &convAgg{byReason: map[string]*int64{}, finish: map[string]*int64{}}
}

func (c *convAgg) add(f *fact) {
	c.records++
	if f.truncated != "" {
		c.truncated++
		*bounded(c.byReason, f.truncated, maxFinish, func() *int64 { return new(int64) })++
	}
	c.turns.add(int64(len(f.turns)))
	for i := range f.turns {
		t := &f.turns[i]
		c.chars.add(int64(t.chars))
		*bounded(c.finish, t.finish, maxFinish, func() *int64 { return new(int64) })++
		if t.usage {
			c.tokens.add(t.cTokens)
		}
		if t.hasCached {
			c.reporting++
			c.cachedTokens += t.cached
			c.cachedOff += t.pTokens
		}
	}
}

func (c *convAgg) report() *Conversations {
	r := &Conversations{Records: c.records, Complete: c.records - c.truncated, Truncated: c.truncated,
		TruncatedByReason: counts(derefCounts(c.byReason)), Turns: c.turns.describe(),
		TurnAnswerChars: c.chars.describe(), TurnCompletionTokens: c.tokens.describe(),
		TurnFinishReasons: counts(derefCounts(c.finish)),
		PrefixCache:       PrefixCache{TurnsReporting: c.reporting, CachedTokens: c.cachedTokens, PromptTokens: c.cachedOff}}
	if c.reporting > 0 {
		rate := ratio(float64(c.cachedTokens), float64(c.cachedOff))
		r.PrefixCache.HitRate = &rate
	}
	return r
}

func (c *Conversations) lengthRows() []namedDist {
	return []namedDist{
		{"turns per conversation", &c.Turns},
		{"turn answer chars", &c.TurnAnswerChars},
		{"turn completion tokens", &c.TurnCompletionTokens},
	}
}

// writeConversations is the text report's conversations section.
func writeConversations(b *strings.Builder, c *Conversations) {
	fmt.Fprintf(b, "regenerated conversations: %s, %s complete, %s truncated", num(c.Records), num(c.Complete), num(c.Truncated))
	if len(c.TruncatedByReason) > 0 {
		var why []string
		for _, x := range c.TruncatedByReason {
			why = append(why, x.Name+" "+num(x.Count))
		}
		fmt.Fprintf(b, " (%s)", strings.Join(why, ", "))
	}
	b.WriteString("\n")
	lengths := table{align: "lrrrrrr", header: []string{"per conversation / turn", "count", "mean", "p50", "p90", "p99", "max"}}
	for _, l := range c.lengthRows() {
		lengths.add(lengthRow(l)...)
	}
	lengths.write(b)
	for _, l := range c.lengthRows() {
		if l.d.Count > 0 {
			writeHistogram(b, l.name, l.d)
		}
	}
	if len(c.TurnFinishReasons) > 0 {
		var turns int64
		for _, x := range c.TurnFinishReasons {
			turns += x.Count
		}
		fin := table{align: "lrrl", header: []string{"turn finish_reason", "turns", "%", ""}}
		for _, x := range c.TurnFinishReasons {
			fin.add(x.Name, num(x.Count), percent(x.Count, turns), bar(float64(x.Count)/float64(turns)))
		}
		fin.write(b)
	}
	p := c.PrefixCache
	if p.HitRate == nil {
		b.WriteString("prefix cache: not reported (no turn's usage has cached_tokens)\n\n")
		return
	}
	fmt.Fprintf(b, "prefix cache: %s of %s prompt tokens cached, hit rate %s%%, over %s reporting cached_tokens\n\n",
		num(p.CachedTokens), num(p.PromptTokens), strconv.FormatFloat(100**p.HitRate, 'f', 1, 64), plural(p.TurnsReporting, "turn"))
}

// lengthRow is a distribution's row of a length table.
func lengthRow(l namedDist) []string {
	s := l.d.Summary
	if s.Count == 0 {
		return []string{l.name, "0", "-", "-", "-", "-", "-"}
	}
	return []string{l.name, num(s.Count), strconv.FormatFloat(s.Mean, 'f', 1, 64), numf(s.P50), numf(s.P90), numf(s.P99), numf(s.Max)}
}
