package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/openai"
)

const (
	// llamaTools is a tool list; llamaKwargs turns Qwen3's thinking off,
	// which its template renders as an empty think block.
	llamaTools  = `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`
	llamaKwargs = `{"enable_thinking":false}`
)

// llamaChat is a chat request body with what renders (tools, kwargs: ""
// none) and settings that do not.
func llamaChat(tools, kwargs string) string {
	b := fmt.Sprintf(`{"model":%q,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"How many tokens is this sentence, all told?"}],"max_tokens":1,"temperature":0.5`, llmsim.DefaultModelName)
	if tools != "" {
		b += `,"tools":` + tools
	}
	if kwargs != "" {
		b += `,"chat_template_kwargs":` + kwargs
	}
	return b + "}"
}

// On llama.cpp, Tokenize counts a prompt as the request is charged, and
// PromptIDs gives as many ids: the chat prompt rendered by /apply-template
// with its tools and chat_template_kwargs, tokenized with the
// begin-of-text token the vocabulary adds (add_special); a completion's
// text with it too.
func TestLlamaCppCountsAsCharged(t *testing.T) {
	qdir := testbin.Tokenizers(t, "qwen3")
	text := fmt.Sprintf(`{"model":%q,"prompt":"Once upon a time, in a land of many tokens,","max_tokens":1}`, llmsim.DefaultModelName)
	for _, tc := range []struct {
		name string
		sim  llmsim.Config
		body string
	}{
		{"chat", llmsim.Config{}, llamaChat("", "")},
		{"chat, a begin-of-text token", llmsim.Config{LlamaBOS: true}, llamaChat("", "")},
		{"text, a begin-of-text token", llmsim.Config{LlamaBOS: true}, text},
		{"qwen3, tools and kwargs", llmsim.Config{Tokenizer: qdir}, llamaChat(llamaTools, llamaKwargs)},
		{"qwen3, kwargs", llmsim.Config{Tokenizer: qdir}, llamaChat("", llamaKwargs)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.sim.Flavor, tc.sim.Instant = llmsim.FlavorLlamaCpp, true
			p, _, _ := simPool(t, tc.sim, 1, Config{ControlTimeout: 10 * time.Second})
			if err := p.WaitReady(context.Background(), 20*time.Second); err != nil {
				t.Fatal(err)
			}
			ep := p.Endpoints()[0]
			path, parse := openai.PathChat, openai.ParseChat
			if strings.Contains(tc.body, `"prompt"`) {
				path, parse = openai.PathCompletions, openai.ParseCompletion
			}
			got, f := p.Complete(ep, path, []byte(tc.body), 10*time.Second, parse)
			if f != nil {
				t.Fatal(f)
			}
			n, err := p.Tokenize(context.Background(), ep, []byte(tc.body))
			if err != nil || n != got.PromptTokens {
				t.Errorf("Tokenize: %d, %v; the request was charged %d", n, err, got.PromptTokens)
			}
			ids, err := p.PromptIDs(context.Background(), ep, openai.ShapeLlama, []byte(tc.body))
			if err != nil || len(ids) != got.PromptTokens {
				t.Errorf("PromptIDs: %d ids, %v; the request was charged %d", len(ids), err, got.PromptTokens)
			}
		})
	}
}

