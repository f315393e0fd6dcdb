package filter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m, "filter") }

// gen builds a single-answer generation record.
func gen(id, text, reasoning, finish string) string {
	out, _ := json.Marshal(map[string]any{"text": text, "reasoning": reasoning, "finish_reason": finish,
		"usage": map[string]int{"prompt_tokens": 10, "completion_tokens": 20}, "sample": 0})
	p, _ := json.Marshal(map[string]any{"id": id, "messages": []map[string]string{{"role": "user", "content": "Explain to a child how green plants make their own food from sunlight."}}})
	return strings.TrimSuffix(string(p), "}") + `,"output":` + string(out) + "}"
}

// conv builds a regenerated conversation: turns are (content, finish) of
// the assistant turns, a tool call turn between them when call is set.
func conv(id string, call string, turns ...[2]string) string {
	msgs := []map[string]any{{"role": "system", "content": "You are helpful."}}
	var ts []map[string]any
	for i, tn := range turns {
		msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("Question %d about the weather in Paris?", i)})
		if i == 0 && call != "" {
			msgs = append(msgs, map[string]any{"role": "assistant", "content": nil, "tool_calls": []map[string]any{
				{"id": "call_1", "type": "function", "function": map[string]string{"name": call, "arguments": `{"city":"Paris"}`}}}})
			ts = append(ts, map[string]any{"message": len(msgs) - 1, "finish_reason": "tool_calls"})
			msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"})
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "content": tn[0]})
		ts = append(ts, map[string]any{"message": len(msgs) - 1, "finish_reason": tn[1]})
	}
	rec := map[string]any{"id": id, "messages": msgs[:2],
		"tools":  []map[string]any{{"type": "function", "function": map[string]string{"name": "get_weather"}}},
		"output": map[string]any{"messages": msgs, "turns": ts, "finish_reason": "stop", "sample": 0}}
	b, _ := json.Marshal(rec)
	return string(b)
}

const goodText = "Plants catch sunlight with their green leaves and use it, with water and air, to make their own food."

var loopText = "Plants make food from light. " + strings.Repeat("They use light to make food. ", 40)

type want struct {
	id     string
	out    bool   // in the fit output
	reason string // else the reject reason ("" for bad input)
	turn   int    // -1: no turn
}

