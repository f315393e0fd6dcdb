package quality

import (
	"bytes"
	stdjson "encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/recordtest"
	"tokenmill/lib/record"
)

// The checks' fast paths (GenerationView.Parse's one-pass scanner, the loop
// check's hashed words, early stops and bounds, the tail's anchored
// search, the thinking markers' gated scans) against straightforward
// versions written from their definitions: encoding/json and maps of strings, every measure computed
// in full. Both must reach the same verdict, with the same detail, on the
// real answers and on fuzzed input.

// refAnswer is what a reference parse makes of one answer.
type refAnswer struct {
	Text, Reasoning, Finish, Prompt string
	Calls                           []ToolCall
}

type refRecord struct {
	reason       string // the ParseError's reason, "" if it parses
	kind         record.Kind
	conversation bool
	answers      []refAnswer
	tools        Tools
}

func rawNull(v []byte) bool { return len(v) == 0 || string(v) == "null" }

// refString decodes a string field as encoding/json does (null or absent:
// ""); ok is false for another type.
func refString(raw []byte) (string, bool) {
	if rawNull(raw) {
		return "", true
	}
	if raw[0] != '"' {
		return "", false
	}
	var s string
	if stdjson.Unmarshal(raw, &s) != nil {
		panic("a valid JSON string did not decode: " + string(raw))
	}
	return s, true
}

// refParse reads a generation record the straightforward way: validated
// by encoding/json, fields looked up in maps (exact keys, the last of
// repeated ones winning), strings decoded by encoding/json.
func refParse(line []byte) refRecord {
	bad := func(reason string) refRecord { return refRecord{reason: reason} }
	if !stdjson.Valid(line) || record.CheckDepth(line) != nil {
		return bad(ReasonMalformedJSON)
	}
	if bytes.TrimLeft(line, " \t\r\n")[0] != '{' {
		return bad(ReasonNotObject)
	}
	var top map[string]stdjson.RawMessage
	if err := stdjson.Unmarshal(line, &top); err != nil {
		panic(err)
	}
	out := refRecord{kind: record.KindPrompt}
	switch {
	case !rawNull(top["output"]):
		out.kind = record.KindGeneration
	case !rawNull(top["error"]):
		out.kind = record.KindError
		return out
	default:
		return out
	}
	if top["output"][0] != '{' {
		return bad(ReasonBadOutput)
	}
	var o map[string]stdjson.RawMessage
	if err := stdjson.Unmarshal(top["output"], &o); err != nil {
		panic(err)
	}
	calls := 0
	if msgs := o["messages"]; !rawNull(msgs) && string(msgs) != "[]" {
		out.conversation = true
		var view outputView
		if record.Decode(msgs, &view.Messages) != nil {
			return bad(ReasonBadOutput)
		}
		if !rawNull(o["turns"]) && record.Decode(o["turns"], &view.Turns) != nil {
			return bad(ReasonBadOutput)
		}
		for _, t := range view.Turns {
			if t.Message == nil || *t.Message < 0 || *t.Message >= len(view.Messages) {
				return bad(ReasonBadOutput)
			}
			m := view.Messages[*t.Message]
			if m.Role != "assistant" {
				return bad(ReasonUnknownTurnRole)
			}
			a := refAnswer{Reasoning: m.ReasoningContent, Finish: t.FinishReason}
			for _, c := range m.ToolCalls {
				a.Calls = append(a.Calls, ToolCall{Name: c.Function.Name, Arguments: c.Function.Arguments})
			}
			if m.Content != nil {
				a.Text = *m.Content
			}
			for j := *t.Message - 1; j >= 0; j-- {
				if u := view.Messages[j]; u.Role == "user" && u.Content != nil {
					a.Prompt = *u.Content
					break
				}
			}
			calls += len(a.Calls)
			out.answers = append(out.answers, a)
		}
	} else {
		if rawNull(o["text"]) && rawNull(o["tool_calls"]) {
			return bad(ReasonBadOutput)
		}
		var a refAnswer
		var ok1, ok2, ok3 bool
		a.Text, ok1 = refString(o["text"])
		a.Reasoning, ok2 = refString(o["reasoning"])
		a.Finish, ok3 = refString(o["finish_reason"])
		if !ok1 || !ok2 || !ok3 {
			return bad(ReasonBadOutput)
		}
		if !rawNull(o["tool_calls"]) {
			var cs []toolCallView
			if record.Decode(o["tool_calls"], &cs) != nil {
				return bad(ReasonBadOutput)
			}
			for _, c := range cs {
				a.Calls = append(a.Calls, ToolCall{Name: c.Function.Name, Arguments: c.Function.Arguments})
			}
		}
		a.Prompt = userTurn(top["messages"], top["prompt"])
		calls = len(a.Calls)
		out.answers = append(out.answers, a)
	}
	if calls > 0 {
		var err error
		if out.tools, err = parseTools(top["tools"]); err != nil {
			return bad(ReasonBadOutput)
		}
	}
	return out
}

