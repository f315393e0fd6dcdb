package stats

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"

	segjson "github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/quality"
	"tokenmill/lib/quantile"
	"tokenmill/lib/record"
)

// stats --against FILE: the inputs' make-up beside a reference's (a
// sample of the traffic a drafter will serve, another training set),
// dimension by dimension, with one distance each: for shares, the total
// variation distance (half the sum of the share differences: the share
// of records that would have to change group to make one mix the other);
// for lengths, the two-sample Kolmogorov-Smirnov statistic (the largest
// gap between the two cumulative distributions). Both are 0 for the same
// make-up and 1 for nothing in common.
//
// The make-up is read by a pass of its own over the inputs and the
// reference, before the report's: every record on the same terms, the
// ones compose groups by (compose --by source, lang, tools, thinking).
// stdin is spooled to a temporary file for the report's pass to read.

// Against is the --against section of the report.
type Against struct {
	// File is the reference; Records the records of it read, Inputs the
	// inputs'; Skipped the lines of the reference that were not records.
	File    string `json:"file"`
	Records int64  `json:"records"`
	Inputs  int64  `json:"input_records"`
	Skipped int64  `json:"skipped,omitempty"`
	// Dimensions: source, lang, tools, thinking, tool_calls (shares, TV
	// distance), prompt_chars and answer_chars (lengths, KS statistic).
	Dimensions []Dimension `json:"dimensions"`
	// DifferMost are the groups whose shares differ most, over every
	// share dimension, largest difference first.
	DifferMost []GroupShare `json:"differ_most"`
}

// Dimension is one way the two make-ups are compared.
type Dimension struct {
	Name string `json:"name"`
	// Measure is "tv" (total variation distance of shares) or "ks" (the
	// two-sample Kolmogorov-Smirnov statistic of lengths).
	Measure string `json:"measure"`
	// Distance is nil when a side has no record the dimension covers.
	Distance *float64 `json:"distance"`
	// Covered counts the records of each side the dimension covers
	// (thinking and tool_calls: records with an answer or a setting).
	Covered int64        `json:"covered"`
	Against int64        `json:"against_covered"`
	Groups  []GroupShare `json:"groups,omitempty"`
	// Lengths: each side's distribution, and its histogram on the
	// report's 1-2-5 log buckets (what --plot draws side by side).
	Inputs       *quantile.Summary `json:"inputs,omitempty"`
	AgainstL     *quantile.Summary `json:"against,omitempty"`
	InputsHist   []Bucket          `json:"inputs_histogram,omitempty"`
	AgainstLHist []Bucket          `json:"against_histogram,omitempty"`
}

// GroupShare is one group's share on each side.
type GroupShare struct {
	Dimension    string  `json:"dimension,omitempty"`
	Name         string  `json:"name"`
	Count        int64   `json:"count"`
	Share        float64 `json:"share"`
	AgainstCount int64   `json:"against_count"`
	AgainstShare float64 `json:"against_share"`
	// Diff is Share - AgainstShare.
	Diff float64 `json:"diff"`
}

// shareDims are the share dimensions, in the report's order.
var shareDims = []string{"source", "lang", "tools", "thinking", "tool_calls"}

// makeup is what one side's records are made of.
type makeup struct {
	records int64
	skipped int64
	groups  [5]map[string]int64 // by shareDims
	prompt  []int32
	answer  []int32
}

func newMakeup() *makeup {
	m := &makeup{}
	for i := range m.groups {
		m.groups[i] = map[string]int64{}
	}
	return m
}

// trait is one record's make-up ("" for a dimension it has no value in).
type trait struct {
	ok             bool
	groups         [5]string
	prompt, answer int32
	hasAnswer      bool
	detail         string // why a line is not a record
}

func (m *makeup) add(t *trait) {
	m.records++
	for i, g := range t.groups {
		if g != "" {
			m.groups[i][g]++
		}
	}
	m.prompt = append(m.prompt, t.prompt)
	if t.hasAnswer {
		m.answer = append(m.answer, t.answer)
	}
}