// TestFilterAccounting sends one record of each kind through the binary:
// every input line ends exactly once in the output or the rejects file,
// fit ones byte for byte, unfit ones as they were plus their reason.
func TestFilterAccounting(t *testing.T) {
	lines := []string{
		gen("ok", goodText, "", "stop"),
		gen("cut", goodText, "", "length"),
		gen("empty", "  \n ", "", "stop"),
		gen("thinking", "", "Let me think about leaves.", "stop"),
		gen("residue", "<think>leaves</think>\n\n"+goodText, "", "stop"),
		gen("loop", loopText, "", "stop"),
		conv("conv-ok", "get_weather", [2]string{"It is 18 C and sunny in Paris today.", "stop"}, [2]string{goodText, "stop"}),
		conv("conv-loop", "", [2]string{goodText, "stop"}, [2]string{loopText, "stop"}),
		conv("conv-badtool", "get_wether", [2]string{goodText, "stop"}),
		`{"id":"failed","messages":[{"role":"user","content":"hi"}],"error":{"status":500,"message":"boom","sample":0}}`,
		`{"id":"prompt","messages":[{"role":"user","content":"hi"}]}`,
		`not json`,
		`[1,2]`,
		`{"id":"shape","messages":[],"output":{"messages":[{"role":"user","content":"x"}],"turns":[{"message":0,"finish_reason":"stop"}]}}`,
	}
	wants := []want{
		{"ok", true, "", -1}, {"cut", false, "length", -1}, {"empty", false, "empty", -1},
		{"thinking", false, "reasoning_only", -1}, {"residue", false, "think_residue", -1}, {"loop", false, "loop", -1},
		{"conv-ok", true, "", -1}, {"conv-loop", false, "loop", 1}, {"conv-badtool", false, "tool_call", 0},
		{"failed", true, "", -1}, {"prompt", false, "not_a_generation", -1}, {"", false, "malformed_json", -1},
		{"", false, "not_an_object", -1}, {"shape", false, "bad_turn", -1},
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "gen.jsonl")
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unfit := filepath.Join(dir, "unfit.jsonl")
	r := testbin.Run(t, dir, nil, nil, "filter", "--rejects", unfit, in)
	if r.Code != 3 {
		t.Fatalf("exit %d, want 3 (bad lines)\n%s", r.Code, r.Stderr)
	}
	for _, s := range []string{"filter: read 14, kept 2, dropped 7 (loop 2, empty 1, length 1, reasoning_only 1, think_residue 1, tool_call 1)",
		"passed 1 error records", "rejected 4 (bad_turn 1, malformed_json 1, not_a_generation 1, not_an_object 1)", "gen.jsonl:12: malformed_json"} {
		if !strings.Contains(r.Stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, r.Stderr)
		}
	}
	out := strings.Split(strings.TrimSuffix(string(r.Stdout), "\n"), "\n")
	rejected := readLines(t, unfit)
	if len(out)+len(rejected) != len(lines) {
		t.Fatalf("%d lines out + %d rejected, %d in", len(out), len(rejected), len(lines))
	}
	oi, ri := 0, 0
	for i, w := range wants {
		if w.out {
			if out[oi] != lines[i] {
				t.Errorf("line %d: output %.80q, want the input byte for byte %.80q", i+1, out[oi], lines[i])
			}
			oi++
			continue
		}
		var rec struct {
			ID     string `json:"id"`
			Raw    string `json:"raw"`
			Reject struct {
				Reason string `json:"reason"`
				Detail string `json:"detail"`
				Turn   *int   `json:"turn"`
				File   string `json:"file"`
				Line   int64  `json:"line"`
			} `json:"reject"`
		}
		if err := json.Unmarshal([]byte(rejected[ri]), &rec); err != nil {
			t.Fatalf("reject %d: %v: %s", ri, err, rejected[ri])
		}
		ri++
		if rec.ID != w.id || rec.Reject.Reason != w.reason || rec.Reject.Line != int64(i+1) {
			t.Errorf("line %d: rejected as %+v (id %q), want id %q reason %s", i+1, rec.Reject, rec.ID, w.id, w.reason)
		}
		if (rec.Reject.Turn == nil) != (w.turn < 0) || rec.Reject.Turn != nil && *rec.Reject.Turn != w.turn {
			t.Errorf("line %d: turn %v, want %d", i+1, rec.Reject.Turn, w.turn)
		}
		// An unfit record is the input plus the reject field.
		if w.id != "" && w.reason != "not_a_generation" && w.reason != "bad_turn" {
			cut := strings.LastIndex(rejected[ri-1], `,"reject":`)
			if cut < 0 || rejected[ri-1][:cut]+"}" != lines[i] {
				t.Errorf("line %d: the unfit record is not the input plus reject:\n%s", i+1, rejected[ri-1])
			}
		}
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Split by hand: a line of any length (the huge-answer tests write
	// hundreds of MB) is one line, never silently cut off.
	var out []string
	for len(b) > 0 {
		line, rest, _ := bytes.Cut(b, []byte{'\n'})
		out = append(out, string(line))
		b = rest
	}
	return out
}

func TestFilterCLI(t *testing.T) {
	good := gen("a", goodText, "", "stop") + "\n" + gen("b", goodText, "", "length") + "\n"
	fr := gen("fr", "La photosynthèse est le processus par lequel les plantes transforment la lumière, l'eau et le dioxyde de carbone en sucre et en oxygène.", "", "stop") + "\n"
	tests := []struct {
		name           string
		stdin          string
		env            []string
		args           []string
		code           int
		stdout, stderr []string
		lines          int // lines on stdout, -1: do not count
	}{
		{name: "help shows a real pipeline", args: []string{"--help"}, lines: -1,
			stdout: []string{"filter --rejects gen.unfit.jsonl -o gen.fit.jsonl gen.jsonl", "merge --prompts prompts.jsonl --missing gen.jsonl gen.unfit.jsonl", "TOKENMILL_FILTER_CHECKS", "TOKENMILL_FILTER_LOOP_DUP_NGRAM"}},
		{name: "stdin to stdout", stdin: good, lines: 1, stderr: []string{"read 2, kept 1, dropped 1 (length 1)"}},
		{name: "checks from the environment", stdin: good, env: []string{"TOKENMILL_FILTER_CHECKS=loop"}, lines: 2, stderr: []string{"read 2, kept 2, dropped 0"}},
		{name: "lang is off by default", stdin: fr, lines: 1},
		{name: "lang on", stdin: fr, args: []string{"--checks", "default,lang"}, lines: 0, stderr: []string{"dropped 1 (lang 1)"}},
		{name: "unknown check", args: []string{"--checks", "lenght"}, code: 2, lines: 0, stderr: []string{"unknown check", "--help"}},
		{name: "bad threshold", args: []string{"--loop-dup-ngram", "4=0.2"}, code: 2, lines: 0, stderr: []string{"--loop-dup-ngram"}},
		{name: "rejects on stdout refused", args: []string{"--rejects", "-"}, code: 2, lines: 0},
		{name: "missing file", args: []string{"no/such.jsonl"}, code: 2, lines: 0, stderr: []string{"cannot read no/such.jsonl: no such file", "--help"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testbin.Run(t, t.TempDir(), strings.NewReader(tt.stdin), tt.env, "filter", tt.args...)
			if r.Code != tt.code {
				t.Fatalf("exit %d, want %d\n%s", r.Code, tt.code, r.Stderr)
			}
			for _, s := range tt.stdout {
				if !strings.Contains(string(r.Stdout), s) {
					t.Errorf("stdout lacks %q", s)
				}
			}
			for _, s := range tt.stderr {
				if !strings.Contains(r.Stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, r.Stderr)
				}
			}
			if n := bytes.Count(r.Stdout, []byte("\n")); tt.lines >= 0 && n != tt.lines {
				t.Errorf("%d lines out, want %d", n, tt.lines)
			}
		})
	}
}

