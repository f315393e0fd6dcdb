package infer

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
	"tokenmill/lib/conversation"
	"tokenmill/lib/record"
)

// mtBenchFile is the real list of questions without answers (FastChat's
// MT-Bench: 80 records of two questions, the second about the answer to
// the first).
const mtBenchFile = "mt_bench_question.jsonl"

// extractAll runs extract --turns all on files and returns its records
// and its summary.
func extractAll(t *testing.T, files ...string) ([]byte, string) {
	t.Helper()
	r := testbin.Exec(t, testbin.Command("extract", append([]string{"--turns", "all", "--progress", "0"}, files...)...))
	if r.Code != 0 {
		t.Fatalf("extract --turns all: exit %d\n%s", r.Code, r.Stderr)
	}
	return []byte(r.Stdout), r.Stderr
}

// linesByID maps each record of data to its line.
func linesByID(t *testing.T, data []byte) map[string]string {
	t.Helper()
	lines := map[string]string{}
	for _, l := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		var p record.Prompt
		if err := json.Unmarshal(l, &p); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		if _, dup := lines[p.ID.Text]; dup {
			t.Fatalf("id %s twice", p.ID.Text)
		}
		lines[p.ID.Text] = string(l)
	}
	return lines
}

// twiceWritten writes n chat logs (ShareGPT) made from FastChat's real
// conversations in which the user wrote twice before an answer: in the
// even ones a second user turn follows the first question, in the odd
// ones the conversation ends with two user turns. It returns the path and
// how many answers each regeneration must have, by id: one per exchange,
// as many as the original has answers.
func twiceWritten(t *testing.T, dir string, n int) (string, map[string]int) {
	t.Helper()
	var src []struct {
		ID            string `json:"id"`
		Conversations []struct {
			From  string `json:"from"`
			Value string `json:"value"`
		} `json:"conversations"`
	}
	if err := json.Unmarshal(mustRead(t, testbin.RealData(t, "fastchat_dummy_conversation.json")), &src); err != nil {
		t.Fatal(err)
	}
	type turn struct {
		From  string `json:"from"`
		Value string `json:"value"`
	}
	answers := map[string]int{}
	var b bytes.Buffer
	for i := 0; i < n && i < len(src); i++ {
		rec := src[i]
		var conv []turn
		gpt := 0
		for k, m := range rec.Conversations {
			if i%2 == 1 && k == len(rec.Conversations)-1 && m.From == "gpt" {
				conv = append(conv, turn{"human", "One more thing: keep it short, please."})
				continue // the last answer is asked for again, after both
			}
			conv = append(conv, turn(m))
			if m.From == "gpt" {
				gpt++
			}
			if i%2 == 0 && k == 0 {
				conv = append(conv, turn{"human", "Sorry, I hit enter too early. Please answer in one paragraph."})
			}
		}
		if i%2 == 1 {
			gpt++ // the final answer to the two last user turns
		}
		id := "twice-" + rec.ID
		answers[id] = gpt
		line, _ := json.Marshal(map[string]any{"id": id, "conversations": conv})
		b.Write(line)
		b.WriteByte('\n')
	}
	path := filepath.Join(dir, "twice.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, answers
}

// mtBenchQuestions reads MT-Bench's questions by id.
func mtBenchQuestions(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, l := range bytes.Split(bytes.TrimSpace(mustRead(t, testbin.RealData(t, mtBenchFile))), []byte("\n")) {
		var q struct {
			ID    int      `json:"question_id"`
			Turns []string `json:"turns"`
		}
		if err := json.Unmarshal(l, &q); err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprint(q.ID)] = q.Turns
	}
	return out
}

// checkQuestionList checks the regeneration of an MT-Bench record: its two
// questions, each followed by its own answer.
func checkQuestionList(t *testing.T, g *genRecord, qs []string) {
	t.Helper()
	o := g.Output
	var roles []string
	for _, m := range o.Messages {
		roles = append(roles, m.Role)
	}
	if len(qs) != 2 || strings.Join(roles, ",") != "user,assistant,user,assistant" || o.Messages[0].Content != qs[0] || o.Messages[2].Content != qs[1] ||
		len(o.Turns) != 2 || o.Turns[0].Message != 1 || o.Turns[1].Message != 3 || o.Truncated != nil {
		t.Fatalf("question %s: %d turns, messages %v: want the two questions each followed by its answer", g.ID.Text, len(o.Turns), roles)
	}
}