// The views of a record the make-up decodes: raw contents, nothing
// copied.
type (
	mkView struct {
		Source        string          `json:"source"`
		Messages      []mkTurn        `json:"messages"`
		Conversations []mkTurn        `json:"conversations"`
		Prompt        json.RawMessage `json:"prompt"`
		Tools         json.RawMessage `json:"tools"`
		Params        *struct {
			Kwargs *struct {
				Thinking *bool `json:"enable_thinking"`
			} `json:"chat_template_kwargs"`
		} `json:"params"`
		Output *struct {
			Text      json.RawMessage `json:"text"`
			Reasoning json.RawMessage `json:"reasoning"`
			ToolCalls json.RawMessage `json:"tool_calls"`
			Messages  []mkTurn        `json:"messages"`
			Turns     []struct {
				Message *int `json:"message"`
			} `json:"turns"`
		} `json:"output"`
	}
	mkTurn struct {
		Role             string          `json:"role"`
		From             string          `json:"from"`
		Content          json.RawMessage `json:"content"`
		Value            json.RawMessage `json:"value"`
		ToolCalls        json.RawMessage `json:"tool_calls"`
		ToolCallID       json.RawMessage `json:"tool_call_id"`
		ReasoningContent json.RawMessage `json:"reasoning_content"`
		Reasoning        json.RawMessage `json:"reasoning"`
	}
)

func (t *mkTurn) role() string {
	r := t.Role
	if r == "" {
		r = t.From
	}
	switch r {
	case "human":
		return "user"
	case "gpt", "function_call":
		return "assistant"
	case "observation", "function":
		return "tool"
	}
	return r
}

func (t *mkTurn) content() json.RawMessage {
	if t.Content != nil {
		return t.Content
	}
	return t.Value
}

// filled tells a raw value that holds something: not absent, null, "",
// [] or {}, nor a string holding one of them (SpecForge's rows carry
// their tools as a JSON string, "[]" for none), as compose reads them.
func filled(v json.RawMessage) bool {
	switch strings.Join(strings.Fields(string(v)), "") {
	case "", "null", `""`, "[]", "{}", `"[]"`, `"{}"`, `"null"`:
		return false
	}
	return true
}

// rawChars counts a content's characters: a string's, or its text parts'.
func rawChars(v json.RawMessage) int32 {
	v = json.RawMessage(strings.TrimSpace(string(v)))
	switch {
	case len(v) >= 2 && v[0] == '"':
		return int32(min(quality.CharsJSON(v[1:len(v)-1]), math.MaxInt32))
	case len(v) > 0 && v[0] == '[':
		var parts []struct {
			Text  json.RawMessage `json:"text"`
			Value json.RawMessage `json:"value"`
		}
		if segjson.Unmarshal(v, &parts) != nil {
			return 0
		}
		var n int32
		for _, p := range parts {
			if p.Text != nil {
				n += rawChars(p.Text)
			} else {
				n += rawChars(p.Value)
			}
		}
		return n
	}
	return 0
}

// rawText is a content's text (a string, or its first text part), cut
// to about n bytes.
func rawText(v json.RawMessage, n int) string {
	v = json.RawMessage(strings.TrimSpace(string(v)))
	if len(v) > 0 && v[0] == '[' {
		var parts []struct {
			Text  json.RawMessage `json:"text"`
			Value json.RawMessage `json:"value"`
		}
		if segjson.Unmarshal(v, &parts) != nil {
			return ""
		}
		for _, p := range parts {
			if filled(p.Text) {
				return rawText(p.Text, n)
			}
			if filled(p.Value) {
				return rawText(p.Value, n)
			}
		}
		return ""
	}
	if len(v) < 2 || v[0] != '"' {
		return ""
	}
	var s string
	if segjson.Unmarshal(v, &s) != nil {
		return ""
	}
	if len(s) > n {
		s = s[:n]
	}
	return s
}

