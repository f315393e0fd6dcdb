package quality

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode"

	"tokenmill/lib/jsonl"
)

// realData is ../shared/data/real beside the repository (as CI lays it
// out, ../../../shared/data/real from here), or the nearest shared/data/real
// further up, where the repository is a worktree one level deeper.
var realData = func() string {
	dir := "../../.."
	for range 4 {
		if p := filepath.Join(dir, "shared/data/real"); dirExists(p) {
			return p
		}
		dir = filepath.Join(dir, "..")
	}
	return "../../../shared/data/real"
}()

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// realAnswer is one assistant turn of a real dataset, with the user turn
// it answers and the tools its conversation offers.
type realAnswer struct {
	file, id string
	a        Answer
	tools    Tools
}

// loadRealAnswers reads every assistant turn of every real dataset that
// has answers (mt_bench has none), keyed by file name.
func loadRealAnswers(t testing.TB) map[string][]realAnswer {
	t.Helper()
	files := []string{"fastchat_dummy_conversation.json", "alpaca_en_demo.json", "glaive_toolcall_en_demo.json",
		"v1_sft_demo.jsonl", "ii_0625_style.parquet", "ii_3m_style.parquet"}
	out := map[string][]realAnswer{}
	for _, name := range files {
		path := filepath.Join(realData, name)
		if _, err := os.Stat(path); err != nil {
			t.Skipf("real data not available (%v)", err)
		}
		in := jsonl.NewReader(context.Background(), nil, []string{path}, nil, jsonl.Options{})
		for {
			rec, err := in.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			out[name] = append(out[name], realTurns(t, name, rec.Data)...)
		}
		in.Close()
		if len(out[name]) == 0 {
			t.Fatalf("%s: no answers read", name)
		}
	}
	return out
}

type realTurn struct {
	From, Role, Value string
	Content           json.RawMessage
}

