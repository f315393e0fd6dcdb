package infer

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
	"tokenmill/lib/conversation"
	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// glaiveFile is the real tool-calling dataset the conversation tests
// regenerate (LLaMA-Factory's glaive_toolcall_en_demo.json).
const glaiveFile = "glaive_toolcall_en_demo.json"

// conversations writes the conversation records of the real glaive data
// (extract --turns all) and, with n > 0, n synthetic multi-turn ones
// (corpus --conversations), to dir/conv.jsonl, and returns the path and
// the lines by id.
func conversations(t *testing.T, dir string, glaive bool, n int) (string, map[string]string) {
	t.Helper()
	var data bytes.Buffer
	if glaive {
		path := testbin.RealData(t, glaiveFile)
		out, err := testbin.Command("extract", "--turns", "all", path).Output()
		if err != nil {
			t.Fatalf("extract %s: %v", path, err)
		}
		data.Write(out)
	}
	if n > 0 {
		corpus := testbin.Command("corpus", "-n", strconv.Itoa(n), "--conversations")
		extract := testbin.Command("extract", "--turns", "all")
		pipe, err := corpus.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		extract.Stdin = pipe
		var out bytes.Buffer
		extract.Stdout = &out
		if err := corpus.Start(); err != nil {
			t.Fatal(err)
		}
		if err := extract.Run(); err != nil {
			t.Fatalf("corpus | extract: %v", err)
		}
		if err := corpus.Wait(); err != nil {
			t.Fatalf("corpus: %v", err)
		}
		data.Write(out.Bytes())
	}
	lines := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var p record.Prompt
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		if _, dup := lines[p.ID.Text]; !dup {
			lines[p.ID.Text] = sc.Text()
		}
	}
	path := filepath.Join(dir, "conv.jsonl")
	if err := os.WriteFile(path, data.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, lines
}

// sim is an llmsim binary with a request log.
type sim struct {
	cmd    *exec.Cmd
	stderr lockedBuffer
	urls   []string
	log    string
	done   chan struct{}
}

// startSim runs llmsim on n free ports, logging every request.
func startSim(t *testing.T, n int, extra ...string) *sim {
	t.Helper()
	dir := t.TempDir()
	s := &sim{log: filepath.Join(dir, "requests.jsonl"), done: make(chan struct{})}
	ready := filepath.Join(dir, "urls")
	listen := strings.TrimSuffix(strings.Repeat("127.0.0.1:0,", n), ",")
	s.cmd = testbin.Command("llmsim", append([]string{"--listen", listen, "--ready-file", ready, "--request-log", s.log}, extra...)...)
	s.cmd.Stderr = &s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() { s.cmd.Process.Kill(); <-s.done })
	waitFor(t, 15*time.Second, "llmsim to write its ready file", func() bool {
		b, _ := os.ReadFile(ready)
		s.urls = strings.Fields(string(b))
		return len(s.urls) == n
	})
	return s
}

// requests stops llmsim (SIGTERM flushes its log) and reads the log.
func (s *sim) requests(t *testing.T) []loggedRequest {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("llmsim did not exit within 20s of SIGTERM:\n%s", s.stderr.String())
	}
	return readRequestLog(t, s.log)
}

// loggedRequest is one line of llmsim's request log.
type loggedRequest struct {
	Time     time.Time `json:"time"`
	Endpoint string    `json:"endpoint"`
	Status   int       `json:"status"`
	Outcome  string    `json:"outcome"`
	Body     struct {
		Messages   []record.Message `json:"messages"`
		Tools      json.RawMessage  `json:"tools"`
		ToolChoice json.RawMessage  `json:"tool_choice"`
		Seed       *int64           `json:"seed"`
		MaxTokens  *int             `json:"max_tokens"`
	} `json:"body"`
}

func readRequestLog(t *testing.T, path string) []loggedRequest {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseRequestLog(t, data)
}

func parseRequestLog(t *testing.T, data []byte) []loggedRequest {
	t.Helper()
	var out []loggedRequest
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var l loggedRequest
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("request log: %v: %.200s", err, sc.Text())
		}
		out = append(out, l)
	}
	return out
}

// historyKey names a request's history, tools and seed: every field of
// every message the server saw.
func historyKey(msgs []record.Message, tools json.RawMessage, seed *int64) string {
	var b strings.Builder
	canon, _, _ := record.AppendCanonicalTools(nil, tools)
	b.Write(canon)
	for _, m := range msgs {
		fmt.Fprintf(&b, "%s\x00%s\x00%s\x00%s\x00%s\x00", m.Role, m.Content, m.Name, m.ToolCallID, m.ReasoningContent)
		calls, _ := openai.ToolCalls(m.ToolCalls)
		for _, c := range calls {
			fmt.Fprintf(&b, "%s(%s:%s)", c.Function.Name, c.ID, c.Function.Arguments)
		}
		b.WriteByte('\x01')
	}
	if seed != nil {
		fmt.Fprintf(&b, "seed=%d", *seed)
	}
	return b.String()
}

// sentHistory is the history an output's turn was asked with: the
// messages before it, reasoning left out unless withReasoning.
func sentHistory(msgs []record.Message, withReasoning bool) []record.Message {
	out := make([]record.Message, len(msgs))
	for i, m := range msgs {
		if !withReasoning || m.Role != "assistant" {
			m.ReasoningContent = ""
		}
		out[i] = m
	}
	return out
}

// convCheck is what checkConversations verifies beyond exact accounting.
type convCheck struct {
	samples       int
	seed          int64 // the run's --seed: sample k is sent seed+k
	reasoning     bool  // llmsim --reasoning: answers open with their digest in reasoning_content
	historyReason bool  // --history-reasoning
	affinity      bool  // every turn of a conversation on one endpoint
	requests      []loggedRequest
}

// convFigures are what the checked output holds.
type convFigures struct {
	ok, failed, turns, truncated, paired, moved, calls int
	turnsOf                                            map[string]int // "id/sample" -> turns
}