// MT-Bench's real questions through extract --turns all and infer
// --regenerate on llmsim, with chat logs (FastChat's conversations) in
// which the user wrote twice before an answer: each MT-Bench record gets
// exactly two answers, the second question asked with the first answer
// before it; each chat log gets one answer per exchange, its two user
// turns in a row kept and answered once; a record whose mark is not a
// boolean is rejected. Every input id is once in the output or the
// rejects, and the summary counts the turns.
func TestRegenerateQuestionLists(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	twice, wantAnswers := twiceWritten(t, dir, 60)
	data, summary := extractAll(t, testbin.RealData(t, mtBenchFile), twice)
	if want := "extract: read 140, wrote 140, rejected 0, 80 question lists"; !strings.Contains(summary, want) {
		t.Fatalf("extract's summary lacks %q:\n%s", want, summary)
	}
	lines := linesByID(t, data)
	questions := mtBenchQuestions(t)
	marked := 0
	for id, l := range lines {
		q, err := conversation.IsQuestionList([]byte(l))
		if err != nil || q != (questions[id] != nil) {
			t.Fatalf("%s: question_list %v (%v): %.200s", id, q, err, l)
		}
		if q {
			marked++
		}
	}
	if marked != 80 || len(lines) != 140 {
		t.Fatalf("%d records, %d marked question lists; want 140, 80", len(lines), marked)
	}
	in := filepath.Join(dir, "conv.jsonl")
	const badMark = `{"id":"bad-mark","messages":[{"role":"user","content":"q1"},{"role":"user","content":"q2"}],"question_list":"yes"}` + "\n"
	if err := os.WriteFile(in, append(data, badMark...), 0o644); err != nil {
		t.Fatal(err)
	}

	s := startSim(t, 2, "--instant", "--seed", "4")
	out, rejects := filepath.Join(dir, "regen.jsonl"), filepath.Join(dir, "rejects.jsonl")
	p := startInfer(t, "-e", strings.Join(s.urls, ","), "--regenerate", "--seed", "9", "--max-tokens", "60",
		"-o", out, "--rejects", rejects, in, "--progress", "0")
	if code := p.wait(t, 2*time.Minute); code != cli.ExitRejects {
		t.Fatalf("exit %d, want 3 (one reject)\n%s", code, p.stderr.String())
	}
	reqs := s.requests(t)
	outs := readRecords(t, out)
	fig := checkConversations(t, lines, convCheck{samples: 1, seed: 9, affinity: true, requests: reqs}, outs, readRecords(t, filepath.Join(dir, "regen.errors.jsonl")))
	if fig.ok != 140 || fig.failed != 0 {
		t.Fatalf("%d conversations regenerated, %d failed; want 140, 0", fig.ok, fig.failed)
	}
	rj := readRecords(t, rejects)
	if len(rj) != 1 || !strings.Contains(rj[0].raw, `"reason":"bad_question_list"`) || !strings.Contains(rj[0].raw, `"bad-mark"`) {
		t.Fatalf("rejects: %v", rj)
	}

	mtTurns, chatTurns, firstAnswer := checkRegeneratedLists(t, outs, questions, wantAnswers)
	checkSecondQuestionsAsked(t, reqs, firstAnswer)
	if len(reqs) != 160+chatTurns || fig.turns != len(reqs) {
		t.Errorf("%d requests for %d turns, want %d", len(reqs), fig.turns, 160+chatTurns)
	}
	stderr := p.stderr.String()
	for _, want := range []string{
		"read 141 records: 140 prompts, 1 rejected, 0 duplicates",
		"answers 140: ok 140, failed 0",
		fmt.Sprintf("conversations: %d turns regenerated,", 160+chatTurns),
		"bad_question_list",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("infer's stderr lacks %q:\n%s", want, stderr)
		}
	}
	m := regexp.MustCompile(`finish stop ([\d,]+), length ([\d,]+), other ([\d,]+)`).FindStringSubmatch(stderr)
	if m == nil || atoiThousands(m[1])+atoiThousands(m[2])+atoiThousands(m[3]) != 160+chatTurns {
		t.Errorf("the finish counts %v do not add up to %d turns", m, 160+chatTurns)
	}
	t.Logf("MT-Bench: 80 records, %d answers; chat logs: 60, %d answers; %d requests", mtTurns, chatTurns, len(reqs))
}

