package infer

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/gguf"
	"tokenmill/internal/llamaserver"
	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/record"
)

// infer against a real llama.cpp server (internal/llamaserver: a tiny
// model on internal/gguf's English SentencePiece vocabulary, which adds a
// begin-of-text token, about 1.6 bytes a token on text outside its
// words; the model always writes max_tokens tokens). Skipped, saying
// why, where no llama-server is found.

// kwargTemplate prints a chat_template_kwargs value and renders no tools.
const kwargTemplate = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}" +
	"{% if flavor is defined %}flavor={{ flavor }} extra words for the kwargs here\n{% endif %}" +
	"{% if add_generation_prompt %}assistant:{% endif %}"

func startLlama(t *testing.T, o llamaserver.Options) *llamaserver.Server {
	t.Helper()
	testbin.Long(t, "a real llama.cpp server")
	if _, err := llamaserver.Find(); err != nil {
		t.Skip(err)
	}
	srv := llamaserver.Start(t, o)
	t.Logf("llama-server build %s", srv.BuildInfo)
	return srv
}

// charged is the prompt_tokens the server's chat route charges messages
// with kwargs ("" none).
func charged(t *testing.T, srv *llamaserver.Server, messages json.RawMessage, kwargs string) int {
	t.Helper()
	body := map[string]any{"messages": messages, "max_tokens": 1}
	if kwargs != "" {
		body["chat_template_kwargs"] = json.RawMessage(kwargs)
	}
	var out struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := srv.Call("/v1/chat/completions", body, &out); err != nil {
		t.Fatal(err)
	}
	return out.Usage.PromptTokens
}