// checkConversations checks a --regenerate run: every (id, sample) is in
// the output or the errors exactly once, as its input line plus its
// field; each output keeps the input's system and user turns in order;
// each turn's answer belongs to the history it was asked with; and, with
// requests, each turn was asked once with exactly that history, the
// record's tools and the sample's seed, and got its answer from the
// endpoint the turn names.
func checkConversations(t *testing.T, lines map[string]string, cc convCheck, outs, errs []genRecord) convFigures {
	t.Helper()
	c := &convChecker{t: t, lines: lines, cc: cc, fig: convFigures{turnsOf: map[string]int{}},
		seen: map[string]string{}, asked: map[string][]loggedRequest{}}
	for _, r := range cc.requests {
		if r.Status == 200 && r.Outcome == "" {
			k := historyKey(r.Body.Messages, r.Body.Tools, r.Body.Seed)
			c.asked[k] = append(c.asked[k], r)
		}
	}
	for i := range outs {
		c.output(&outs[i])
	}
	for i := range errs {
		g := &errs[i]
		if g.Error == nil || g.Error.TurnsDone == nil || g.Error.Turn == nil {
			t.Fatalf("not a conversation error record: %s", g.raw)
		}
		c.own(g, "error", "error")
		c.fig.failed++
	}
	for id := range lines {
		for s := 0; s < cc.samples; s++ {
			if _, ok := c.seen[fmt.Sprintf("%s/%d", id, s)]; !ok {
				t.Fatalf("%s/%d is missing from both the output and the errors", id, s)
			}
		}
	}
	return c.fig
}

// convChecker is checkConversations' state: what it has seen, and the
// successful requests not yet matched to a turn, by history key.
type convChecker struct {
	t     *testing.T
	lines map[string]string
	cc    convCheck
	fig   convFigures
	seen  map[string]string // "id/sample" -> the kind of record it was in
	asked map[string][]loggedRequest
}

// own checks that g is its input line plus field, seen once, and returns
// the input's prompt and g's "id/sample".
func (c *convChecker) own(g *genRecord, kind, field string) (record.Prompt, string) {
	t := c.t
	t.Helper()
	orig, ok := c.lines[g.ID.Text]
	if !ok {
		t.Fatalf("%s record for unknown id %q", kind, g.ID.Text)
	}
	sample := g.sample()
	key := fmt.Sprintf("%s/%d", g.ID.Text, sample)
	if sample < 0 || sample >= c.cc.samples {
		t.Fatalf("%s: sample out of range", key)
	}
	if prev, dup := c.seen[key]; dup {
		t.Fatalf("%s appears twice (%s and %s)", key, prev, kind)
	}
	c.seen[key] = kind
	stripped, err := record.WithoutFields(nil, []byte(g.raw), field)
	if err != nil || string(stripped) != orig {
		t.Fatalf("%s record of %s is not its input line plus %q:\n got %s\nwant %s", kind, key, field, stripped, orig)
	}
	var p record.Prompt
	if err := json.Unmarshal([]byte(orig), &p); err != nil {
		t.Fatal(err)
	}
	return p, key
}

// output checks one conversation record and its turns.
func (c *convChecker) output(g *genRecord) {
	t := c.t
	t.Helper()
	o := g.Output
	if o == nil || o.Messages == nil || o.Turns == nil {
		t.Fatalf("not a conversation record: %.300s", g.raw)
	}
	p, key := c.own(g, "output", "output")
	c.fig.ok++
	c.fig.turnsOf[key] = len(o.Turns)
	c.fig.turns += len(o.Turns)
	if o.Truncated != nil {
		c.fig.truncated++
		if tr := o.Truncated; tr.Detail == "" || (tr.Reason != record.TruncContextFull && (tr.Turn != len(o.Turns)-1 || len(o.Messages) != o.Turns[tr.Turn].Message+1)) {
			t.Fatalf("%s: truncation %+v does not end at its turn (%d turns, %d messages)", key, tr, len(o.Turns), len(o.Messages))
		}
	}
	// The input's system and user turns, in order and untouched.
	var want, got []string
	for _, m := range openai.ChatMessages(&p) {
		if m.Role == "system" || m.Role == "user" {
			want = append(want, m.Role+":"+m.Content)
		}
	}
	for _, m := range o.Messages {
		if m.Role == "system" || m.Role == "user" {
			got = append(got, m.Role+":"+m.Content)
		}
	}
	if o.Truncated == nil && strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		t.Fatalf("%s: system and user turns %q, want %q", key, got, want)
	}
	if o.Truncated != nil && !strings.HasPrefix(strings.Join(want, "\x00"), strings.Join(got, "\x00")) {
		t.Fatalf("%s: system and user turns %q are not a prefix of %q", key, got, want)
	}
	endpoints := map[string]bool{}
	var usage record.TurnUsage
	for ti, turn := range o.Turns {
		c.turn(g, p, key, ti, turn)
		endpoints[turn.Endpoint] = true
		usage.PromptTokens += turn.Usage.PromptTokens
		usage.CompletionTokens += turn.Usage.CompletionTokens
		usage.AddCached(turn.Usage.CachedTokens)
	}
	if u := o.Usage; !reflect.DeepEqual(usage, record.TurnUsage(u)) {
		t.Fatalf("%s: usage %+v, turns add up to %+v", key, o.Usage, usage)
	}
	if c.cc.affinity && len(endpoints) > 1 {
		t.Fatalf("%s: turns on %d endpoints with affinity and no fault", key, len(endpoints))
	}
	if n := len(o.Turns); n > 0 && (o.FinishReason != o.Turns[n-1].FinishReason || o.Endpoint != o.Turns[0].Endpoint) {
		t.Fatalf("%s: finish %q endpoint %q disagree with the turns", key, o.FinishReason, o.Endpoint)
	}
}

