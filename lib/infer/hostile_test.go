package infer

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
	"tokenmill/lib/record"
)

// Two runs on one output under two names, a symbolic link or a hard link
// to it (with --resume, with --regenerate), are one output: the second is
// refused at once while the first runs, exit 1 naming the holder, and the
// answers are never written twice.
func TestLockedUnderAnyName(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{TimeScale: 20, MaxRunning: 2}, 1, promptSet{n: 200})
	first := startInfer(t, s.args("--max-tokens", "64", "--regenerate")...)
	waitFor(t, 30*time.Second, "the first run's output", func() bool {
		_, err := os.Stat(s.out)
		return err == nil
	})
	latest := filepath.Join(s.dir, "latest.jsonl")
	hard := filepath.Join(s.dir, "hard.jsonl")
	if err := os.Symlink(s.out, latest); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(s.out, hard); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		out  string
		want string
	}{
		{latest, fmt.Sprintf("-o %q is in use by process %d", s.out, first.cmd.Process.Pid)},
		{hard, fmt.Sprintf("-o %q is in use by another process under another name", hard)},
	} {
		r := runBinary(t, "-o", tt.out, s.in, "-e", endpointsFlag(s.fleet.URLs()), "--max-tokens", "64", "--regenerate", "--resume", "--progress", "0")
		if r.Code != cli.ExitFailure || !strings.Contains(r.Stderr, tt.want) {
			t.Fatalf("second run on %s: exit %d, want 1 saying %q:\n%s", tt.out, r.Code, tt.want, r.Stderr)
		}
	}
	first.cmd.Process.Signal(os.Interrupt)
	if code := first.wait(t, 30*time.Second); code != cli.ExitInterrupted {
		t.Fatalf("first run: exit %d\n%s", code, first.stderr.String())
	}
	// Resumed through the link until done: each answer once.
	for i := 0; ; i++ {
		// A shorter limit, to finish fast: another setting, allowed.
		r := runBinary(t, "-o", latest, s.in, "-e", endpointsFlag(s.fleet.URLs()), "--max-tokens", "8", "--regenerate", "--resume", "--allow-changed-settings", "--progress", "0")
		if r.Code == cli.ExitOK {
			break
		}
		if i == 3 {
			t.Fatalf("resume through the link: exit %d\n%s", r.Code, r.Stderr)
		}
	}
	checkConversations(t, s.lines, convCheck{samples: 1}, readRecords(t, s.out), readRecords(t, s.errs()))
	if st, err := os.Lstat(latest); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was not kept: %v", err)
	}
	assertNoLitter(t, s.dir)
}

// assertNoLitter fails on a lock or temporary file left in dir.
func assertNoLitter(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".lock") || strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("%s left in %s", e.Name(), dir)
		}
	}
}