// sameParse fails unless r, as Parse left it (perr its result), is what
// refParse makes of line.
func sameParse(t *testing.T, line []byte, r *GenerationView, perr *ParseError) {
	t.Helper()
	want := refParse(line)
	got := refRecord{kind: r.Kind, conversation: r.Conversation, tools: r.Tools()}
	if perr != nil {
		got = refRecord{reason: perr.Reason}
	} else {
		for i := range r.Answers {
			a := &r.Answers[i]
			got.answers = append(got.answers, refAnswer{Text: a.Text, Reasoning: a.Reasoning, Finish: a.Finish, Prompt: a.PromptText(), Calls: a.ToolCalls})
		}
	}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Fatalf("Parse(%.300q)\n got %.500v\nwant %.500v", line, got, want)
	}
}

// refMeasures are the loop measures of text, each computed in full from
// its definition (see loop.go).
func refMeasures(text string) LoopMeasures {
	var m LoopMeasures
	m.TailCopies, m.TailSpan, m.TailBytes = refTail(text)
	if text == "" {
		return m
	}
	total := float64(len(text))
	// Lines and paragraphs; white-space-only lines separate paragraphs.
	var nLines, dupLines, dupLineBytes, nParas, dupParas, dupParaBytes int
	seenLine, seenPara := map[string]bool{}, map[string]bool{}
	lines := strings.Split(text, "\n")
	paraStart, pos := -1, 0
	paraEnd := 0
	endPara := func() {
		if paraStart >= 0 {
			p := text[paraStart:paraEnd]
			nParas++
			if seenPara[p] {
				dupParas++
				dupParaBytes += len(p)
			}
			seenPara[p] = true
			paraStart = -1
		}
	}
	for _, l := range lines {
		if strings.Trim(l, " \t\r") == "" {
			endPara()
		} else {
			nLines++
			if seenLine[l] {
				dupLines++
				dupLineBytes += len(l)
			}
			seenLine[l] = true
			if paraStart < 0 {
				paraStart = pos
			}
			paraEnd = pos + len(l)
		}
		pos += len(l) + 1
	}
	endPara()
	if nLines > 0 {
		m.DupLines = float64(dupLines) / float64(nLines)
	}
	if nParas > 0 {
		m.DupParagraphs = float64(dupParas) / float64(nParas)
	}
	m.DupLineBytes, m.DupParagraphBytes = float64(dupLineBytes)/total, float64(dupParaBytes)/total
	refNgrams(&m, text, total)
	return m
}

