package infer

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"tokenmill/internal/llmsim"
	"tokenmill/lib/record"
	"tokenmill/lib/tokens"
)

// longTailed writes n chat prompts whose token counts (as llmsim counts
// them) are long-tailed, from a few dozen to past ctx, a few of them on
// each side of the limit, and returns the path, the lines and each id's
// tokens.
func longTailed(t *testing.T, dir string, n, ctx int) (string, map[string]string, map[string]int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(4096, uint64(n)))
	lines, tokens := map[string]string{}, map[string]int{}
	var b strings.Builder
	for i := 0; i < n; i++ {
		target := int(math.Exp(math.Log(1200) + 0.9*rng.NormFloat64()))
		if i%10 == 3 { // near the limit: the answer's room around --min-answer-tokens
			target = ctx - 60 + rng.IntN(60)
		}
		target = max(min(target, 3*ctx), 16)
		text := fmt.Sprintf("Question %d.", i) + strings.Repeat(" word", target)
		msgs := []llmsim.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: text}}
		id := idOf(i)
		line := fmt.Sprintf(`{"id":%q,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":%q}]}`, id, text)
		lines[id] = line
		tokens[id] = chatTokens(msgs)
		b.WriteString(line + "\n")
	}
	path := filepath.Join(dir, "prompts.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, lines, tokens
}

// chatTokens is a chat prompt's tokens as llmsim charges them: 4 per
// message and 3 for the answer's turn beside the texts'.
func chatTokens(msgs []llmsim.Message) int {
	n := 3
	for _, m := range msgs {
		n += 4 + llmsim.TextTokens(m.Content)
	}
	return n
}

// Every flavour of server that states its context, 4,096 tokens learned
// at start, --max-tokens 4096:
// every prompt that fits is answered with max_tokens lowered to what it
// leaves (output.max_tokens), those that cannot fit are error records
// prompt_too_long with their count, and no request is refused for length
// (llmsim's request log). vLLM counts the chat prompt exactly; SGLang and
// llama.cpp count the texts, the chat template's tokens added as measured,
// so the refusals there may reach a few tokens a message further.
func TestFitContextEveryFlavor(t *testing.T) {
	const ctx, margin, minAnswer = 4096, 8, 32
	for _, tt := range []struct {
		flavor string
		slack  int    // tokens the count may be over by
		source string // where infer learns the context
	}{
		{"sglang", 2 * tokens.TemplateGuess * 3, "context_length, /get_server_info"}, {"vllm", 0, "max_model_len, /v1/models"},
		{"vllm-0.10.0", 0, "max_model_len, /v1/models"}, {"llamacpp", 2 * tokens.TemplateGuess * 3, "n_ctx, /props"},
	} {
		t.Run(tt.flavor, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			in, lines, tokens := longTailed(t, dir, 150, ctx)
			s := startSim(t, 2, "--instant", "--context-length", fmt.Sprint(ctx), "--flavor", tt.flavor)
			out := filepath.Join(dir, "gen.jsonl")
			p := startInfer(t, "-e", strings.Join(s.urls, ","), "--model", "Qwen3.6-27B", "--max-tokens", "4096", "-o", out, in, "--progress", "0")
			code := p.wait(t, time.Minute)
			if want := fmt.Sprintf("context %d tokens (%s)", ctx, tt.source); !strings.Contains(p.stderr.String(), want) {
				t.Errorf("the context's source is not %q:\n%s", want, p.stderr.String())
			}
			reqs := s.requests(t)
			outs, errs := readRecords(t, out), readRecords(t, filepath.Join(dir, "gen.errors.jsonl"))
			if len(outs)+len(errs) != len(lines) {
				t.Fatalf("%d answers and %d errors for %d prompts (exit %d)\n%s", len(outs), len(errs), len(lines), code, p.stderr.String())
			}
			checkContextRun(t, lines, tokens, outs, errs, reqs, ctx, margin, minAnswer, tt.slack)
			if len(errs) > 0 && code != 3 || len(errs) == 0 && code != 0 {
				t.Errorf("exit %d with %d errors", code, len(errs))
			}
		})
	}
}