// A symbolic link planted at one of infer's own files (the turn journal,
// the errors file, the lock file) is never followed: the run is refused
// before anything is written, the link's target is neither created,
// written nor printed. --force on an -o that is a link replaces the link
// with the new output and leaves its target alone.
func TestSidecarLinksRefused(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 5})
	elsewhere := t.TempDir()
	victim := filepath.Join(elsewhere, "victim.txt")
	const secret = "PRIVATE-CONTENT-1234"
	os.WriteFile(victim, []byte(`{"id":"z","error":{"message":"`+secret+`"}}`+"\n"), 0o600)
	dangling := filepath.Join(elsewhere, "created-by-infer")
	for _, tt := range []struct {
		name, at, to string
		args         []string
		code         int
		want         string
	}{
		{"dangling journal link", s.out + ".turns", dangling, []string{"--regenerate"}, cli.ExitUsage, "-o's turn journal"},
		{"journal link to a file", s.out + ".turns", victim, []string{"--regenerate", "--resume"}, cli.ExitUsage, "is a symbolic link"},
		{"errors link to a file", s.errs(), victim, nil, cli.ExitUsage, "--errors"},
		{"dangling errors link", s.errs(), dangling, nil, cli.ExitUsage, "is a symbolic link"},
		{"lock link", s.out + ".lock", victim, nil, cli.ExitFailure, "is a symbolic link, not a lock file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.Symlink(tt.to, tt.at); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(tt.at)
			r := runBinary(t, s.args(tt.args...)...)
			if r.Code != tt.code || !strings.Contains(r.Stderr, tt.want) {
				t.Fatalf("exit %d, want %d saying %q:\n%s", r.Code, tt.code, tt.want, r.Stderr)
			}
			if strings.Contains(r.Stderr, secret) {
				t.Fatalf("the link's target was printed:\n%s", r.Stderr)
			}
			if _, err := os.Lstat(dangling); err == nil {
				t.Fatal("the dangling link's target was created")
			}
			if b, _ := os.ReadFile(victim); !strings.Contains(string(b), secret) || strings.Count(string(b), "\n") != 1 {
				t.Fatalf("the link's target changed: %q", b)
			}
			if _, err := os.Stat(s.out); err == nil {
				t.Fatal("-o was created by a refused run")
			}
		})
	}
	t.Run("force on a linked -o", func(t *testing.T) {
		link := filepath.Join(s.dir, "link-out.jsonl")
		os.Symlink(victim, link)
		r := runBinary(t, "-o", link, s.in, "-e", endpointsFlag(s.fleet.URLs()), "--force", "--progress", "0")
		if r.Code != cli.ExitOK {
			t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
		}
		if b, _ := os.ReadFile(victim); !strings.Contains(string(b), secret) {
			t.Fatalf("--force truncated the link's target: %q", b)
		}
		st, err := os.Lstat(link)
		if err != nil || !st.Mode().IsRegular() {
			t.Fatalf("the link was not replaced by the output: %v %v", st, err)
		}
		if got := len(readRecords(t, link)); got != 5 {
			t.Fatalf("%d answers in the new output, want 5", got)
		}
	})
	t.Run("force through a hard link", func(t *testing.T) {
		out := filepath.Join(s.dir, "h.jsonl")
		other := filepath.Join(s.dir, "h-other-name.jsonl")
		os.WriteFile(out, []byte(`{"id":"old","output":{"text":"kept under the other name"}}`+"\n"), 0o644)
		os.Link(out, other)
		r := runBinary(t, "-o", out, s.in, "-e", endpointsFlag(s.fleet.URLs()), "--force", "--progress", "0")
		if r.Code != cli.ExitOK {
			t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
		}
		if b, _ := os.ReadFile(other); !strings.Contains(string(b), "kept under the other name") {
			t.Fatalf("--force emptied the file under its other name: %q", b)
		}
	})
	assertNoLitter(t, s.dir)
}

// An errors file that is a FIFO or a device is written in place: never
// removed, never replaced by a regular file, whether prompts fail or not.
func TestErrorsFileDeviceOrFIFO(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{Instant: true, Faults: llmsim.Faults{FailRate: 1}}, 1, promptSet{n: 4})
	fifo := filepath.Join(s.dir, "errors.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// The FIFO's reader: every error record the run writes.
	got := make(chan string, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		got <- string(b)
	}()
	r := runBinary(t, s.args("--errors", fifo, "--retries", "0")...)
	if r.Code != cli.ExitRejects {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	select {
	case b := <-got:
		if n := strings.Count(b, `"error":`); n != 4 {
			t.Fatalf("the FIFO's reader got %d error records, want 4:\n%s", n, b)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the FIFO's reader got no end of file")
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO is gone or replaced: %v %v", st, err)
	}

	// Nothing failed and no reader waits: the FIFO is not opened to wait
	// for one (the run would never end), and stays a FIFO.
	none := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 4})
	idle := filepath.Join(none.dir, "idle.fifo")
	if err := syscall.Mkfifo(idle, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runBinary(t, none.args("--errors", idle)...); r.Code != cli.ExitOK {
		t.Fatalf("nothing failed, no reader on the FIFO: exit %d\n%s", r.Code, r.Stderr)
	}
	if st, err := os.Lstat(idle); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the idle FIFO is gone or replaced: %v %v", st, err)
	}

	devices := []string{}
	if os.Geteuid() == 0 {
		dev := filepath.Join(s.dir, "mynull")
		if err := syscall.Mknod(dev, syscall.S_IFCHR|0o666, int(1<<8|3)); err == nil {
			devices = append(devices, dev)
		}
	}
	ok := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 4})
	for _, dev := range devices {
		for _, st := range []*setup{s, ok} { // failures, and none
			os.Remove(st.out)
			r := runBinary(t, st.args("--errors", dev, "--retries", "0", "--force")...)
			if r.Code != cli.ExitRejects && r.Code != cli.ExitOK {
				t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
			}
			if fi, err := os.Lstat(dev); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
				t.Fatalf("the device %s is gone or replaced: %v %v", dev, fi, err)
			}
		}
	}
	if len(devices) == 0 {
		t.Log("no device made (not root): the FIFO case alone")
	}
}