// readTrait reads one record's make-up.
func readTrait(data []byte, t *trait) error {
	var v mkView
	if err := record.Decode(data, &v); err != nil {
		return err
	}
	*t = trait{ok: true}
	t.groups[0] = v.Source
	if t.groups[0] == "" {
		t.groups[0] = noneName
	}
	turns := v.Messages
	if turns == nil {
		turns = v.Conversations
	}
	var user json.RawMessage
	lastAssistant := -1
	tools := filled(v.Tools)
	for i := range turns {
		tr := &turns[i]
		switch tr.role() {
		case "user":
			if user == nil {
				user = tr.content()
			}
		case "assistant":
			lastAssistant = i
		case "tool":
			tools = true
		}
		tools = tools || filled(tr.ToolCalls) || filled(tr.ToolCallID)
	}
	if user == nil {
		user = v.Prompt
	}
	if text := rawText(user, 8<<10); text != "" {
		t.groups[1] = quality.Language(text, &quality.DefaultLang)
	} else {
		t.groups[1] = quality.Undetermined
	}
	promptEnd := len(turns)
	if v.Output == nil && lastAssistant >= 0 {
		promptEnd = lastAssistant
	}
	for i := range turns[:promptEnd] {
		t.prompt += rawChars(turns[i].content())
	}
	if len(turns) == 0 {
		t.prompt = rawChars(v.Prompt)
	}
	// The answer: output's (its text, or the regenerated turns), or a
	// training row's last assistant turn.
	thinks, calls := false, false
	switch {
	case v.Output != nil:
		o := v.Output
		t.hasAnswer = true
		calls = filled(o.ToolCalls)
		thinks = filled(o.Reasoning) || strings.Contains(string(o.Text), "<think>")
		if len(o.Turns) > 0 {
			for _, tu := range o.Turns {
				if tu.Message != nil && *tu.Message >= 0 && *tu.Message < len(o.Messages) {
					m := &o.Messages[*tu.Message]
					t.answer += rawChars(m.content())
					calls = calls || filled(m.ToolCalls)
					thinks = thinks || filled(m.ReasoningContent) || filled(m.Reasoning)
				}
			}
		} else {
			t.answer = rawChars(o.Text)
		}
	case lastAssistant >= 0:
		m := &turns[lastAssistant]
		t.hasAnswer = true
		t.answer = rawChars(m.content())
		for i := range turns {
			if turns[i].role() == "assistant" {
				calls = calls || filled(turns[i].ToolCalls)
				thinks = thinks || filled(turns[i].ReasoningContent) || filled(turns[i].Reasoning) ||
					strings.Contains(string(turns[i].content()), "<think>")
			}
		}
	}
	tools = tools || calls
	t.groups[2] = onOff(tools, "yes", "no")
	switch {
	case t.hasAnswer:
		t.groups[3] = onOff(thinks, "on", "off")
		t.groups[4] = onOff(calls, "calls", "no calls")
	case v.Params != nil && v.Params.Kwargs != nil && v.Params.Kwargs.Thinking != nil:
		t.groups[3] = onOff(*v.Params.Kwargs.Thinking, "on", "off")
	}
	return nil
}

func onOff(b bool, on, off string) string {
	if b {
		return on
	}
	return off
}

