package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/llmsim"
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
// alone), ErrNoTokenizer. llama.cpp counts a chat prompt through
// /apply-template. A cached prompt is not asked again.
func TestTokenizePerFlavor(t *testing.T) {
	model := llmsim.DefaultModelName
	chat := fmt.Sprintf(`{"model":%q,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"How many tokens is this sentence, all told?"}],"max_tokens":1}`, model)
	text := fmt.Sprintf(`{"model":%q,"prompt":"Once upon a time, in a land of many tokens,","max_tokens":1}`, model)
	supported := map[llmsim.Flavor][2]bool{ // chat, text
		llmsim.FlavorSGLang: {false, true}, llmsim.FlavorVLLM: {true, true}, llmsim.FlavorVLLM0100: {true, true},
		llmsim.FlavorLlamaCpp: {true, true}, llmsim.FlavorOllama: {false, false}, llmsim.FlavorOpenAI: {false, false},
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

// TokenizeTexts counts a chat prompt's texts with no chat template, where
// Tokenize finds no tokenizer that applies one: SGLang counts each text
// (contents, tool calls, tools), llama.cpp and vLLM the texts joined by
// newlines; a server without a tokenizer has ErrNoTokenizer.
func TestTokenizeTexts(t *testing.T) {
	model := llmsim.DefaultModelName
	tools := `[{"type":"function","function":{"name":"f"}}]`
	calls := `[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]`
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"How many tokens "},{"type":"text","text":"is this sentence?"}]},{"role":"assistant","content":"","tool_calls":%s}],"tools":%s}`, model, calls, tools)
	texts := []string{"Be brief.", "How many tokens is this sentence?", calls, tools}
	each := 0
	for _, s := range texts {
		each += llmsim.TextTokens(s)
	}
	joined := llmsim.TextTokens(strings.Join(texts, "\n"))
	want := map[llmsim.Flavor]int{llmsim.FlavorSGLang: each, llmsim.FlavorLlamaCpp: joined, llmsim.FlavorVLLM: joined, llmsim.FlavorOllama: -1, llmsim.FlavorOpenAI: -1}
	for fl, w := range want {
		t.Run(string(fl), func(t *testing.T) {
			p, _, _ := simPool(t, llmsim.Config{Flavor: fl, Instant: true}, 1, Config{ControlTimeout: 10 * time.Second})
			if err := p.WaitReady(context.Background(), 20*time.Second); err != nil {
				t.Fatal(err)
			}
			ep := p.Endpoints()[0]
			n, err := p.TokenizeTexts(context.Background(), ep, []byte(body))
			switch {
			case w < 0 && !errors.Is(err, ErrNoTokenizer):
				t.Errorf("%d, %v; want ErrNoTokenizer", n, err)
			case w >= 0 && (err != nil || n != w):
				t.Errorf("%d, %v; want %d", n, err, w)
			}
		})
	}
}

// llmsimGolden is the part of one of llmsim's golden exchanges
// (testdata/llmsim), each written from its server's source, that a
// tokenize answer needs.
type llmsimGolden struct {
	Response json.RawMessage `json:"response"`
}

// Every server's tokenize answer: the count, and whether the server
// counted (vLLM, SGLang) or listed tokens alone (llama.cpp).
func TestParseTokenizeGoldens(t *testing.T) {
	for _, tt := range []struct {
		file    string
		n       int
		counted bool
	}{
		{"tokenize.json", 5, true},
		{"vllm/tokenize.json", 5, true},
		{"vllm/tokenize_chat.json", 12, true},
		{"llamacpp/tokenize.json", 5, false},
	} {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "llmsim", tt.file))
		if err != nil {
			t.Fatal(err)
		}
		var g llmsimGolden
		json.Unmarshal(b, &g)
		n, counted, err := parseTokenize(g.Response)
		if err != nil || n != tt.n || counted != tt.counted {
			t.Errorf("%s: %d %v %v, want %d %v", tt.file, n, counted, err, tt.n, tt.counted)
		}
	}
	if n, counted, err := parseTokenize([]byte(`{"tokens":[[1,2],[3]],"count":[2,1],"max_model_len":9}`)); n != 3 || !counted || err != nil {
		t.Errorf("SGLang's list of prompts: %d %v %v", n, counted, err)
	}
	for _, bad := range []string{`{}`, `not json`, `{"count":null}`, `{"count":[1,-2]}`} {
		if n, _, err := parseTokenize([]byte(bad)); err == nil {
			t.Errorf("%s read as %d", bad, n)
		}
	}
}

// Every request in flight may ask the tokenizer at once: more of them
// than the control requests' few connections all get their count.
func TestTokenizeConcurrent(t *testing.T) {
	p, _, _ := simPool(t, llmsim.Config{Flavor: llmsim.FlavorVLLM, Instant: true}, 1, Config{ControlTimeout: 10 * time.Second})
	if err := p.WaitReady(context.Background(), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ep := p.Endpoints()[0]
	const n = 64
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			text := strings.Repeat("word ", 1+i)
			_, err := p.Tokenize(context.Background(), ep, []byte(fmt.Sprintf(`{"messages":[{"role":"user","content":%q}]}`, text)))
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
}