func realTurns(t testing.TB, file string, data []byte) []realAnswer {
	var v struct {
		ID            any        `json:"id"`
		Conversations []realTurn `json:"conversations"`
		Messages      []realTurn `json:"messages"`
		Instruction   string     `json:"instruction"`
		Input         string     `json:"input"`
		Output        *string    `json:"output"`
		Tools         any        `json:"tools"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var tools Tools
	if v.Tools != nil {
		raw, _ := json.Marshal(v.Tools)
		var err error
		if tools, err = parseTools(raw); err != nil {
			t.Fatalf("%s: tools: %v", file, err)
		}
	}
	id, _ := json.Marshal(v.ID)
	if v.Output != nil {
		prompt := v.Instruction
		if strings.TrimSpace(v.Input) != "" {
			prompt += "\n\n" + v.Input
		}
		return []realAnswer{{file: file, id: string(id), a: Answer{Prompt: prompt, Text: *v.Output, Finish: "stop"}}}
	}
	turns := append(v.Conversations, v.Messages...)
	var out []realAnswer
	prompt := ""
	for _, tn := range turns {
		text := tn.Value
		if len(tn.Content) > 0 {
			var parts []struct{ Value, Text string }
			if json.Unmarshal(tn.Content, &parts) == nil {
				for _, p := range parts {
					text += p.Value + p.Text
				}
			} else {
				json.Unmarshal(tn.Content, &text)
			}
		}
		switch tn.From + tn.Role {
		case "human", "user":
			prompt = text
		case "gpt", "assistant":
			out = append(out, realAnswer{file: file, id: string(id), a: Answer{Prompt: prompt, Text: text, Finish: "stop"}, tools: tools})
		case "function_call":
			// A call as glaive writes it: {"name": ..., "arguments": {...}}.
			var call struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			}
			if err := json.Unmarshal([]byte(text), &call); err != nil {
				t.Fatalf("%s: function_call %q: %v", file, text, err)
			}
			out = append(out, realAnswer{file: file, id: string(id), tools: tools,
				a: Answer{Prompt: prompt, Finish: "stop", ToolCalls: []ToolCall{{Name: call.Name, Arguments: call.Arguments}}}})
		}
	}
	return out
}

// TestRealAnswersKept runs the default checks, and lang, on every
// assistant turn of the real datasets: each check must keep at least 99%
// of each dataset, and the loop check's measures are reported one by one,
// as GUIDE.md's "What filter checks" quotes them.
func TestRealAnswersKept(t *testing.T) {
	all := loadRealAnswers(t)
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	c, err := NewChecker(Config{Checks: Checks, Loop: DefaultLoop, Lang: DefaultLang})
	if err != nil {
		t.Fatal(err)
	}
	var s Scratch
	for _, name := range names {
		answers := all[name]
		failed := map[string]int{}
		measures := map[string]int{}
		droppedDefault, droppedPaper := 0, 0
		for _, ra := range answers {
			var dflt bool
			for _, f := range c.All(&ra.a, ra.tools, nil) {
				failed[f.Check]++
				if f.Check != CheckLang {
					dflt = true
				}
				if testing.Verbose() && f.Check != CheckLang {
					t.Logf("%s id %s: %s: %s: %.300q", name, ra.id, f.Check, f.Detail, ra.a.Text)
				}
			}
			if dflt {
				droppedDefault++
			}
			if _, bad := Loop(ra.a.Text, &PaperLoop, &s); bad {
				droppedPaper++
			}
			m := MeasureLoop(ra.a.Text, &s)
			for _, x := range m.Exceeded(&DefaultLoop, len(ra.a.Text)) {
				measures[x]++
			}
		}
		n := len(answers)
		keep := func(k int) float64 { return 100 * float64(n-k) / float64(n) }
		var line []string
		for _, ch := range Checks {
			line = append(line, ch+" "+pct(keep(failed[ch])))
			if keep(failed[ch]) < 99 {
				t.Errorf("%s: check %s keeps %.2f%% of %d answers, want at least 99%%", name, ch, keep(failed[ch]), n)
			}
		}
		var ms []string
		for _, m := range MeasureNames {
			ms = append(ms, m+" "+pct(keep(measures[m])))
		}
		t.Logf("%s: %d answers, default checks keep %s; per check: %s", name, n, pct(keep(droppedDefault)), strings.Join(line, ", "))
		t.Logf("%s: loop measures keep: %s", name, strings.Join(ms, ", "))
		t.Logf("%s: the paper's thresholds on every answer (PaperLoop) would keep %s", name, pct(keep(droppedPaper)))
		if droppedPaper < failed[CheckLoop] {
			t.Errorf("%s: the calibrated loop check drops more (%d) than the paper's thresholds (%d)", name, failed[CheckLoop], droppedPaper)
		}
		if keep(droppedDefault) < 99 {
			t.Errorf("%s: the default checks keep %.2f%%, want at least 99%%", name, keep(droppedDefault))
		}
	}
}

func pct(v float64) string { return fmt.Sprintf("%.2f%%", v) }

// TestLangAccuracy judges a labelled sample: English answers of the real
// datasets, the Chinese ones of v1_sft, and paragraphs in 14 languages
// written for this test (testdata/quality/lang-samples.jsonl). Each
// answer is set against an English prompt and a prompt in its own
// language; the lang check must call the first pair a mismatch exactly
// when the answer is not English, and never the second.
func TestLangAccuracy(t *testing.T) {
	all := loadRealAnswers(t)
	type sample struct{ lang, text string }
	var samples []sample
	cjk := func(s string) bool {
		n := 0
		for _, r := range s {
			if r >= 0x4e00 && r <= 0x9fff {
				n++
			}
		}
		return n >= 20
	}
	for _, name := range []string{"alpaca_en_demo.json", "fastchat_dummy_conversation.json", "v1_sft_demo.jsonl"} {
		seen := map[string]bool{}
		for _, ra := range all[name] {
			text := ra.a.Text
			if seen[text] || len(text) < 200 || strings.Contains(strings.ToLower(ra.a.Prompt), "translat") {
				continue
			}
			seen[text] = true
			switch {
			case cjk(text):
				samples = append(samples, sample{"zh", text})
			case asciiLetters(text) > 0.99 && name != "v1_sft_demo.jsonl":
				samples = append(samples, sample{"en", text})
			}
		}
	}
	b, err := os.ReadFile("../../testdata/quality/lang-samples.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	byLang := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var s struct{ Lang, Text string }
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatal(err)
		}
		samples = append(samples, sample{s.Lang, s.Text})
		byLang[s.Lang] = append(byLang[s.Lang], s.Text)
	}
	for _, s := range samples {
		if s.lang == "en" || s.lang == "zh" {
			byLang[s.lang] = append(byLang[s.lang], s.text)
		}
	}
	enPrompt := "Please explain in a few paragraphs how plants make their food from sunlight, and why this matters for the animals that eat them."
	wrong := map[string]int{}
	count := map[string]int{}
	for i, s := range samples {
		count[s.lang]++
		_, mismatch := Lang(enPrompt, s.text, &DefaultLang)
		same := byLang[s.lang][(i+1)%len(byLang[s.lang])]
		_, selfMismatch := Lang(same, s.text, &DefaultLang)
		if mismatch != (s.lang != "en") || selfMismatch {
			wrong[s.lang]++
			if testing.Verbose() {
				t.Logf("%s: mismatch with English %v, with its own language %v: %.100q", s.lang, mismatch, selfMismatch, s.text)
			}
		}
	}
	bad := 0
	var parts []string
	for _, l := range slices.Sorted(maps.Keys(count)) {
		bad += wrong[l]
		parts = append(parts, fmt.Sprintf("%s %d/%d", l, count[l]-wrong[l], count[l]))
	}
	acc := 100 * float64(len(samples)-bad) / float64(len(samples))
	t.Logf("lang on %d labelled answers: %.1f%% judged right (%s)", len(samples), acc, strings.Join(parts, ", "))
	if acc < 98 {
		t.Errorf("lang judged %.1f%% of the labelled sample right, want at least 98%%", acc)
	}
}

func asciiLetters(s string) float64 {
	var a, l int
	for _, r := range s {
		if unicode.IsLetter(r) {
			l++
			if r < 128 {
				a++
			}
		}
	}
	if l == 0 {
		return 0
	}
	return float64(a) / float64(l)
}