// compare reads the make-up of the inputs and of --against's file, for
// the report to carry (nothing without --against). stdin is spooled as
// it is read, and the report's pass reads the spool.
func compare(ctx context.Context, env *cli.Env, cfg Config) (*Against, error) {
	if cfg.Against == "" {
		return nil, nil
	}
	if err := jsonl.CheckPaths(jsonl.Inputs([]string{cfg.Against}), nil, false); err != nil {
		return nil, err
	}
	inputs, workers := cfg.Files, cfg.Workers
	var read, bytes atomic.Int64
	display := cli.StartProgress(ctx, env, cfg.Progress, func() []string {
		return []string{fmt.Sprintf("--against: read %s records (%s)", num(read.Load()), bytesText(bytes.Load()))}
	})
	defer display.Stop()
	stdin := env.Stdin
	var spool *os.File
	if slices.Contains(inputs, "-") {
		f, err := jsonl.CreateSpill("", "tokenmill-stats-*")
		if err != nil {
			return nil, fmt.Errorf("--against: spooling stdin: %w", err)
		}
		spool = f
		stdin = io.TeeReader(env.Stdin, f)
	}
	for _, in := range inputs {
		if in == "-" {
			continue
		}
		if st, err := os.Stat(in); err == nil && !st.Mode().IsRegular() {
			return nil, cli.Usagef("--against reads the inputs twice (their make-up, then the report): %s is not a regular file; name a file, or pipe it to stdin", in)
		}
	}
	mine, err := readMakeup(ctx, env, inputs, stdin, workers, &read, &bytes)
	if err != nil {
		return nil, err
	}
	if spool != nil {
		size, err := spool.Seek(0, io.SeekEnd)
		if err != nil {
			return nil, fmt.Errorf("--against: spooling stdin: %w", err)
		}
		env.Stdin = io.NewSectionReader(spool, 0, size)
		runtime.AddCleanup(env, func(f *os.File) { f.Close() }, spool)
	}
	theirs, err := readMakeup(ctx, env, []string{cfg.Against}, nil, workers, &read, &bytes)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return compareMakeups(cfg.Against, mine, theirs), nil
}

// readMakeup reads the make-up of files; lines that are not records are
// counted and the first few shown (the report's pass rejects the
// inputs' own).
func readMakeup(ctx context.Context, env *cli.Env, files []string, stdin io.Reader, workers int, read, bytes *atomic.Int64) (*makeup, error) {
	m := newMakeup()
	rd := jsonl.NewReader(ctx, env, files, stdin, jsonl.Options{})
	base := bytes.Load()
	shown := 0
	err := jsonl.Parallel(ctx, rd, workers, func(_ int, b *jsonl.Batch[trait]) {
		for i := range b.Items {
			it := &b.Items[i]
			if it.Err == nil {
				if err := readTrait(it.Data, &it.V); err != nil {
					it.V = trait{detail: err.Error()}
				}
			}
		}
	}, func(b *jsonl.Batch[trait]) error {
		for i := range b.Items {
			it := &b.Items[i]
			if it.Err != nil || !it.V.ok {
				m.skipped++
				if shown < 3 && len(files) == 1 && files[0] != "-" && it.Err == nil {
					shown++
					env.Logf("--against %s:%d: not a record (%s): left out of the make-up", it.File, it.Line, cli.Plain(it.V.detail))
				}
				continue
			}
			m.add(&it.V)
		}
		read.Add(int64(len(b.Items)))
		bytes.Store(base + b.Read.Bytes)
		return nil
	})
	return m, err
}

// compareMakeups sets two make-ups side by side.
func compareMakeups(file string, mine, theirs *makeup) *Against {
	a := &Against{File: file, Records: theirs.records, Inputs: mine.records, Skipped: theirs.skipped}
	for i, name := range shareDims {
		d := shareDimension(name, mine.groups[i], theirs.groups[i])
		a.Dimensions = append(a.Dimensions, d)
		for _, g := range d.Groups {
			if d.Distance != nil {
				g.Dimension = name
				a.DifferMost = append(a.DifferMost, g)
			}
		}
	}
	slices.SortStableFunc(a.DifferMost, func(x, y GroupShare) int {
		return cmp.Compare(math.Abs(y.Diff), math.Abs(x.Diff))
	})
	a.DifferMost = slices.DeleteFunc(a.DifferMost, func(g GroupShare) bool { return math.Abs(g.Diff) < 1e-12 })
	if len(a.DifferMost) > 5 {
		a.DifferMost = a.DifferMost[:5]
	}
	a.Dimensions = append(a.Dimensions, lengthDimension("prompt_chars", mine.prompt, theirs.prompt),
		lengthDimension("answer_chars", mine.answer, theirs.answer))
	return a
}

