package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"tokenmill/lib/llmsim"
	"tokenmill/lib/openai"
)

// mapCache is a TokenCache that counts its hits.
type mapCache struct {
	mu   sync.Mutex
	m    map[uint64]int
	hits int
}

func (c *mapCache) Get(k uint64) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.m[k]
	if ok {
		c.hits++
	}
	return n, ok
}

func (c *mapCache) Put(k uint64, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[k] = n
}

// Tokenize on every kind of server: where it offers a tokenizer for the
// request, the count is the prompt_tokens the same request is charged;
// where not (Ollama, gateways; chat on SGLang, whose tokenizer takes text
// alone, and on llama.cpp without /apply-template), ErrNoTokenizer. A
// cached prompt is not asked again.
func TestTokenizePerFlavor(t *testing.T) {
	model := llmsim.DefaultModelName
	chat := fmt.Sprintf(`{"model":%q,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"How many tokens is this sentence, all told?"}],"max_tokens":1}`, model)
	text := fmt.Sprintf(`{"model":%q,"prompt":"Once upon a time, in a land of many tokens,","max_tokens":1}`, model)
	supported := map[llmsim.Flavor][2]bool{ // chat, text
		llmsim.FlavorSGLang: {false, true}, llmsim.FlavorVLLM: {true, true}, llmsim.FlavorVLLM0100: {true, true},
		llmsim.FlavorLlamaCpp: {false, true}, llmsim.FlavorOllama: {false, false}, llmsim.FlavorOpenAI: {false, false},
	}
	for _, fl := range llmsim.Flavors {
		t.Run(string(fl), func(t *testing.T) {
			cache := &mapCache{m: map[uint64]int{}}
			p, _, _ := simPool(t, llmsim.Config{Flavor: fl, Instant: true}, 1, Config{TokenCache: cache, ControlTimeout: 10 * time.Second})
			if err := p.WaitReady(context.Background(), 20*time.Second); err != nil {
				t.Fatal(err)
			}
			ep := p.Endpoints()[0]
			for i, c := range []struct {
				body, path string
				parse      func([]byte) (openai.Completion, error)
			}{{chat, openai.PathChat, openai.ParseChat}, {text, openai.PathCompletions, openai.ParseCompletion}} {
				n, err := p.Tokenize(context.Background(), ep, []byte(c.body))
				if !supported[fl][i] {
					if !errors.Is(err, ErrNoTokenizer) {
						t.Errorf("%s: %d, %v; want ErrNoTokenizer", c.path, n, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", c.path, err)
				}
				got, f := p.Complete(ep, c.path, []byte(c.body), 10*time.Second, c.parse)
				if f != nil {
					t.Fatal(f)
				}
				if n != got.PromptTokens || n <= 0 {
					t.Errorf("%s: tokenize counts %d, the request was charged %d", c.path, n, got.PromptTokens)
				}
				hits := cache.hits
				if again, err := p.Tokenize(context.Background(), ep, []byte(c.body)); err != nil || again != n || cache.hits != hits+1 {
					t.Errorf("%s again: %d %v, cache hits %d -> %d", c.path, again, err, hits, cache.hits)
				}
			}
		})
	}
}

// Tokenize gives up with its context, and refuses a body with nothing to
// count.
func TestTokenizeBounds(t *testing.T) {
	p, _, _ := simPool(t, llmsim.Config{Flavor: llmsim.FlavorVLLM, Instant: true}, 1, Config{})
	if err := p.WaitReady(context.Background(), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ep := p.Endpoints()[0]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Tokenize(ctx, ep, []byte(`{"prompt":"x"}`)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	for _, bad := range []string{`{}`, `not json`, `{"max_tokens":3}`} {
		if _, err := p.Tokenize(context.Background(), ep, []byte(bad)); err == nil || errors.Is(err, ErrNoTokenizer) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
