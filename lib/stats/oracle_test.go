package stats

// A second, deliberately naive computation of every figure, from records
// decoded with the standard library, to check the real one against.

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"tokenmill/lib/record"
)

// located is one valid input line and where it is.
type located struct {
	line []byte
	file string
	no   int64
}

// expect computes the report the records should give; top as --top,
// wall in seconds as --wall, contextLength as --context-length.
func expect(records []located, top int, wall float64, contextLength int64) *Report {
	o := &oracle{
		r: &Report{Schema: Schema, FinishReasons: []Count{}, Sources: []Source{}, Endpoints: []Endpoint{},
			Errors:     Errors{ByStatus: []StatusCount{}, TopMessages: []Message{}},
			Duplicates: Duplicates{Examples: []Duplicate{}}},
		finish: map[string]int64{}, status: map[int]int64{}, groups: map[string]*oracleGroup{}, seen: map[string]bool{},
		sources: map[string]*Source{}, sourceChars: map[string][2]float64{}, endpoints: map[string]*oracleEP{},
		number: regexp.MustCompile(`\d+`), cx: &Context{},
	}
	for _, rec := range records {
		o.add(rec)
	}
	o.context(contextLength)
	o.tables(top)
	o.fleet(wall)
	return o.r
}

// oracle is what expect gathers from the records.
type oracle struct {
	r                                                                    *Report
	promptChars, promptTokens, answerChars, answerTokens, reasoningChars []float64
	finish                                                               map[string]int64
	status                                                               map[int]int64
	groups                                                               map[string]*oracleGroup
	seen                                                                 map[string]bool
	sources                                                              map[string]*Source
	sourceChars                                                          map[string][2]float64
	endpoints                                                            map[string]*oracleEP
	number                                                               *regexp.Regexp
	cx                                                                   *Context
	answerPrompts, turnPrompts, refusedPrompts                           []float64
	largest, lowered                                                     int64
}

// oracleGroup is an error message's count and its first wording.
type oracleGroup struct {
	count int64
	first string
}

// oracleEP is one endpoint's sums.
type oracleEP struct {
	answers, errors, prompt, completion, timedTokens, timedMS int64
	latencies                                                 []float64
}

func (o *oracle) endpointOf(name string) *oracleEP {
	if name == "" {
		name = "(none)"
	}
	if o.endpoints[name] == nil {
		o.endpoints[name] = &oracleEP{}
	}
	return o.endpoints[name]
}

// lower notes a request's prompt tokens and whether infer lowered its
// max_tokens to fit.
func (o *oracle) lower(m map[string]any, prompts *[]float64) bool {
	usage, ok := m["usage"].(map[string]any)
	if ok {
		*prompts = append(*prompts, float64(num64(usage["prompt_tokens"])))
	}
	if num64(m["max_tokens"]) <= 0 {
		return false
	}
	if p := num64(usage["prompt_tokens"]); ok && p > 0 {
		o.lowered++
		o.largest = max(o.largest, p+num64(m["max_tokens"]))
	}
	return true
}

// add counts one record.
func (o *oracle) add(rec located) {
	var m map[string]any
	if err := json.Unmarshal(rec.line, &m); err != nil {
		panic(fmt.Sprintf("expect got a bad line %s: %v", rec.line, err))
	}
	o.r.Records++
	chars := 0
	if msgs, ok := m["messages"].([]any); ok {
		for _, msg := range msgs {
			if c, ok := msg.(map[string]any)["content"].(string); ok {
				chars += utf8.RuneCountInString(c)
			}
		}
	}
	if p, ok := m["prompt"].(string); ok {
		chars += utf8.RuneCountInString(p)
	}
	o.promptChars = append(o.promptChars, float64(chars))
	srcName, _ := m["source"].(string)
	if srcName == "" {
		srcName = "(none)"
	}
	src := o.sources[srcName]
	if src == nil {
		src = &Source{Source: srcName}
		o.sources[srcName] = src
	}
	src.Records++
	sc := o.sourceChars[srcName]
	sc[0] += float64(chars)

	kind, class, sample := "prompt", "prompt", num64(m["sample"])
	out, isGen := m["output"].(map[string]any)
	errRec, isErr := m["error"].(map[string]any)
	switch {
	case isGen:
		kind, class, sample = "generation", "answer", num64(out["sample"])
		sc[1] += o.generation(out, src)
	case isErr:
		kind, class, sample = "error", "answer", num64(errRec["sample"])
		o.errorRecord(errRec, src)
	default:
		o.r.Kinds.Prompt++
		src.Prompts++
	}
	o.sourceChars[srcName] = sc

	var id record.ID
	raw, _ := json.Marshal(m["id"])
	if err := id.UnmarshalJSON(raw); err != nil {
		panic(err)
	}
	key := fmt.Sprint(class, "\x00", id.Numeric, "\x00", id.Text, "\x00", sample)
	if o.seen[key] {
		o.r.Duplicates.Records++
		if len(o.r.Duplicates.Examples) < 5 {
			o.r.Duplicates.Examples = append(o.r.Duplicates.Examples, Duplicate{ID: id, Sample: int(sample), Kind: kind, File: rec.file, Line: rec.no})
		}
	}
	o.seen[key] = true
}