// shareDimension sets two sides' group counts side by side, largest
// difference first, with their total variation distance.
func shareDimension(name string, mine, theirs map[string]int64) Dimension {
	d := Dimension{Name: name, Measure: "tv"}
	for _, n := range mine {
		d.Covered += n
	}
	for _, n := range theirs {
		d.Against += n
	}
	names := map[string]bool{}
	for g := range mine {
		names[g] = true
	}
	for g := range theirs {
		names[g] = true
	}
	for g := range names {
		s := GroupShare{Name: g, Count: mine[g], AgainstCount: theirs[g]}
		if d.Covered > 0 {
			s.Share = float64(s.Count) / float64(d.Covered)
		}
		if d.Against > 0 {
			s.AgainstShare = float64(s.AgainstCount) / float64(d.Against)
		}
		s.Diff = s.Share - s.AgainstShare
		d.Groups = append(d.Groups, s)
	}
	slices.SortFunc(d.Groups, func(x, y GroupShare) int {
		return cmp.Or(cmp.Compare(math.Abs(y.Diff), math.Abs(x.Diff)), cmp.Compare(y.Count+y.AgainstCount, x.Count+x.AgainstCount), strings.Compare(x.Name, y.Name))
	})
	if d.Covered > 0 && d.Against > 0 {
		tv := TotalVariation(mine, theirs)
		d.Distance = &tv
	}
	return d
}

// TotalVariation is the total variation distance between the shares two
// counts give: half the sum over the groups of the difference of shares.
func TotalVariation(a, b map[string]int64) float64 {
	var na, nb int64
	for _, n := range a {
		na += n
	}
	for _, n := range b {
		nb += n
	}
	if na == 0 || nb == 0 {
		return math.NaN()
	}
	sum := 0.0
	for g, n := range a {
		sum += math.Abs(float64(n)/float64(na) - float64(b[g])/float64(nb))
	}
	for g, n := range b {
		if _, ok := a[g]; !ok {
			sum += float64(n) / float64(nb)
		}
	}
	return sum / 2
}

// KolmogorovSmirnov is the two-sample Kolmogorov-Smirnov statistic: the
// largest difference between the two samples' empirical cumulative
// distributions. It sorts both.
func KolmogorovSmirnov(a, b []int32) float64 {
	if len(a) == 0 || len(b) == 0 {
		return math.NaN()
	}
	slices.Sort(a)
	slices.Sort(b)
	var i, j int
	d := 0.0
	for i < len(a) && j < len(b) {
		x := min(a[i], b[j])
		for i < len(a) && a[i] == x {
			i++
		}
		for j < len(b) && b[j] == x {
			j++
		}
		d = max(d, math.Abs(float64(i)/float64(len(a))-float64(j)/float64(len(b))))
	}
	return d
}

// lengthDimension compares two sides' lengths.
func lengthDimension(name string, mine, theirs []int32) Dimension {
	d := Dimension{Name: name, Measure: "ks", Covered: int64(len(mine)), Against: int64(len(theirs))}
	if len(mine) > 0 && len(theirs) > 0 {
		ks := KolmogorovSmirnov(mine, theirs)
		d.Distance = &ks
	}
	d.Inputs, d.AgainstL = lengthStats(mine), lengthStats(theirs)
	d.InputsHist, d.AgainstLHist = lengthHistogram(mine), lengthHistogram(theirs)
	return d
}

// lengthHistogram counts lengths into the report's buckets (nil for none).
func lengthHistogram(v []int32) []Bucket {
	if len(v) == 0 {
		return nil
	}
	d := make(dist, 0, len(v))
	for _, x := range v {
		d.add(int64(x))
	}
	return histogram(d.floats())
}