// turn checks one turn of conversation g: its answer belongs to its
// history, its tool calls are answered in order, and it was asked as the
// record says.
func (c *convChecker) turn(g *genRecord, p record.Prompt, key string, ti int, turn record.Turn) {
	t, o := c.t, g.Output
	t.Helper()
	m := o.Messages[turn.Message]
	if m.Role != "assistant" || turn.Endpoint == "" || turn.Attempts < 1 || turn.FinishReason == "" {
		t.Fatalf("%s: turn %d: %+v at %+v", key, ti, turn, m)
	}
	if ti > 0 && turn.Endpoint != o.Turns[ti-1].Endpoint {
		c.fig.moved++
	}
	history := o.Messages[:turn.Message]
	var sim llmsim.Prompt
	for _, h := range history {
		sim.Messages = append(sim.Messages, llmsim.Message{Role: h.Role, Content: h.Content})
	}
	calls, err := openai.ToolCalls(m.ToolCalls)
	if err != nil {
		t.Fatal(err)
	}
	c.fig.calls += len(calls)
	if len(calls) == 0 {
		opening := m.Content
		if c.cc.reasoning {
			opening = m.ReasoningContent + m.Content
		}
		if d := llmsim.PromptDigest(sim); !strings.HasPrefix(opening, d) {
			t.Fatalf("%s: turn %d does not answer its history (digest %s): %.80q", key, ti, d, opening)
		}
	} else if turn.FinishReason != "tool_calls" {
		t.Fatalf("%s: turn %d calls tools but finished %q", key, ti, turn.FinishReason)
	}
	// Tool results follow the calls, re-addressed to them.
	for k, call := range calls {
		if end := turn.Message + 1 + k; end < len(o.Messages) && (o.Truncated == nil || ti < o.Truncated.Turn) {
			if r := o.Messages[end]; r.Role != "tool" || r.ToolCallID != call.ID {
				t.Fatalf("%s: call %s of turn %d answered by %+v", key, call.ID, ti, r)
			}
			c.fig.paired++
		}
	}
	if c.cc.requests != nil {
		c.askedOnce(p, key, ti, turn, history, c.cc.seed+int64(o.Sample))
	}
}

// askedOnce checks that turn ti was asked of the endpoint it names with
// exactly its history, the record's tools and seed, and takes that
// request off the unmatched ones.
func (c *convChecker) askedOnce(p record.Prompt, key string, ti int, turn record.Turn, history []record.Message, seed int64) {
	t := c.t
	t.Helper()
	hk := historyKey(sentHistory(history, c.cc.historyReason), p.Tools, &seed)
	sent := c.asked[hk]
	if len(sent) == 0 {
		t.Fatalf("%s: turn %d was never asked with its history and seed %d", key, ti, seed)
	}
	// Conversations that open alike ask alike: take the one
	// request of the endpoint the turn names.
	at := -1
	for i, r := range sent {
		if r.Endpoint == turn.Endpoint {
			at = i
			break
		}
	}
	if at < 0 {
		t.Fatalf("%s: turn %d was asked of %s, not of %s, as the record says", key, ti, sent[0].Endpoint, turn.Endpoint)
	}
	if len(p.Tools) > 0 && len(sent[at].Body.Tools) == 0 {
		t.Fatalf("%s: turn %d was sent without the record's tools", key, ti)
	}
	c.asked[hk] = append(sent[:at], sent[at+1:]...)
}

// The real glaive conversations and synthetic multi-turn ones,
// regenerated twice each on a fleet that calls tools: each turn is asked
// once, with the history regenerated so far (reasoning left out), the
// record's tools and its sample's seed, on the endpoint that served the
// conversation's first turn; calls are answered from the records' own
// tool results or end the conversation.
func TestRegenerateOnFleet(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, lines := conversations(t, dir, true, 150)
	s := startSim(t, 3, "--instant", "--tool-call-rate", "0.5", "--parallel-tool-call-rate", "0.3", "--reasoning",
		"--kv-tokens", "400000", "--cache-report", "--seed", "11")
	out := filepath.Join(dir, "regen.jsonl")
	p := startInfer(t, "-e", strings.Join(s.urls, ","), "--regenerate", "--samples", "2", "--seed", "7", "--max-tokens", "40",
		"-o", out, in, "--progress", "0")
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr.String())
	}
	reqs := s.requests(t)
	fig := checkConversations(t, lines, convCheck{samples: 2, seed: 7, reasoning: true, affinity: true, requests: reqs},
		readRecords(t, out), readRecords(t, filepath.Join(dir, "regen.errors.jsonl")))
	if fig.ok != 2*len(lines) || fig.failed != 0 {
		t.Fatalf("%d conversations regenerated, %d failed, want %d", fig.ok, fig.failed, 2*len(lines))
	}
	if len(reqs) != fig.turns {
		t.Errorf("%d requests for %d turns: a turn was asked more than once", len(reqs), fig.turns)
	}
	if fig.paired == 0 || fig.truncated == 0 || fig.calls == 0 {
		t.Errorf("the fleet's tool calls were not exercised: %d calls, %d paired, %d truncated", fig.calls, fig.paired, fig.truncated)
	}
	for _, want := range []string{"conversations: " + cli.Thousands(int64(fig.turns)) + " turns regenerated", cli.Thousands(int64(fig.paired)) + " tool calls answered"} {
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, p.stderr.String())
		}
	}
	if _, err := os.Stat(conversation.JournalPath(out)); !os.IsNotExist(err) {
		t.Errorf("the turn journal is left after a complete run: %v", err)
	}
	t.Logf("%d conversations, %d turns, %d calls, %d paired, %d truncated", fig.ok, fig.turns, fig.calls, fig.paired, fig.truncated)
}

// journaled reads the (id, sample, turn) lines of a turn journal.
func journaled(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return out
	}
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i+1]
	} else {
		data = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var l conversation.JournalLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: a line that is not a turn: %v: %.200s", path, err, sc.Text())
		}
		out[fmt.Sprintf("%s/%d/%d", l.ID.Text, l.Sample, l.Turn)] = true
	}
	return out
}

// turnKeys maps each turn of the final output, "id/sample/turn", to the
// history key it was asked with; "" for a history two turns share (two
// conversations that open alike ask alike, and their requests cannot be
// told apart).
func turnKeys(t *testing.T, lines map[string]string, seed int64, outs []genRecord) map[string]string {
	t.Helper()
	keys := map[string]string{}
	owners := map[string]int{}
	for i := range outs {
		o := outs[i].Output
		var p record.Prompt
		json.Unmarshal([]byte(lines[outs[i].ID.Text]), &p)
		s := seed + int64(o.Sample)
		for ti, turn := range o.Turns {
			k := historyKey(sentHistory(o.Messages[:turn.Message], false), p.Tools, &s)
			keys[fmt.Sprintf("%s/%d/%d", outs[i].ID.Text, o.Sample, ti)] = k
			owners[k]++
		}
	}
	for turn, k := range keys {
		if owners[k] > 1 {
			keys[turn] = ""
		}
	}
	return keys
}