// TestFilterFiles: -o and --rejects appear whole, only at the end, are
// refused when they exist unless --force or when they are an input, and a
// compressed input is read.
func TestFilterFiles(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 3000 {
		text, finish := goodText, "stop"
		if i%10 == 0 {
			text = loopText
		}
		if i%7 == 0 {
			finish = "length"
		}
		b.WriteString(gen(fmt.Sprint(i), text, "", finish) + "\n")
	}
	in := filepath.Join(dir, "gen.jsonl")
	os.WriteFile(in, []byte(b.String()), 0o644)
	fit, unfit := filepath.Join(dir, "fit.jsonl.zst"), filepath.Join(dir, "unfit.jsonl")
	r := testbin.Run(t, dir, nil, nil, "filter", "--workers", "3", "-o", fit, "--rejects", unfit, in)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	// i%7==0 are length (429), else i%10==0 loop (300 - 43 with both = 257).
	if !strings.Contains(r.Stderr, "read 3000, kept 2314, dropped 686 (length 429, loop 257)") {
		t.Errorf("summary: %s", r.Stderr)
	}
	// Reading the compressed output back: the fit records in input order.
	r2 := testbin.Run(t, dir, nil, nil, "filter", "--checks", "empty", fit)
	want := 0
	for _, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		if !strings.Contains(l, `"length"`) && !strings.Contains(l, "They use light") {
			if !bytes.Contains(r2.Stdout, []byte(l+"\n")) {
				t.Fatalf("fit record missing from %s: %.80s", fit, l)
			}
			want++
		}
	}
	if want != 2314 || bytes.Count(r2.Stdout, []byte("\n")) != want {
		t.Errorf("%d fit records read back, want %d", bytes.Count(r2.Stdout, []byte("\n")), want)
	}
	if n := len(readLines(t, unfit)); n != 686 {
		t.Errorf("%d unfit records, want 686", n)
	}
	r = testbin.Run(t, dir, nil, nil, "filter", "-o", fit, in)
	if r.Code != 2 || !strings.Contains(r.Stderr, "already exists: pass --force") { // the one replace rule: a usage error
		t.Errorf("an existing -o was not refused: exit %d %s", r.Code, r.Stderr)
	}
	if r := testbin.Run(t, dir, nil, nil, "filter", "--force", "-o", fit, "--rejects", unfit, in); r.Code != 0 {
		t.Errorf("--force: exit %d %s", r.Code, r.Stderr)
	}
	// An output that is an input, under its name or through a link, is
	// refused before anything is written; the input is left as it was.
	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink(in, link); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(in)
	for _, args := range [][]string{{"--force", "-o", in, in}, {"--force", "--rejects", link, in}, {"-o", link, "--force", in}} {
		r := testbin.Run(t, dir, nil, nil, "filter", args...)
		if r.Code != 2 || !strings.Contains(r.Stderr, "is the same file as input") {
			t.Errorf("%q: exit %d, want 2 naming both:\n%s", args, r.Code, r.Stderr)
		}
		if after, _ := os.ReadFile(in); !bytes.Equal(after, before) {
			t.Fatalf("%q changed the input", args)
		}
	}
	// Filtering the unfit records again replaces their reject field.
	again := filepath.Join(dir, "again.jsonl")
	if r := testbin.Run(t, dir, nil, nil, "filter", "--rejects", again, unfit); r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	for _, l := range readLines(t, again) {
		if strings.Count(l, `"reject":`) != 1 {
			t.Fatalf("a record with %d reject fields: %.200s", strings.Count(l, `"reject":`), l)
		}
	}
}