// lengthStats summarises lengths (nil for none).
func lengthStats(v []int32) *quantile.Summary {
	if len(v) == 0 {
		return nil
	}
	f := make([]float64, len(v))
	for i, x := range v {
		f[i] = float64(x)
	}
	s := quantile.Summarize(f)
	return &s
}

// writeAgainst writes the section as text.
func writeAgainst(b *strings.Builder, a *Against, top int) {
	fmt.Fprintf(b, "against %s: %s beside %s of the inputs", a.File, plural(a.Records, "record"), num(a.Inputs))
	if a.Skipped > 0 {
		fmt.Fprintf(b, " (%s of it not records, left out)", plural(a.Skipped, "line"))
	}
	b.WriteString("\n")
	dist := table{align: "llrrr", header: []string{"dimension", "measure", "distance", "inputs", "against"}}
	for _, d := range a.Dimensions {
		v := "n/a"
		if d.Distance != nil {
			v = strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.4f", *d.Distance), "0"), ".")
		}
		kind := "total variation"
		if d.Measure == "ks" {
			kind = "Kolmogorov-Smirnov"
		}
		dist.add(d.Name, kind, v, num(d.Covered), num(d.Against))
	}
	dist.write(b)
	for _, d := range a.Dimensions {
		if d.Measure != "tv" || len(d.Groups) == 0 {
			continue
		}
		t := table{align: "lrrrrr", header: []string{d.Name, "inputs", "%", "against", "%", "diff"}}
		groups := d.Groups
		if top > 0 && len(groups) > top {
			groups = groups[:top]
		}
		for _, g := range groups {
			t.add(g.Name, num(g.Count), pct(g.Share), num(g.AgainstCount), pct(g.AgainstShare), fmt.Sprintf("%+.1f", 100*g.Diff))
		}
		if len(groups) < len(d.Groups) {
			t.add(fmt.Sprintf("(%d more)", len(d.Groups)-len(groups)), "", "", "", "", "")
		}
		t.write(b)
	}
	lt := table{align: "llrrrrrr", header: []string{"length", "side", "count", "mean", "p50", "p90", "p99", "max"}}
	for _, d := range a.Dimensions {
		if d.Measure != "ks" {
			continue
		}
		for _, side := range []struct {
			name string
			s    *quantile.Summary
		}{{"inputs", d.Inputs}, {"against", d.AgainstL}} {
			if side.s == nil {
				lt.add(d.Name, side.name, "0", "", "", "", "", "")
				continue
			}
			lt.add(d.Name, side.name, num(side.s.Count), numf(side.s.Mean), numf(side.s.P50), numf(side.s.P90), numf(side.s.P99), numf(side.s.Max))
		}
	}
	lt.write(b)
	if len(a.DifferMost) > 0 {
		parts := make([]string, len(a.DifferMost))
		for i, g := range a.DifferMost {
			parts[i] = fmt.Sprintf("%s %s %+.1f points", g.Dimension, g.Name, 100*g.Diff)
		}
		fmt.Fprintf(b, "differ most: %s\n\n", strings.Join(parts, ", "))
	}
}

// writeCompared writes the report with the --against section: after the
// tables, or as the "against" field of the JSON document.
func writeCompared(env *cli.Env, cfg Config, r *Report, against *Against) error {
	if !cfg.JSON {
		if err := r.WriteText(env.Stdout, cfg.Top); err != nil {
			return err
		}
		var b strings.Builder
		writeAgainst(&b, against, cfg.Top)
		_, err := io.WriteString(env.Stdout, b.String())
		return err
	}
	out, err := json.MarshalIndent(struct {
		*Report
		Against *Against `json:"against"`
	}{r, against}, "", "  ")
	if err != nil {
		return err
	}
	_, err = env.Stdout.Write(append(out, '\n'))
	return err
}
