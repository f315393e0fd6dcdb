package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/ollamaserver"
	"tokenmill/internal/testbin"
	"tokenmill/lib/openai"
)

// What the pool learns of a real Ollama server (v0.6.5, internal/ollamaserver): ready
// on /v1/models (it has no /health), no capacity, its context from
// /api/show, and no tokenizer. A model created without num_ctx gets
// Ollama's default, 2048 tokens: a longer prompt is cut to it, as the
// answer's prompt_tokens shows; with num_ctx set, that is the context.
func TestOllamaDiscovery(t *testing.T) {
	testbin.Long(t, "a real Ollama server")
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 400)
	for _, tt := range []struct {
		numCtx int
		want   int
		source string
	}{
		{0, 2048, "Ollama's default num_ctx: the model sets none in /api/show"},
		{1024, 1024, "num_ctx, /api/show"},
	} {
		t.Run(fmt.Sprintf("num_ctx %d", tt.numCtx), func(t *testing.T) {
			srv := ollamaserver.Start(t, ollamaserver.Options{Parallel: 1, NumCtx: tt.numCtx})
			targets, err := ParseEndpoints(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			l := &logs{}
			ctx, cancel := context.WithCancel(context.Background())
			p := NewPool(ctx, targets, Config{ProbeInterval: 50 * time.Millisecond, ControlTimeout: 30 * time.Second, EjectAfter: 5, Logf: l.logf})
			t.Cleanup(func() {
				cancel()
				p.Close()
			})
			p.Start()
			if err := p.WaitReady(context.Background(), 30*time.Second); err != nil {
				t.Fatal(err)
			}
			v := p.View()[0]
			if v.Info.Context != tt.want || v.Info.ContextSource != tt.source || v.Info.Capacity != 0 || !v.Adaptive ||
				v.Info.Parallel != ollamaDefaultParallel || v.Slots != FirstLevel ||
				len(v.Info.Models) != 1 || v.Info.Models[0] != srv.Model+":latest" {
				t.Errorf("%+v", v)
			}
			if want := srv.URL + ": /health 404 (no such route), /v1/models 200: ready; capacity not reported"; !strings.Contains(l.text(), want) {
				t.Errorf("ready line:\n%s", l.text())
			}
			ep := p.Endpoints()[0]
			body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":2}`, srv.Model, long)
			c, f := p.Complete(ep, openai.PathChat, []byte(body), time.Minute, openai.ParseChat)
			if f != nil {
				t.Fatal(f)
			}
			if c.PromptTokens != tt.want {
				t.Errorf("a prompt longer than the context was charged %d prompt tokens, want it cut to %d", c.PromptTokens, tt.want)
			}
			if _, err := p.Tokenize(context.Background(), ep, []byte(body)); !errors.Is(err, ErrNoTokenizer) {
				t.Errorf("tokenize: %v, want ErrNoTokenizer", err)
			}
		})
	}
}
