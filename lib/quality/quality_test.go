package quality

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"tokenmill/internal/llmsim"
	"tokenmill/lib/record"
)

// prose is ordinary text for the synthetic loops to grow out of.
const proseText = "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen. " +
	"It happens in the chloroplasts of leaves, where chlorophyll absorbs red and blue light. " +
	"The sugar feeds the plant, and the oxygen is released into the air through small pores.\n\n"

func repeat(s string, n int) string { return strings.Repeat(s, n) }

// loopCases are degenerate answers the loop check must catch, and
// ordinary ones it must keep.
var loopCases = []struct {
	name string
	text string
	loop bool
}{
	{"a sentence repeated", proseText + repeat("I hope this helps you understand the process better. ", 40), true},
	{"a sentence repeated, cut mid-copy", proseText + repeat("The answer is yes, and ", 60) + "the ans", true},
	{"a token cycle", "Sure. " + repeat("the the the the ", 60), true},
	{"a short token cycle in CJK", "好的。" + repeat("我不知道。", 40), true},
	{"a list that repeats its last item", "Here are some tips:\n- Sleep eight hours\n- Drink water\n" + repeat("- Take a short walk after lunch\n", 30), true},
	{"a numbered list that repeats its last item", "Steps:\n" + func() string {
		var b strings.Builder
		for i := 1; i <= 40; i++ {
			fmt.Fprintf(&b, "%d. Stir the sauce gently over a low heat\n", i)
		}
		return b.String()
	}(), true},
	{"a code block repeated", "Here is the code:\n\n" + repeat("```python\ndef area(w, h):\n    return w * h\n```\n\n", 12), true},
	{"paragraphs repeated then a new ending", repeat(proseText, 5) + "In short, plants make food from light.", true},
	{"ordinary prose", repeat(strings.ReplaceAll(proseText, "\n\n", " "), 1) + "That is why plants need light to grow.", false},
	{"a markdown table", "| name | type | size |\n| --- | --- | --- |\n| a | int | 4 |\n| b | int | 4 |\n| c | float | 8 |\n| d | float | 8 |\n| e | bool | 1 |\n" + proseText, false},
	{"code with repeated braces", "```go\nfunc main() {\n\tfor i := 0; i < 3; i++ {\n\t\tif i%2 == 0 {\n\t\t\tfmt.Println(i)\n\t\t}\n\t}\n}\n\nfunc f() {\n\tif x {\n\t\treturn\n\t}\n}\n```\n" + proseText, false},
	{"a short answer", "Yes.", false},
	{"empty", "", false},
	{"a song with a chorus", "(Verse 1)\nThe morning light is on the hill\nThe river runs and the air is still\n\n(Chorus)\nSing along, sing along with me\nAcross the valley to the sea\n\n(Verse 2)\nThe evening falls and the stars come out\nThe owls call and the children shout\n\n(Chorus)\nSing along, sing along with me\nAcross the valley to the sea\n", false},
	{"an ellipsis ending", proseText + "And so on...", false},
}

func TestLoopCaught(t *testing.T) {
	var s Scratch
	for _, tc := range loopCases {
		t.Run(tc.name, func(t *testing.T) {
			detail, bad := Loop(tc.text, &DefaultLoop, &s)
			if bad != tc.loop {
				m := MeasureLoop(tc.text, &s)
				t.Errorf("Loop = %v (%s), want %v; measures %+v", bad, detail, tc.loop, m)
			}
			// The early-stopping check and the full measures agree.
			m := MeasureLoop(tc.text, &s)
			if over := m.Exceeded(&DefaultLoop, len(tc.text)); (len(over) > 0) != bad {
				t.Errorf("MeasureLoop finds %v over, Loop says %v (%s)", over, bad, detail)
			}
		})
	}
}

