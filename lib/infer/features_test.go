package infer

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
	"tokenmill/lib/cli"
	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// --samples K: K answers per prompt, numbered 0..K-1.
func TestSamples(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{TimeScale: 2000, MaxRunning: 8}, 2, promptSet{n: 40})
	res := runWant(t, cli.ExitOK, s.args("--max-tokens", "16", "--samples", "3", "--seed", "100")...)
	acc := s.check(t, 3)
	if acc.ok != 120 {
		t.Fatalf("ok %d, want 120", acc.ok)
	}
	if !strings.Contains(res.stderr, "answers 120 (3 samples each): ok 120") {
		t.Errorf("summary:\n%s", res.stderr)
	}
}

// Bad records are rejected with their reason, duplicate ids are named and
// generated once, and the counts add up.
func TestRejectsAndDuplicates(t *testing.T) {
	t.Parallel()
	fleet := startFleet(t, llmsim.Config{TimeScale: 2000, MaxRunning: 8}, 1)
	dir := t.TempDir()
	_, lines := promptSet{n: 10}.write(t, dir, "valid.jsonl")
	var b strings.Builder
	for i := 0; i < 10; i++ {
		b.WriteString(lines[idOf(i)] + "\n")
		if i == 2 || i == 5 {
			b.WriteString(strings.Replace(lines[idOf(i)], "Question", "Another question", 1) + "\n")
		}
	}
	bad := []struct{ line, reason string }{
		{`{"id":"x1","messages":[{"role":"user","content":"unterminated}`, "malformed_json"},
		{`["not", "an", "object"]`, "not_an_object"},
		{`{"messages":[{"role":"user","content":"no id"}]}`, ReasonNoID},
		{`{"id":"x4","source":"nothing to ask"}`, openai.ReasonNoPrompt},
		{`{"id":"x5","messages":[{"role":"user","content":"hi"}],"params":"hot"}`, openai.ReasonBadParams},
		{`{"id":"x6","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}`, openai.ReasonNoUserTurn},
	}
	for _, r := range bad {
		b.WriteString(r.line + "\n")
	}
	in := filepath.Join(dir, "prompts.jsonl")
	os.WriteFile(in, []byte(b.String()), 0o644)
	out, rej := filepath.Join(dir, "gen.jsonl"), filepath.Join(dir, "rejects.jsonl")
	args := append([]string{"-e", endpointsFlag(fleet.URLs()), "--max-tokens", "8", "-o", out, "--rejects", rej, in}, fastFlags...)
	res := runWant(t, cli.ExitRejects, args...)
	checkExactlyOnce(t, lines, 1, readRecords(t, out), nil)
	rejects := readRecords(t, rej)
	if len(rejects) != len(bad) {
		t.Fatalf("%d rejects, want %d", len(rejects), len(bad))
	}
	for i, r := range bad {
		if !strings.Contains(rejects[i].raw, `"reason":"`+r.reason+`"`) {
			t.Errorf("reject %d: %s, want reason %s", i, rejects[i].raw, r.reason)
		}
	}
	for _, want := range []string{`duplicate id "p00002"`, `duplicate id "p00005"`, "read 18 records: 10 prompts, 6 rejected, 2 duplicates"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, res.stderr)
		}
	}
}

// A record's "params" override --extra-body, which overrides the flags.
func TestParamsOverride(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{TimeScale: 2000, MaxRunning: 8}, 1, promptSet{n: 40, extra: func(i int) string {
		if i%2 == 0 {
			return `,"params":{"max_tokens":3}`
		}
		return ""
	}})
	runWant(t, cli.ExitOK, s.args("--max-tokens", "40", "--extra-body", `{"max_tokens":6}`)...)
	acc := s.check(t, 1)
	for key, g := range acc.outputs {
		var i int
		fmt.Sscanf(key, "p%05d", &i)
		limit := 6
		if i%2 == 0 {
			limit = 3
		}
		if n := g.Output.Usage.CompletionTokens; n > limit {
			t.Errorf("%s: %d completion tokens, limit %d", key, n, limit)
		}
	}
}

// Prompts that only failed are tried again on --resume; the errors file
// then lists the latest run's failures alone.
func TestResumeRetriesFailures(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{TimeScale: 2000, MaxRunning: 8, ContextLength: 200}, 1, promptSet{n: 30})
	lengthen(t, s, 4, 9)
	runWant(t, cli.ExitRejects, s.args("--max-tokens", "8")...)
	if acc := s.check(t, 1); acc.failed != 2 {
		t.Fatalf("failed %d", acc.failed)
	}

	large := startFleet(t, llmsim.Config{TimeScale: 2000, MaxRunning: 8}, 1)
	res := runWant(t, cli.ExitOK, s.args("-e", endpointsFlag(large.URLs()), "--max-tokens", "8", "--resume")...)
	if st, err := os.Stat(s.errs()); err != nil || st.Size() != 0 {
		t.Errorf("the old errors file was not replaced by an empty one: %v", err)
	}
	acc := s.check(t, 1)
	if acc.ok != 30 || !strings.Contains(res.stderr, "ok 2, failed 0, skipped 28") {
		t.Fatalf("ok %d\n%s", acc.ok, res.stderr)
	}
}

