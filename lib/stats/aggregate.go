package stats

import (
	"cmp"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"

	"tokenmill/lib/quantile"
	"tokenmill/lib/record"
)

// Limits that keep memory bounded whatever the input: names beyond these
// are counted under "(other)".
const (
	maxSources     = 1000
	maxEndpoints   = 1000
	maxMessages    = 10000 // distinct error message patterns
	maxFinish      = 100
	maxExamples    = 5   // duplicate ids shown
	maxMessageText = 300 // characters of an error message kept as its example
	otherName      = "(other)"
	noneName       = "(none)"
)

// dist keeps every value of one distribution, 4 bytes each, so that its
// percentiles are exact. Values beyond 2³²-1 saturate.
type dist []uint32

func (d *dist) add(v int64) {
	*d = append(*d, uint32(min(max(v, 0), math.MaxUint32)))
}

// floats sorts d and returns its values as float64s for package quantile.
// Sorting the 4-byte integers first is the faster way, and leaves
// quantile's own sort nothing to do.
func (d dist) floats() []float64 {
	sortValues(d)
	f := make([]float64, len(d))
	for i, v := range d {
		f[i] = float64(v)
	}
	return f
}

// sortValues sorts d: by radix for a long one (four passes of a byte,
// linear in its length), by comparison for a short one. The report's
// sorts run on one goroutine after the last record, so their time adds
// to the run's whole.
func sortValues(d []uint32) {
	if len(d) < 1<<12 {
		slices.Sort(d)
		return
	}
	buf := make([]uint32, len(d))
	src, dst := d, buf
	for shift := uint(0); shift < 32; shift += 8 {
		var count [256]int
		for _, v := range src {
			count[v>>shift&0xff]++
		}
		if count[src[0]>>shift&0xff] == len(src) {
			continue // every value has this byte: the pass would move nothing
		}
		pos := 0
		for i, c := range count {
			count[i], pos = pos, pos+c
		}
		for _, v := range src {
			b := v >> shift & 0xff
			dst[count[b]] = v
			count[b]++
		}
		src, dst = dst, src
	}
	if &src[0] != &d[0] {
		copy(d, src)
	}
}

// describe summarizes d with its log-scale histogram.
func (d dist) describe() Distribution {
	values := d.floats()
	return Distribution{Summary: quantile.Summarize(values), Histogram: histogram(values)}
}

// bucketEdges are the 1-2-5 log-scale bucket bounds used for every length
// histogram: [0,1) [1,2) [2,5) [5,10) [10,20) ...
var bucketEdges = func() []int64 {
	edges := []int64{0}
	for decade := int64(1); decade <= 1e10; decade *= 10 {
		edges = append(edges, decade, 2*decade, 5*decade)
	}
	return edges
}()

// histogram counts sorted values into bucketEdges, from the first to the
// last non-empty bucket.
func histogram(sorted []float64) []Bucket {
	if len(sorted) == 0 {
		return []Bucket{}
	}
	var out []Bucket
	i := 0
	for b := 0; b+1 < len(bucketEdges) && i < len(sorted); b++ {
		lo, hi := bucketEdges[b], bucketEdges[b+1]
		j := i + sort.Search(len(sorted)-i, func(k int) bool { return sorted[i+k] >= float64(hi) })
		if j > i || len(out) > 0 {
			out = append(out, Bucket{Lo: lo, Hi: hi, Count: int64(j - i)})
		}
		i = j
	}
	return out
}

type sourceAgg struct {
	kinds                [3]int64
	length, completion   int64
	promptChars, answers int64
}

type endpointAgg struct {
	answers, errors   int64
	prompt, completed int64 // tokens
	latency           dist
	timedTokens       int64 // completion tokens of answers that have a latency
	timedMS           int64 // their summed latency
}

type msgKey struct {
	status  int
	pattern string
}

type msgAgg struct {
	count   int64
	example string
}

// aggregator folds facts into the figures of a report, in input order, on
// one goroutine.
type aggregator struct {
	records  int64
	kinds    [3]int64
	lengths  [numLengths]dist
	finish   map[string]*int64 // pointer counts: assigning m[k] would store k, which aliases the input line
	statuses map[int]int64
	messages map[msgKey]*msgAgg
	seen     keySet
	dups     int64
	examples []Duplicate
	sources  map[string]*sourceAgg
	ends     map[string]*endpointAgg
	empty    int64
	checks   *checkAgg // nil without --checks
	convs    *convAgg  // nil until a regenerated conversation is read
	ctx      ctxAgg
	// arms are the mixture's (arms.go); nil until a record names one.
	arms  map[string]*armAgg
	noArm armAgg
	// settings are the answers' settings (settings.go); nil until a
	// record names some.
	settings   map[string]*settingsAgg
	noSettings settingsAgg
}