// A gateway has no tokenizer and says nothing of the context
// (--context-length gives it): prompts' tokens are estimated. A prompt the
// estimate puts past the limit, but not so far that the estimate could not
// be that wrong, is sent as asked, and the gateway's refusal (which states
// the count) settles it: no prompt that fits is lost, each prompt is
// refused by the server at most once, none is answered past the context,
// and every error record is a prompt that cannot fit.
func TestFitContextGateway(t *testing.T) {
	t.Parallel()
	const ctx, margin, minAnswer = 4096, 8, 32
	dir := t.TempDir()
	in, lines, tokens := longTailed(t, dir, 150, ctx)
	s := startSim(t, 2, "--instant", "--context-length", fmt.Sprint(ctx), "--flavor", "openai")
	out := filepath.Join(dir, "gen.jsonl")
	p := startInfer(t, "-e", strings.Join(s.urls, ","), "--model", "Qwen3.6-27B", "--max-tokens", "4096", "--context-length", fmt.Sprint(ctx),
		"-o", out, in, "--progress", "0")
	p.wait(t, time.Minute)
	outs, errs := readRecords(t, out), readRecords(t, filepath.Join(dir, "gen.errors.jsonl"))
	if len(outs)+len(errs) != len(lines) {
		t.Fatalf("%d answers and %d errors for %d prompts\n%s", len(outs), len(errs), len(lines), p.stderr.String())
	}
	refusals := map[string]int{}
	for _, r := range s.requests(t) {
		if r.Status == 400 {
			refusals[historyKey(r.Body.Messages, nil, nil)]++
		}
	}
	for k, n := range refusals {
		if n > 1 {
			t.Errorf("a prompt was refused %d times: %.60q", n, k)
		}
	}
	room := func(id string) int { return ctx - tokens[id] - margin - 1 }
	for _, g := range outs {
		// The estimate may be a few tokens short of the count (the margin
		// covers that): the server's own limit is what must hold.
		if id := g.ID.Text; room(id) < minAnswer || g.Output.MaxTokens+tokens[id] > ctx {
			t.Errorf("%s: answered with max_tokens %d, its %d tokens leave %d", id, g.Output.MaxTokens, tokens[id], room(id))
		}
	}
	for _, g := range errs {
		if id := g.ID.Text; g.Error.Reason != record.ReasonPromptTooLong || room(id) >= minAnswer {
			t.Errorf("%s: error %+v, its %d tokens leave %d", id, g.Error, tokens[id], room(id))
		}
	}
	if len(refusals) == 0 {
		t.Errorf("no prompt was sent for the gateway to count:\n%s", p.stderr.String())
	}
}

// checkContextRun checks a run fitted to ctx: no request refused for
// length, each answer to a prompt that fits asked for what it leaves,
// each refusal a prompt that cannot fit (within slack).
func checkContextRun(t *testing.T, lines map[string]string, tokens map[string]int, outs, errs []genRecord, reqs []loggedRequest, ctx, margin, minAnswer, slack int) {
	t.Helper()
	for _, r := range reqs {
		if r.Status == 400 {
			t.Fatalf("a request was refused: %+v", r)
		}
		if r.Body.MaxTokens != nil && r.Body.Messages != nil {
			n := chatTokens(toSim(r.Body.Messages))
			if n+*r.Body.MaxTokens >= ctx {
				t.Fatalf("a request of %d prompt tokens asked for %d", n, *r.Body.MaxTokens)
			}
		}
	}
	fits := func(id string) int { return ctx - tokens[id] - margin - 1 }
	for _, g := range outs {
		id := g.ID.Text
		room := fits(id)
		if room < minAnswer {
			t.Errorf("%s: %d tokens leave %d, yet it was answered", id, tokens[id], room)
		}
		if got := g.Output.MaxTokens; got > room || got < room-slack || got == 0 {
			t.Errorf("%s: output.max_tokens %d, the prompt's %d tokens leave %d", id, got, tokens[id], room)
		}
		if g.Output.Usage.CompletionTokens > g.Output.MaxTokens {
			t.Errorf("%s: %d tokens for max_tokens %d", id, g.Output.Usage.CompletionTokens, g.Output.MaxTokens)
		}
	}
	for _, g := range errs {
		id := g.ID.Text
		e := g.Error
		if e.Reason != record.ReasonPromptTooLong || e.PromptTokens < tokens[id] || e.PromptTokens > tokens[id]+slack {
			t.Errorf("%s: error %+v, the prompt has %d tokens", id, e, tokens[id])
		}
		if room := fits(id); room >= minAnswer+slack {
			t.Errorf("%s: refused, but its %d tokens leave %d", id, tokens[id], room)
		}
	}
	refused := 0
	for id := range lines {
		if fits(id) < minAnswer {
			refused++
		}
	}
	if refused == 0 || len(errs) < refused {
		t.Errorf("%d prompts cannot fit, %d refused", refused, len(errs))
	}
}

func toSim(msgs []record.Message) []llmsim.Message {
	out := make([]llmsim.Message, len(msgs))
	for i, m := range msgs {
		out[i] = llmsim.Message{Role: m.Role, Content: m.Content}
	}
	return out
}