// checkRegeneratedLists checks the regenerated records: MT-Bench's two
// answers each, and a chat log's one per exchange, with the user's two
// turns in a row kept in a row. It returns the answers of each kind and
// MT-Bench's first answers by the second question.
func checkRegeneratedLists(t *testing.T, outs []genRecord, questions map[string][]string, wantAnswers map[string]int) (mtTurns, chatTurns int, firstAnswer map[string]string) {
	t.Helper()
	firstAnswer = map[string]string{}
	for i := range outs {
		g := &outs[i]
		if qs := questions[g.ID.Text]; qs != nil {
			checkQuestionList(t, g, qs)
			firstAnswer[qs[1]] = g.Output.Messages[1].Content
			mtTurns += len(g.Output.Turns)
			continue
		}
		// A chat log: one answer per exchange; the user's two turns in a
		// row stay in a row.
		want, ok := wantAnswers[g.ID.Text]
		if !ok {
			t.Fatalf("an output for unknown id %s", g.ID.Text)
		}
		inRow := 0
		for k := 1; k < len(g.Output.Messages); k++ {
			if g.Output.Messages[k].Role == "user" && g.Output.Messages[k-1].Role == "user" {
				inRow++
			}
		}
		if len(g.Output.Turns) != want || inRow != 1 {
			t.Fatalf("%s: %d answers, %d user turns in a row; want %d answers, the user's two turns in a row kept", g.ID.Text, len(g.Output.Turns), inRow, want)
		}
		chatTurns += want
	}
	if mtTurns != 160 || len(firstAnswer) != 80 {
		t.Fatalf("%d MT-Bench answers for %d records, want 160 for 80", mtTurns, len(firstAnswer))
	}
	return mtTurns, chatTurns, firstAnswer
}

// checkSecondQuestionsAsked checks that each second MT-Bench question was
// asked once, after its first answer.
func checkSecondQuestionsAsked(t *testing.T, reqs []loggedRequest, firstAnswer map[string]string) {
	t.Helper()
	asked := 0
	for _, r := range reqs {
		m := r.Body.Messages
		for k := 1; k < len(m); k++ {
			if a, ok := firstAnswer[m[k].Content]; ok && m[k].Role == "user" {
				if k != 2 || len(m) != 3 || m[1].Role != "assistant" || m[1].Content != a {
					t.Fatalf("a second MT-Bench question asked without its first answer before it: %+v", m)
				}
				asked++
			}
		}
	}
	if asked != 80 {
		t.Errorf("%d requests asked a second MT-Bench question, want 80", asked)
	}
}

func atoiThousands(s string) int {
	n := 0
	fmt.Sscan(strings.ReplaceAll(s, ",", ""), &n)
	return n
}