// Indexes of aggregator.lengths.
const (
	lenPromptChars = iota
	lenPromptTokens
	lenAnswerChars
	lenAnswerTokens
	lenReasoningChars
	numLengths
)

func newAggregator() *aggregator {
	return &aggregator{
		finish:   map[string]*int64{},
		statuses: map[int]int64{},
		messages: map[msgKey]*msgAgg{},
		sources:  map[string]*sourceAgg{},
		ends:     map[string]*endpointAgg{},
	}
}

// add counts one record; file and line locate it for duplicate examples.
func (a *aggregator) add(f *fact, file string, line int64) {
	a.records++
	a.kinds[f.kind]++
	a.lengths[lenPromptChars].add(int64(f.prompt))
	src := bounded(a.sources, f.source, maxSources, func() *sourceAgg { return &sourceAgg{} })
	src.kinds[f.kind]++
	src.promptChars += int64(f.prompt)

	if a.seen.add(f.key) {
		a.dups++
		if len(a.examples) < maxExamples {
			a.examples = append(a.examples, Duplicate{ID: f.id.text(), Sample: f.sample,
				Kind: f.kind.String(), File: file, Line: line})
		}
	}

	if f.kind != record.KindPrompt {
		a.ctx.add(f)
		a.addArm(f)
		a.addSettings(f)
	}
	switch f.kind {
	case record.KindGeneration:
		if f.empty {
			a.empty++
		}
		if f.conversation {
			if a.convs == nil {
				a.convs = newConvAgg()
			}
			a.convs.add(f)
		}
		if a.checks != nil {
			a.checks.add(f, file, line)
		}
		a.lengths[lenAnswerChars].add(int64(f.answer))
		if f.hasReas {
			a.lengths[lenReasoningChars].add(int64(f.reasoning))
		}
		if f.usage {
			a.lengths[lenPromptTokens].add(f.pTokens)
			a.lengths[lenAnswerTokens].add(f.cTokens)
		}
		*bounded(a.finish, f.finish, maxFinish, func() *int64 { return new(int64) })++
		if f.finish == record.FinishLength {
			src.length++
		}
		src.completion += f.cTokens
		src.answers += int64(f.answer)
		e := a.endpoint(f.endpoint)
		e.answers++
		e.prompt += f.pTokens
		e.completed += f.cTokens
		e.latency.add(f.latency)
		if f.latency > 0 {
			e.timedTokens += f.cTokens
			e.timedMS += f.latency
		}
	case record.KindError:
		a.statuses[f.status]++
		a.endpoint(f.endpoint).errors++
		a.addMessage(f.status, f.message)
	}
}

func (a *aggregator) endpoint(name string) *endpointAgg {
	return bounded(a.ends, name, maxEndpoints, func() *endpointAgg { return &endpointAgg{} })
}

// bounded returns m's entry for name ("" is noneName), creating it while m
// has fewer than limit names and using otherName after that. New keys are
// cloned: name may alias an input line that is about to be reused. Callers
// update the entry through the pointer and never assign m[name]: a map
// assignment stores its key again, aliasing the line after all.
func bounded[T any](m map[string]*T, name string, limit int, fresh func() *T) *T {
	if name == "" {
		name = noneName
	}
	if v, ok := m[name]; ok {
		return v
	}
	if len(m) >= limit {
		name = otherName
		if v, ok := m[name]; ok {
			return v
		}
	}
	v := fresh()
	m[strings.Clone(name)] = v
	return v
}

// digits finds the numbers that make otherwise equal error messages differ
// ("The input (9001 tokens) ..."), so messages are grouped without them.
var digits = regexp.MustCompile(`[0-9]+`)

func (a *aggregator) addMessage(status int, msg string) {
	pattern := msg
	if strings.ContainsAny(msg, "0123456789") {
		pattern = digits.ReplaceAllLiteralString(msg, "N")
	}
	key := msgKey{status, prefix(pattern, maxMessageText)}
	if m, ok := a.messages[key]; ok {
		m.count++
		return
	}
	if len(a.messages) >= maxMessages {
		key = msgKey{status, otherName}
		if m, ok := a.messages[key]; ok {
			m.count++
			return
		}
		msg = otherName
	}
	example := prefix(msg, maxMessageText)
	if len(example) < len(msg) {
		example += "…"
	}
	key.pattern = strings.Clone(key.pattern)
	a.messages[key] = &msgAgg{count: 1, example: strings.Clone(example)}
}

// prefix is s cut to at most n characters.
func prefix(s string, n int) string {
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos]
		}
		i++
	}
	return s
}