// generation counts a generation record's output; it returns the
// answer's characters.
func (o *oracle) generation(out map[string]any, src *Source) float64 {
	r, cx := o.r, o.cx
	r.Kinds.Generation++
	src.Generations++
	text, _ := out["text"].(string)
	if strings.TrimSpace(text) == "" && out["tool_calls"] == nil && out["messages"] == nil {
		r.Empty++
	}
	o.answerChars = append(o.answerChars, float64(utf8.RuneCountInString(text)))
	if reasoning, _ := out["reasoning"].(string); reasoning != "" {
		o.reasoningChars = append(o.reasoningChars, float64(utf8.RuneCountInString(reasoning)))
	}
	e := o.endpointOf(str(out["endpoint"]))
	e.answers++
	latency := num64(out["latency_ms"])
	e.latencies = append(e.latencies, float64(latency))
	var completion int64
	if usage, ok := out["usage"].(map[string]any); ok {
		o.promptTokens = append(o.promptTokens, float64(num64(usage["prompt_tokens"])))
		completion = num64(usage["completion_tokens"])
		o.answerTokens = append(o.answerTokens, float64(completion))
		e.prompt += num64(usage["prompt_tokens"])
		e.completion += completion
	}
	src.CompletionTokens += completion
	if msgs, _ := out["messages"].([]any); len(msgs) > 0 {
		if tr, ok := out["truncated"].(map[string]any); ok && tr["reason"] == "context_full" {
			cx.ContextFull++
		}
		turns, _ := out["turns"].([]any)
		for _, tn := range turns {
			cx.Turns.Records++
			if o.lower(tn.(map[string]any), &o.turnPrompts) {
				cx.LoweredTurns++
			}
		}
	} else {
		cx.Answers.Records++
		if o.lower(out, &o.answerPrompts) {
			cx.LoweredAnswers++
		}
	}
	if latency > 0 {
		e.timedTokens += completion
		e.timedMS += latency
	}
	reason := str(out["finish_reason"])
	if reason == "" {
		reason = "(none)"
	}
	o.finish[reason]++
	if reason == "length" {
		src.Length++
	}
	return float64(utf8.RuneCountInString(text))
}

// errorRecord counts an error record.
func (o *oracle) errorRecord(errRec map[string]any, src *Source) {
	o.r.Kinds.Error++
	src.Errors++
	code := int(num64(errRec["status"]))
	o.status[code]++
	o.endpointOf(str(errRec["endpoint"])).errors++
	if errRec["reason"] == "prompt_too_long" {
		o.cx.Refused.Records++
		if p := num64(errRec["prompt_tokens"]); p > 0 {
			o.refusedPrompts = append(o.refusedPrompts, float64(p))
		}
	}
	msg := str(errRec["message"])
	key := fmt.Sprint(code, "\x00", o.number.ReplaceAllString(msg, "N"))
	if o.groups[key] == nil {
		o.groups[key] = &oracleGroup{first: msg}
	}
	o.groups[key].count++
}

// context is the context section, for runs with answers or errors.
func (o *oracle) context(contextLength int64) {
	r, cx := o.r, o.cx
	if r.Kinds.Generation+r.Kinds.Error == 0 {
		return
	}
	cx.Length, cx.Source = contextLength, "--context-length"
	switch {
	case contextLength > 0:
	case o.lowered > 0:
		cx.Length, cx.Source = o.largest+9, "inferred"
		cx.Inferred = &InferredContext{Requests: o.lowered, LargestSum: o.largest, Added: 9}
	default:
		cx.Source = "unknown"
	}
	for _, x := range []struct {
		p      *ContextPrompts
		values []float64
	}{{&cx.Answers, o.answerPrompts}, {&cx.Turns, o.turnPrompts}, {&cx.Refused, o.refusedPrompts}} {
		x.p.PromptTokens = naiveDist(x.values).Summary
		if cx.Length > 0 {
			l, s := float64(cx.Length), x.p.PromptTokens
			sh := &ContextShare{Mean: s.Mean / l, P50: s.P50 / l, P90: s.P90 / l, P99: s.P99 / l, Max: s.Max / l}
			for _, v := range x.values {
				if v/l > 0.5 {
					sh.AboveHalf++
				}
				if v/l > 0.9 {
					sh.Above90++
				}
			}
			x.p.Share = sh
		}
	}
	r.Context = cx
}

