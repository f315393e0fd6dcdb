package infer

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/ollamaserver"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
	"tokenmill/lib/record"
)

// infer's binary against a real Ollama server (internal/ollamaserver: v0.6.5 on the
// CPU, its tiny model, 4 requests at once), no proxy between them. The
// tiny model always writes max_tokens tokens, so every answer's length and
// finish reason are known in advance. Skipped, saying why, where Ollama is
// not installed (.ci/install-ollama).

// checkOllama is exact accounting for answers from Ollama: every (id,
// sample) of the input exactly once in the output or the errors, each
// record its prompt line plus its field, every answer max_tokens long and
// cut there, from the server and the model asked.
func checkOllama(t *testing.T, srv *ollamaserver.Server, lines map[string]string, samples, maxTokens int, outs, errs []genRecord) {
	t.Helper()
	seen := map[string]bool{}
	for i := range outs {
		g := &outs[i]
		orig, ok := lines[g.ID.Text]
		if !ok || g.Output == nil {
			t.Fatalf("an output record for %q: %s", g.ID.Text, g.raw)
		}
		key := fmt.Sprintf("%s/%d", g.ID.Text, g.Output.Sample)
		if seen[key] {
			t.Fatalf("answer %s twice", key)
		}
		seen[key] = true
		if stripped, err := record.WithoutFields(nil, []byte(g.raw), "output"); err != nil || string(stripped) != orig {
			t.Fatalf("record of %s is not its prompt plus output:\n got %s\nwant %s", key, stripped, orig)
		}
		o := g.Output
		if o.Usage.CompletionTokens != maxTokens || o.FinishReason != "length" || o.Usage.PromptTokens <= 0 || o.Endpoint != srv.URL ||
			o.Usage.CachedTokens != nil || !strings.HasPrefix(o.Model, srv.Model) {
			t.Fatalf("answer %s: %+v (model %q, endpoint %q)", key, o.Usage, o.Model, o.Endpoint)
		}
	}
	if len(errs) > 0 {
		t.Fatalf("%d error records, the first: %s", len(errs), errs[0].raw)
	}
	for id := range lines {
		for s := 0; s < samples; s++ {
			if !seen[fmt.Sprintf("%s/%d", id, s)] {
				t.Fatalf("answer %s/%d is missing", id, s)
			}
		}
	}
}