// TestFilterInterrupt: SIGINT while reading a quiet stdin exits 130 with
// no -o file put in place.
func TestFilterInterrupt(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "fit.jsonl")
	p := testbin.Start(t, "filter", "-o", out, "--progress", "20ms")
	fmt.Fprintln(p.Stdin, gen("a", goodText, "", "stop"))
	// A progress line says the run has begun, its SIGINT handler set: a
	// signal before (a loaded machine starting the binary slowly) would
	// kill it outright.
	p.WaitFor(t, 20*time.Second, "^filter: read ")
	p.Signal(t, syscall.SIGINT)
	r := p.Wait(t, 10*time.Second)
	if r.Code != 130 {
		t.Fatalf("exit %d, want 130: %s", r.Code, r.Stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("%s was put in place after an interrupt", out)
	}
}

// TestPythonTwin: pipelines/bench/filter_gopher.py, the benchmark's
// Python version of the default checks, keeps exactly the records filter
// keeps, so the two are compared doing the same work.
func TestPythonTwin(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "gen.jsonl")
	data := benchRecords(4 << 20)
	extra := []string{gen("cjk", strings.Repeat("我不知道。", 40), "", "stop"), gen("residue", "[THINK]x[/THINK] ok", "", "stop"),
		conv("conv", "get_weather", [2]string{goodText, "stop"}, [2]string{loopText, "stop"}), gen("short", "ok ok ok ok", "", "stop")}
	data = append(data, []byte(strings.Join(extra, "\n")+"\n")...)
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := testbin.Run(t, dir, nil, nil, "filter", in)
	p := testbin.Exec(t, exec.Command(py, "../../pipelines/bench/filter_gopher.py", in))
	if r.Code != 0 || p.Code != 0 {
		t.Fatalf("filter exit %d, python exit %d: %s %s", r.Code, p.Code, r.Stderr, p.Stderr)
	}
	if !bytes.Equal(r.Stdout, p.Stdout) {
		t.Fatalf("filter kept %d records, filter_gopher.py %d\n%s%s", bytes.Count(r.Stdout, []byte("\n")), bytes.Count(p.Stdout, []byte("\n")), r.Stderr, p.Stderr)
	}
	want, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(r.Stderr), "filter: "), "), ")
	if got := strings.TrimPrefix(strings.TrimSpace(p.Stderr), "filter_gopher.py: "); !strings.HasPrefix(got, want+"), rejected 0") {
		t.Errorf("summaries differ:\n%s\n%s", got, want)
	}
}