// The kwargs change the prompt (Qwen3's empty think block), so a count or
// ids without them would be another prompt's.
func TestLlamaCppKwargsRender(t *testing.T) {
	qdir := testbin.Tokenizers(t, "qwen3")
	p, _, _ := simPool(t, llmsim.Config{Flavor: llmsim.FlavorLlamaCpp, Instant: true, Tokenizer: qdir}, 1, Config{ControlTimeout: 10 * time.Second})
	if err := p.WaitReady(context.Background(), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ep := p.Endpoints()[0]
	count := func(body string) int {
		ids, err := p.PromptIDs(context.Background(), ep, openai.ShapeLlama, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		n, err := p.Tokenize(context.Background(), ep, []byte(body))
		if err != nil || n != len(ids) {
			t.Fatalf("Tokenize %d, %v; PromptIDs %d", n, err, len(ids))
		}
		return n
	}
	with, without := count(llamaChat("", llamaKwargs)), count(llamaChat("", ""))
	if with == without {
		t.Errorf("%d tokens with the kwargs and without: they did not render", with)
	}
}

// A llama.cpp whose template renders no tools says so on /props, and the
// pool keeps it: ToolsUnsupported says why that endpoint is not sent
// tools; one whose template renders them has nothing to say.
func TestLlamaCppToolsUnsupported(t *testing.T) {
	for _, no := range []bool{false, true} {
		p, _, _ := simPool(t, llmsim.Config{Flavor: llmsim.FlavorLlamaCpp, Instant: true, LlamaNoTools: no}, 1, Config{ControlTimeout: 10 * time.Second})
		if err := p.WaitReady(context.Background(), 20*time.Second); err != nil {
			t.Fatal(err)
		}
		why := p.ToolsUnsupported(p.Endpoints()[0])
		if no != (why != "") || no && !strings.Contains(why, "chat_template_caps.supports_tools is false") {
			t.Errorf("template without tools %v: %q", no, why)
		}
	}
	for _, tc := range []struct{ props, want string }{
		{`{"total_slots":1,"chat_template_caps":{"supports_tools":false}}`, "does not support tools"},
		{`{"total_slots":1,"chat_template_caps":{"supports_tools":true}}`, ""},
		{`{"total_slots":1}`, ""}, // an older release says nothing: sent
		{`{"total_slots":1,"chat_template_caps":{}}`, ""},
		{`not json`, ""},
	} {
		if got := propsNoTools([]byte(tc.props)); tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.props, got, tc.want)
		}
	}
}

// A llama.cpp without /apply-template (a proxy in front that has no such
// route) cannot render a chat prompt: PromptIDs says ErrNoTokenizer, never
// ids of another rendering. A refusal of the rendering is the server's
// status and word.
func TestLlamaCppPromptIDsWithoutTemplate(t *testing.T) {
	f, err := llmsim.Start(context.Background(), llmsim.Config{Flavor: llmsim.FlavorLlamaCpp, Instant: true, Seed: 7}, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	target, _ := url.Parse(f.URLs()[0])
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apply-template" {
			proxy.ServeHTTP(w, r)
			return
		}
		if b, _ := io.ReadAll(r.Body); strings.Contains(string(b), "refuse me") {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"code":400,"message":"the template refused","type":"invalid_request_error"}}`)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	targets, err := ParseEndpoints(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := NewPool(ctx, targets, Config{ProbeInterval: 20 * time.Millisecond, ControlTimeout: 10 * time.Second, Logf: func(string, ...any) {}})
	t.Cleanup(func() {
		cancel()
		p.Close()
	})
	p.Start()
	if err := p.WaitReady(context.Background(), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ep := p.Endpoints()[0]
	var refused *Failure
	_, err = p.PromptIDs(context.Background(), ep, openai.ShapeLlama, []byte(strings.Replace(llamaChat("", ""), "Be brief.", "refuse me", 1)))
	if !errors.As(err, &refused) || refused.Status != 400 || refused.Message != "the template refused" || refused.Retriable {
		t.Errorf("refused: %v (%+v); want the server's 400 and message", err, refused)
	}
	ids, err := p.PromptIDs(context.Background(), ep, openai.ShapeLlama, []byte(llamaChat("", "")))
	if !errors.Is(err, ErrNoTokenizer) || ids != nil {
		t.Errorf("without /apply-template: %v, %v; want ErrNoTokenizer", ids, err)
	}
	if ids, err := p.PromptIDs(context.Background(), ep, openai.ShapeLlama, []byte(`{"prompt":"a text","max_tokens":1}`)); err != nil || len(ids) == 0 {
		t.Errorf("a text needs no template: %v, %v", ids, err)
	}
}