// Where no server states the context at start (a gateway in front of
// them hides it) and no --context-length is given, the first refusals for
// length say what it is: each refused request is sent again fitted to the
// numbers it states (vLLM 0.10.1+ says only "at least": its tokenizer
// counts then), and the run ends as if the context had been given:
// nothing lost, nothing refused twice.
func TestFitContextLearnsFromRefusals(t *testing.T) {
	const ctx, slack = 4096, 2 * tokens.TemplateGuess * 3
	for _, flavor := range []string{"sglang", "vllm", "vllm-0.10.0"} {
		t.Run(flavor, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			in, lines, tokens := longTailed(t, dir, 120, ctx)
			s := startSim(t, 2, "--instant", "--context-length", fmt.Sprint(ctx), "--flavor", flavor)
			var hidden []string
			for _, u := range s.urls {
				hidden = append(hidden, hideContext(t, u))
			}
			out := filepath.Join(dir, "gen.jsonl")
			p := startInfer(t, "-e", strings.Join(hidden, ","), "--model", "Qwen3.6-27B", "--max-tokens", "4096", "-o", out, in, "--progress", "0")
			p.wait(t, time.Minute)
			reqs := s.requests(t)
			outs, errs := readRecords(t, out), readRecords(t, filepath.Join(dir, "gen.errors.jsonl"))
			if len(outs)+len(errs) != len(lines) {
				t.Fatalf("%d answers and %d errors for %d prompts\n%s", len(outs), len(errs), len(lines), p.stderr.String())
			}
			refusals := map[string]int{}
			var kept []loggedRequest
			for _, r := range reqs {
				if r.Status == 400 {
					refusals[historyKey(r.Body.Messages, nil, nil)]++
					continue
				}
				kept = append(kept, r)
			}
			if len(refusals) == 0 {
				t.Fatalf("no request was refused: the context was not learned from a refusal\n%s", p.stderr.String())
			}
			for k, n := range refusals {
				if n > 1 {
					t.Errorf("a prompt was refused %d times: %.60q", n, k)
				}
			}
			checkContextRun(t, lines, tokens, outs, errs, kept, ctx, 8, 32, slack)
			if !strings.Contains(p.stderr.String(), fmt.Sprintf("the model's context is %d tokens", ctx)) {
				t.Errorf("no word of the context learned:\n%s", p.stderr.String())
			}
		})
	}
}

// hideContext puts a gateway in front of the server at target that hides
// what it says of its context: /get_server_info and /props are not
// served (nor SGLang's newer /server_info), and /v1/models lists the models without max_model_len.
// Everything else, streams included, goes through as it is.
func hideContext(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1
	proxy.ErrorLog = log.New(io.Discard, "", 0) // infer closing a stream early is no news
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.URL.Path != "/v1/models" || resp.StatusCode != 200 {
			return nil
		}
		var models map[string]any
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if err := json.Unmarshal(body, &models); err != nil {
			return err
		}
		if data, ok := models["data"].([]any); ok {
			for _, m := range data {
				if m, ok := m.(map[string]any); ok {
					delete(m, "max_model_len")
				}
			}
		}
		if body, err = json.Marshal(models); err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/get_server_info", "/server_info", "/props":
			http.NotFound(w, r)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A server that refuses every request for length, whatever it is sent:
// the request is sent again twice, fitted, then the refusal is filed.
func TestContextRefusalSentAgainTwice(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 4})
	var mu sync.Mutex
	sent := map[string]int{}
	url := badServer(t, true, func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) != "/v1/chat/completions" {
			ctx.SetStatusCode(404) // no tokenizer, no metrics
			return
		}
		var req struct {
			Messages  []record.Message `json:"messages"`
			MaxTokens *int             `json:"max_tokens"`
		}
		json.Unmarshal(ctx.PostBody(), &req)
		mu.Lock()
		sent[req.Messages[1].Content]++
		mu.Unlock()
		ctx.SetStatusCode(400)
		ctx.SetBodyString(`{"object":"error","message":"Requested token count exceeds the model's maximum context length of 2048 tokens. You requested a total of 2100 tokens: 100 tokens from the input messages and 2000 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.","type":"BadRequestError","param":null,"code":400}`)
	})
	r := runBinary(t, s.args("-e", url, "--max-tokens", "2000")...)
	if r.Code != 3 {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	acc := s.check(t, 1)
	if acc.failed != 4 {
		t.Fatalf("%d errors", acc.failed)
	}
	for k, n := range sent {
		if n != 1+maxContextRetries {
			t.Errorf("%.40q sent %d times, want %d", k, n, 1+maxContextRetries)
		}
	}
	for key, g := range acc.errors {
		if g.Error.Status != 400 || !strings.Contains(g.Error.Message, "maximum context length of 2048") {
			t.Errorf("%s: %+v", key, g.Error)
		}
	}
}