// refNgrams fills in the word n-gram measures of text (total bytes long).
func refNgrams(m *LoopMeasures, text string, total float64) {
	// Words: runs of bytes between ASCII white space.
	words := strings.FieldsFunc(text, func(r rune) bool { return r < 0x80 && spaces[r] })
	all := 0
	for _, w := range words {
		all += len(w)
	}
	size := func(g []string) int {
		n := 0
		for _, w := range g {
			n += len(w)
		}
		return n
	}
	for n := 2; n <= 4; n++ {
		count := map[string]int{}
		for i := 0; i+n <= len(words); i++ {
			count[strings.Join(words[i:i+n], " ")]++
		}
		best, bestBytes := 0, 0
		for g, c := range count {
			b := size(strings.Split(g, " "))
			if c > best || c == best && b > bestBytes {
				best, bestBytes = c, b
			}
		}
		if best >= 2 {
			m.TopNgram[n] = min(float64(best)*float64(bestBytes), float64(all)) / total
		}
	}
	for n := 5; n <= 10; n++ {
		seen := map[string]bool{}
		covered := make([]bool, len(words))
		for i := 0; i+n <= len(words); i++ {
			g := strings.Join(words[i:i+n], " ")
			if seen[g] {
				for j := i; j < i+n; j++ {
					covered[j] = true
				}
			}
			seen[g] = true
		}
		b := 0
		for i, c := range covered {
			if c {
				b += len(words[i])
			}
		}
		m.DupNgram[n] = float64(b) / total
	}
}

// refTail is repeatedTail as its comment defines it: the nearest eight
// earlier occurrences of the last bytes, within 4 kB, are the candidate
// spans; the one whose copies cover the most bytes wins.
func refTail(text string) (copies, span, covered int) {
	t := strings.TrimRight(text, " \n\t\r\v\f")
	if len(t) < 2 {
		return 0, 0, 0
	}
	k := min(8, len(t)/2)
	suffix := t[len(t)-k:]
	var near []int // ends of occurrences, nearest first
	for q := len(t) - 1 - k; q >= max(0, len(t)-1-4096-k) && len(near) < 8; q-- {
		if t[q:q+k] == suffix {
			near = append(near, q+k)
		}
	}
	for _, e := range near {
		// The longest end of t that has period p: as long as the text
		// p bytes back is the same, one byte more.
		p, n := len(t)-e, len(t)-e
		for n < len(t) && t[len(t)-1-n] == t[len(t)-1-n+p] {
			n++
		}
		if n/p >= 2 && n > covered {
			copies, span, covered = n/p, p, n
		}
	}
	return copies, span, covered
}

// refLoop is the loop check's verdict from refMeasures: the first measure
// over its threshold, in the order Loop tries them, with its detail.
func refLoop(text string, cfg *LoopConfig) (string, bool) {
	m := refMeasures(text)
	if cfg.TailCopies > 0 && m.TailCopies >= cfg.TailCopies && m.TailBytes >= cfg.TailBytes {
		return fmt.Sprintf("tail: the last %d bytes are %d copies of a %d-byte span", m.TailBytes, m.TailCopies, m.TailSpan), true
	}
	if len(text) < cfg.MinBytes || text == "" {
		return "", false
	}
	type measure struct {
		name      string
		v, thresh float64
	}
	list := []measure{{MeasureDupLines, m.DupLines, cfg.DupLines}, {MeasureDupLineBytes, m.DupLineBytes, cfg.DupLineBytes},
		{MeasureDupParagraphs, m.DupParagraphs, cfg.DupParagraphs}, {MeasureDupParagraphBytes, m.DupParagraphBytes, cfg.DupParagraphBytes}}
	for n := 2; n <= 4; n++ {
		list = append(list, measure{fmt.Sprintf("top_%dgram", n), m.TopNgram[n], cfg.TopNgram[n]})
	}
	for n := 5; n <= 10; n++ {
		list = append(list, measure{fmt.Sprintf("dup_%dgram", n), m.DupNgram[n], cfg.DupNgram[n]})
	}
	for _, x := range list {
		if x.thresh > 0 && x.thresh < 1 && x.v > x.thresh {
			return fmt.Sprintf("%s %.3f > %.2f", x.name, x.v, x.thresh), true
		}
	}
	return "", false
}