// --redo-length generates again the answers cut short by max_tokens.
func TestRedoLength(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{TimeScale: 2000, MaxRunning: 8}, 2, promptSet{n: 60})
	runWant(t, cli.ExitOK, s.args("--max-tokens", "400")...)
	first := readRecords(t, s.out)
	s.check(t, 1)
	cut := map[string]bool{}
	for _, g := range first {
		if g.Output.FinishReason == record.FinishLength {
			cut[g.ID.Text] = true
		}
	}
	if len(cut) == 0 || len(cut) == 60 {
		t.Fatalf("%d of 60 answers cut by length: the test needs some of each", len(cut))
	}
	// A longer limit is another setting: refused, then allowed.
	refused := runWant(t, cli.ExitUsage, s.args("--max-tokens", "30000", "--resume", "--redo-length")...)
	if !strings.Contains(refused.stderr, "was made with max_tokens 400, this run asks 30000") {
		t.Errorf("the refusal does not name max_tokens:\n%s", refused.stderr)
	}
	res := runWant(t, cli.ExitOK, s.args("--max-tokens", "30000", "--resume", "--redo-length", "--allow-changed-settings")...)
	all := readRecords(t, s.out)
	redone := all[len(first):]
	if len(redone) != len(cut) {
		t.Fatalf("%d answers generated again, want the %d cut by length", len(redone), len(cut))
	}
	for _, g := range redone {
		if !cut[g.ID.Text] {
			t.Errorf("%s was generated again though it was complete", g.ID.Text)
		}
		delete(cut, g.ID.Text)
	}
	if !strings.Contains(res.stderr, "cut short by length to redo") {
		t.Errorf("stderr:\n%s", res.stderr)
	}
	// A third run has nothing left to do.
	runWant(t, cli.ExitOK, s.args("--max-tokens", "30000", "--resume", "--redo-length")...)
	if n := len(readRecords(t, s.out)); n != len(all) {
		t.Fatalf("a third run wrote %d more records", n-len(all))
	}
}

// --metrics-addr serves the run's figures while it runs.
func TestMetrics(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{TimeScale: 20, MaxRunning: 4}, 2, promptSet{n: 200})
	fleet := s.fleet
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	args := s.args("--max-tokens", "24", "--metrics-addr", addr)
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan result, 1)
	go func() { done <- runInferCtx(t, ctx, 30*time.Second, "", args...) }()
	okRe := regexp.MustCompile(`(?m)^tokenmill_infer_answers_ok_total (\d+)`)
	var body string
	waitFor(t, 20*time.Second, "metrics with answers", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		m := okRe.FindStringSubmatch(body)
		n, _ := strconv.Atoi(firstOr(m, 1))
		return n > 0
	})
	cancel(cli.ErrInterrupted)
	<-done
	for _, want := range []string{
		"tokenmill_infer_records_read_total",
		`tokenmill_infer_endpoint_slots{endpoint="` + fleet.Endpoint(0).URL() + `"} 6`,
		`tokenmill_infer_endpoint_up{endpoint="` + fleet.Endpoint(1).URL() + `"} 1`,
		`tokenmill_infer_tokens_total{kind="completion"}`,
		"tokenmill_infer_completion_tokens_per_second",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

func firstOr(m []string, i int) string {
	if len(m) > i {
		return m[i]
	}
	return ""
}

// Progress: plain lines in a log every --progress (or its old name,
// --progress-interval), a live block with one line per endpoint on a
// terminal.
func TestProgress(t *testing.T) {
	for _, tt := range []struct {
		name        string
		interactive bool
		flag        string
	}{{"log", false, "--progress"}, {"log, old flag name", false, "--progress-interval"}, {"terminal", true, "--progress"}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t, llmsim.Config{TimeScale: 50, MaxRunning: 4}, 2, promptSet{n: 400})
			fleet := s.fleet
			args := s.args("--max-tokens", "24", tt.flag, "50ms")
			res := runInferEnv(t, context.Background(), 30*time.Second, tt.interactive, "", args...)
			if res.code != cli.ExitOK {
				t.Fatalf("exit %d\n%s", res.code, res.stderr)
			}
			line := regexp.MustCompile(`answers \d+/400 \(\d+\.\d%\) \| ok \d+ failed 0 retrying 0 \| in flight \d+/12 \| [\d,]+ tok/s \| ETA`)
			if !line.MatchString(res.stderr) {
				t.Errorf("no progress line:\n%s", res.stderr)
			}
			perEndpoint := strings.Contains(res.stderr, fleet.Endpoint(0).URL()+"  ready")
			if perEndpoint != tt.interactive {
				t.Errorf("per-endpoint lines shown: %v, on a terminal: %v\n%s", perEndpoint, tt.interactive, res.stderr)
			}
		})
	}
}
