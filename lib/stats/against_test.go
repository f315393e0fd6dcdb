package stats

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"tokenmill/internal/testbin"
)

// againstRecord is one generation record of known make-up: its prompt
// is exactly promptChars characters in the language asked, its answer
// answerChars.
func againstRecord(id, source string, zh bool, promptChars, answerChars int, tools, thinks, calls bool) string {
	text := "Please explain how the water cycle works and why it matters for the weather we have"
	if zh {
		text = "请解释水循环是如何运作的，以及它为什么对天气很重要。"
	}
	text += strings.Repeat(".", promptChars-utf8.RuneCountInString(text))
	rec := map[string]any{"id": id, "source": source, "messages": []map[string]string{{"role": "user", "content": text}}}
	if tools {
		rec["tools"] = []any{map[string]any{"type": "function", "function": map[string]any{"name": "lookup"}}}
	}
	out := map[string]any{"text": strings.Repeat("a", answerChars), "finish_reason": "stop"}
	if thinks {
		out["reasoning"] = "first, the sun"
	}
	if calls {
		out["tool_calls"] = []any{map[string]any{"id": "c1", "type": "function", "function": map[string]any{"name": "lookup", "arguments": "{}"}}}
	}
	rec["output"] = out
	b, _ := json.Marshal(rec)
	return string(b)
}

