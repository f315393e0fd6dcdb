package infer

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
	"tokenmill/lib/record"
)

// startFleet starts an in-process simulated fleet, closed with the test.
func startFleet(t testing.TB, cfg llmsim.Config, n int) *llmsim.Fleet {
	t.Helper()
	if cfg.Seed == 0 {
		cfg.Seed = 7
	}
	f, err := llmsim.Start(context.Background(), cfg, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// endpointsFlag is the --endpoints value for a fleet's URLs.
func endpointsFlag(urls []string) string { return strings.Join(urls, ",") }

// promptSet describes test input: n records with ids p00000..., chat or
// completion style.
type promptSet struct {
	n          int
	completion bool // "prompt" text instead of "messages"
	extra      func(i int) string
}

// write writes the prompt records to dir/name and returns the path and
// the lines by id.
func (ps promptSet) write(t testing.TB, dir, name string) (string, map[string]string) {
	t.Helper()
	var b bytes.Buffer
	lines := make(map[string]string, ps.n)
	for i := 0; i < ps.n; i++ {
		id := idOf(i)
		text := fmt.Sprintf("Question %d: explain topic number %d in a few words.", i, i*7919%1000)
		var line string
		if ps.completion {
			line = fmt.Sprintf(`{"id":%q,"prompt":%q,"meta":{"i":%d}`, id, text, i)
		} else {
			line = fmt.Sprintf(`{"id":%q,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":%q}],"meta":{"i":%d}`, id, text, i)
		}
		if ps.extra != nil {
			line += ps.extra(i)
		}
		line += "}"
		lines[id] = line
		b.WriteString(line)
		b.WriteByte('\n')
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, lines
}

// result is what a run of infer printed.
type result struct {
	code           int
	stdout, stderr string
}

// lockedBuffer is a buffer safe for the concurrent writes of the
// progress display and the summary (and a simulator's request log).
type lockedBuffer = testbin.LockedBuffer

// runInfer runs infer in-process with args, bounded by limit.
func runInfer(t testing.TB, limit time.Duration, stdin string, args ...string) result {
	t.Helper()
	return runInferCtx(t, context.Background(), limit, stdin, args...)
}

// runInferCtx is runInfer under ctx (cancel it with cli.ErrInterrupted to
// play a SIGINT).
func runInferCtx(t testing.TB, parent context.Context, limit time.Duration, stdin string, args ...string) result {
	t.Helper()
	return runInferEnv(t, parent, limit, false, stdin, args...)
}

// runInferEnv is runInferCtx with stderr taken for a terminal or not.
func runInferEnv(t testing.TB, parent context.Context, limit time.Duration, interactive bool, stdin string, args ...string) result {
	t.Helper()
	return runCommand(t, parent, limit, interactive, stdin, &Generate{}, args...)
}

// runCommand runs cmd, a Generate the test may have set up (its clock),
// as infer.
func runCommand(t testing.TB, parent context.Context, limit time.Duration, interactive bool, stdin string, cmd *Generate, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(parent, limit)
	defer cancel()
	var stdout, stderr lockedBuffer
	env := &cli.Env{Name: "infer", Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr, Interactive: interactive}
	done := make(chan int, 1)
	go func() { done <- cli.Run(ctx, env, Description, cmd, args) }()
	select {
	case code := <-done:
		return result{code, stdout.String(), stderr.String()}
	case <-time.After(limit + 10*time.Second):
		t.Fatalf("infer did not return within %v; stderr:\n%s", limit, stderr.String())
	}
	return result{}
}

// fastFlags make retries and probes quick for tests.
var fastFlags = []string{"--backoff", "5ms", "--max-backoff", "50ms", "--probe-interval", "20ms", "--wait-ready", "20s", "--progress", "0"}

// genRecord is a generation or error record as read back in tests.
type genRecord struct {
	record.Generation
	Messages []record.Message `json:"messages"`
	raw      string
}

// sample is the sample number of a generation or error record.
func (g *genRecord) sample() int {
	switch {
	case g.Output != nil:
		return g.Output.Sample
	case g.Error != nil:
		return g.Error.Sample
	}
	return g.Sample
}

// readRecords reads a JSONL file (missing file: none), failing on a line
// that is not a JSON object or a file that does not end in a newline.
func readRecords(t testing.TB, path string) []genRecord {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return parseRecords(t, path, data)
}

func parseRecords(t testing.TB, name string, data []byte) []genRecord {
	t.Helper()
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("%s does not end with a newline: a partial line was left", name)
	}
	var out []genRecord
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for n := 1; sc.Scan(); n++ {
		var g genRecord
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatalf("%s:%d: %v: %q", name, n, err, sc.Text())
		}
		g.raw = sc.Text()
		out = append(out, g)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

// digestOf is the digest llmsim puts at the start of its answer to a
// prompt record (a "prompt" text sent to the chat API is one user turn).
func digestOf(g *genRecord, chat bool) string {
	var p llmsim.Prompt
	if g.Prompt.Prompt != nil && len(g.Messages) == 0 {
		if chat {
			p.Messages = []llmsim.Message{{Role: "user", Content: *g.Prompt.Prompt}}
		} else {
			p.Text = *g.Prompt.Prompt
		}
	}
	for _, m := range g.Messages {
		p.Messages = append(p.Messages, llmsim.Message{Role: m.Role, Content: m.Content})
	}
	return llmsim.PromptDigest(p)
}

// accounting checks exactly-once: every (id, sample) of the input is in
// the output or the errors exactly once, nothing else is, each answer
// belongs to its prompt, and each record is the input line plus its field.
type accounting struct {
	ok, failed int
	byEndpoint map[string]int
	outputs    map[string]*genRecord // "id/sample"
	errors     map[string]*genRecord
}

func checkExactlyOnce(t testing.TB, lines map[string]string, samples int, outs, errs []genRecord) accounting {
	return checkAPI(t, true, lines, samples, outs, errs)
}

// checkAPI is checkExactlyOnce for a run with --api other than chat.
func checkAPI(t testing.TB, chat bool, lines map[string]string, samples int, outs, errs []genRecord) accounting {
	t.Helper()
	acc := accounting{byEndpoint: map[string]int{}, outputs: map[string]*genRecord{}, errors: map[string]*genRecord{}}
	seen := map[string]string{}
	check := func(g *genRecord, kind string) {
		orig, ok := lines[g.ID.Text]
		if !ok {
			t.Fatalf("%s record for unknown id %q", kind, g.ID.Text)
		}
		sample := g.sample()
		if sample < 0 || sample >= samples {
			t.Fatalf("id %s: sample %d out of range", g.ID.Text, sample)
		}
		key := fmt.Sprintf("%s/%d", g.ID.Text, sample)
		if prev, dup := seen[key]; dup {
			t.Fatalf("answer %s appears twice (%s and %s)", key, prev, kind)
		}
		seen[key] = kind
		field := "output"
		if kind == "error" {
			field = "error"
		}
		stripped, err := record.WithoutFields(nil, []byte(g.raw), field)
		if err != nil || string(stripped) != orig {
			t.Fatalf("%s record of %s is not its prompt record plus %q:\n got %s\nwant %s", kind, key, field, stripped, orig)
		}
	}
	for i := range outs {
		g := &outs[i]
		if g.Output == nil {
			t.Fatalf("output line without an output field: %s", g.raw)
		}
		check(g, "output")
		// The digest opens the answer: its reasoning part when it has one.
		if want := digestOf(g, chat); !strings.HasPrefix(g.Output.Reasoning+g.Output.Text, want) {
			t.Fatalf("answer to %s does not start with its prompt's digest %s: %.60q", g.ID.Text, want, g.Output.Reasoning+g.Output.Text)
		}
		if g.Output.Attempts < 1 || g.Output.Endpoint == "" || g.Output.FinishReason == "" {
			t.Fatalf("incomplete output field: %s", g.raw)
		}
		acc.ok++
		acc.byEndpoint[g.Output.Endpoint]++
		acc.outputs[fmt.Sprintf("%s/%d", g.ID.Text, g.Output.Sample)] = g
	}
	for i := range errs {
		g := &errs[i]
		if g.Error == nil {
			t.Fatalf("errors line without an error field: %s", g.raw)
		}
		check(g, "error")
		acc.failed++
		acc.errors[fmt.Sprintf("%s/%d", g.ID.Text, g.Error.Sample)] = g
	}
	for id := range lines {
		for s := 0; s < samples; s++ {
			if _, ok := seen[fmt.Sprintf("%s/%d", id, s)]; !ok {
				t.Fatalf("answer %s/%d is missing from both the output and the errors", id, s)
			}
		}
	}
	return acc
}

// waitFor polls cond every 5 ms until it holds or limit passes.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func idOf(i int) string { return fmt.Sprintf("p%05d", i) }

// rewrite writes the prompt lines back to path in id order.
func rewrite(t testing.TB, path string, lines map[string]string) {
	t.Helper()
	ids := make([]string, 0, len(lines))
	for id := range lines {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b bytes.Buffer
	for _, id := range ids {
		b.WriteString(lines[id])
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// setup is what most tests start from: a simulated fleet, a prompt file
// and the output path.
type setup struct {
	fleet        *llmsim.Fleet
	dir, in, out string
	lines        map[string]string
}

func newSetup(t testing.TB, cfg llmsim.Config, endpoints int, ps promptSet) *setup {
	t.Helper()
	s := &setup{dir: t.TempDir()}
	if endpoints > 0 {
		s.fleet = startFleet(t, cfg, endpoints)
	}
	s.in, s.lines = ps.write(t, s.dir, "prompts.jsonl")
	s.out = filepath.Join(s.dir, "gen.jsonl")
	return s
}

// args are infer's arguments against the setup's fleet and files, with
// the fast test flags, then extra.
func (s *setup) args(extra ...string) []string {
	a := []string{"-o", s.out, s.in}
	if s.fleet != nil {
		a = append(a, "-e", endpointsFlag(s.fleet.URLs()))
	}
	a = append(a, fastFlags...)
	return append(a, extra...)
}

func (s *setup) errs() string { return filepath.Join(s.dir, "gen.errors.jsonl") }

// check is checkExactlyOnce over the setup's output and errors files.
func (s *setup) check(t testing.TB, samples int) accounting {
	t.Helper()
	return checkExactlyOnce(t, s.lines, samples, readRecords(t, s.out), readRecords(t, s.errs()))
}

// runWant runs infer in-process and fails unless it exits with want.
func runWant(t testing.TB, want int, args ...string) result {
	t.Helper()
	res := runInfer(t, time.Minute, "", args...)
	if res.code != want {
		t.Fatalf("exit %d, want %d\n%s", res.code, want, res.stderr)
	}
	return res
}