// Killed with SIGKILL mid-conversation three times and resumed: the
// conversations go on from their last completed turn (no turn the
// journal held is asked again after the kill), and the output ends with
// exactly one conversation record per (conversation, sample).
func TestRegenerateKillResume(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, lines := conversations(t, dir, false, 120)
	s := startSim(t, 3, "--time-scale", "20", "--max-running", "8", "--kv-tokens", "200000", "--cache-report",
		"--tool-call-rate", "0.3", "--seed", "5")
	out := filepath.Join(dir, "regen.jsonl")
	jpath := conversation.JournalPath(out)
	args := []string{"-e", strings.Join(s.urls, ","), "--regenerate", "--samples", "2", "--seed", "3", "--max-tokens", "48",
		"--flush-interval", "100ms", "-o", out, in, "--progress", "0", "--backoff", "5ms", "--probe-interval", "20ms"}
	kills := killWhileJournaling(t, args, jpath, 3, func(int) int { return 40 }, func() time.Duration { return 0 }, func(round int, p *proc) {
		if strings.Contains(p.stderr.String(), "answers 480") {
			t.Fatalf("round %d finished before the kill", round)
		}
		if round > 0 && !strings.Contains(p.stderr.String(), "unfinished conversations continue from") {
			t.Errorf("round %d: no report of the journal's turns:\n%s", round, p.stderr.String())
		}
		if round == 2 && !strings.Contains(p.stderr.String(), jpath+": removed a partial last line") {
			t.Errorf("round 2: the journal's partial line was not repaired:\n%s", p.stderr.String())
		}
		if round == 1 {
			// A crash mid-write: half a turn at the journal's end.
			f, _ := os.OpenFile(jpath, os.O_APPEND|os.O_WRONLY, 0)
			f.WriteString(`{"id":"conv-3","sample":1,"fp":"1f2e","base":0,"turn":0,"answer":{"role":"assis`)
			f.Close()
		}
	})
	p := startInfer(t, append(args, "--resume")...)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("final resume: exit %d\n%s", code, p.stderr.String())
	}
	m := regexp.MustCompile(`([\d,]+) continued from the journal`).FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Errorf("the final run continued no turn from the journal:\n%s", p.stderr.String())
	}
	reqs := s.requests(t)
	outs := readRecords(t, out)
	fig := checkConversations(t, lines, convCheck{samples: 2, seed: 3, requests: reqs}, outs, readRecords(t, filepath.Join(dir, "regen.errors.jsonl")))
	if fig.ok != 2*len(lines) {
		t.Fatalf("%d conversations regenerated, want %d (%d failed)", fig.ok, 2*len(lines), fig.failed)
	}
	for i, k := range kills {
		checkNotAskedAgain(t, fmt.Sprintf("kill %d", i), k.turns, k.dead, turnKeys(t, lines, 3, outs), reqs)
	}
	if _, err := os.Stat(jpath); !os.IsNotExist(err) {
		t.Errorf("the journal is left after the run completed: %v", err)
	}
	t.Logf("%d conversations, %d turns, %d requests; turns journaled at the kills: %d %d %d", fig.ok, fig.turns, len(reqs), len(kills[0].turns), len(kills[1].turns), len(kills[2].turns))
}

// journaledKill is what a SIGKILL left: when the process was dead, and
// the turns ("id/sample/turn") the journal held.
type journaledKill struct {
	dead  time.Time
	turns map[string]bool
}

// killWhileJournaling runs infer with args rounds times (with --resume
// after the first), each killed with SIGKILL once the turn journal at
// jpath has grown by grow(round) turns and pause() has passed; each (nil:
// none) looks at every killed run.
func killWhileJournaling(t *testing.T, args []string, jpath string, rounds int, grow func(int) int, pause func() time.Duration, each func(int, *proc)) []journaledKill {
	t.Helper()
	var kills []journaledKill
	for round := 0; round < rounds; round++ {
		a := args
		if round > 0 {
			a = append(append([]string{}, args...), "--resume")
		}
		before, n := len(journaled(t, jpath)), grow(round)
		p := startInfer(t, a...)
		waitFor(t, 90*time.Second, fmt.Sprintf("round %d to journal %d turns", round, n), func() bool { return len(journaled(t, jpath)) >= before+n })
		time.Sleep(pause())
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.wait(t, 10*time.Second)
		kills = append(kills, journaledKill{dead: time.Now(), turns: journaled(t, jpath)})
		if each != nil {
			each(round, p)
		}
	}
	return kills
}

// checkNotAskedAgain fails for a turn journaled before a kill at dead that
// a later run asked for again.
func checkNotAskedAgain(t *testing.T, what string, turns map[string]bool, dead time.Time, keys map[string]string, reqs []loggedRequest) {
	t.Helper()
	asked := map[string][]time.Time{}
	for _, r := range reqs {
		k := historyKey(r.Body.Messages, r.Body.Tools, r.Body.Seed)
		asked[k] = append(asked[k], r.Time)
	}
	for turn := range turns {
		key, ok := keys[turn]
		if !ok {
			t.Fatalf("%s: journaled turn %s is not in the final output", what, turn)
		}
		if key == "" {
			continue
		}
		for _, at := range asked[key] {
			if at.After(dead) {
				t.Errorf("%s: turn %s, journaled before the kill, was asked again at %v (killed at %v)", what, turn, at, dead)
			}
		}
	}
}