// firstQuestionsOnly is a server that answers the first question of a
// conversation (one message: the answer is llmsim's digest of it and
// firstMark) and holds every later request open without answering; hung
// counts the requests it holds.
func firstQuestionsOnly(t *testing.T, hung *atomic.Int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Path()) {
		case "/health":
			return
		case "/get_server_info":
			ctx.SetBodyString(`{"max_running_requests": 256}`)
			return
		case "/v1/models":
			ctx.SetBodyString(`{"object":"list","data":[{"id":"m","object":"model"}]}`)
			return
		}
		var req struct {
			Messages []record.Message `json:"messages"`
		}
		json.Unmarshal(ctx.PostBody(), &req)
		if len(req.Messages) != 1 {
			hung.Add(1)
			ctx.HijackSetNoResponse(true)
			ctx.Hijack(func(c net.Conn) {
				buf := make([]byte, 512)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			})
			return
		}
		firstAnswer(ctx, req.Messages)
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// Killed (SIGKILL) between the two answers of every MT-Bench record (the
// first answers journaled, the second questions asked and not answered)
// and resumed: each conversation goes on with its second question, asked
// with the journaled first answer before it; no first question is asked
// again, and the output holds each record once, with both answers.
func TestRegenerateQuestionListKillResume(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data, _ := extractAll(t, testbin.RealData(t, mtBenchFile))
	lines := linesByID(t, data)
	questions := mtBenchQuestions(t)
	in := filepath.Join(dir, "conv.jsonl")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "regen.jsonl")
	jpath := conversation.JournalPath(out)

	var hung atomic.Int64
	url := firstQuestionsOnly(t, &hung)
	p := startInfer(t, "-e", url, "--regenerate", "--seed", "2", "--max-tokens", "60", "-o", out, in, "--progress", "0")
	waitFor(t, time.Minute, "every first answer journaled and every second question asked", func() bool {
		return len(journaled(t, jpath)) == 80 && hung.Load() >= 80
	})
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.wait(t, 10*time.Second)
	j := journaled(t, jpath)
	for id := range lines {
		if !j[id+"/0/0"] || j[id+"/0/1"] {
			t.Fatalf("%s: the journal does not hold exactly its first answer: %v", id, j)
		}
	}
	if n := len(readRecords(t, out)); n != 0 {
		t.Fatalf("%d records written before any conversation was complete", n)
	}

	s := startSim(t, 1, "--instant", "--seed", "8")
	r := runBinary(t, "-e", s.urls[0], "--regenerate", "--resume", "--seed", "2", "--max-tokens", "60", "-o", out, in, "--progress", "0")
	if r.Code != cli.ExitOK {
		t.Fatalf("resume: exit %d\n%s", r.Code, r.Stderr)
	}
	for _, want := range []string{
		"80 unfinished conversations continue from 80 turns",
		"answers 80: ok 80, failed 0",
		"conversations: 80 turns regenerated, 80 continued from the journal",
	} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("resume: stderr lacks %q:\n%s", want, r.Stderr)
		}
	}
	reqs := s.requests(t)
	outs := readRecords(t, out)
	fig := checkConversations(t, lines, convCheck{samples: 1}, outs, readRecords(t, filepath.Join(dir, "regen.errors.jsonl")))
	if fig.ok != 80 || fig.turns != 160 {
		t.Fatalf("%d conversations with %d turns, want 80 with 160", fig.ok, fig.turns)
	}
	firstAnswer := map[string]string{}
	for i := range outs {
		g := &outs[i]
		checkQuestionList(t, g, questions[g.ID.Text])
		a := g.Output.Messages[1].Content
		if !strings.HasSuffix(a, firstMark) || g.Output.Turns[0].Endpoint != url {
			t.Fatalf("%s: the first answer %q (from %s) is not the journaled one", g.ID.Text, a, g.Output.Turns[0].Endpoint)
		}
		firstAnswer[g.Output.Messages[2].Content] = a
	}
	// The resumed run asked the second questions alone, each once, with
	// its journaled first answer before it.
	if len(reqs) != 80 {
		t.Fatalf("the resumed run sent %d requests, want the 80 second questions", len(reqs))
	}
	seen := map[string]bool{}
	for _, rq := range reqs {
		m := rq.Body.Messages
		if len(m) != 3 || m[0].Role != "user" || m[1].Role != "assistant" || m[2].Role != "user" || firstAnswer[m[2].Content] != m[1].Content || seen[m[2].Content] {
			t.Fatalf("a resumed request that is not a second question after its journaled answer: %+v", m)
		}
		seen[m[2].Content] = true
	}
	if _, err := os.Stat(jpath); !os.IsNotExist(err) {
		t.Errorf("the journal is left after the run completed: %v", err)
	}
}