func TestRepeatedTail(t *testing.T) {
	tests := []struct {
		text                  string
		copies, span, covered int
	}{
		{"abc", 0, 0, 0},
		{"xyz" + repeat("hello ", 5) + "\n\n", 4, 6, 29},
		{"xyz" + repeat("hello ", 5) + "hel", 5, 6, 33},
		{repeat("ab", 10), 10, 2, 20},
		{"just some text with no repetition at its end", 0, 0, 0},
	}
	for _, tt := range tests {
		c, s, cov := repeatedTail(tt.text)
		if c != tt.copies || s != tt.span || cov != tt.covered {
			t.Errorf("repeatedTail(%q) = %d copies of %d covering %d, want %d of %d covering %d", tt.text, c, s, cov, tt.copies, tt.span, tt.covered)
		}
	}
}

func TestMeasuresExact(t *testing.T) {
	var s Scratch
	// 4 lines, one repeating the first: 1/4 of lines, 5 of 24 bytes.
	text := "alpha\nbeta\nalpha\ngamma\n"
	m := MeasureLoop(text, &s)
	if m.DupLines != 0.25 || m.DupLineBytes != 5.0/float64(len(text)) {
		t.Errorf("dup lines %v, bytes %v", m.DupLines, m.DupLineBytes)
	}
	// "a b a b a b": the 2-gram "a b" occurs 3 times, 2 bytes each.
	text = "a b a b a b"
	m = MeasureLoop(text, &s)
	if want := 3 * 2.0 / float64(len(text)); m.TopNgram[2] != want {
		t.Errorf("top 2-gram %v, want %v", m.TopNgram[2], want)
	}
	// Ten distinct words, then the first five again: the repeat's 5 words
	// (bytes 1 each) are duplicate 5-gram bytes.
	text = "a b c d e f g h i j a b c d e"
	m = MeasureLoop(text, &s)
	if want := 5.0 / float64(len(text)); m.DupNgram[5] != want {
		t.Errorf("dup 5-gram %v, want %v", m.DupNgram[5], want)
	}
	if m.DupNgram[6] != 0 {
		t.Errorf("dup 6-gram %v, want 0", m.DupNgram[6])
	}
	// Paragraphs: the second of three repeats the first.
	text = "one two\n\none two\n\nthree"
	m = MeasureLoop(text, &s)
	if m.DupParagraphs != 1.0/3 || m.DupParagraphBytes != 7.0/float64(len(text)) {
		t.Errorf("dup paragraphs %v, bytes %v", m.DupParagraphs, m.DupParagraphBytes)
	}
}

var thinkCases = []struct {
	prompt, text, reasoning string
	marker                  string
}{
	{"", "The answer is 4.", "", ""},
	{"", "<think>\nLet me add.\n</think>\n\nThe answer is 4.", "", "<think>"},
	{"", "Let me add. 2+2=4.\n</think>\n\nThe answer is 4.", "", "</think>"},
	{"", "The answer is 4.", "Let me add.</think>The answer", "</think>"},
	{"", "<|channel|>analysis<|message|>add them<|end|>", "", "<|channel|>"},
	{"", "◁think▷ add ◁/think▷ 4", "", "◁think▷"},
	{"", "<|begin_of_thought|> add <|end_of_thought|>", "", "<|begin_of_thought|>"},
	{"", "[THINK]add[/THINK]4", "", "[THINK]"},
	{"", "<seed:think>add</seed:think>4", "", "<seed:think>"},
	{"What does the <think> tag mean in DeepSeek-R1?", "The <think> tag opens its reasoning.", "", ""},
	{"", "Use <table> and <tr> in HTML; a < b.", "", ""},
}

func TestThinkResidue(t *testing.T) {
	for _, tc := range thinkCases {
		m, _, found := ThinkResidue(tc.prompt, tc.text, tc.reasoning)
		if m != tc.marker || found != (tc.marker != "") {
			t.Errorf("ThinkResidue(%q, %q, %q) = %q %v, want %q", tc.prompt, tc.text, tc.reasoning, m, found, tc.marker)
		}
	}
}

var tools = Tools{"get_weather": {}, "search": {}}