// Chaos: 200 conversations (60 outside the long tier), two samples each,
// on a fleet that fails, drops, aborts and hangs requests and whose
// endpoint 0 crashes and comes back, while infer is killed with SIGKILL
// at seeded moments (4; 2 outside the long tier) and resumed.
// At the end every (conversation, sample) has exactly one record, each
// turn answered from its own history, and no journaled turn was asked for
// after the kill that left it in the journal.
func TestRegenerateChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: skipped with -short")
	}
	t.Parallel()
	dir := t.TempDir()
	synthetic, total := testbin.Size(20, 50), testbin.Size(60, 200)
	in, lines := conversations(t, dir, true, synthetic)
	for id := range lines { // glaive's first and the synthetic ones
		if len(lines) <= total {
			break
		}
		if !strings.HasPrefix(id, "conv-") {
			delete(lines, id)
		}
	}
	var keep bytes.Buffer
	data, _ := os.ReadFile(in)
	for _, line := range strings.SplitAfter(string(data), "\n") {
		var p record.Prompt
		if json.Unmarshal([]byte(line), &p) == nil && lines[p.ID.Text] != "" {
			keep.WriteString(line)
		}
	}
	os.WriteFile(in, keep.Bytes(), 0o644)
	s := startSim(t, 4, "--time-scale", "40", "--max-running", "8", "--kv-tokens", "200000", "--cache-report", "--seed", "20250611",
		"--tool-call-rate", "0.3", "--fail-rate", "0.02", "--drop-rate", "0.01", "--abort-rate", "0.01", "--hang-rate", "0.005",
		"--fault", fmt.Sprintf("0=crash-after:%d,restart-after:3s,startup-delay:1s", testbin.Size(50, 150)))
	out := filepath.Join(dir, "regen.jsonl")
	jpath := conversation.JournalPath(out)
	args := []string{"-e", strings.Join(s.urls, ","), "--regenerate", "--samples", "2", "--seed", "40", "--max-tokens", "32",
		"--request-timeout", "2s", "--flush-interval", "50ms", "-o", out, in, "--progress", "0",
		"--backoff", "5ms", "--max-backoff", "100ms", "--probe-interval", "20ms", "--wait-ready", "30s"}
	rng := rand.New(rand.NewPCG(chaosSeed, 200))
	kills := killWhileJournaling(t, args, jpath, testbin.Size(2, 4), func(int) int { return testbin.Size(10, 20) + rng.IntN(testbin.Size(30, 60)) },
		func() time.Duration { return time.Duration(rng.IntN(40)) * time.Millisecond }, nil)
	for final := 0; ; final++ {
		p := startInfer(t, append(args, "--resume")...)
		code := p.wait(t, 3*time.Minute)
		if code == 0 {
			break
		}
		if code != 3 || final == 3 {
			t.Fatalf("resume %d: exit %d\n%s", final, code, p.stderr.String())
		}
	}
	reqs := s.requests(t)
	outs := readRecords(t, out)
	fig := checkConversations(t, lines, convCheck{samples: 2, seed: 40, requests: reqs}, outs, readRecords(t, filepath.Join(dir, "regen.errors.jsonl")))
	if fig.ok != 2*len(lines) {
		t.Fatalf("%d conversations regenerated, want %d (%d failed)", fig.ok, 2*len(lines), fig.failed)
	}
	keys := turnKeys(t, lines, 40, outs)
	for i, k := range kills {
		checkNotAskedAgain(t, fmt.Sprintf("kill %d", i), k.turns, k.dead, keys, reqs)
	}
	if _, err := os.Stat(jpath); !os.IsNotExist(err) {
		t.Errorf("the journal is left after the run completed: %v", err)
	}
	faults := map[string]int{}
	for _, r := range reqs {
		if r.Outcome != "" {
			faults[r.Outcome]++
		}
	}
	t.Logf("%d conversations, %d turns, %d requests, %d moved turns; faults %v", fig.ok, fig.turns, len(reqs), fig.moved, faults)
}

// An endpoint that dies mid-conversation: its conversations move to
// another endpoint and go on from their last completed turn.
func TestRegenerateEndpointDies(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, lines := conversations(t, dir, false, 80)
	s := startSim(t, 3, "--time-scale", "20", "--max-running", "8", "--kv-tokens", "200000", "--cache-report", "--seed", "9",
		"--fault", "0=crash-after:30,restart-after:1h")
	out := filepath.Join(dir, "regen.jsonl")
	p := startInfer(t, "-e", strings.Join(s.urls, ","), "--regenerate", "--seed", "1", "--max-tokens", "48", "-o", out, in,
		"--progress", "0", "--backoff", "5ms", "--probe-interval", "20ms")
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr.String())
	}
	reqs := s.requests(t)
	fig := checkConversations(t, lines, convCheck{samples: 1, seed: 1, requests: reqs}, readRecords(t, out), readRecords(t, filepath.Join(dir, "regen.errors.jsonl")))
	if fig.ok != len(lines) {
		t.Fatalf("%d of %d conversations regenerated", fig.ok, len(lines))
	}
	if fig.moved == 0 {
		t.Errorf("no conversation moved off the endpoint that died")
	}
	crashed := 0
	for _, r := range reqs {
		if r.Endpoint == s.urls[0] && (r.Outcome == "crash" || r.Outcome == "lost") {
			crashed++
		}
	}
	if crashed == 0 {
		t.Errorf("endpoint 0 lost no request in its crash: the test did not crash it mid-conversation")
	}
	t.Logf("%d conversations, %d moved turns, %d requests lost in the crash", fig.ok, fig.moved, crashed)
}

// Without affinity each turn goes to the least loaded endpoint, and the
// conversations come out the same way.
func TestRegenerateWithoutAffinity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, lines := conversations(t, dir, true, 60)
	s := startSim(t, 3, "--time-scale", "200", "--max-running", "4", "--tool-call-rate", "0.4", "--reasoning", "--seed", "3")
	out := filepath.Join(dir, "regen.jsonl")
	p := startInfer(t, "-e", strings.Join(s.urls, ","), "--regenerate", "--affinity=false", "--history-reasoning", "--seed", "2", "--max-tokens", "24",
		"-o", out, in, "--progress", "0")
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr.String())
	}
	reqs := s.requests(t)
	fig := checkConversations(t, lines, convCheck{samples: 1, seed: 2, reasoning: true, historyReason: true, requests: reqs},
		readRecords(t, out), readRecords(t, filepath.Join(dir, "regen.errors.jsonl")))
	if fig.ok != len(lines) || len(reqs) != fig.turns {
		t.Fatalf("%d conversations, %d turns, %d requests", fig.ok, fig.turns, len(reqs))
	}
	if fig.moved == 0 {
		t.Errorf("without affinity no turn went to another endpoint than the one before")
	}
}