// armGen is gen with the answer's arm (infer --mix).
func armGen(id, arm, text string) string {
	return strings.TrimSuffix(gen(id, text, "", "stop"), "}}") + `,"arm":"` + arm + `"}}`
}

// TestFilterReasoningModes: --reasoning per run and per arm, through the
// binary. With the parser off for the thinking arm only, its answers open
// with a think block (fit when well formed), while markers in the other
// arm's answers are residue.
func TestFilterReasoningModes(t *testing.T) {
	block := "<think>\nLeaves hold chlorophyll, which catches light.\n</think>\n\n"
	lines := []string{
		armGen("t-ok", "think", block+goodText),
		armGen("t-noblock", "think", goodText),
		armGen("t-open", "think", "<think>\nLeaves hold chlorophyll"),
		armGen("t-empty", "think", "<think>\n\n</think>\n\n"+goodText),
		armGen("t-only", "think", block),
		armGen("n-ok", "no_think", goodText),
		armGen("n-residue", "no_think", block+goodText),
		gen("plain", goodText, "", "stop"),
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "gen.jsonl")
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		mode    string
		kept    []string
		reasons map[string]string
	}{
		{"parsed", []string{"t-noblock", "n-ok", "plain"}, map[string]string{"t-ok": "think_residue", "t-open": "think_residue", "t-empty": "think_residue",
			"t-only": "think_residue", "n-residue": "think_residue"}},
		{"parsed,think=inline", []string{"t-ok", "n-ok", "plain"}, map[string]string{"t-noblock": "think_block", "t-open": "think_block", "t-empty": "think_block",
			"t-only": "reasoning_only", "n-residue": "think_residue"}},
		{"inline", []string{"t-ok", "n-residue"}, map[string]string{"t-noblock": "think_block", "t-open": "think_block", "t-empty": "think_block",
			"t-only": "reasoning_only", "n-ok": "think_block", "plain": "think_block"}},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			unfit := filepath.Join(t.TempDir(), "unfit.jsonl")
			r := testbin.Run(t, dir, nil, nil, "filter", "--reasoning", tt.mode, "--rejects", unfit, in)
			if r.Code != 0 {
				t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
			}
			var kept []string
			for _, l := range strings.Split(strings.TrimSpace(string(r.Stdout)), "\n") {
				var rec struct{ ID string }
				json.Unmarshal([]byte(l), &rec)
				kept = append(kept, rec.ID)
			}
			if strings.Join(kept, ",") != strings.Join(tt.kept, ",") {
				t.Errorf("kept %v, want %v", kept, tt.kept)
			}
			got := map[string]string{}
			for _, l := range readLines(t, unfit) {
				var rec struct {
					ID     string
					Reject struct{ Reason string }
				}
				json.Unmarshal([]byte(l), &rec)
				got[rec.ID] = rec.Reject.Reason
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.reasons) {
				t.Errorf("rejected %v, want %v", got, tt.reasons)
			}
			if len(kept)+len(got) != len(lines) {
				t.Errorf("%d kept + %d rejected of %d", len(kept), len(got), len(lines))
			}
		})
	}
	r := testbin.Run(t, dir, nil, nil, "filter", "--reasoning", "raw", in)
	if r.Code != 2 || !strings.Contains(r.Stderr, `"raw": want parsed or inline`) {
		t.Errorf("--reasoning raw: exit %d\n%s", r.Code, r.Stderr)
	}
}
