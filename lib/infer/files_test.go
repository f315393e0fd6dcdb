package infer

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
	"tokenmill/lib/record"
)

// A second infer on the same -o, with or without --resume, refuses at
// once naming the first one's pid, and leaves the first run's files alone.
func TestOutputLockedForTheRun(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{TimeScale: 20, MaxRunning: 2}, 1, promptSet{n: 200})
	first := startInfer(t, s.args("--max-tokens", "64")...)
	waitFor(t, 30*time.Second, "the first run's lock", func() bool {
		_, err := os.Stat(s.out + ".lock")
		return err == nil
	})
	// At once: a second run that waited for the lock would get it only
	// once the first had ended, and would then not refuse; the first is
	// still running when it is interrupted below.
	for _, extra := range [][]string{nil, {"--resume"}} {
		r := runBinary(t, s.args(append([]string{"--max-tokens", "64"}, extra...)...)...)
		want := fmt.Sprintf(`-o %q is in use by process %d`, s.out, first.cmd.Process.Pid)
		if r.Code != cli.ExitFailure || !strings.Contains(r.Stderr, want) {
			t.Fatalf("second run %v: exit %d, want 1 saying %q:\n%s", extra, r.Code, want, r.Stderr)
		}
	}
	first.cmd.Process.Signal(os.Interrupt)
	if code := first.wait(t, 30*time.Second); code != cli.ExitInterrupted {
		t.Fatalf("first run: exit %d\n%s", code, first.stderr.String())
	}
	// The first run's answers are intact and the lock is gone.
	readRecords(t, s.out)
	if _, err := os.Stat(s.out + ".lock"); !os.IsNotExist(err) {
		t.Errorf("the lock file is left: %v", err)
	}
	r := runBinary(t, s.args("--max-tokens", "8", "--resume", "--allow-changed-settings")...) // a shorter limit, to finish fast
	if r.Code != cli.ExitOK {
		t.Fatalf("resume after the lock is released: exit %d\n%s", r.Code, r.Stderr)
	}
}

// Files that infer must not write: an --errors file that is not infer's
// own, an output that is an input or another output under another name, a
// directory, an existing --rejects without --force. Each refusal is exit
// 2, names both files, and leaves every file as it was.
func TestRefusesFilesItMustNotWrite(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 3})
	other := filepath.Join(s.dir, "notes.jsonl")
	os.WriteFile(other, []byte(`{"id":"x","note":"precious"}`+"\n"), 0o644)
	link := filepath.Join(s.dir, "link.jsonl")
	os.Symlink(s.in, link)
	rejects := filepath.Join(s.dir, "rejects.jsonl")
	os.WriteFile(rejects, []byte(`{"raw":"x","reject":{"reason":"malformed_json"}}`+"\n"), 0o644)
	sub := filepath.Join(s.dir, "sub")
	os.Mkdir(sub, 0o755)
	before := dirState(t, s.dir)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--errors", other}, fmt.Sprintf("--errors %q is not an infer errors file", other)},
		{[]string{"--errors", s.in}, fmt.Sprintf("--errors %q is the same file as input %q", s.in, s.in)},
		{[]string{"--errors", link}, fmt.Sprintf("--errors %q is the same file as input %q", link, s.in)},
		{[]string{"--rejects", s.in, "--force"}, fmt.Sprintf("--rejects %q is the same file as input %q", s.in, s.in)},
		{[]string{"--rejects", rejects}, fmt.Sprintf("--rejects %q already exists", rejects)},
		{[]string{"--errors", sub}, fmt.Sprintf("--errors %q is a directory", sub)},
		{[]string{"-o", sub}, fmt.Sprintf("-o %q is a directory", sub)},
		{[]string{"-o", link}, fmt.Sprintf("-o %q is the same file as input %q", link, s.in)},
	} {
		r := runBinary(t, s.args(append([]string{"-e", "127.0.0.1:1"}, tt.args...)...)...)
		if r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, tt.want) {
			t.Errorf("%v: exit %d, want 2 saying %q:\n%s", tt.args, r.Code, tt.want, r.Stderr)
		}
		if after := dirState(t, s.dir); after != before {
			t.Fatalf("%v: files changed:\n%s\nbecame\n%s", tt.args, before, after)
		}
	}
}

// infer's own errors file is rewritten by the next run; with --resume an
// existing --rejects is written again.
func TestOwnFilesRewritten(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 10})
	os.WriteFile(s.errs(), []byte(`{"id":"p00001","messages":[],"error":{"status":500,"message":"old","attempts":1,"retriable":true,"sample":0}}`+"\n"), 0o644)
	rejects := filepath.Join(s.dir, "rejects.jsonl")
	os.WriteFile(rejects, nil, 0o644)
	runWant(t, cli.ExitOK, s.args("--rejects", rejects, "--resume")...)
	if b, _ := os.ReadFile(s.errs()); len(b) != 0 {
		t.Errorf("the old errors file was not rewritten: %s", b)
	}
	s.check(t, 1)
}