// Records with tools, which this template would leave out, are
// tools_unsupported, unsent, the others answered, every record once;
// with --token-ids each prompt's ids are as many as the server's chat
// route charges the same request, chat_template_kwargs rendered and the
// begin-of-text token first.
func TestRealLlamaCppTokenIDsAndTools(t *testing.T) {
	srv := startLlama(t, llamaserver.Options{Model: gguf.Llama{ChatTemplate: kwargTemplate}, Parallel: 2})
	const kwargs = `{"flavor":"spicy"}`
	tools := func(i int) string {
		if i%4 != 3 {
			return ""
		}
		return `,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
	}
	for _, ids := range []bool{false, true} {
		s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 12, extra: tools})
		args := s.args("-e", srv.URL, "--max-tokens", "8", "--extra-body", `{"chat_template_kwargs":`+kwargs+`}`)
		if ids {
			args = append(args, "--token-ids")
		}
		res := runInfer(t, 2*time.Minute, "", args...)
		outs, errs := readRecords(t, s.out), readRecords(t, s.errs())
		accountOnce(t, s.lines, outs, errs)
		if res.code != 3 || len(outs) != 9 || len(errs) != 3 {
			t.Fatalf("token ids %v: exit %d, %d answers, %d errors\n%s", ids, res.code, len(outs), len(errs), res.stderr)
		}
		for _, g := range errs {
			if e := g.Error; !strings.Contains(s.lines[g.ID.Text], `"tools"`) || e.Reason != record.ReasonToolsUnsupported || e.Status != 0 || !strings.Contains(e.Message, "does not support tools") {
				t.Errorf("token ids %v: %s: %+v", ids, g.ID.Text, e)
			}
		}
		if !ids {
			continue
		}
		for i, r := range readTokenRecords(t, s.out) {
			var p struct {
				Messages json.RawMessage `json:"messages"`
			}
			if err := json.Unmarshal([]byte(s.lines[r.ID]), &p); err != nil {
				t.Fatal(err)
			}
			want := charged(t, srv, p.Messages, kwargs)
			o := r.Output
			if len(o.PromptTokenIDs) != want || o.Usage.PromptTokens != want || o.PromptTokenIDs[0] != gguf.BOSID || len(o.TokenIDs) != 8 {
				t.Errorf("%s: %d prompt ids (usage %d, first %d), the chat route charges %d; %d answer ids", r.ID, len(o.PromptTokenIDs), o.Usage.PromptTokens, o.PromptTokenIDs[0], want, len(o.TokenIDs))
			}
			if i == 0 {
				t.Logf("prompt ids with kwargs: %d recorded, the chat route charges %d (%d without the kwargs)", len(o.PromptTokenIDs), want, charged(t, srv, p.Messages, ""))
			}
		}
	}
}

// denseText is text of single letters and short pieces, about 1.6 bytes a
// token on the English vocabulary.
func denseText(rng *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		for k := 1 + rng.IntN(3); k > 0; k-- {
			b.WriteByte(byte('a' + rng.IntN(26)))
		}
		b.WriteByte(' ')
	}
	return b.String()
}

// Near a 1,024-token context, prompts of a vocabulary of short tokens:
// none is sent to be refused or cut; each that does not fit is
// prompt_too_long unsent, counted as the server charges it (the
// begin-of-text token among them); each that fits is answered in full.
func TestRealLlamaCppFitNearTheLimit(t *testing.T) {
	const ctx, maxTokens, margin, minAnswer = 1024, 16, 8, 32
	srv := startLlama(t, llamaserver.Options{Model: gguf.Llama{ChatTemplate: gguf.DefaultChatTemplate}, Context: ctx})
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1024, 7))
	var in bytes.Buffer
	lines, counts := map[string]string{}, map[string]int{}
	var bytesTotal, tokensTotal int
	for i := 0; i < 40; i++ {
		text := denseText(rng, 1350+i*8)
		id := idOf(i)
		line := fmt.Sprintf(`{"id":%q,"messages":[{"role":"user","content":%q}]}`, id, text)
		lines[id] = line
		in.WriteString(line + "\n")
		var tpl struct{ Prompt string }
		if err := srv.Call("/apply-template", map[string]any{"messages": []map[string]string{{"role": "user", "content": text}}}, &tpl); err != nil {
			t.Fatal(err)
		}
		var toks struct{ Tokens []int }
		if err := srv.Call("/tokenize", map[string]any{"content": tpl.Prompt, "add_special": true}, &toks); err != nil {
			t.Fatal(err)
		}
		counts[id] = len(toks.Tokens)
		bytesTotal, tokensTotal = bytesTotal+len(text), tokensTotal+len(toks.Tokens)
	}
	path := filepath.Join(dir, "prompts.jsonl")
	if err := os.WriteFile(path, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "gen.jsonl")
	res := runInfer(t, 5*time.Minute, "", append([]string{"-e", srv.URL, "--max-tokens", fmt.Sprint(maxTokens), "-o", out, path}, fastFlags...)...)
	outs, errs := readRecords(t, out), readRecords(t, filepath.Join(dir, "gen.errors.jsonl"))
	accountOnce(t, lines, outs, errs)
	fits := func(id string) bool { return counts[id]+max(maxTokens, minAnswer)+margin < ctx }
	tooLong, sent := 0, 0
	for id := range lines {
		if !fits(id) {
			tooLong++
		}
	}
	for _, g := range errs {
		e := g.Error
		if e.Status != 0 || e.Attempts > 0 { // sent: refused, or answered too short
			sent++
		}
		if fits(g.ID.Text) || e.Reason != record.ReasonPromptTooLong || e.Status != 0 || e.PromptTokens != counts[g.ID.Text] {
			t.Errorf("%s (%d tokens): %+v", g.ID.Text, counts[g.ID.Text], e)
		}
	}
	for _, g := range outs {
		if o := g.Output; !fits(g.ID.Text) || o.Usage.PromptTokens != counts[g.ID.Text] || o.Usage.CompletionTokens != maxTokens {
			t.Errorf("%s (%d tokens): answered, prompt %d tokens, %d answer tokens", g.ID.Text, counts[g.ID.Text], o.Usage.PromptTokens, o.Usage.CompletionTokens)
		}
	}
	t.Logf("%d prompts, %.2f bytes a token, in a %d-token context: %d do not fit; refused unsent %d, sent %d; %d answered",
		len(lines), float64(bytesTotal)/float64(tokensTotal), ctx, tooLong, len(errs)-sent, sent, len(outs))
	if tooLong == 0 || tooLong == len(lines) || len(errs) != tooLong {
		t.Errorf("%d do not fit, %d refused (exit %d)\n%s", tooLong, len(errs), res.code, res.stderr)
	}
}