// A single answer's request carries what its record carries: the tools
// (in the OpenAI shape), tool_choice, the history's tool calls and the
// tool results' tool_call_id, and a top-level system first; an answer
// that calls tools is written with output.tool_calls.
func TestSingleAnswerCarriesTools(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, err := testbin.Command("extract", "--turns", "each", testbin.RealData(t, glaiveFile)).Output()
	if err != nil {
		t.Fatal(err)
	}
	var in bytes.Buffer
	lines := map[string]string{}
	for i, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if i%3 == 0 { // some records say how to choose, and carry a system prompt of their own
			line = strings.TrimSuffix(line, "}") + `,"tool_choice":"auto","system":"Answer briefly."}`
		}
		var p record.Prompt
		json.Unmarshal([]byte(line), &p)
		if _, dup := lines[p.ID.Text]; !dup {
			lines[p.ID.Text] = line
		}
		in.WriteString(line + "\n")
	}
	path := filepath.Join(dir, "prompts.jsonl")
	os.WriteFile(path, in.Bytes(), 0o644)
	s := startSim(t, 2, "--instant", "--tool-call-rate", "0.5", "--seed", "4")
	gen := filepath.Join(dir, "gen.jsonl")
	p := startInfer(t, "-e", strings.Join(s.urls, ","), "--max-tokens", "40", "-o", gen, path, "--progress", "0")
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr.String())
	}
	asked := map[string]loggedRequest{}
	for _, r := range s.requests(t) {
		asked[historyKey(r.Body.Messages, r.Body.Tools, r.Body.Seed)] = r
	}
	outs := readRecords(t, gen)
	if len(outs) != len(lines) {
		t.Fatalf("%d answers for %d prompts", len(outs), len(lines))
	}
	withHistory, calls := 0, 0
	for _, g := range outs {
		var p record.Prompt
		json.Unmarshal([]byte(lines[g.ID.Text]), &p)
		r, ok := asked[historyKey(openai.ChatMessages(&p), p.Tools, nil)]
		if !ok {
			t.Fatalf("%s: no request carried the record's history and tools", g.ID.Text)
		}
		if len(p.ToolChoice) > 0 && string(r.Body.ToolChoice) != `"auto"` {
			t.Errorf("%s: tool_choice %s not sent", g.ID.Text, r.Body.ToolChoice)
		}
		for _, m := range r.Body.Messages {
			if m.ToolCallID != "" {
				withHistory++
				break
			}
		}
		if len(g.Output.ToolCalls) > 0 {
			calls++
			if g.Output.FinishReason != "tool_calls" || g.Output.Text != "" || g.Output.ToolCalls[0].ID == "" || g.Output.ToolCalls[0].Function.Name == "" {
				t.Errorf("%s: an answer's calls: %s", g.ID.Text, g.raw)
			}
		}
	}
	if withHistory == 0 || calls == 0 {
		t.Errorf("%d requests with tool results in their history, %d answers with calls: not exercised", withHistory, calls)
	}
}

// The turn journal is infer's own file: a run that would ignore or
// overwrite one refuses before writing anything, --force starts over, and
// a conversation that fails says how far it got.
func TestRegenerateRefusalsAndErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, lines := conversations(t, dir, false, 20)
	out := filepath.Join(dir, "regen.jsonl")
	jpath := conversation.JournalPath(out)
	const held = `{"id":"conv-0","sample":0,"fp":"1","base":0,"turn":0,"answer":{"role":"assistant","content":"x"},"meta":{"message":1}}` + "\n"
	os.WriteFile(jpath, []byte(held), 0o644)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--regenerate"}, "add --resume to continue them"},
		{[]string{}, "add --regenerate to continue it"},
		{[]string{"--resume"}, "add --regenerate to continue it"},
		{[]string{"--regenerate", "--api", "completions"}, "needs --api chat"},
		{[]string{"--regenerate", "--tool-rounds=-1"}, "--tool-rounds must not be negative"},
	} {
		r := runBinary(t, append([]string{"-e", "127.0.0.1:1", "-o", out, in}, tt.args...)...)
		if r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, tt.want) {
			t.Errorf("%v: exit %d, want 2 saying %q:\n%s", tt.args, r.Code, tt.want, r.Stderr)
		}
		if b, _ := os.ReadFile(jpath); string(b) != held {
			t.Fatalf("%v: the journal was touched", tt.args)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Fatalf("%v: -o was created", tt.args)
		}
	}

	// The second turn of every conversation is refused for good: each
	// conversation goes to the errors file with its first turn done, and
	// the journal stays for a later --resume.
	url := firstTurnsOnly(t)
	r := runBinary(t, "-e", url, "--regenerate", "--force", "-o", out, in, "--progress", "0")
	if r.Code != cli.ExitRejects {
		t.Fatalf("exit %d, want 3\n%s", r.Code, r.Stderr)
	}
	errs := readRecords(t, filepath.Join(dir, "regen.errors.jsonl"))
	outs := readRecords(t, out)
	fig := checkConversations(t, lines, convCheck{samples: 1}, outs, errs)
	multi := 0
	for _, g := range errs {
		if *g.Error.TurnsDone != 1 || *g.Error.Turn != 1 || g.Error.Status != 400 || g.Error.Message != "no second turn here" {
			t.Errorf("%s: error %+v, turns_done %d, turn %d", g.ID.Text, g.Error, *g.Error.TurnsDone, *g.Error.Turn)
		}
		multi++
	}
	if fig.failed+fig.ok != len(lines) || multi == 0 {
		t.Fatalf("%d errors and %d outputs for %d conversations", fig.failed, len(outs), len(lines))
	}
	if j := journaled(t, jpath); len(j) != multi+fig.turns || strings.Contains(string(mustRead(t, jpath)), `"fp":"1"`) {
		t.Errorf("the journal holds %d turns, not the %d of the failed conversations and %d of the others (or --force kept the old one)", len(j), multi, fig.turns)
	}

	// --resume on a fleet that answers: the failed conversations go on
	// from their journaled first turn.
	sim := startSim(t, 1, "--instant", "--model", "m") // the model the first server served
	r = runBinary(t, "-e", sim.urls[0], "--regenerate", "--resume", "-o", out, in, "--progress", "0")
	if r.Code != cli.ExitOK {
		t.Fatalf("resume: exit %d\n%s", r.Code, r.Stderr)
	}
	for _, want := range []string{fmt.Sprintf("%d unfinished conversations continue from %d turns", multi, multi), fmt.Sprintf("%d continued from the journal", multi)} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("resume: stderr lacks %q:\n%s", want, r.Stderr)
		}
	}
	outs = readRecords(t, out)
	before := fig.turns
	fig = checkConversations(t, lines, convCheck{samples: 1}, outs, nil)
	if reqs := sim.requests(t); len(reqs) != fig.turns-before-multi {
		t.Errorf("the resumed run asked %d times for %d turns not yet done", len(reqs), fig.turns-before-multi)
	}
	resumed := 0
	for _, g := range outs {
		if len(g.Output.Turns) > 1 && strings.HasSuffix(g.Output.Messages[g.Output.Turns[0].Message].Content, firstMark) {
			resumed++
		}
	}
	if resumed != multi {
		t.Errorf("%d conversations kept their journaled first turn, want %d", resumed, multi)
	}
	if _, err := os.Stat(jpath); !os.IsNotExist(err) {
		t.Errorf("the journal is left after the run completed: %v", err)
	}
}