var toolCases = []struct {
	calls []ToolCall
	bad   bool
}{
	{[]ToolCall{{Name: "get_weather", Arguments: []byte(`"{\"city\":\"Paris\"}"`)}}, false},
	{[]ToolCall{{Name: "get_weather", Arguments: []byte(`{"city":"Paris"}`)}}, false},
	{[]ToolCall{{Name: "get_weather", Arguments: []byte(`"{\"city\":\"Par"`)}}, true},
	{[]ToolCall{{Name: "get_weather", Arguments: []byte(`"not json"`)}}, true},
	{[]ToolCall{{Name: "get_wether", Arguments: []byte(`"{}"`)}}, true},
	{[]ToolCall{{Name: "search", Arguments: []byte(`"{}"`)}, {Name: "book", Arguments: []byte(`"{}"`)}}, true},
}

func TestToolCallProblem(t *testing.T) {
	for _, tc := range toolCases {
		d, bad := ToolCallProblem(tc.calls, tools)
		if bad != tc.bad {
			t.Errorf("ToolCallProblem(%v) = %v (%s), want %v", tc.calls, bad, d, tc.bad)
		}
	}
}

func TestBlank(t *testing.T) {
	for _, tc := range []struct {
		text  string
		json  string
		blank bool
	}{
		{"", `""`, true},
		{" \n\t", `" \n\t"`, true},
		{"\u3000", `"\u3000"`, true},
		{"\u00a0x", `"\u00a0x"`, false},
		{"a", `"a"`, false},
		{"", `null`, true},
		{"\\n", `"\\n"`, false},
	} {
		if tc.json != "null" && Blank(tc.text) != tc.blank {
			t.Errorf("Blank(%q) = %v", tc.text, !tc.blank)
		}
		if BlankJSON([]byte(tc.json)) != tc.blank {
			t.Errorf("BlankJSON(%s) = %v", tc.json, !tc.blank)
		}
	}
}

func TestLang(t *testing.T) {
	en := "Photosynthesis is the process by which plants turn light, water and carbon dioxide into sugar and oxygen."
	fr := "La photosynthèse est le processus par lequel les plantes transforment la lumière, l'eau et le dioxyde de carbone en sucre."
	zh := "光合作用是植物利用阳光、水和二氧化碳制造葡萄糖和氧气的过程。它主要发生在叶片的叶绿体中，是地球上几乎所有生命的能量来源。"
	for _, tc := range []struct {
		prompt, answer string
		bad            bool
	}{
		{en, en, false},
		{en, fr, true},
		{zh, en, true},
		{en, zh, true},
		{zh, zh, false},
		{"hi", fr, false}, // the prompt is too short to judge
		{en, "```python\nprint('bonjour')\n```\n" + en, false}, // code blocks are not prose
	} {
		d, bad := Lang(tc.prompt, tc.answer, &DefaultLang)
		if bad != tc.bad {
			t.Errorf("Lang(%.20q, %.20q) = %v (%s), want %v", tc.prompt, tc.answer, bad, d, tc.bad)
		}
	}
}

// TestCheckerOrder: an answer failing several checks is reported under the
// first in Checks order by First, and under all of them by All.
func TestCheckerOrder(t *testing.T) {
	c, err := NewChecker(Config{Checks: DefaultChecks, Loop: DefaultLoop, Lang: DefaultLang})
	if err != nil {
		t.Fatal(err)
	}
	a := Answer{Text: "<think>" + repeat("so so so so ", 50), Finish: "length"}
	f, ok := c.First(&a, nil)
	if !ok || f.Check != CheckLength {
		t.Errorf("First = %+v %v, want length", f, ok)
	}
	var got []string
	for _, f := range c.All(&a, nil, nil) {
		got = append(got, f.Check)
	}
	if strings.Join(got, ",") != "length,think_residue,loop" {
		t.Errorf("All = %v", got)
	}
	for _, tc := range []struct {
		a    Answer
		want string
	}{
		{Answer{Text: "", Reasoning: "thinking...", Finish: "stop"}, CheckReasoningOnly},
		{Answer{Text: "  \n", Finish: "stop"}, CheckEmpty},
		{Answer{Text: "", Finish: "stop", ToolCalls: []ToolCall{{Name: "search", Arguments: []byte(`"{}"`)}}}, ""},
		{Answer{Text: "", Finish: "stop", ToolCalls: []ToolCall{{Name: "nope", Arguments: []byte(`"{}"`)}}}, CheckToolCall},
	} {
		f, ok := c.First(&tc.a, tools)
		if f.Check != tc.want || ok != (tc.want != "") {
			t.Errorf("First(%+v) = %+v, want %q", tc.a, f, tc.want)
		}
	}
}