// report builds the figures. top limits the error messages listed;
// contextLength is --context-length (0: not given).
func (a *aggregator) report(top int, wallSeconds float64, contextLength int64) *Report {
	r := &Report{
		Schema:  Schema,
		Records: a.records,
		Kinds:   Kinds{Prompt: a.kinds[record.KindPrompt], Generation: a.kinds[record.KindGeneration], Error: a.kinds[record.KindError]},
		Lengths: Lengths{
			PromptChars:    a.lengths[lenPromptChars].describe(),
			PromptTokens:   a.lengths[lenPromptTokens].describe(),
			AnswerChars:    a.lengths[lenAnswerChars].describe(),
			AnswerTokens:   a.lengths[lenAnswerTokens].describe(),
			ReasoningChars: a.lengths[lenReasoningChars].describe(),
		},
		FinishReasons: counts(derefCounts(a.finish)),
		Errors:        Errors{ByStatus: []StatusCount{}, TopMessages: []Message{}},
		Duplicates:    Duplicates{Records: a.dups, Examples: append([]Duplicate{}, a.examples...)},
		Sources:       []Source{},
		Endpoints:     []Endpoint{},
		Empty:         a.empty,
	}
	if a.checks != nil {
		r.Checks = a.checks.report()
	}
	if a.convs != nil {
		r.Conversations = a.convs.report()
	}
	if r.Kinds.Generation+r.Kinds.Error > 0 {
		r.Context = a.ctx.report(contextLength)
	}
	r.Arms = a.armsReport(wallSeconds)
	r.Settings = a.settingsReport()
	for status, n := range a.statuses {
		r.Errors.ByStatus = append(r.Errors.ByStatus, StatusCount{Status: status, Count: n})
	}
	slices.SortFunc(r.Errors.ByStatus, func(x, y StatusCount) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), cmp.Compare(x.Status, y.Status))
	})
	for k, m := range a.messages {
		r.Errors.TopMessages = append(r.Errors.TopMessages, Message{Status: k.status, Count: m.count, Message: m.example})
	}
	slices.SortFunc(r.Errors.TopMessages, func(x, y Message) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), cmp.Compare(x.Status, y.Status), strings.Compare(x.Message, y.Message))
	})
	r.Errors.TopMessages = r.Errors.TopMessages[:min(top, len(r.Errors.TopMessages))]

	for name, s := range a.sources {
		records := s.kinds[0] + s.kinds[1] + s.kinds[2]
		src := Source{Source: name, Records: records, Prompts: s.kinds[record.KindPrompt],
			Generations: s.kinds[record.KindGeneration], Errors: s.kinds[record.KindError],
			Length: s.length, CompletionTokens: s.completion,
			MeanPromptChars: ratio(float64(s.promptChars), float64(records))}
		src.MeanAnswerChars = ratio(float64(s.answers), float64(src.Generations))
		r.Sources = append(r.Sources, src)
	}
	slices.SortFunc(r.Sources, func(x, y Source) int {
		return cmp.Or(cmp.Compare(y.Records, x.Records), strings.Compare(x.Source, y.Source))
	})

	var all endpointAgg
	for name, e := range a.ends {
		r.Endpoints = append(r.Endpoints, e.describe(name, wallSeconds))
		all.answers += e.answers
		all.errors += e.errors
		all.prompt += e.prompt
		all.completed += e.completed
		all.latency = append(all.latency, e.latency...)
		all.timedTokens += e.timedTokens
		all.timedMS += e.timedMS
	}
	slices.SortFunc(r.Endpoints, func(x, y Endpoint) int { return strings.Compare(x.Endpoint, y.Endpoint) })
	r.Fleet = all.describe(allName, wallSeconds)
	if wallSeconds > 0 {
		r.WallSeconds = wallSeconds
	}
	return r
}

const allName = "(all)"

// describe computes the endpoint's figures (see Endpoint for definitions).
func (e *endpointAgg) describe(name string, wallSeconds float64) Endpoint {
	out := Endpoint{
		Endpoint: name, Requests: e.answers + e.errors, Answers: e.answers, Errors: e.errors,
		PromptTokens: e.prompt, CompletionTokens: e.completed,
		LatencyMS:           quantile.Summarize(e.latency.floats()),
		TokPerSecPerRequest: ratio(float64(e.timedTokens), float64(e.timedMS)/1000),
	}
	if wallSeconds > 0 {
		tps := float64(e.completed) / wallSeconds
		inFlight := float64(e.timedMS) / 1000 / wallSeconds
		out.TokPerSec, out.InFlight = &tps, &inFlight
	}
	return out
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// counts lists a map's counts, most frequent first, then by name.
func counts(m map[string]int64) []Count {
	out := make([]Count, 0, len(m))
	for k, n := range m {
		out = append(out, Count{Name: k, Count: n})
	}
	slices.SortFunc(out, func(x, y Count) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), strings.Compare(x.Name, y.Name))
	})
	return out
}

func derefCounts(m map[string]*int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = *v
	}
	return out
}