// infer reading its input from stdin redirected from the file -o names
// (`infer --force -o x.jsonl < x.jsonl`, or with -) is refused, exit 2,
// before the file is touched; so is --regenerate.
func TestStdinIsTheOutput(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 40})
	before, _ := os.ReadFile(s.in)
	for _, args := range [][]string{
		{"--force"},
		{"--force", "-"},
		{"--force", "--regenerate"},
		{"--resume"},
	} {
		f, err := os.Open(s.in)
		if err != nil {
			t.Fatal(err)
		}
		cmd := testbin.Command("infer", append([]string{"-o", s.in, "-e", endpointsFlag(s.fleet.URLs()), "--progress", "0"}, args...)...)
		cmd.Stdin = f
		r := testbin.Exec(t, cmd)
		f.Close()
		if r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, "is the same file as the input on stdin") {
			t.Fatalf("%v: exit %d, want 2:\n%s", args, r.Code, r.Stderr)
		}
		if after, _ := os.ReadFile(s.in); string(after) != string(before) {
			t.Fatalf("%v: the input changed", args)
		}
	}
	assertNoLitter(t, s.dir)
}

// echoStub answers every generation request with status and a body that
// repeats the request's Authorization header, raw and after a terminal
// escape that would set the window title, colour the text and forge a
// log line.
func echoStub(t *testing.T, status int) *stub {
	return startStub(t, func(s *stub, ctx *fasthttp.RequestCtx) {
		auth := string(ctx.Request.Header.Peek("Authorization"))
		ctx.SetStatusCode(status)
		ctx.SetContentType("application/json")
		msg := "you sent " + auth + " \x1b]0;PWNED\x07\x1b[31mRED\x1b[0m\r\nfake line"
		b, _ := json.Marshal(map[string]any{"object": "error", "message": msg})
		ctx.SetBody(b)
	})
}