// sameLoop fails unless Loop and refLoop agree on text, detail and all,
// under each configuration.
func sameLoop(t *testing.T, text string, s *Scratch) {
	t.Helper()
	for _, cfg := range []*LoopConfig{&DefaultLoop, &PaperLoop} {
		d, bad := Loop(text, cfg, s)
		wd, wbad := refLoop(text, cfg)
		if d != wd || bad != wbad {
			t.Fatalf("Loop(%.200q) = %v %q, the reference %v %q", text, bad, d, wbad, wd)
		}
	}
	if got, want := MeasureLoop(text, s), refMeasures(text); got != want {
		t.Fatalf("MeasureLoop(%.200q)\n = %+v\nthe reference %+v", text, got, want)
	}
}

// sameFirst fails unless the Checker's first finding for a is the one the
// reference loop check gives in its place.
func sameFirst(t *testing.T, c *Checker, a *Answer, tools Tools) {
	t.Helper()
	got, gotBad := c.First(a, tools)
	cfg := c.cfg
	cfg.Checks = slices.DeleteFunc(slices.Clone(cfg.Checks), func(s string) bool { return s == CheckLoop })
	ref, err := NewChecker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want, wantBad := ref.First(a, tools)
	if d, bad := refLoop(a.Text, &c.cfg.Loop); c.Enabled(CheckLoop) && bad && (!wantBad || checkIndex(want.Check) > iLoop) {
		want, wantBad = Finding{Check: CheckLoop, Detail: d}, true
	}
	if got != want || gotBad != wantBad {
		t.Fatalf("First(%.200q) = %+v, the reference %+v", a.Text, got, want)
	}
}