// The depth check and the exact-"id" rule reach infer's input: a record
// nested past the limit is rejected as malformed_json, one with "ID" but
// no "id" as no_id; the others are answered.
func TestDeepAndMisnamedRecordsRejected(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 4})
	f, _ := os.OpenFile(s.in, os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprintf(f, `{"id":"deep","messages":[{"role":"user","content":"hi"}],"meta":%s1%s}`+"\n", strings.Repeat("[", 20000), strings.Repeat("]", 20000))
	f.WriteString(`{"ID":"upper","messages":[{"role":"user","content":"hi"}]}` + "\n")
	f.Close()
	rej := filepath.Join(s.dir, "rejects.jsonl")
	runWant(t, cli.ExitRejects, s.args("--rejects", rej)...)
	s.check(t, 1)
	got := readRecords(t, rej)
	if len(got) != 2 || !strings.Contains(got[0].raw, `"reason":"malformed_json"`) || !strings.Contains(got[1].raw, `"reason":"no_id"`) {
		t.Fatalf("rejects:\n%v", got)
	}
}

// An answer whose record would pass the line limit is an error record
// answer_too_large, never a line that --resume cannot read; the others
// are written, and a resume goes on from them.
func TestAnswerTooLarge(t *testing.T) {
	old := maxLineOut
	maxLineOut = 64 << 10
	t.Cleanup(func() { maxLineOut = old })
	s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 6})
	url := hugeAnswers(t, map[string]int{"Question 2:": 100 << 10})
	res := runWant(t, cli.ExitRejects, s.args("-e", url)...)
	acc := checkAPI(t, true, s.lines, 1, readRecords(t, s.out), readRecords(t, s.errs()))
	if acc.ok != 5 || acc.failed != 1 {
		t.Fatalf("%d answers, %d errors\n%s", acc.ok, acc.failed, res.stderr)
	}
	e := acc.errors["p00002/0"]
	if e == nil || e.Error.Reason != record.ReasonAnswerTooLarge {
		t.Fatalf("error records: %+v", acc.errors)
	}
	runWant(t, cli.ExitRejects, s.args("-e", url, "--resume")...)
	if n := len(readRecords(t, s.out)); n != 5 {
		t.Errorf("after the resume the output holds %d records", n)
	}
}

// hugeAnswers is a chat server whose answer to a prompt containing a key
// of sizes is its digest and a word, then that many bytes of a model's
// prose (llmsim.Prose: paragraphs, lists and code, newlines the JSON
// escapes), and to any other prompt its digest and the word alone.
func hugeAnswers(t *testing.T, sizes map[string]int) string {
	t.Helper()
	prose := map[string]string{}
	for key, n := range sizes {
		prose[key] = llmsim.Prose(n)[:n]
	}
	return badServer(t, true, func(ctx *fasthttp.RequestCtx) {
		body := string(ctx.PostBody())
		text := ""
		var p struct {
			Messages []struct{ Role, Content string } `json:"messages"`
		}
		if err := json.Unmarshal(ctx.PostBody(), &p); err == nil {
			var sp llmsim.Prompt
			for _, m := range p.Messages {
				sp.Messages = append(sp.Messages, llmsim.Message{Role: m.Role, Content: m.Content})
			}
			text = llmsim.PromptDigest(sp) + " ok"
		}
		for key, huge := range prose {
			if strings.Contains(body, key) {
				text += " " + huge
			}
		}
		content, _ := json.Marshal(text)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"id":"x","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":` + string(content) + `},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":` + strconv.Itoa(len(text)/4) + `}}`)
	})
}

// A 70 MiB answer (past the old 64 MiB line limit; 9 MiB outside the
// long test tier, past every buffer's first size) is written whole and
// read back by three resumes in a row, through the real binary.
func TestHugeAnswerResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("a 70 MiB answer: skipped with -short")
	}
	t.Parallel()
	size := testbin.Size(9<<20, 70<<20)
	s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 4})
	url := hugeAnswers(t, map[string]int{"Question 1:": size})
	if r := runBinary(t, s.args("-e", url)...); r.Code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	want, _ := os.ReadFile(s.out)
	if len(want) < size {
		t.Fatalf("the output holds %d bytes", len(want))
	}
	for i := 0; i < 3; i++ {
		r := runBinary(t, s.args("-e", url, "--resume")...)
		if r.Code != cli.ExitOK || !regexp.MustCompile(`4 answers already done`).MatchString(r.Stderr) {
			t.Fatalf("resume %d: exit %d\n%s", i, r.Code, r.Stderr)
		}
		if got, _ := os.ReadFile(s.out); !bytes.Equal(got, want) {
			t.Fatalf("resume %d changed the output", i)
		}
	}
	s.check(t, 1)
}
