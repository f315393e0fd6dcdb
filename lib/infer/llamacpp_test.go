package infer

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/record"
	"tokenmill/lib/tokenizer"
)

// simRequest is a line of llmsim's request log.
type simRequest struct {
	Route        string `json:"route"`
	Status       int    `json:"status"`
	PromptTokens int    `json:"prompt_tokens"`
	Body         struct {
		Tools     json.RawMessage `json:"tools"`
		MaxTokens *int            `json:"max_tokens"`
		NPredict  *int            `json:"n_predict"`
	} `json:"body"`
}

// accountOnce checks that every prompt is in the output or the errors,
// once, as its prompt record plus the field (llama.cpp's answers to ids,
// and a model's thinking, do not open with the digest checkExactlyOnce
// looks for).
func accountOnce(t *testing.T, lines map[string]string, outs, errs []genRecord) {
	t.Helper()
	seen := map[string]bool{}
	for _, set := range []struct {
		field string
		recs  []genRecord
	}{{"output", outs}, {"error", errs}} {
		for _, g := range set.recs {
			id := g.ID.Text
			stripped, err := record.WithoutFields(nil, []byte(g.raw), set.field)
			if seen[id] || err != nil || string(stripped) != lines[id] {
				t.Fatalf("%s record of %s: twice, or not its prompt record plus %q: %s", set.field, id, set.field, g.raw)
			}
			seen[id] = true
		}
	}
	if len(seen) != len(lines) {
		t.Fatalf("%d of %d prompts accounted for", len(seen), len(lines))
	}
}

func simRequests(t *testing.T, f *llmsim.Fleet, log *lockedBuffer) []simRequest {
	t.Helper()
	f.Close() // flushes the log
	var out []simRequest
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		if line == "" {
			continue
		}
		var r simRequest
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("request log: %v: %s", err, line)
		}
		out = append(out, r)
	}
	return out
}