// firstTurnsOnly serves the first turn of every conversation (its text
// the prompt's digest and firstMark) and refuses every later one for good
// (400): those conversations go to the errors file, their first turn in
// the journal.
func firstTurnsOnly(t *testing.T) string {
	t.Helper()
	return badServer(t, true, func(ctx *fasthttp.RequestCtx) {
		var req struct {
			Messages []record.Message `json:"messages"`
		}
		json.Unmarshal(ctx.PostBody(), &req)
		if len(req.Messages) > 2 {
			ctx.SetStatusCode(400)
			ctx.SetBodyString(`{"object":"error","message":"no second turn here","type":"BadRequestError","param":null,"code":400}`)
			return
		}
		firstAnswer(ctx, req.Messages)
	})
}

// firstMark ends every answer of firstTurnsOnly and firstQuestionsOnly:
// llmsim never writes it, so an answer that ends with it is theirs, kept
// through the journal.
const firstMark = " (first server)"

// firstAnswer answers messages with llmsim's digest of them and firstMark.
func firstAnswer(ctx *fasthttp.RequestCtx, messages []record.Message) {
	var sp llmsim.Prompt
	for _, m := range messages {
		sp.Messages = append(sp.Messages, llmsim.Message{Role: m.Role, Content: m.Content})
	}
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"id":"x","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` + llmsim.PromptDigest(sp) + firstMark + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1}}`)
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Conversations on a small context: a turn whose history no longer fits
// is not sent; the conversation ends there, truncated context_full, with
// the turns done; no request is refused for length.
func TestRegenerateContextFull(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, lines := conversations(t, dir, false, 80)
	s := startSim(t, 2, "--instant", "--context-length", "2500", "--seed", "2")
	out := filepath.Join(dir, "regen.jsonl")
	p := startInfer(t, "-e", strings.Join(s.urls, ","), "--regenerate", "--max-tokens", "700", "--context-length", "2500", "--seed", "1",
		"-o", out, in, "--progress", "0")
	code := p.wait(t, time.Minute)
	reqs := s.requests(t)
	for _, r := range reqs {
		if r.Status == 400 {
			t.Fatalf("a request was refused: %+v", r)
		}
	}
	outs, errs := readRecords(t, out), readRecords(t, filepath.Join(dir, "regen.errors.jsonl"))
	fig := checkConversations(t, lines, convCheck{samples: 1, seed: 1, requests: reqs}, outs, errs)
	full := 0
	for _, g := range outs {
		o := g.Output
		if tr := o.Truncated; tr != nil && tr.Reason == record.TruncContextFull {
			full++
			if tr.Turn != len(o.Turns) || len(o.Turns) == 0 || len(o.Messages) != o.Turns[len(o.Turns)-1].Message+1 {
				t.Errorf("%s: %+v with %d turns, %d messages", g.ID.Text, tr, len(o.Turns), len(o.Messages))
			}
		}
	}
	for _, g := range errs {
		if g.Error.Reason != record.ReasonPromptTooLong || *g.Error.TurnsDone != 0 {
			t.Errorf("%s: error %+v", g.ID.Text, g.Error)
		}
	}
	if full == 0 {
		t.Errorf("no conversation outgrew the context (exit %d):\n%s", code, p.stderr.String())
	}
	t.Logf("%d conversations, %d truncated context_full, %d too long from the start", fig.ok, full, fig.failed)
}

// --redo-length with --resume regenerates, from its first turn, every
// conversation that had a turn cut by length; the old record stays beside
// the new one. (llmsim answers a history alike each time, so each redo is
// cut again and the next --redo-length run redoes it once more.)
func TestRegenerateRedoLength(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, lines := conversations(t, dir, false, 40)
	// Greedy: a conversation redone is cut again, so each round redoes the
	// same ones.
	s := startSim(t, 2, "--instant", "--seed", "6", "--temperature", "0")
	out := filepath.Join(dir, "regen.jsonl")
	args := []string{"-e", strings.Join(s.urls, ","), "--regenerate", "--max-tokens", "1200", "-o", out, in, "--progress", "0"}
	p := startInfer(t, args...)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr.String())
	}
	first := readRecords(t, out)
	cut := map[string]bool{}
	for _, g := range first {
		for _, turn := range g.Output.Turns {
			if turn.FinishReason == record.FinishLength {
				cut[g.ID.Text] = true
			}
		}
	}
	if len(cut) == 0 || len(cut) == len(first) {
		t.Fatalf("%d of %d conversations had a turn cut by length: the test needs some of each", len(cut), len(first))
	}
	for round := 0; round < 2; round++ {
		p = startInfer(t, append(append([]string{}, args...), "--resume", "--redo-length")...)
		if code := p.wait(t, time.Minute); code != 0 {
			t.Fatalf("redo %d: exit %d\n%s", round, code, p.stderr.String())
		}
	}
	counts := map[string]int{}
	for _, g := range readRecords(t, out) {
		counts[g.ID.Text]++
	}
	for id := range lines {
		want := 1
		if cut[id] {
			want = 3
		}
		if counts[id] != want {
			t.Errorf("%s: %d records, want %d", id, counts[id], want)
		}
	}
	if _, err := os.Stat(conversation.JournalPath(out)); !os.IsNotExist(err) {
		t.Errorf("the journal is left: %v", err)
	}
	// Each redo asked for every turn again: the first run's turns, twice
	// more for the conversations cut.
	turns := 0
	for _, g := range first {
		n := len(g.Output.Turns)
		if cut[g.ID.Text] {
			n *= 3
		}
		turns += n
	}
	if reqs := s.requests(t); len(reqs) != turns {
		t.Errorf("%d requests, want %d", len(reqs), turns)
	}
}