// A server that echoes the credentials it was sent (the API key from
// --api-key or OPENAI_API_KEY as a Bearer header, a URL's password as a
// Basic header) and terminal escapes: nothing infer writes (stderr, the
// errors file, infer bench --json) holds the key, the password or the
// Basic header's base64, and stderr holds no raw control character.
func TestEchoedSecretsAndEscapes(t *testing.T) {
	t.Parallel()
	const key, pw = "sk-hostile-5e4d3c2b1a", "S3cr3tPw-77"
	s := echoStub(t, fasthttp.StatusInternalServerError)
	withPassword := strings.Replace(s.url, "http://", "http://admin:"+pw+"@", 1)
	basic := base64.StdEncoding.EncodeToString([]byte("admin:" + pw))
	su := newSetup(t, llmsim.Config{}, 0, promptSet{n: 3})
	for _, tt := range []struct {
		name     string
		endpoint string
		env      []string
		args     []string
	}{
		{"--api-key", s.url, nil, []string{"--api-key", key}},
		{"OPENAI_API_KEY", s.url, []string{"OPENAI_API_KEY=" + key}, nil},
		{"URL password", withPassword, nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(su.errs())
			args := append([]string{"-o", su.out, su.in, "-e", tt.endpoint, "--force", "--retries", "0", "--progress", "0"}, tt.args...)
			cmd := testbin.Command("infer", args...)
			cmd.Env = append(os.Environ(), tt.env...)
			r := testbin.Exec(t, cmd)
			if r.Code != cli.ExitRejects {
				t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
			}
			errs, _ := os.ReadFile(su.errs())
			if n := strings.Count(string(errs), `"error":`); n != 3 {
				t.Fatalf("%d error records, want 3:\n%s", n, errs)
			}
			bench := testbin.Command("infer", append([]string{"bench", "-e", tt.endpoint, "--json", "--concurrency", "1", "--duration", "1s", "--warmup", "0s"}, tt.args...)...)
			bench.Env = cmd.Env
			br := testbin.Exec(t, bench)
			for what, text := range map[string]string{"stderr": r.Stderr, "errors file": string(errs), "bench --json": string(br.Stdout), "bench stderr": br.Stderr} {
				for _, secret := range []string{key, pw, basic} {
					if strings.Contains(text, secret) {
						t.Errorf("%s shows %q:\n%s", what, secret, text)
					}
				}
			}
			if !strings.Contains(string(errs), "you sent Bearer ***") && !strings.Contains(string(errs), "you sent Basic ***") {
				t.Errorf("the errors file does not show the echo redacted:\n%s", errs)
			}
			for what, text := range map[string]string{"stderr": r.Stderr, "bench stderr": br.Stderr} {
				if strings.ContainsAny(text, "\x1b\x07\r") || strings.Contains(text, "\nfake line") {
					t.Errorf("%s holds raw control characters: %q", what, text)
				}
			}
			if !strings.Contains(r.Stderr, `\x1b]0;PWNED\x07`) {
				t.Errorf("the escape is not shown escaped:\n%s", r.Stderr)
			}
		})
	}
}

// A server that answers every request 429 with Retry-After: 1 (a quota
// run out) ends the run, plain or --regenerate: each 429 counts toward
// --retries, so with a budget that runs out first every prompt is an
// error record (status 429, --retries+1 attempts, exit 3); with a larger
// budget, once every endpoint has answered nothing but 429 for
// --down-timeout, the run stops with exit 1 saying the servers refuse for
// quota or rate limit, and no prompt is written anywhere, so --resume
// redoes them all.
func TestPermanent429Ends(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	s := startStub(t, func(_ *stub, ctx *fasthttp.RequestCtx) {
		requests.Add(1)
		ctx.Response.Header.Set("Retry-After", "1")
		ctx.SetStatusCode(fasthttp.StatusTooManyRequests)
		ctx.SetBodyString(`{"error":{"message":"quota exceeded","type":"insufficient_quota"}}`)
	})
	for _, regen := range []bool{false, true} {
		t.Run(fmt.Sprintf("regenerate=%v", regen), func(t *testing.T) {
			su := newSetup(t, llmsim.Config{}, 0, promptSet{n: 6})
			extra := []string{"-e", s.url, "--max-backoff", "20ms"}
			if regen {
				extra = append(extra, "--regenerate")
			}
			requests.Store(0)
			r := runBinary(t, su.args(append(extra, "--retries", "2")...)...)
			if r.Code != cli.ExitRejects {
				t.Fatalf("--retries 2: exit %d, want 3\n%s", r.Code, r.Stderr)
			}
			errs := readRecords(t, su.errs())
			if len(errs) != 6 || len(readRecords(t, su.out)) != 0 {
				t.Fatalf("%d error records, want 6\n%s", len(errs), r.Stderr)
			}
			for _, e := range errs {
				if e.Error.Status != 429 || e.Error.Attempts != 3 || !e.Error.Retriable {
					t.Fatalf("error record %+v", e.Error)
				}
			}
			if n := requests.Load(); n != 18 {
				t.Errorf("%d requests for 6 prompts with --retries 2, want 18", n)
			}

			os.Remove(su.out)
			os.Remove(su.errs())
			requests.Store(0)
			r = runBinary(t, su.args(append(extra, "--retries", "100000", "--down-timeout", "300ms")...)...)
			if r.Code != cli.ExitFailure || !strings.Contains(r.Stderr, "refusing every request for quota or rate limit") ||
				!strings.Contains(r.Stderr, "nothing but 429 Too Many Requests for 300ms (--down-timeout)") {
				t.Fatalf("--down-timeout 300ms: exit %d, want 1 saying the servers refuse for quota:\n%s", r.Code, r.Stderr)
			}
			if len(readRecords(t, su.out))+len(readRecords(t, su.errs())) != 0 || !strings.Contains(r.Stderr, "not done 6") {
				t.Fatalf("the prompts are not all left for --resume:\n%s", r.Stderr)
			}
			assertNoLitter(t, su.dir)
		})
	}
}