// againstFiles writes the two files of known make-up:
//
//	inputs (10):   source a 6, b 3, c 1; en 7, zh 3; tools 2; thinking 4; tool calls 1;
//	               prompts 100, 110, ..., 190 characters; answers 10, 20, ..., 100
//	reference (8): source a 2, b 2, d 4; en 4, zh 4; tools 4; thinking 2; tool calls 0;
//	               prompts 145, 155, ..., 215; answers 10, 20, ..., 80
func againstFiles(t *testing.T, dir string) (inputs, reference string) {
	t.Helper()
	var in, ref []string
	srcIn := []string{"a", "a", "a", "a", "a", "a", "b", "b", "b", "c"}
	for i := range 10 {
		in = append(in, againstRecord(fmt.Sprintf("in-%d", i), srcIn[i], i >= 7, 100+10*i, 10+10*i, i < 2, i < 4, i == 0))
	}
	srcRef := []string{"a", "a", "b", "b", "d", "d", "d", "d"}
	for i := range 8 {
		ref = append(ref, againstRecord(fmt.Sprintf("ref-%d", i), srcRef[i], i >= 4, 145+10*i, 10+10*i, i < 4, i < 2, false))
	}
	inputs, reference = filepath.Join(dir, "train.jsonl"), filepath.Join(dir, "served.jsonl")
	for path, lines := range map[string][]string{inputs: in, reference: ref} {
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return inputs, reference
}

// TestAgainst: the distances of two files of known make-up, through the
// binary, as JSON and as text, from a file and from stdin.
func TestAgainst(t *testing.T) {
	dir := t.TempDir()
	inputs, reference := againstFiles(t, dir)
	// Total variation: half the sum of the share differences.
	want := map[string]float64{
		"source":     (math.Abs(0.6-0.25) + math.Abs(0.3-0.25) + math.Abs(0.1-0) + math.Abs(0-0.5)) / 2, // 0.5
		"lang":       (math.Abs(0.7-0.5) + math.Abs(0.3-0.5)) / 2,                                       // 0.2
		"tools":      (math.Abs(0.2-0.5) + math.Abs(0.8-0.5)) / 2,                                       // 0.3
		"thinking":   (math.Abs(0.4-0.25) + math.Abs(0.6-0.75)) / 2,                                     // 0.15
		"tool_calls": (math.Abs(0.1-0) + math.Abs(0.9-1)) / 2,                                           // 0.1
		// Kolmogorov-Smirnov: the prompts' CDFs are furthest apart from
		// 140 to 145 characters (5/10 against 0/8); the answers' at 80
		// (8/10 against 8/8).
		"prompt_chars": 0.5,
		"answer_chars": 0.2,
	}
	for _, stdin := range []bool{false, true} {
		t.Run(fmt.Sprintf("stdin=%v", stdin), func(t *testing.T) {
			args := []string{"--json", "--against", reference, inputs}
			var in *os.File
			if stdin {
				f, err := os.Open(inputs)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				in, args = f, args[:3]
			}
			var r testbin.Result
			if in != nil {
				r = testbin.Run(t, dir, in, nil, "stats", args...)
			} else {
				r = testbin.Run(t, dir, nil, nil, "stats", args...)
			}
			if r.Code != 0 {
				t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
			}
			var doc struct {
				Records int64    `json:"records"`
				Against *Against `json:"against"`
			}
			if err := json.Unmarshal(r.Stdout, &doc); err != nil {
				t.Fatal(err)
			}
			if doc.Records != 10 || doc.Against == nil || doc.Against.Records != 8 || doc.Against.Inputs != 10 {
				t.Fatalf("records %d, against %+v", doc.Records, doc.Against)
			}
			got := map[string]float64{}
			for _, d := range doc.Against.Dimensions {
				if d.Distance == nil {
					t.Errorf("%s: no distance", d.Name)
					continue
				}
				got[d.Name] = *d.Distance
			}
			for name, w := range want {
				if math.Abs(got[name]-w) > 1e-9 {
					t.Errorf("%s: distance %v, want %v", name, got[name], w)
				}
			}
			if m := doc.Against.DifferMost; len(m) < 2 || m[0].Dimension != "source" || m[0].Name != "d" || math.Abs(m[0].Diff+0.5) > 1e-9 ||
				m[1].Name != "a" || math.Abs(m[1].Diff-0.35) > 1e-9 {
				t.Errorf("differ most: %+v", m)
			}
			t.Logf("distances: %v", got)
		})
	}
	r := testbin.Run(t, dir, nil, nil, "stats", "--against", reference, inputs)
	for _, s := range []string{`against \S+served.jsonl: 8 records beside 10 of the inputs`, `(?m)^  source\s+total variation\s+0\.5\s+10\s+8$`,
		`(?m)^  thinking\s+total variation\s+0\.15\s`, `(?m)^  prompt_chars\s+Kolmogorov-Smirnov\s+0\.5\s+10\s+8$`,
		`(?m)^  d\s+0\s+0\.0%\s+4\s+50\.0%\s+-50\.0$`, "differ most: source d -50.0 points, source a \\+35.0 points"} {
		if !regexp.MustCompile(s).Match(r.Stdout) {
			t.Errorf("the table report lacks %s:\n%s", s, r.Stdout)
		}
	}
	// The report itself is the inputs': one pass for the make-up does
	// not change it.
	plain := testbin.Run(t, dir, nil, nil, "stats", inputs)
	if !strings.HasPrefix(string(r.Stdout), string(plain.Stdout[:len(plain.Stdout)-1])) {
		t.Errorf("with --against the report differs before its section")
	}
	// --plot draws each dimension, the records' side beside the reference's.
	if r := testbin.Run(t, dir, nil, nil, "stats", "--against", reference, "--plot", "makeup.svg", inputs); r.Code != 0 {
		t.Fatalf("--plot: exit %d\n%s", r.Code, r.Stderr)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "makeup.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"source (total variation 0.500)", "prompt_chars (Kolmogorov-Smirnov 0.500)", "these records", "--against served.jsonl"} {
		if !strings.Contains(string(svg), s) {
			t.Errorf("the picture lacks %q", s)
		}
	}
	if r := testbin.Run(t, dir, nil, nil, "stats", "--against", filepath.Join(dir, "none.jsonl"), inputs); r.Code != 2 ||
		!strings.Contains(r.Stderr, "none.jsonl: no such file") {
		t.Errorf("a missing reference: exit %d\n%s", r.Code, r.Stderr)
	}
}

func TestDistances(t *testing.T) {
	if tv := TotalVariation(map[string]int64{"x": 1, "y": 1}, map[string]int64{"x": 2, "y": 2}); tv != 0 {
		t.Errorf("same shares: %v", tv)
	}
	if tv := TotalVariation(map[string]int64{"x": 5}, map[string]int64{"y": 3}); tv != 1 {
		t.Errorf("nothing in common: %v", tv)
	}
	if tv := TotalVariation(map[string]int64{"x": 3, "y": 1}, map[string]int64{"x": 1, "y": 1}); math.Abs(tv-0.25) > 1e-12 {
		t.Errorf("0.75/0.25 against 0.5/0.5: %v, want 0.25", tv)
	}
	for _, tc := range []struct {
		a, b []int32
		want float64
	}{
		{[]int32{1, 2, 3}, []int32{1, 2, 3}, 0},
		{[]int32{1, 2}, []int32{3, 4}, 1},
		{[]int32{1, 2, 3, 4}, []int32{3, 4, 5, 6}, 0.5},
		{[]int32{5, 5, 5, 1}, []int32{5}, 0.25},
	} {
		if got := KolmogorovSmirnov(tc.a, tc.b); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("KS(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