// tables are the lengths, finish reasons, errors and sources, sorted.
func (o *oracle) tables(top int) {
	r := o.r
	r.Lengths = Lengths{
		PromptChars: naiveDist(o.promptChars), PromptTokens: naiveDist(o.promptTokens),
		AnswerChars: naiveDist(o.answerChars), AnswerTokens: naiveDist(o.answerTokens),
		ReasoningChars: naiveDist(o.reasoningChars),
	}
	for name, n := range o.finish {
		r.FinishReasons = append(r.FinishReasons, Count{name, n})
	}
	sort.Slice(r.FinishReasons, func(i, j int) bool {
		a, b := r.FinishReasons[i], r.FinishReasons[j]
		return a.Count > b.Count || a.Count == b.Count && a.Name < b.Name
	})
	for code, n := range o.status {
		r.Errors.ByStatus = append(r.Errors.ByStatus, StatusCount{code, n})
	}
	sort.Slice(r.Errors.ByStatus, func(i, j int) bool {
		a, b := r.Errors.ByStatus[i], r.Errors.ByStatus[j]
		return a.Count > b.Count || a.Count == b.Count && a.Status < b.Status
	})
	for key, g := range o.groups {
		var code int
		fmt.Sscan(strings.SplitN(key, "\x00", 2)[0], &code)
		r.Errors.TopMessages = append(r.Errors.TopMessages, Message{code, g.count, g.first})
	}
	sort.Slice(r.Errors.TopMessages, func(i, j int) bool {
		a, b := r.Errors.TopMessages[i], r.Errors.TopMessages[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		if a.Status != b.Status {
			return a.Status < b.Status
		}
		return a.Message < b.Message
	})
	if len(r.Errors.TopMessages) > top {
		r.Errors.TopMessages = r.Errors.TopMessages[:top]
	}
	for name, s := range o.sources {
		s.MeanPromptChars = o.sourceChars[name][0] / float64(s.Records)
		if s.Generations > 0 {
			s.MeanAnswerChars = o.sourceChars[name][1] / float64(s.Generations)
		}
		r.Sources = append(r.Sources, *s)
	}
	sort.Slice(r.Sources, func(i, j int) bool {
		a, b := r.Sources[i], r.Sources[j]
		return a.Records > b.Records || a.Records == b.Records && a.Source < b.Source
	})
}

// fleet is each endpoint's figures and the whole fleet's.
func (o *oracle) fleet(wall float64) {
	r := o.r
	all := &oracleEP{}
	describe := func(name string, e *oracleEP) Endpoint {
		out := Endpoint{Endpoint: name, Requests: e.answers + e.errors, Answers: e.answers, Errors: e.errors,
			PromptTokens: e.prompt, CompletionTokens: e.completion, LatencyMS: naiveDist(e.latencies).Summary}
		if e.timedMS > 0 {
			out.TokPerSecPerRequest = float64(e.timedTokens) * 1000 / float64(e.timedMS)
		}
		if wall > 0 {
			tps, inFlight := float64(e.completion)/wall, float64(e.timedMS)/1000/wall
			out.TokPerSec, out.InFlight = &tps, &inFlight
		}
		return out
	}
	for name, e := range o.endpoints {
		r.Endpoints = append(r.Endpoints, describe(name, e))
		all.answers += e.answers
		all.errors += e.errors
		all.prompt += e.prompt
		all.completion += e.completion
		all.timedTokens += e.timedTokens
		all.timedMS += e.timedMS
		all.latencies = append(all.latencies, e.latencies...)
	}
	sort.Slice(r.Endpoints, func(i, j int) bool { return r.Endpoints[i].Endpoint < r.Endpoints[j].Endpoint })
	r.Fleet = describe("(all)", all)
	r.WallSeconds = wall
}

// naiveDist is the nearest-rank summary and 1-2-5 histogram, written out.
func naiveDist(values []float64) Distribution {
	d := Distribution{Histogram: []Bucket{}}
	if len(values) == 0 {
		return d
	}
	sorted := append([]float64(nil), values...)
	sort.Float64s(sorted)
	n := len(sorted)
	rank := func(p float64) float64 {
		k := int(math.Ceil(p / 100 * float64(n)))
		return sorted[max(k, 1)-1]
	}
	var sum float64
	for _, v := range sorted {
		sum += v
	}
	d.Count, d.Mean, d.Max = n, sum/float64(n), sorted[n-1]
	d.P50, d.P90, d.P99 = rank(50), rank(90), rank(99)

	edges := []int64{0, 1}
	for edges[len(edges)-1] <= int64(sorted[n-1]) {
		last := edges[len(edges)-1]
		switch fmt.Sprint(last)[0] {
		case '1':
			edges = append(edges, last*2)
		case '2':
			edges = append(edges, last/2*5)
		default:
			edges = append(edges, last*2)
		}
	}
	counts := make([]int64, len(edges)-1)
	for _, v := range sorted {
		for b := range counts {
			if v >= float64(edges[b]) && v < float64(edges[b+1]) {
				counts[b]++
			}
		}
	}
	first := 0
	for counts[first] == 0 {
		first++
	}
	for b := first; b < len(counts); b++ {
		d.Histogram = append(d.Histogram, Bucket{edges[b], edges[b+1], counts[b]})
	}
	return d
}

func num64(v any) int64 {
	f, _ := v.(float64)
	return int64(f)
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