// refusingStub answers chat requests "ok", but refuses with one and the
// same 400 every prompt whose text holds BAD.
func refusingStub(t *testing.T) *stub {
	return startStub(t, func(_ *stub, ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		if strings.Contains(string(ctx.PostBody()), "BAD") {
			ctx.SetStatusCode(fasthttp.StatusBadRequest)
			ctx.SetBodyString(`{"object":"error","message":"Invalid request: content policy","type":"BadRequestError","code":400}`)
			return
		}
		ctx.SetBodyString(`{"id":"x","object":"chat.completion","model":"stub-model","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	})
}

// Three prompts refused with one identical 400, fifty answered: resumes
// send the three again, find them refused as the errors file recorded,
// write them there again and finish (exit 3); they are never taken for a
// systematic refusal of the run (which stopped every resume with exit 1
// and lost one of them), and every prompt is in exactly one file after
// every run. A fresh run that meets the three first (--concurrency 2) may
// stop as systematic, but writes all three, and the resume goes on.
func TestResumeRecountsKnownRefusals(t *testing.T) {
	t.Parallel()
	s := refusingStub(t)
	su := newSetup(t, llmsim.Config{}, 0, promptSet{n: 0})
	var in strings.Builder
	for i := 0; i < 53; i++ {
		text := fmt.Sprintf("question %d", i)
		if i < 3 {
			text += " BAD"
		}
		fmt.Fprintf(&in, `{"id":%q,"messages":[{"role":"user","content":%q}]}`+"\n", idOf(i), text)
	}
	os.WriteFile(su.in, []byte(in.String()), 0o644)
	args := func(extra ...string) []string {
		return append([]string{"-o", su.out, su.in, "-e", s.url, "--progress", "0", "--concurrency", "2", "--queue-depth", "0"}, extra...)
	}
	// accounted: every id in exactly one file, the three bad ones refused.
	accounted := func(run string, final bool) {
		t.Helper()
		seen := map[string]string{}
		for kind, path := range map[string]string{"output": su.out, "error": su.errs()} {
			for _, g := range readRecords(t, path) {
				if prev, ok := seen[g.ID.Text]; ok {
					t.Fatalf("%s: %s in %s and %s", run, g.ID.Text, prev, kind)
				}
				seen[g.ID.Text] = kind
			}
		}
		for i := 0; i < 53; i++ {
			want := "output"
			if i < 3 {
				want = "error"
			}
			if got := seen[idOf(i)]; got != want && (final || got != "" || i < 3) {
				t.Fatalf("%s: %s is in %q, want %q", run, idOf(i), got, want)
			}
		}
	}
	r := runBinary(t, args()...)
	switch r.Code {
	case cli.ExitRejects:
		accounted("fresh run", true)
	case cli.ExitFailure:
		if !strings.Contains(r.Stderr, "every endpoint refused the first requests the same way") || !strings.Contains(r.Stderr, "--resume goes on") {
			t.Fatalf("fresh run: exit 1 for another reason:\n%s", r.Stderr)
		}
		accounted("fresh run stopped as systematic", false)
	default:
		t.Fatalf("fresh run: exit %d\n%s", r.Code, r.Stderr)
	}
	for i := range 3 {
		r := runBinary(t, args("--resume")...)
		if r.Code != cli.ExitRejects || strings.Contains(r.Stderr, "every endpoint refused") || !strings.Contains(r.Stderr, "refused again as the errors file recorded: 3") {
			t.Fatalf("resume %d: exit %d, want 3 with the three refused again:\n%s", i+1, r.Code, r.Stderr)
		}
		accounted(fmt.Sprintf("resume %d", i+1), true)
	}
}

// A prompt record over --max-prompt-bytes is rejected as it is read
// (line_too_long, naming the flag), never sent; the prompts around it are
// answered.
func TestPromptOverLimitRejected(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 0})
	huge := `{"id":"huge","messages":[{"role":"user","content":"` + strings.Repeat("a", 3<<20) + `"}]}`
	os.WriteFile(s.in, []byte(`{"id":"a","messages":[{"role":"user","content":"one"}]}`+"\n"+huge+"\n"+`{"id":"b","messages":[{"role":"user","content":"two"}]}`+"\n"), 0o644)
	r := runBinary(t, s.args("--max-prompt-bytes", "1MiB")...)
	if r.Code != cli.ExitRejects || !strings.Contains(r.Stderr, "prompts.jsonl:2: line_too_long: line longer than 1048576 bytes (--max-prompt-bytes)") {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	outs := readRecords(t, s.out)
	if len(outs) != 2 || outs[0].ID.Text == "huge" || outs[1].ID.Text == "huge" {
		t.Fatalf("%d answers", len(outs))
	}
	if st := s.fleet.Stats(); st.Requests != 2 {
		t.Fatalf("%d requests, want 2: the huge prompt was sent", st.Requests)
	}
}

// completionBody is a chat answer whose text is n bytes of x.
func completionBody(n int) []byte {
	return []byte(`{"id":"x","object":"chat.completion","model":"stub-model","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("x", n) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
}

// Answer bodies are bounded as they arrive: a chunked body past
// --max-answer-bytes is cut off, the prompt an error record
// answer_too_large after one attempt (no retry, the connection closed);
// and bodies of requests in flight together stay within --answer-memory:
// with room for two of four at once, the others are abandoned (their
// connections closed mid-body) and sent again, until every prompt is
// answered exactly once.
func TestAnswerBodiesBounded(t *testing.T) {
	t.Parallel()
	var endless, abandoned atomic.Int64
	huge := startStub(t, func(_ *stub, ctx *fasthttp.RequestCtx) {
		endless.Add(1)
		ctx.SetContentType("application/json")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			w.WriteString(`{"choices":[{"message":{"role":"assistant","content":"`)
			chunk := strings.Repeat("x", 64<<10)
			for range 1 << 15 { // 2 GiB, if nothing stops it
				if _, err := w.WriteString(chunk); err != nil {
					return
				}
				if w.Flush() != nil {
					return
				}
			}
		})
	})
	su := newSetup(t, llmsim.Config{}, 0, promptSet{n: 2})
	r := runBinary(t, su.args("-e", huge.url, "--max-answer-bytes", "1MiB", "--retries", "3")...)
	if r.Code != cli.ExitRejects {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	errs := readRecords(t, su.errs())
	if len(errs) != 2 || endless.Load() != 2 {
		t.Fatalf("%d error records, %d requests; want 2 and 2\n%s", len(errs), endless.Load(), r.Stderr)
	}
	for _, e := range errs {
		if e.Error.Reason != "answer_too_large" || e.Error.Attempts != 1 || !strings.Contains(e.Error.Message, "passed 1MiB (--max-answer-bytes)") {
			t.Fatalf("error record %+v", e.Error)
		}
	}

	const size = 600 << 10
	slow := startStub(t, func(_ *stub, ctx *fasthttp.RequestCtx) {
		body := completionBody(size)
		ctx.SetContentType("application/json")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for off := 0; off < len(body); off += 32 << 10 {
				if _, err := w.Write(body[off:min(off+32<<10, len(body))]); err != nil || w.Flush() != nil {
					abandoned.Add(1)
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	})
	su = newSetup(t, llmsim.Config{}, 0, promptSet{n: 12})
	r = runBinary(t, su.args("-e", slow.url, "--concurrency", "4", "--max-answer-bytes", "1MiB", "--answer-memory", "1400KiB", "--retries", "1000")...)
	if r.Code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	outs := readRecords(t, su.out)
	if len(outs) != 12 {
		t.Fatalf("%d answers, want 12", len(outs))
	}
	seen := map[string]bool{}
	for _, g := range outs {
		if seen[g.ID.Text] || len(g.Output.Text) != size {
			t.Fatalf("%s twice, or its answer is %d bytes", g.ID.Text, len(g.Output.Text))
		}
		seen[g.ID.Text] = true
	}
	waitFor(t, 5*time.Second, "the server to see an abandoned body", func() bool { return abandoned.Load() > 0 })
}

// An id is its text in infer as in every tool: records with ids 7 and "7"
// are one prompt, answered once, the second counted as a duplicate.
func TestIDsAreTheirText(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 0})
	os.WriteFile(s.in, []byte(`{"id":7,"messages":[{"role":"user","content":"one"}]}`+"\n"+`{"id":"7","messages":[{"role":"user","content":"one"}]}`+"\n"), 0o644)
	res := runWant(t, cli.ExitOK, s.args()...)
	if outs := readRecords(t, s.out); len(outs) != 1 || !strings.Contains(res.stderr, `duplicate id "7"`) {
		t.Fatalf("%d answers\n%s", len(outs), res.stderr)
	}
}

// A server that gives two tool calls of one answer the same id: the
// second is re-addressed (call_<m>_<k>), in a plain answer and in a
// regenerated conversation, whose tool results then pair one to one with
// the calls; the summary counts them.
func TestSharedToolCallIDs(t *testing.T) {
	t.Parallel()
	s := startStub(t, func(_ *stub, ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		if strings.Contains(string(ctx.PostBody()), `"role":"tool"`) {
			ctx.SetBodyString(`{"choices":[{"message":{"role":"assistant","content":"A sunny, B rain"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":4}}`)
			return
		}
		ctx.SetBodyString(`{"choices":[{"message":{"role":"assistant","content":"","tool_calls":[` +
			`{"id":"dup","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"A\"}"}},` +
			`{"id":"dup","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"B\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":9,"completion_tokens":8}}`)
	})
	su := newSetup(t, llmsim.Config{}, 0, promptSet{n: 0})
	os.WriteFile(su.in, []byte(`{"id":"c1","messages":[{"role":"user","content":"Weather in A and B?"},`+
		`{"role":"assistant","content":"","tool_calls":[{"id":"t1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"A\"}"}},{"id":"t2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"B\"}"}}]},`+
		`{"role":"tool","tool_call_id":"t1","content":"sunny"},{"role":"tool","tool_call_id":"t2","content":"rain"},{"role":"assistant","content":"A is sunny, B rainy."}],`+
		`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}`+"\n"), 0o644)
	conv, _ := os.ReadFile(su.in)
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
	for _, regen := range []bool{false, true} {
		os.Remove(su.out)
		args := su.args("-e", s.url)
		if regen {
			args = append(args, "--regenerate")
			os.WriteFile(su.in, conv, 0o644)
		} else {
			os.WriteFile(su.in, []byte(`{"id":"p1","messages":[{"role":"user","content":"Weather in A and B?"}],`+tools+"}\n"), 0o644)
		}
		r := runBinary(t, args...)
		if r.Code != cli.ExitOK || !strings.Contains(r.Stderr, "tool calls re-addressed (their id repeated another call's in the same answer): 1") {
			t.Fatalf("regenerate %v: exit %d\n%s", regen, r.Code, r.Stderr)
		}
		g := readRecords(t, su.out)
		if len(g) != 1 {
			t.Fatalf("%d records", len(g))
		}
		var out struct {
			ToolCalls []record.ToolCall `json:"tool_calls"`
			Messages  []record.Message  `json:"messages"`
		}
		raw, _ := record.FieldValue([]byte(g[0].raw), "output")
		json.Unmarshal(raw, &out)
		calls := out.ToolCalls
		if regen {
			calls = nil
			var results []string
			for _, m := range out.Messages {
				if m.Role == "assistant" && len(m.ToolCalls) > 0 {
					json.Unmarshal(m.ToolCalls, &calls)
				}
				if m.Role == "tool" {
					results = append(results, m.ToolCallID)
				}
			}
			if fmt.Sprint(results) != "[dup call_2_2]" {
				t.Fatalf("tool results answer %v, want [dup call_2_2]:\n%s", results, g[0].raw)
			}
		}
		if len(calls) != 2 || calls[0].ID != "dup" || calls[1].ID != "call_2_2" {
			t.Fatalf("regenerate %v: calls %+v", regen, calls)
		}
	}
}

// An answer nested millions deep (6 MB of brackets) is a malformed answer,
// retried and then filed, never a crash of the decoder's stack: every
// prompt is in the errors file, the run ends 3, and no lock is left. The
// same body as an error answer is read as
// malformed too (a streamed chunk: lib/openai's TestDeepBodies).
func TestDeeplyNestedAnswers(t *testing.T) {
	t.Parallel()
	const depth = 3_000_000
	deep := strings.Repeat("[", depth) + strings.Repeat("]", depth)
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"answer", fasthttp.StatusOK, `{"choices":[{"message":{"role":"assistant","content":` + deep + `}}]}`},
		{"bare", fasthttp.StatusOK, deep},
		{"error body", fasthttp.StatusInternalServerError, `{"error":` + deep + `}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var requests atomic.Int64
			s := startStub(t, func(_ *stub, ctx *fasthttp.RequestCtx) {
				requests.Add(1)
				ctx.SetContentType("application/json")
				ctx.SetStatusCode(tc.status)
				ctx.SetBodyString(tc.body)
			})
			su := newSetup(t, llmsim.Config{}, 0, promptSet{n: 2})
			r := runBinary(t, su.args("-e", s.url, "--retries", "1", "--max-backoff", "10ms")...)
			if r.Code != cli.ExitRejects || strings.Contains(r.Stderr, "stack overflow") {
				t.Fatalf("exit %d, want 3\n%.2000s", r.Code, r.Stderr)
			}
			errs := readRecords(t, su.errs())
			if len(errs) != 2 || len(readRecords(t, su.out)) != 0 || requests.Load() != 4 {
				t.Fatalf("%d error records, %d requests; want 2 and 4\n%.2000s", len(errs), requests.Load(), r.Stderr)
			}
			for _, e := range errs {
				if !e.Error.Retriable || e.Error.Attempts != 2 {
					t.Fatalf("error record %+v", e.Error)
				}
			}
			assertNoLitter(t, su.dir)
		})
	}
}

// Values no working server gives are malformed answers, retried then
// filed, never good records: a negative token count, tool-call arguments
// that are not a JSON object.
func TestBadServerValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, body string }{
		{"negative usage", `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":-25,"completion_tokens":-5925}}`},
		{"arguments not JSON", `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{not json"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":5}}`},
		{"arguments not an object", `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"[1,2]"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":5}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startStub(t, func(_ *stub, ctx *fasthttp.RequestCtx) {
				ctx.SetContentType("application/json")
				ctx.SetBodyString(tc.body)
			})
			su := newSetup(t, llmsim.Config{}, 0, promptSet{n: 3})
			r := runBinary(t, su.args("-e", s.url, "--retries", "1", "--max-backoff", "10ms")...)
			if r.Code != cli.ExitRejects {
				t.Fatalf("exit %d, want 3\n%s", r.Code, r.Stderr)
			}
			errs := readRecords(t, su.errs())
			if len(errs) != 3 || len(readRecords(t, su.out)) != 0 || strings.Contains(r.Stderr, "-5,925") {
				t.Fatalf("%d error records, %d good; want 3 and none\n%s", len(errs), len(readRecords(t, su.out)), r.Stderr)
			}
		})
	}
}