func TestOllamaBinaries(t *testing.T) {
	testbin.Long(t, "a real Ollama server")
	srv := ollamaserver.Start(t, ollamaserver.Options{Parallel: 4})

	t.Run("plain", func(t *testing.T) {
		s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 40})
		r := runOllama(t, srv, s, "--max-tokens", "8")
		if r.code != cli.ExitOK {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
		checkOllama(t, srv, s.lines, 1, 8, readRecords(t, s.out), readRecords(t, s.errs()))
		for _, want := range []string{srv.URL + ": /health 404 (no such route), /v1/models 200: ready; capacity not reported, in flight adapted to the server from 16 (it may run 4, Ollama's default OLLAMA_NUM_PARALLEL",
			"context 2048 tokens (Ollama's default num_ctx: the model sets none in /api/show)"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
			}
		}
	})

	t.Run("samples and seed", func(t *testing.T) {
		s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 10})
		args := []string{"--max-tokens", "12", "--samples", "2", "--seed", "7", "--temperature", "0.9"}
		if r := runOllama(t, srv, s, args...); r.code != cli.ExitOK {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
		first := readRecords(t, s.out)
		checkOllama(t, srv, s.lines, 2, 12, first, readRecords(t, s.errs()))
		if r := runOllama(t, srv, s, append(args, "--force")...); r.code != cli.ExitOK {
			t.Fatalf("again: exit %d\n%s", r.code, r.stderr)
		}
		checkSeededSamples(t, 7, first, readRecords(t, s.out))
	})

	t.Run("completions", func(t *testing.T) {
		s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 20, completion: true})
		if r := runOllama(t, srv, s, "--api", "completions", "--max-tokens", "6"); r.code != cli.ExitOK {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
		checkOllama(t, srv, s.lines, 1, 6, readRecords(t, s.out), readRecords(t, s.errs()))
	})

	t.Run("wrong model", func(t *testing.T) {
		s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 5})
		r := runOllama(t, srv, s, "--model", "nope", "--max-tokens", "4")
		if want := fmt.Sprintf(`--model "nope" is not served by %s: they serve "%s:latest"`, srv.URL, srv.Model); r.code != cli.ExitUsage || !strings.Contains(r.stderr, want) {
			t.Errorf("exit %d, want 2 and %q:\n%s", r.code, want, r.stderr)
		}
		if _, err := os.Stat(s.out); !os.IsNotExist(err) {
			t.Error("the output was created")
		}
		// The bare name is Ollama's own.
		if r := runOllama(t, srv, s, "--model", srv.Model, "--max-tokens", "4"); r.code != cli.ExitOK {
			t.Errorf("--model %s: exit %d\n%s", srv.Model, r.code, r.stderr)
		}
	})

	t.Run("kill and resume", func(t *testing.T) {
		s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 150})
		args := s.args("-e", srv.URL, "--max-tokens", "16", "--flush-interval", "50ms")
		p := startInfer(t, args...)
		waitFor(t, 60*time.Second, "some answers written", func() bool { return completeLines(s.out) >= 10 })
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.wait(t, 10*time.Second)
		if n := completeLines(s.out); n >= 150 {
			t.Fatalf("the run finished (%d lines) before it was killed", n)
		}
		p = startInfer(t, append(args, "--resume")...)
		if code := p.wait(t, 90*time.Second); code != cli.ExitOK {
			t.Fatalf("resume: exit %d\n%s", code, p.stderr.String())
		}
		checkOllama(t, srv, s.lines, 1, 16, readRecords(t, s.out), readRecords(t, s.errs()))
	})

	// Last: the server killed (kill -9, runners and all) in the middle of a
	// run and started again on the same port: infer waits it out and every
	// answer is there once.
	t.Run("server killed and restarted", func(t *testing.T) {
		s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 150})
		p := startInfer(t, s.args("-e", srv.URL, "--max-tokens", "16", "--flush-interval", "50ms", "--down-timeout", "2m")...)
		waitFor(t, 60*time.Second, "some answers written", func() bool { return completeLines(s.out) >= 10 })
		srv.Kill()
		killedAt := completeLines(s.out)
		time.Sleep(300 * time.Millisecond) // down a while: requests are refused
		srv.Restart()
		if code := p.wait(t, 90*time.Second); code != cli.ExitOK {
			t.Fatalf("exit %d\n%s", code, p.stderr.String())
		}
		if killedAt >= 150 {
			t.Fatalf("the run finished before the server was killed")
		}
		checkOllama(t, srv, s.lines, 1, 16, readRecords(t, s.out), readRecords(t, s.errs()))
		if err := p.stderr.String(); !strings.Contains(err, "is out of service") || !strings.Contains(err, "is back in service (/v1/models 200: ready") {
			t.Errorf("stderr:\n%s", err)
		}
	})
}

// runOllama runs infer on setup s against srv with args.
func runOllama(t *testing.T, srv *ollamaserver.Server, s *setup, args ...string) testbinResult {
	t.Helper()
	r := runBinary(t, append(s.args("-e", srv.URL), args...)...)
	return testbinResult{r.Code, r.Stderr}
}

// checkSeededSamples checks that a second run of the same seed gave again
// the answers of first, and that two samples of a prompt (seeds seed and
// seed+1) differ for at least one prompt.
func checkSeededSamples(t *testing.T, seed int, first, second []genRecord) {
	t.Helper()
	again := map[string]string{}
	for _, g := range second {
		again[fmt.Sprintf("%s/%d", g.ID.Text, g.Output.Sample)] = g.Output.Text
	}
	differ := 0
	bySample := map[string][2]string{}
	for _, g := range first {
		key := fmt.Sprintf("%s/%d", g.ID.Text, g.Output.Sample)
		if again[key] != g.Output.Text {
			t.Errorf("%s: seed %d gave %q, then %q", key, seed+g.Output.Sample, g.Output.Text, again[key])
		}
		pair := bySample[g.ID.Text]
		pair[g.Output.Sample] = g.Output.Text
		bySample[g.ID.Text] = pair
	}
	for _, p := range bySample {
		if p[0] != p[1] {
			differ++
		}
	}
	if differ == 0 {
		t.Errorf("samples 0 and 1 (seeds %d and %d) answered the same for every prompt", seed, seed+1)
	}
}

// testbinResult is what a binary run printed, as the tests here read it.
type testbinResult struct {
	code   int
	stderr string
}