func TestParseChecks(t *testing.T) {
	got, err := ParseChecks("loop,default,length")
	if err != nil || strings.Join(got, ",") != strings.Join(DefaultChecks, ",") {
		t.Errorf("ParseChecks = %v %v", got, err)
	}
	if got, _ := ParseChecks("all"); len(got) != len(Checks) {
		t.Errorf("all = %v", got)
	}
	if _, err := ParseChecks("lenght"); err == nil {
		t.Error("an unknown check was accepted")
	}
}

func FuzzLoop(f *testing.F) {
	for _, tc := range loopCases {
		f.Add(tc.text)
	}
	var s Scratch
	f.Fuzz(func(t *testing.T, text string) {
		_, bad := Loop(text, &DefaultLoop, &s)
		m := MeasureLoop(text, &s)
		if over := m.Exceeded(&DefaultLoop, len(text)); (len(over) > 0) != bad {
			t.Fatalf("Loop %v, measures over %v", bad, over)
		}
		for _, v := range append(append([]float64{m.DupLines, m.DupParagraphs, m.DupLineBytes, m.DupParagraphBytes}, m.TopNgram[:]...), m.DupNgram[:]...) {
			if v < 0 || v > 1 {
				t.Fatalf("a fraction out of [0, 1]: %+v", m)
			}
		}
		for n := 6; n <= 10; n++ {
			if m.DupNgram[n] > m.DupNgram[n-1] {
				t.Fatalf("duplicate %d-gram bytes %v above the %d-gram's %v", n, m.DupNgram[n], n-1, m.DupNgram[n-1])
			}
		}
		if m.TailBytes > len(text) || (m.TailCopies > 0 && m.TailSpan*m.TailCopies > m.TailBytes) {
			t.Fatalf("tail %+v of a %d-byte text", m, len(text))
		}
		checkCountWords(t, text)
	})
}

// checkCountWords: countWords (which sizes a long text's buffers) counts
// the words hashWords finds.
func checkCountWords(t *testing.T, text string) {
	t.Helper()
	want := len(strings.FieldsFunc(text, func(r rune) bool { return r < 0x80 && isSpace(byte(r)) }))
	if got := countWords(text); got != want {
		t.Fatalf("countWords(%q) = %d, want %d", text, got, want)
	}
	var s Scratch
	if s.hashWords(text); len(s.words) != want {
		t.Fatalf("hashWords(%q) found %d words, want %d", text, len(s.words), want)
	}
}

// TestCountWords: every separator, runs of them, at every offset of texts
// up to 40 bytes (across the 8-byte words countWords reads).
func TestCountWords(t *testing.T) {
	for _, sep := range []string{" ", "\n", "\t", "\r", "\v", "\f", " \n\t", "\x85", "\u00a0"} {
		for n := 0; n <= 40; n++ {
			base := strings.Repeat("ab", n)[:n]
			for at := 0; at <= n; at++ {
				checkCountWords(t, base[:at]+sep+base[at:])
				checkCountWords(t, sep+base[:at]+sep+sep+base[at:]+sep)
			}
		}
	}
	for _, a := range llmsim.Answers(50, 9) {
		checkCountWords(t, a)
	}
}

