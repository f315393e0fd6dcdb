package infer

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/llmsim"
	"tokenmill/lib/mix"
	"tokenmill/lib/record"
)

// testMix is three arms: Qwen3-style thinking on and off, and a high
// reasoning effort.
const testMix = `arms:
  - name: think
    weight: 5
    params:
      chat_template_kwargs: {enable_thinking: true}
      temperature: 0.6
      top_p: 0.95
      max_tokens: 20000
  - name: no_think
    weight: 3
    params:
      chat_template_kwargs: {enable_thinking: false}
      temperature: 0.7
      top_p: 0.8
      stop: ["###"]
  - name: effort_high
    weight: 2
    params: {reasoning_effort: high, max_tokens: 30000}
`

// wantSent is what each arm's requests send of its settings (after
// --temperature 1 and --max-tokens 4096 under them), for a record without
// params.
var wantSent = map[string]string{
	"think":       `{"chat_template_kwargs":{"enable_thinking":true},"max_tokens":20000,"temperature":0.6,"top_p":0.95}`,
	"no_think":    `{"chat_template_kwargs":{"enable_thinking":false},"stop":["###"],"temperature":0.7,"top_p":0.8}`,
	"effort_high": `{"max_tokens":30000,"reasoning_effort":"high"}`,
}

func writeMix(t *testing.T, dir, text string) (string, *mix.Mix) {
	t.Helper()
	path := filepath.Join(dir, "mix.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := mix.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, m
}

// TestMixReachesTheServer: every request carries its arm's settings over
// the flags (the server's request log shows them), a record's own params
// still win, and every answer records its arm and what was sent; thinking
// arms answer with reasoning, and longer.
func TestMixReachesTheServer(t *testing.T) {
	var reqlog lockedBuffer
	const n, samples = 120, 2
	s := newSetup(t, llmsim.Config{Instant: true, Reasoning: true, RequestLog: &reqlog}, 2, promptSet{n: n, extra: func(i int) string {
		if i%10 == 3 {
			return `,"params":{"temperature":0.1,"max_tokens":null}`
		}
		return ""
	}})
	path, m := writeMix(t, s.dir, testMix)
	res := runWant(t, 0, s.args("--mix", path, "--seed", "5", "--samples", "2", "--temperature", "1", "--max-tokens", "4096")...)
	acc := s.check(t, samples)
	s.fleet.Close()

	// Each answer: its arm is the mixture's for (id, sample, --seed).
	perArm := map[string]int{}
	tokens := map[string]int{}
	reasoned := map[string]int{}
	for key, g := range acc.outputs {
		o := g.Output
		want := m.Arms[m.Pick(5, g.ID.Text, o.Sample)].Name
		if o.Arm != want {
			t.Fatalf("%s: arm %q, want %q", key, o.Arm, want)
		}
		sent := wantSent[want]
		if strings.Contains(s.lines[g.ID.Text], `"params"`) {
			// The record's temperature wins; its null removes max_tokens.
			sent = map[string]string{
				"think":       `{"chat_template_kwargs":{"enable_thinking":true},"temperature":0.1,"top_p":0.95}`,
				"no_think":    `{"chat_template_kwargs":{"enable_thinking":false},"stop":["###"],"temperature":0.1,"top_p":0.8}`,
				"effort_high": `{"reasoning_effort":"high"}`}[want]
		}
		if string(o.ArmParams) != sent {
			t.Errorf("%s (%s): arm_params %s, want %s", key, want, o.ArmParams, sent)
		}
		perArm[want]++
		tokens[want] += o.Usage.CompletionTokens
		if o.Reasoning != "" {
			reasoned[want]++
		}
	}
	t.Logf("answers per arm %v, reasoning %v, tokens %v", perArm, reasoned, tokens)
	for _, a := range m.Arms {
		if perArm[a.Name] == 0 {
			t.Fatalf("no answer under arm %s: %v", a.Name, perArm)
		}
	}
	if reasoned["no_think"] != 0 || reasoned["think"] != perArm["think"] || reasoned["effort_high"] != perArm["effort_high"] {
		t.Errorf("answers with reasoning per arm %v of %v: thinking arms reason, no_think does not", reasoned, perArm)
	}
	mean := func(arm string) float64 { return float64(tokens[arm]) / float64(perArm[arm]) }
	if !(mean("effort_high") > mean("think") && mean("think") > 1.5*mean("no_think")) {
		t.Errorf("mean answer tokens: effort_high %.0f, think %.0f, no_think %.0f: thinking answers longer, more with more effort",
			mean("effort_high"), mean("think"), mean("no_think"))
	}
	wantLine := fmt.Sprintf("arms: think %d answers (%s tokens); no_think %d answers", perArm["think"], thousands(tokens["think"]), perArm["no_think"])
	if !strings.Contains(res.stderr, wantLine) {
		t.Errorf("summary lacks %q:\n%s", wantLine, res.stderr)
	}
	checkArmsSent(t, reqlog.String(), m, s.lines, n*samples)
}

// checkArmsSent checks that the server saw each arm's settings in every
// request of the log: the settings of the arm the mixture picks for the
// request's (id, sample), the record's params over them, and answers
// requests in all (the run's --seed is 5).
func checkArmsSent(t *testing.T, reqlog string, m *mix.Mix, lines map[string]string, answers int) {
	t.Helper()
	type body struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
		Seed      *int64          `json:"seed"`
		Kwargs    json.RawMessage `json:"chat_template_kwargs"`
		Effort    *string         `json:"reasoning_effort"`
		Temp      *float64        `json:"temperature"`
		TopP      *float64        `json:"top_p"`
		MaxTokens *int            `json:"max_tokens"`
		Stop      []string        `json:"stop"`
	}
	byUser := map[string]string{}
	for id, line := range lines {
		var p struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		json.Unmarshal([]byte(line), &p)
		byUser[p.Messages[1].Content] = id
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(reqlog))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l struct {
			Body body `json:"body"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		b := l.Body
		id := byUser[b.Messages[len(b.Messages)-1].Content]
		if id == "" || b.Seed == nil {
			t.Fatalf("a request the test cannot place: %s", sc.Text())
		}
		sample := int(*b.Seed - 5)
		arm := m.Arms[m.Pick(5, id, sample)].Name
		seen[fmt.Sprintf("%s/%d", id, sample)] = true
		got := fmt.Sprintf("kwargs=%s effort=%v temp=%v top_p=%v max=%v stop=%v", b.Kwargs, deref(b.Effort), deref(b.Temp), deref(b.TopP), deref(b.MaxTokens), b.Stop)
		want := map[string]string{
			"think":       `kwargs={"enable_thinking":true} effort=<nil> temp=0.6 top_p=0.95 max=20000 stop=[]`,
			"no_think":    `kwargs={"enable_thinking":false} effort=<nil> temp=0.7 top_p=0.8 max=4096 stop=[###]`,
			"effort_high": `kwargs= effort=high temp=1 top_p=<nil> max=30000 stop=[]`,
		}[arm]
		if strings.Contains(lines[id], `"params"`) {
			want = map[string]string{
				"think":       `kwargs={"enable_thinking":true} effort=<nil> temp=0.1 top_p=0.95 max=<nil> stop=[]`,
				"no_think":    `kwargs={"enable_thinking":false} effort=<nil> temp=0.1 top_p=0.8 max=<nil> stop=[###]`,
				"effort_high": `kwargs= effort=high temp=0.1 top_p=<nil> max=<nil> stop=[]`,
			}[arm]
		}
		if got != want {
			t.Errorf("%s/%d (%s) was sent %s, want %s", id, sample, arm, got, want)
		}
	}
	if len(seen) != answers {
		t.Errorf("the request log places %d answers, want %d", len(seen), answers)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// armsOf maps each answer of path ("id/sample") to its arm.
func armsOf(t *testing.T, path string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, g := range readRecords(t, path) {
		key := fmt.Sprintf("%s/%d", g.ID.Text, g.Output.Sample)
		if _, dup := out[key]; dup {
			t.Fatalf("%s: %s twice", path, key)
		}
		out[key] = g.Output.Arm
	}
	return out
}

// TestMixIsStable: the arms are the same in a run with 2 requests in
// flight and one with 64, after a resume from half the output and a cut
// last line, and after --append; a resume under another seed, another
// mixture or none is refused before anything is written.
func TestMixIsStable(t *testing.T) {
	s := newSetup(t, llmsim.Config{Instant: true}, 2, promptSet{n: 200})
	path, m := writeMix(t, s.dir, testMix)
	runWant(t, 0, s.args("--mix", path, "--seed", "3", "--samples", "2", "--concurrency", "2")...)
	first := armsOf(t, s.out)
	if len(first) != 400 {
		t.Fatalf("%d answers, want 400", len(first))
	}
	for key, arm := range first {
		id, sample, _ := strings.Cut(key, "/")
		if want := m.Arms[m.Pick(3, id, int(sample[0]-'0'))].Name; arm != want {
			t.Fatalf("%s: arm %s, the mixture gives %s", key, arm, want)
		}
	}
	same := func(what, path string) {
		t.Helper()
		got := armsOf(t, path)
		if len(got) != len(first) {
			t.Fatalf("%s: %d answers, want %d", what, len(got), len(first))
		}
		for key, arm := range first {
			if got[key] != arm {
				t.Fatalf("%s: %s got arm %q, the first run %q", what, key, got[key], arm)
			}
		}
	}

	wide := filepath.Join(s.dir, "wide.jsonl")
	runWant(t, 0, "-o", wide, s.in, "-e", endpointsFlag(s.fleet.URLs()), "--mix", path, "--seed", "3", "--samples", "2", "--concurrency", "64", "--progress", "0")
	same("64 in flight", wide)

	// Half the output and a partial line, as a kill leaves it: --resume.
	data, _ := os.ReadFile(s.out)
	lines := bytes.SplitAfter(data, []byte("\n"))
	half := append(bytes.Join(lines[:200], nil), lines[200][:40]...)
	resumed := filepath.Join(s.dir, "resumed.jsonl")
	os.WriteFile(resumed, half, 0o644)
	res := runWant(t, 0, "-o", resumed, s.in, "-e", endpointsFlag(s.fleet.URLs()), "--mix", path, "--seed", "3", "--samples", "2", "--resume", "--progress", "0")
	if !strings.Contains(res.stderr, "200 answers already done") {
		t.Errorf("resume summary:\n%s", res.stderr)
	}
	same("resumed", resumed)

	// --append answers every prompt again, under the same arms.
	appended := filepath.Join(s.dir, "appended.jsonl")
	os.WriteFile(appended, bytes.Join(lines[:100], nil), 0o644)
	runWant(t, 0, "-o", appended, s.in, "-e", endpointsFlag(s.fleet.URLs()), "--mix", path, "--seed", "3", "--samples", "2", "--append", "--progress", "0")
	for _, g := range readRecords(t, appended) {
		key := fmt.Sprintf("%s/%d", g.ID.Text, g.Output.Sample)
		if g.Output.Arm != first[key] {
			t.Fatalf("appended: %s under %q, the first run %q", key, g.Output.Arm, first[key])
		}
	}

	// Continuing under other arms is refused, the file untouched.
	os.WriteFile(resumed, half, 0o644)
	other, _ := writeMix(t, t.TempDir(), "arms:\n  - name: think\n  - name: no_think\n")
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"another seed", []string{"--mix", path, "--seed", "4"}, `answers asked under other arms than this run gives them (id "p`},
		{"another mixture", []string{"--mix", other, "--seed", "3"}, "continue it with the --mix and --seed of the run that wrote them"},
		{"no mixture", []string{"--seed", "3"}, `in the file, no arm now): continue it with the --mix (and --seed)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"-o", resumed, s.in, "-e", endpointsFlag(s.fleet.URLs()), "--samples", "2", "--resume", "--progress", "0"}, tt.args...)
			res := runWant(t, 2, args...)
			if !strings.Contains(res.stderr, tt.want) {
				t.Errorf("stderr lacks %q:\n%s", tt.want, res.stderr)
			}
			// The partial last line is cut (as for any resume); nothing else changes.
			if got, _ := os.ReadFile(resumed); !bytes.Equal(got, half[:len(half)-40]) {
				t.Errorf("the refused run changed %s", resumed)
			}
		})
	}
}

// TestMixUsage: a mixture that cannot be read (missing, malformed, a
// device that never ends) is a usage error, before anything is written.
func TestMixUsage(t *testing.T) {
	s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 3})
	bad, _ := os.Create(filepath.Join(s.dir, "bad.yaml"))
	bad.WriteString("arms:\n  - name: a\n    params: {seed: 1}\n")
	bad.Close()
	for _, tt := range []struct{ file, want string }{
		{filepath.Join(s.dir, "none.yaml"), "--mix " + filepath.Join(s.dir, "none.yaml") + ": open"},
		{bad.Name(), `"seed" is --seed's`},
		{"/dev/zero", "--mix /dev/zero: larger than 1024 KiB"},
	} {
		res := runWant(t, 2, s.args("--mix", tt.file)...)
		if !strings.Contains(res.stderr, tt.want) {
			t.Errorf("stderr lacks %q:\n%s", tt.want, res.stderr)
		}
		if _, err := os.Stat(s.out); err == nil {
			t.Errorf("a refused run wrote %s", s.out)
		}
	}
}

// TestMixRegenerate: with --regenerate every turn of a conversation is
// asked under the conversation's arm, and its record carries it.
func TestMixRegenerate(t *testing.T) {
	var reqlog lockedBuffer
	s := newSetup(t, llmsim.Config{Instant: true, RequestLog: &reqlog}, 1, promptSet{})
	// Two user turns each, with the dataset's answers to regenerate.
	var b strings.Builder
	for i := 0; i < 30; i++ {
		fmt.Fprintf(&b, `{"id":"c%02d","messages":[{"role":"user","content":"First question %d?"},{"role":"assistant","content":"old"},{"role":"user","content":"Second question %d?"},{"role":"assistant","content":"old"}]}`+"\n", i, i, i)
	}
	in := filepath.Join(s.dir, "convs.jsonl")
	os.WriteFile(in, []byte(b.String()), 0o644)
	path, m := writeMix(t, s.dir, testMix)
	runWant(t, 0, "-o", s.out, in, "-e", endpointsFlag(s.fleet.URLs()), "--regenerate", "--mix", path, "--progress", "0")
	s.fleet.Close()
	arms := map[string]string{}
	for _, g := range readRecords(t, s.out) {
		want := m.Arms[m.Pick(0, g.ID.Text, 0)].Name
		var o struct {
			Arm       string          `json:"arm"`
			ArmParams json.RawMessage `json:"arm_params"`
			Turns     []struct{}      `json:"turns"`
		}
		v, _ := record.FieldValue([]byte(g.raw), "output")
		json.Unmarshal(v, &o)
		if o.Arm != want || string(o.ArmParams) != wantSent[want] || len(o.Turns) != 2 {
			t.Fatalf("%s: arm %q params %s, %d turns; want %q %s", g.ID.Text, o.Arm, o.ArmParams, len(o.Turns), want, wantSent[want])
		}
		arms[g.ID.Text] = want
	}
	if len(arms) != 30 {
		t.Fatalf("%d conversations, want 30", len(arms))
	}
	turns := 0
	sc := bufio.NewScanner(strings.NewReader(reqlog.String()))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l struct {
			Body struct {
				Messages []struct{ Content string } `json:"messages"`
				Kwargs   json.RawMessage            `json:"chat_template_kwargs"`
			} `json:"body"`
		}
		json.Unmarshal(sc.Bytes(), &l)
		var i int
		fmt.Sscanf(l.Body.Messages[0].Content, "First question %d?", &i)
		want := map[string]string{"think": `{"enable_thinking":true}`, "no_think": `{"enable_thinking":false}`, "effort_high": ``}[arms[fmt.Sprintf("c%02d", i)]]
		if string(l.Body.Kwargs) != want {
			t.Errorf("c%02d turn with %d messages: kwargs %s, want %s", i, len(l.Body.Messages), l.Body.Kwargs, want)
		}
		turns++
	}
	if turns != 60 {
		t.Errorf("%d turns asked, want 60", turns)
	}
}