// With --token-ids on llama.cpp, a prompt's ids are those of the chat
// prompt its request renders, chat_template_kwargs included (the
// template of Qwen3 turns thinking off with an empty think block): the
// rendering and tokenizing of the model's own template and tokenizer,
// as many as the usage counts; without the kwargs they would be another
// prompt's.
func TestLlamaCppTokenIDsWithKwargs(t *testing.T) {
	dir := testbin.Tokenizers(t, "qwen3")
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Half the records send their own kwargs, the others the flags'.
	own := func(i int) string {
		if i%2 == 0 {
			return ""
		}
		return `,"params":{"chat_template_kwargs":{"enable_thinking":false}}`
	}
	s := newSetup(t, llmsim.Config{Instant: true, Flavor: llmsim.FlavorLlamaCpp, Tokenizer: dir}, 1, promptSet{n: 8, extra: own})
	res := runWant(t, 0, s.args("--token-ids", "--max-tokens", "24", "--extra-body", `{"chat_template_kwargs":{"enable_thinking":false}}`)...)
	accountOnce(t, s.lines, readRecords(t, s.out), readRecords(t, s.errs()))
	recs := readTokenRecords(t, s.out)
	if len(recs) != 8 || !strings.Contains(res.stderr, "token ids: 8 answers with them, 0 failed") {
		t.Fatalf("%d records\n%s", len(recs), res.stderr)
	}
	for _, r := range recs {
		var p struct {
			Messages json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal([]byte(s.lines[r.ID]), &p); err != nil {
			t.Fatal(err)
		}
		ids := func(kwargs string) []int32 {
			req := tokenizer.Request{Messages: p.Messages, AddGenerationPrompt: true}
			if kwargs != "" {
				req.Kwargs = []byte(kwargs)
			}
			text, err := tok.Render(req)
			if err != nil {
				t.Fatal(err)
			}
			var out []int32
			for _, id := range tok.Encode(text) {
				out = append(out, int32(id))
			}
			return out
		}
		want, without := ids(`{"enable_thinking":false}`), ids("")
		got := r.Output.PromptTokenIDs
		if !slices.Equal(got, want) || len(got) != r.Output.Usage.PromptTokens {
			t.Errorf("%s: %d prompt ids (usage %d), want the %d of the prompt rendered with its kwargs (%d without them)", r.ID, len(got), r.Output.Usage.PromptTokens, len(want), len(without))
		}
		if r.ID == idOf(1) {
			t.Logf("prompt ids with kwargs: %d recorded, %d the chat route renders; %d without the kwargs", len(got), len(want), len(without))
		}
	}
}

// llamaProxy is a llama.cpp server behind a proxy that has no
// /apply-template (an older release, or a gateway in front): a chat
// prompt cannot be rendered by the server.
func llamaProxy(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/apply-template" {
			io.Copy(io.Discard, r.Body)
			http.NotFound(w, r)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// Where the server cannot render the chat prompt, no ids are shown to be
// its: the run stops at the first answer (exit 2), nothing written, never
// ids of another rendering.
func TestLlamaCppTokenIDsWithoutTemplateRoute(t *testing.T) {
	s := newSetup(t, llmsim.Config{Instant: true, Flavor: llmsim.FlavorLlamaCpp}, 0, promptSet{n: 4})
	f := startFleet(t, llmsim.Config{Instant: true, Flavor: llmsim.FlavorLlamaCpp}, 1)
	res := runWant(t, 2, append(s.args("--token-ids", "--concurrency", "1"), "-e", llamaProxy(t, f.URLs()[0]))...)
	if !strings.Contains(res.stderr, "cannot render the chat prompt") || !strings.Contains(res.stderr, "no token ids") {
		t.Errorf("stderr:\n%s", res.stderr)
	}
	if b, _ := os.ReadFile(s.out); len(b) > 0 {
		t.Errorf("answers written:\n%s", b)
	}
}

// A llama.cpp whose template renders no tools (its /props says so) is
// never sent a record with tools, which it would answer with the tools
// left out of the prompt: such records are errors tools_unsupported,
// the others are answered, each record once; with --token-ids too.
func TestLlamaCppToolsUnsupported(t *testing.T) {
	tools := func(i int) string {
		if i%3 != 0 {
			return ""
		}
		return `,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
	}
	for _, ids := range []bool{false, true} {
		t.Run(fmt.Sprintf("token ids %v", ids), func(t *testing.T) {
			log := &lockedBuffer{}
			s := newSetup(t, llmsim.Config{Instant: true, Flavor: llmsim.FlavorLlamaCpp, LlamaNoTools: true, ToolCallRate: 1, RequestLog: log}, 2, promptSet{n: 12, extra: tools})
			args := s.args("--max-tokens", "16")
			if ids {
				args = append(args, "--token-ids")
			}
			res := runWant(t, 3, args...)
			outs, errs := readRecords(t, s.out), readRecords(t, s.errs())
			accountOnce(t, s.lines, outs, errs)
			if len(outs) != 8 || len(errs) != 4 {
				t.Fatalf("%d answered, %d failed; want 8 and 4\n%s", len(outs), len(errs), res.stderr)
			}
			for _, g := range errs {
				if !strings.Contains(s.lines[g.ID.Text], `"tools"`) || g.Error.Reason != record.ReasonToolsUnsupported ||
					!strings.Contains(g.Error.Message, "does not support tools") || g.Error.Status != 0 {
					t.Errorf("%s: %+v", g.ID.Text, g.Error)
				}
			}
			for _, r := range simRequests(t, s.fleet, log) {
				if len(r.Body.Tools) > 0 {
					t.Errorf("a request with tools was sent to %s", r.Route)
				}
			}
		})
	}
}

// Fitted to a llama.cpp server whose vocabulary adds a begin-of-text
// token, a prompt is counted with it (as the chat route charges it): no
// request is refused or sent with more than its context, each answer
// asks for what its prompt leaves, and each prompt too long is refused
// unsent, counted as charged.
func TestLlamaCppFitCountsTheBeginOfText(t *testing.T) {
	const ctx, margin, minAnswer = 4096, 8, 32
	dir := t.TempDir()
	in, lines, counts := longTailed(t, dir, 120, ctx)
	for id := range counts {
		counts[id]++ // the begin-of-text token
	}
	log := &lockedBuffer{}
	f := startFleet(t, llmsim.Config{Instant: true, Flavor: llmsim.FlavorLlamaCpp, LlamaBOS: true, ContextLength: ctx, RequestLog: log}, 2)
	out := filepath.Join(dir, "gen.jsonl")
	res := runInfer(t, 2*time.Minute, "", append([]string{"-e", endpointsFlag(f.URLs()), "--max-tokens", "4096", "-o", out, in}, fastFlags...)...)
	outs, errs := readRecords(t, out), readRecords(t, filepath.Join(dir, "gen.errors.jsonl"))
	checkExactlyOnce(t, lines, 1, outs, errs)
	sent := 0
	for _, r := range simRequests(t, f, log) {
		sent++
		if r.Status != 200 || r.Body.MaxTokens == nil || r.PromptTokens+*r.Body.MaxTokens >= ctx {
			t.Errorf("request: status %d, %d prompt tokens, max_tokens %v", r.Status, r.PromptTokens, r.Body.MaxTokens)
		}
	}
	for _, g := range errs {
		if e := g.Error; e.Reason != record.ReasonPromptTooLong || e.PromptTokens != counts[g.ID.Text] || e.Status != 0 {
			t.Errorf("%s: %+v, charged %d", g.ID.Text, e, counts[g.ID.Text])
		}
	}
	for _, g := range outs {
		if room := ctx - counts[g.ID.Text] - margin - 1; g.Output.Usage.PromptTokens != counts[g.ID.Text] || g.Output.MaxTokens != room || room < minAnswer {
			t.Errorf("%s: prompt %d tokens (charged %d), max_tokens %d, room %d", g.ID.Text, g.Output.Usage.PromptTokens, counts[g.ID.Text], g.Output.MaxTokens, room)
		}
	}
	if len(errs) == 0 || sent != len(outs) {
		t.Errorf("%d refused unsent, %d sent for %d answers (exit %d)\n%s", len(errs), sent, len(outs), res.code, res.stderr)
	}
}

// A vocabulary of a byte or two a token (Qwen3's digits, one token each),
// near a small context: the estimate from bytes alone would send prompts
// the server refuses or cuts; every prompt that does not fit is counted
// and refused unsent, every one that fits answered in full.
func TestLlamaCppFitDenseVocabulary(t *testing.T) {
	qdir := testbin.Tokenizers(t, "qwen3")
	tok, err := tokenizer.Load(qdir)
	if err != nil {
		t.Fatal(err)
	}
	const ctx, maxTokens, margin, minAnswer = 1024, 16, 8, 32
	dir := t.TempDir()
	var b bytes.Buffer
	lines, counts := map[string]string{}, map[string]int{}
	for i := 0; i < 50; i++ {
		var digits strings.Builder
		for k := 0; k < 940+4*i; k++ {
			digits.WriteByte(byte('0' + (k*7+i)%10))
		}
		id := idOf(i)
		line := fmt.Sprintf(`{"id":%q,"messages":[{"role":"user","content":%q}]}`, id, digits.String())
		lines[id] = line
		b.WriteString(line + "\n")
		text, err := tok.Render(tokenizer.Request{Messages: []byte(`[{"role":"user","content":"` + digits.String() + `"}]`), AddGenerationPrompt: true})
		if err != nil {
			t.Fatal(err)
		}
		counts[id] = len(tok.Encode(text))
	}
	in := filepath.Join(dir, "digits.jsonl")
	if err := os.WriteFile(in, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	log := &lockedBuffer{}
	f := startFleet(t, llmsim.Config{Instant: true, Flavor: llmsim.FlavorLlamaCpp, Tokenizer: qdir, ContextLength: ctx, RequestLog: log}, 1)
	out := filepath.Join(dir, "gen.jsonl")
	res := runInfer(t, 2*time.Minute, "", append([]string{"-e", endpointsFlag(f.URLs()), "--max-tokens", fmt.Sprint(maxTokens), "-o", out, in}, fastFlags...)...)
	outs, errs := readRecords(t, out), readRecords(t, filepath.Join(dir, "gen.errors.jsonl"))
	accountOnce(t, lines, outs, errs)
	fits := func(id string) bool { return counts[id]+max(maxTokens, minAnswer)+margin < ctx }
	tooLong := 0
	for id := range lines {
		if !fits(id) {
			tooLong++
		}
	}
	for _, r := range simRequests(t, f, log) {
		if r.Status != 200 {
			t.Errorf("a request was refused: %+v", r)
		}
	}
	for _, g := range errs {
		if e := g.Error; fits(g.ID.Text) || e.Reason != record.ReasonPromptTooLong || e.Status != 0 || e.PromptTokens != counts[g.ID.Text] {
			t.Errorf("%s (%d tokens): %+v", g.ID.Text, counts[g.ID.Text], e)
		}
	}
	for _, g := range outs {
		if !fits(g.ID.Text) || g.Output.Usage.CompletionTokens != maxTokens {
			t.Errorf("%s (%d tokens): answered with %d tokens", g.ID.Text, counts[g.ID.Text], g.Output.Usage.CompletionTokens)
		}
	}
	least, most := ctx, 0
	for _, n := range counts {
		least, most = min(least, n), max(most, n)
	}
	t.Logf("%d prompts of %d-%d tokens in a %d-token context: %d too long, refused unsent %d; %d answered", len(lines), least, most, ctx, tooLong, len(errs), len(outs))
	if tooLong == 0 || len(errs) != tooLong {
		t.Errorf("%d prompts too long, %d refused (exit %d)\n%s", tooLong, len(errs), res.code, res.stderr)
	}
}