// generationLine is a generation record holding a as its single answer.
func generationLine(t testing.TB, id string, a Answer) []byte {
	out := map[string]any{"text": a.Text, "finish_reason": a.Finish, "usage": map[string]int{"completion_tokens": len(a.Text) / 4}}
	if a.Reasoning != "" {
		out["reasoning"] = a.Reasoning
	}
	if len(a.ToolCalls) > 0 {
		var calls []any
		for _, c := range a.ToolCalls {
			calls = append(calls, map[string]any{"type": "function", "function": map[string]any{"name": c.Name, "arguments": string(c.Arguments)}})
		}
		out["tool_calls"] = calls
	}
	b, err := stdjson.Marshal(map[string]any{"id": id, "messages": []any{map[string]string{"role": "user", "content": a.Prompt}}, "output": out})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFastPathsMatchReference: every real answer, made into a generation
// record, parses as the reference parses it and gets the reference's
// verdict; so do the synthetic loops and the benchmarks' answers.
func TestFastPathsMatchReference(t *testing.T) {
	c, err := NewChecker(Config{Checks: DefaultChecks, Loop: DefaultLoop})
	if err != nil {
		t.Fatal(err)
	}
	var r GenerationView
	var s Scratch
	check := func(id string, a Answer, tools Tools) {
		line := generationLine(t, id, a)
		perr := r.Parse(line)
		sameParse(t, line, &r, perr)
		sameLoop(t, a.Text, &s)
		sameMarker(t, a.Text, a.Prompt)
		sameFirst(t, c, &a, tools)
	}
	n := 0
	for name, answers := range loadRealAnswers(t) {
		for _, ra := range answers {
			check(name+" "+ra.id, ra.a, ra.tools)
			n++
		}
	}
	for _, tc := range loopCases {
		check(tc.name, Answer{Text: tc.text, Finish: "stop"}, nil)
	}
	for i, text := range llmsim.Answers(300, 7) {
		check(fmt.Sprint(i), Answer{Text: text, Finish: "stop"}, nil)
	}
	t.Logf("%d real answers, %d synthetic loops, 300 model-like answers", n, len(loopCases))
	for _, line := range append(slices.Clone(recordSeeds), recordtest.Values...) {
		sameParse(t, []byte(line), &r, r.Parse([]byte(line)))
	}
}

// FuzzFastPaths: any line parses as the reference parses it, and any text
// (the line itself, and the answers it holds) gets the reference loop
// verdict and measures.
func FuzzFastPaths(f *testing.F) {
	for _, s := range recordSeeds {
		f.Add(s)
	}
	for _, s := range recordtest.Values {
		f.Add(s)
	}
	for _, tc := range loopCases {
		f.Add(tc.text)
		f.Add(string(generationLine(f, tc.name, Answer{Text: tc.text, Finish: "stop"})))
	}
	var r GenerationView
	var s Scratch
	f.Fuzz(func(t *testing.T, line string) {
		perr := r.Parse([]byte(line))
		sameParse(t, []byte(line), &r, perr)
		texts := []string{line}
		if perr == nil {
			for _, a := range r.Answers {
				texts = append(texts, strings.Clone(a.Text))
			}
		}
		for _, text := range texts {
			sameLoop(t, text, &s)
			sameMarker(t, text, "")
		}
	})
}

// TestCheckIndexes: the index constants name the checks of Checks.
func TestCheckIndexes(t *testing.T) {
	for i, want := range map[int]string{iLength: CheckLength, iThinkBlock: CheckThinkBlock, iReasoningOnly: CheckReasoningOnly, iEmpty: CheckEmpty,
		iThinkResidue: CheckThinkResidue, iToolCall: CheckToolCall, iLoop: CheckLoop, iLang: CheckLang} {
		if Checks[i] != want || checkIndex(want) != i {
			t.Errorf("index %d is %q in Checks, want %q", i, Checks[i], want)
		}
	}
	if len(Checks) != numChecks {
		t.Errorf("%d checks, numChecks %d", len(Checks), numChecks)
	}
}

// refMarker is findMarker from its definition: the earliest angle marker
// in s, else the first other marker in list order; none the prompt holds.
func refMarker(s, prompt string) (string, bool) {
	for i := range len(s) {
		for _, m := range thinkMarkers {
			if m[0] == '<' && strings.HasPrefix(s[i:], m) && !strings.Contains(prompt, m) {
				return m, true
			}
		}
	}
	for _, m := range thinkMarkers {
		if m[0] != '<' && strings.Contains(s, m) && !strings.Contains(prompt, m) {
			return m, true
		}
	}
	return "", false
}

func sameMarker(t *testing.T, s, prompt string) {
	t.Helper()
	m, ok := findMarker(s, prompt)
	if wm, wok := refMarker(s, prompt); m != wm || ok != wok {
		t.Fatalf("findMarker(%.200q, %.100q) = %q %v, the reference %q %v", s, prompt, m, ok, wm, wok)
	}
}

func FuzzFindMarker(f *testing.F) {
	for _, tc := range thinkCases {
		f.Add(tc.text, tc.prompt)
	}
	f.Add("[/THINK] ◁/think▷ [THINK]", "[/THINK]")
	f.Fuzz(func(t *testing.T, s, prompt string) { sameMarker(t, s, prompt) })
}

// TestHugeTextMatchesReference: a text whose n-gram tables pass bigSet
// (made once at their size, filled to three quarters, dropped afterwards)
// gets the reference's measures and verdict, and so does the short text
// checked after it with the same Scratch.
func TestHugeTextMatchesReference(t *testing.T) {
	if testing.Short() {
		t.Skip("a 1.2 MB text against the reference: seconds")
	}
	text := llmsim.Prose(1200 << 10)
	if countWords(text) <= bigSet/2 {
		t.Fatalf("%d words: the tables would not pass bigSet", countWords(text))
	}
	var s Scratch
	for _, tt := range []string{text, proseText} {
		sameLoop(t, tt, &s)
	}
	if cap(s.words) > bigSet || len(s.set.slots) > bigSet {
		t.Errorf("the Scratch keeps %d words and %d slots after a huge text", cap(s.words), len(s.set.slots))
	}
}