func FuzzThinkResidue(f *testing.F) {
	for _, tc := range thinkCases {
		f.Add(tc.prompt, tc.text, tc.reasoning)
	}
	f.Fuzz(func(t *testing.T, prompt, text, reasoning string) {
		m, where, found := ThinkResidue(prompt, text, reasoning)
		if !found {
			return
		}
		in := map[string]string{"answer": text, "reasoning": reasoning}[where]
		if !strings.Contains(in, m) || strings.Contains(prompt, m) {
			t.Fatalf("marker %q reported in the %s %q (prompt %q)", m, where, in, prompt)
		}
	})
}

func FuzzBlankJSON(f *testing.F) {
	for _, s := range []string{`""`, `" \n"`, `"\u3000"`, `"a"`, `"\\n"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		var s string
		if err := jsonUnmarshalString(raw, &s); err != nil {
			return
		}
		if BlankJSON([]byte(raw)) != Blank(s) {
			t.Fatalf("BlankJSON(%s) = %v, Blank(%q) = %v", raw, BlankJSON([]byte(raw)), s, Blank(s))
		}
	})
}

func FuzzToolCallProblem(f *testing.F) {
	for _, tc := range toolCases {
		f.Add(tc.calls[0].Name, string(tc.calls[0].Arguments))
	}
	f.Fuzz(func(t *testing.T, name, args string) {
		ToolCallProblem([]ToolCall{{Name: name, Arguments: []byte(args)}}, tools)
	})
}

// jsonUnmarshalString decodes a JSON string literal (only a string).
func jsonUnmarshalString(raw string, s *string) error {
	if len(raw) < 2 || raw[0] != '"' {
		return fmt.Errorf("not a string")
	}
	return json.Unmarshal([]byte(raw), s)
}

var recordSeeds = []string{
	`{"id":"a","messages":[{"role":"user","content":"hi"}],"output":{"text":"Hello!\n","reasoning":"greet","finish_reason":"stop","sample":0}}`,
	`{"id":"b","prompt":"2+2=","output":{"text":" 4","finish_reason":"length","tool_calls":[{"function":{"name":"calc","arguments":"{\"x\":1}"}}]},"tools":"[{\"name\":\"calc\"}]"}`,
	`{"id":"c","messages":[],"output":{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"r"},{"role":"assistant","content":"done","reasoning_content":"r"}],"turns":[{"message":1,"finish_reason":"tool_calls"},{"message":3,"finish_reason":"stop"}]}}`,
	`{"id":"d","error":{"status":500,"message":"boom"}}`,
	`{"id":"e","messages":[{"role":"user","content":"hi"}]}`,
	`{"id":"f","output":{"text":7}}`,
	`{"id":"g","output":{"messages":[{"role":"user","content":"x"}],"turns":[{"message":5}]}}`,
	`[1,2]`, `{"id":`, `{"output":{"text":"a\ud83d\ude00\u00e9"}}`,
}

func TestRecordParse(t *testing.T) {
	want := []struct {
		reason  string
		answers int
	}{{"", 1}, {"", 1}, {"", 2}, {"", 0}, {"", 0}, {ReasonBadOutput, 0}, {ReasonBadOutput, 0}, {ReasonNotObject, 0}, {ReasonMalformedJSON, 0}, {"", 1}}
	var r GenerationView
	for i, line := range recordSeeds {
		perr := r.Parse([]byte(line))
		reason := ""
		if perr != nil {
			reason = perr.Reason
		}
		if reason != want[i].reason || perr == nil && len(r.Answers) != want[i].answers {
			t.Errorf("%s: reason %q, %d answers; want %q, %d", line, reason, len(r.Answers), want[i].reason, want[i].answers)
		}
	}
	r.Parse([]byte(recordSeeds[2]))
	if a := r.Answers[1]; a.Text != "done" || a.Reasoning != "r" || a.Prompt != "x" || len(r.Answers[0].ToolCalls) != 1 || !r.Conversation {
		t.Errorf("conversation turns %+v", r.Answers)
	}
	r.Parse([]byte(recordSeeds[1]))
	if a := r.Answers[0]; a.Text != " 4" || a.Finish != "length" || a.PromptText() != "2+2=" || len(r.Tools()) != 1 {
		t.Errorf("single answer %+v, tools %v", a, r.Tools())
	}
}

// TestRecordExactKeys: field names match as the record contract spells
// them, exactly; a field spelled otherwise is an unknown field, carried
// and not read (the other stages' decoders match the same way).
func TestRecordExactKeys(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		kind       record.Kind
		reason     string
		text       string // of the one answer, when it parses as a generation
		finish     string
		prompt     string
	}{
		{"the contract's names", `{"messages":[{"role":"user","content":"q"}],"output":{"text":"a","finish_reason":"stop"}}`, record.KindGeneration, "", "a", "stop", "q"},
		{"Output is not output", `{"Output":{"text":"a"}}`, record.KindPrompt, "", "", "", ""},
		{"OUTPUT beside output", `{"OUTPUT":{"text":"b"},"output":{"text":"a"}}`, record.KindGeneration, "", "a", "", ""},
		{"Error is not error", `{"Error":{"status":500}}`, record.KindPrompt, "", "", "", ""},
		{"Text is not text", `{"output":{"Text":"a"}}`, record.KindGeneration, ReasonBadOutput, "", "", ""},
		{"Text beside text", `{"output":{"text":"a","Text":"b"}}`, record.KindGeneration, "", "a", "", ""},
		{"Finish_Reason is not finish_reason", `{"output":{"text":"a","Finish_Reason":"length"}}`, record.KindGeneration, "", "a", "", ""},
		{"Messages is not messages", `{"Messages":[{"role":"user","content":"q"}],"output":{"text":"a"}}`, record.KindGeneration, "", "a", "", ""},
		{"Role and Content are not role and content", `{"messages":[{"Role":"user","Content":"q"}],"output":{"text":"a"}}`, record.KindGeneration, "", "a", "", ""},
		{"Prompt is not prompt", `{"Prompt":"q","output":{"text":"a"}}`, record.KindGeneration, "", "a", "", ""},
		{"an escaped key is its text", `{"out\u0070ut":{"t\u0065xt":"a"}}`, record.KindGeneration, "", "a", "", ""},
		{"the last of repeated keys", `{"output":{"text":"a"},"output":{"text":"b"}}`, record.KindGeneration, "", "b", "", ""},
		{"a later output replaces an earlier one's fields", `{"output":{"text":"a"},"output":{"reasoning":"r"}}`, record.KindGeneration, ReasonBadOutput, "", "", ""},
		{"Turns is not turns", `{"output":{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}],"Turns":[{"message":1}]}}`, record.KindGeneration, "", "", "", ""},
	} {
		var r GenerationView
		perr := r.Parse([]byte(tc.line))
		reason := ""
		if perr != nil {
			reason = perr.Reason
		}
		switch {
		case reason != tc.reason:
			t.Errorf("%s: reason %q, want %q", tc.name, reason, tc.reason)
		case perr != nil:
		case r.Kind != tc.kind:
			t.Errorf("%s: kind %v, want %v", tc.name, r.Kind, tc.kind)
		case tc.kind == record.KindGeneration && !r.Conversation && (len(r.Answers) != 1 || r.Answers[0].Text != tc.text || r.Answers[0].Finish != tc.finish || r.Answers[0].PromptText() != tc.prompt):
			t.Errorf("%s: answers %+v, want text %q, prompt %q", tc.name, r.Answers, tc.text, tc.prompt)
		case r.Conversation && len(r.Answers) != 0:
			t.Errorf("%s: %d answers from turns spelled Turns", tc.name, len(r.Answers))
		}
	}
	// Tool calls and tools: Function and Name are not function and name.
	var r GenerationView
	line := `{"tools":[{"type":"function","Function":{"name":"f"}}],"output":{"text":"","tool_calls":[{"function":{"Name":"f","arguments":"{}"}}]}}`
	if perr := r.Parse([]byte(line)); perr != nil || len(r.Answers) != 1 || len(r.Answers[0].ToolCalls) != 1 {
		t.Fatalf("Parse: %v, %+v", perr, r.Answers)
	}
	if c := r.Answers[0].ToolCalls[0]; c.Name != "" || len(r.Tools()) != 0 {
		t.Errorf("call named %q, tools %v: read through miscased names", c.Name, r.Tools())
	}
}

// FuzzRecordParse: any line parses or is rejected with a reason, without
// a panic, and a line that parses as a generation is valid JSON.
func FuzzRecordParse(f *testing.F) {
	for _, s := range recordSeeds {
		f.Add(s)
	}
	c, _ := NewChecker(Config{Checks: Checks, Loop: DefaultLoop, Lang: DefaultLang})
	var r GenerationView
	f.Fuzz(func(t *testing.T, line string) {
		perr := r.Parse([]byte(line))
		if perr != nil {
			if perr.Reason == "" {
				t.Fatalf("a parse error without a reason: %v", perr)
			}
			return
		}
		if !json.Valid([]byte(line)) {
			t.Fatalf("%q parsed but is not valid JSON", line)
		}
		for i := range r.Answers {
			c.All(&r.Answers[i], r.Tools(), nil)
		}
	})
}

// TestLoopSkipsOnlyWhatCannotBeOver: the 3-gram pass is skipped (its bound
// is below its threshold) while the 4-gram's bound, larger, is not: a
// repeated 4-gram of long words must still be found.
func TestLoopSkipsOnlyWhatCannotBeOver(t *testing.T) {
	var b strings.Builder
	w := 0
	filler := func(n int) {
		for range n {
			fmt.Fprintf(&b, "w%03d ", w)
			w++
		}
	}
	for range 3 {
		filler(31)
		b.WriteString("aaaaaaaaaa bbbbbbbbbb cccccccccc dddddddddd ")
	}
	filler(3)
	text := strings.TrimSpace(b.String())
	var s Scratch
	m := MeasureLoop(text, &s)
	if m.TopNgram[3] > DefaultLoop.TopNgram[3] || m.TopNgram[4] <= DefaultLoop.TopNgram[4] {
		t.Fatalf("the text does not set the case up: %d bytes, top 3-gram %.3f, top 4-gram %.3f", len(text), m.TopNgram[3], m.TopNgram[4])
	}
	if d, bad := Loop(text, &DefaultLoop, &s); !bad || !strings.HasPrefix(d, "top_4gram") {
		t.Errorf("Loop = %v %q, want top_4gram", bad, d)
	}
}

func TestCharsJSON(t *testing.T) {
	tests := []struct {
		literal string // the inside of a JSON string
		want    int
	}{
		{``, 0},
		{`abc`, 3},
		{`héllo`, 5},
		{`日本語`, 3},
		{`😀`, 1},
		{`\n\t\"\\\/`, 5},
		{`\u00e9`, 1},
		{`\ud83d\ude00`, 1},               // a surrogate pair is one character
		{`\ud83d`, 1},                     // a lone surrogate decodes to U+FFFD
		{`\ud83d\u0041`, 2},               // high surrogate, then an ordinary escape
		{`\ud83dx`, 2},                    // high surrogate, then a letter
		{`\ude00\ud83d`, 2},               // low before high: two replacements
		{"a\xffb", 3},                     // an invalid byte counts as one
		{"\xe6\x97", 2},                   // a cut-off sequence: one per byte
		{`x\u003cb\u003e\u0026\u0001`, 6}, // HTML escapes as encoding/json writes them
	}
	for _, tt := range tests {
		if got := CharsJSON([]byte(tt.literal)); got != tt.want {
			t.Errorf("CharsJSON(%q) = %d, want %d", tt.literal, got, tt.want)
		}
		// The standard decoder agrees.
		var s string
		if err := json.Unmarshal([]byte(`"`+tt.literal+`"`), &s); err != nil {
			t.Fatalf("%q: %v", tt.literal, err)
		}
		if n := utf8.RuneCountInString(s); n != tt.want {
			t.Errorf("%q decodes to %d characters, table says %d", tt.literal, n, tt.want)
		}
	}
}
