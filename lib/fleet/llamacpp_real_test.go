package fleet

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/gguf"
	"tokenmill/internal/llamaserver"
	"tokenmill/internal/testbin"
	"tokenmill/lib/openai"
)

// kwargTemplate prints a chat_template_kwargs value (and so takes a dozen
// tokens more with it) and renders no tools; toolTemplate renders them.
const (
	kwargTemplate = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}" +
		"{% if flavor is defined %}flavor={{ flavor }} extra words for the kwargs here\n{% endif %}" +
		"{% if add_generation_prompt %}assistant:{% endif %}"
	toolTemplate = "{% if tools %}tools: {{ tools | tojson }}\n{% endif %}" + kwargTemplate
)

// realLlamaPool is a pool of one real llama-server (internal/llamaserver:
// a tiny model on internal/gguf's English SentencePiece vocabulary, which
// adds a begin-of-text token) with the chat template given, ready.
func realLlamaPool(t *testing.T, template string) (*Pool, *llamaserver.Server) {
	t.Helper()
	srv := llamaserver.Start(t, llamaserver.Options{Model: gguf.Llama{ChatTemplate: template}})
	targets, err := ParseEndpoints(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := NewPool(ctx, targets, Config{ProbeInterval: 50 * time.Millisecond, ControlTimeout: time.Minute, Logf: func(string, ...any) {}})
	t.Cleanup(func() {
		cancel()
		p.Close()
	})
	p.Start()
	if err := p.WaitReady(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	return p, srv
}

// Against a real llama.cpp server: Tokenize counts a chat prompt (with
// chat_template_kwargs that render, and the begin-of-text token the
// vocabulary adds) and a text as the server charges them; PromptIDs gives
// as many ids, the begin-of-text token first; /props' chat_template_caps
// say whether the template renders tools, and the pool keeps it.
func TestRealLlamaCppCountsAndCaps(t *testing.T) {
	testbin.Long(t, "a real llama.cpp server")
	if _, err := llamaserver.Find(); err != nil {
		t.Skip(err)
	}
	p, srv := realLlamaPool(t, kwargTemplate)
	t.Logf("llama-server build %s", srv.BuildInfo)
	ep := p.Endpoints()[0]
	if why := p.ToolsUnsupported(ep); !strings.Contains(why, "does not support tools") {
		t.Errorf("a template without tools: ToolsUnsupported %q", why)
	}
	const messages = `[{"role":"system","content":"Be brief."},{"role":"user","content":"Tell me about the water of the sea and the land."}]`
	charged := map[string]int{}
	for _, c := range []struct{ name, body, path string }{
		{"chat", `{"messages":` + messages + `,"max_tokens":1}`, openai.PathChat},
		{"chat with kwargs", `{"messages":` + messages + `,"max_tokens":1,"chat_template_kwargs":{"flavor":"spicy"}}`, openai.PathChat},
		{"text", `{"prompt":"the water of the sea and the land","max_tokens":1}`, openai.PathCompletions},
	} {
		var out struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := srv.Call(c.path, json.RawMessage(c.body), &out); err != nil {
			t.Fatal(err)
		}
		charged[c.name] = out.Usage.PromptTokens
		n, err := p.Tokenize(context.Background(), ep, []byte(c.body))
		if err != nil || n != out.Usage.PromptTokens {
			t.Errorf("%s: counted %d (%v), charged %d", c.name, n, err, out.Usage.PromptTokens)
		}
		ids, err := p.PromptIDs(context.Background(), ep, openai.ShapeLlama, []byte(c.body))
		if err != nil || len(ids) != out.Usage.PromptTokens || ids[0] != gguf.BOSID {
			t.Errorf("%s: %d prompt ids (%v), charged %d; want the begin-of-text %d first", c.name, len(ids), err, out.Usage.PromptTokens, gguf.BOSID)
		}
	}
	t.Logf("charged: %v", charged)
	if charged["chat with kwargs"] <= charged["chat"] {
		t.Errorf("the kwargs did not render: %v", charged)
	}

	p2, _ := realLlamaPool(t, toolTemplate)
	if why := p2.ToolsUnsupported(p2.Endpoints()[0]); why != "" {
		t.Errorf("a template that renders tools: ToolsUnsupported %q", why)
	}
}