// A LLaMA-Factory record whose one observation holds the results of the
// parallel calls before it (a JSON list), through extract --turns all and
// infer --regenerate on a fleet that always calls two tools in parallel:
// each new call is answered by its own result from the list, and no
// conversation ends tool_unpaired for it.
func TestRegenerateOneTurnOfParallelResults(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var b strings.Builder
	for i := 0; i < 10; i++ {
		fmt.Fprintf(&b, `{"id":"p%d","conversations":[{"from":"human","value":"Weather in Paris and Oslo, case %d?"},`+
			`{"from":"function_call","value":"[{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"w\", \"arguments\": {\"city\": \"Oslo\"}}]"},`+
			`{"from":"observation","value":"[\"{\\\"t\\\": 20}\", \"{\\\"t\\\": 9}\"]"},{"from":"gpt","value":"20 and 9."}],`+
			`"tools":"[{\"name\": \"w\", \"description\": \"weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}]"}`+"\n", i, i)
	}
	raw := filepath.Join(dir, "raw.jsonl")
	os.WriteFile(raw, []byte(b.String()), 0o644)
	in := filepath.Join(dir, "convs.jsonl")
	ex := testbin.Command("extract", "--turns", "all", "-o", in, raw)
	if out, err := ex.CombinedOutput(); err != nil {
		t.Fatalf("extract: %v\n%s", err, out)
	}
	s := startSim(t, 1, "--instant", "--tool-call-rate", "1", "--parallel-tool-call-rate", "1")
	out := filepath.Join(dir, "regen.jsonl")
	p := startInfer(t, "-e", s.urls[0], "--regenerate", "--max-tokens", "200", "-o", out, in, "--progress", "0")
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr.String())
	}
	outs := readRecords(t, out)
	if len(outs) != 10 {
		t.Fatalf("%d records for 10 conversations", len(outs))
	}
	for _, g := range outs {
		o := g.Output
		if o.Truncated != nil && o.Truncated.Reason == record.TruncToolUnpaired && o.Truncated.Turn == 0 {
			t.Errorf("%s: the first answer's two calls were not both answered: %+v", g.ID.Text, o.Truncated)
		}
		results := 0
		for _, m := range o.Messages {
			if m.Role == "tool" {
				results++
				if m.Content != `{"t": 20}` && m.Content != `{"t": 9}` {
					t.Errorf("%s: a result %q, want one of the list's", g.ID.Text, m.Content)
				}
			}
		}
		if results < 2 {
			t.Errorf("%s: %d tool results in %+v", g.ID.Text, results, o.Messages)
		}
	}
	checkTrainedToolResults(t, filepath.Join(dir, "train.jsonl"), out, outs)
}

// checkTrainedToolResults merges out, infer's records outs, into train as
// the trainer loads it: every conversation, with every result it was
// given, paired with a call of the turn before it. The simulator calls
// tools in every answer, the last one too, so each conversation ends on
// a call nobody answers: --keep-truncated writes it up to that call.
func checkTrainedToolResults(t *testing.T, train, out string, outs []genRecord) {
	t.Helper()
	m := testbin.Exec(t, testbin.Command("merge", "--to", "conversations", "--keep-truncated", "-o", train, out))
	if m.Code != 0 {
		t.Fatalf("merge: exit %d\n%s", m.Code, m.Stderr)
	}
	trained, err := os.ReadFile(train)
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSuffix(string(trained), "\n"), "\n")
	if len(rows) != len(outs) {
		t.Fatalf("merge wrote %d conversations for infer's %d", len(rows), len(outs))
	}
	byID := map[string]genRecord{}
	for _, g := range outs {
		byID[g.ID.Text] = g
	}
	for i, line := range rows {
		var row struct {
			ID       string `json:"id"`
			Messages []struct {
				Role       string `json:"role"`
				ToolCallID string `json:"tool_call_id"`
				ToolCalls  []struct {
					ID string `json:"id"`
				} `json:"tool_calls"`
			} `json:"conversations"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("train row %d: %v", i, err)
		}
		g, ok := byID[row.ID]
		if !ok {
			t.Fatalf("train row %d: id %q is not one infer answered", i, row.ID)
		}
		delete(byID, row.ID)
		inInfer, inTrain, unpaired := 0, 0, 0
		for _, msg := range g.Output.Messages {
			if msg.Role == "tool" {
				inInfer++
			}
		}
		calls := map[string]bool{}
		for _, msg := range row.Messages {
			for _, c := range msg.ToolCalls {
				calls[c.ID] = true
			}
			if msg.Role == "tool" {
				inTrain++
				if !calls[msg.ToolCallID] {
					unpaired++ // no call before it, or one already answered
				}
				delete(calls, msg.ToolCallID)
			}
		}
		if inTrain != inInfer || unpaired != 0 {
			t.Errorf("train row %s: %d tool results (infer wrote %d), %d not paired with a call before them", row.ID, inTrain, inInfer, unpaired)
		}
	}
}
