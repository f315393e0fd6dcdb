package fleet

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// What discovery asks, in order, and what it makes of each kind of answer:
// SGLang's server info (either name), llama.cpp's /props where no capacity
// was said, the models listed (vLLM's max_model_len, Ollama's "library"),
// Ollama's /api/show, and --context-length over all of it.
// answer is what a route of a fake server answers.
type answer struct {
	status int
	body   string
}

// What fake servers answer to their info and model routes.
const (
	sglangInfo = `{"max_running_requests":48,"context_length":32768}`
	oneModel   = `{"data":[{"id":"m"}]}`
	ollamaList = `{"data":[{"id":"tiny:latest","owned_by":"library"}]}`
)

func TestDiscover(t *testing.T) {
	tests := discoverCases()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var asked []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				key := r.Method + " " + r.URL.Path
				body, _ := io.ReadAll(r.Body)
				mu.Lock()
				if len(body) > 0 {
					asked = append(asked, key+" "+string(body))
				} else {
					asked = append(asked, key)
				}
				mu.Unlock()
				a, ok := tt.routes[key]
				if !ok {
					a = answer{404, `{"detail":"Not Found"}`}
				}
				w.WriteHeader(a.status)
				io.WriteString(w, a.body)
			}))
			defer srv.Close()
			targets, err := ParseEndpoints(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			p := NewPool(ctx, targets, Config{Model: tt.model, ContextLength: tt.ctxLen, ControlTimeout: 10 * time.Second})
			defer func() {
				cancel()
				p.Close()
			}()
			got := p.discover(p.eps[0])
			if got.Capacity != tt.want.Capacity || got.CapacitySource != tt.want.CapacitySource ||
				got.Context != tt.want.Context || got.ContextSource != tt.want.ContextSource ||
				!slices.Equal(got.Models, tt.want.Models) || got.Metrics != "" ||
				got.ContextAssumed != strings.HasPrefix(got.ContextSource, "Ollama's default") {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(asked, tt.asked) {
				t.Errorf("asked %q\nwant  %q", asked, tt.asked)
			}
		})
	}
}

// discoverCase is one case of TestDiscover.
type discoverCase struct {
	name   string
	routes map[string]answer // the rest are 404
	model  string            // --model
	ctxLen int               // --context-length
	want   Info
	asked  []string
}

// discoverCases are TestDiscover's cases.
func discoverCases() []discoverCase {
	return append(discoverServerCases(), discoverOllamaCases()...)
}

// discoverServerCases are the cases of SGLang, vLLM and llama.cpp.
func discoverServerCases() []discoverCase {
	return []discoverCase{
		{name: "SGLang: capacity and context from /get_server_info",
			routes: map[string]answer{"GET /get_server_info": {200, sglangInfo}, "GET /v1/models": {200, oneModel}},
			want: Info{Capacity: 48, CapacitySource: "max_running_requests, /get_server_info",
				Context: 32768, ContextSource: "context_length, /get_server_info", Models: []string{"m"}},
			asked: []string{"GET /get_server_info", "GET /v1/models"}},
		{name: "newer SGLang: /server_info after a 404",
			routes: map[string]answer{"GET /get_server_info": {404, `{"detail":"Not Found"}`}, "GET /server_info": {200, sglangInfo}, "GET /v1/models": {200, oneModel}},
			want: Info{Capacity: 48, CapacitySource: "max_running_requests, /server_info",
				Context: 32768, ContextSource: "context_length, /server_info", Models: []string{"m"}},
			asked: []string{"GET /get_server_info", "GET /server_info", "GET /v1/models"}},
		{name: "a server info that does not parse: the next name",
			routes: map[string]answer{"GET /get_server_info": {200, `not json`}, "GET /server_info": {200, sglangInfo}},
			want: Info{Capacity: 48, CapacitySource: "max_running_requests, /server_info",
				Context: 32768, ContextSource: "context_length, /server_info"},
			asked: []string{"GET /get_server_info", "GET /server_info", "GET /v1/models"}},
		{name: "a server info without capacity: /props for it, the context kept",
			routes: map[string]answer{"GET /get_server_info": {200, `{"context_length":4096}`},
				"GET /props": {200, `{"total_slots":4,"default_generation_settings":{"n_ctx":8192}}`}},
			want:  Info{Capacity: 4, CapacitySource: "total_slots, /props", Context: 4096, ContextSource: "context_length, /get_server_info"},
			asked: []string{"GET /get_server_info", "GET /props", "GET /v1/models"}},
		{name: "llama.cpp: capacity and context from /props",
			routes: map[string]answer{"GET /props": {200, `{"total_slots":4,"default_generation_settings":{"n_ctx":8192}}`},
				"GET /v1/models": {200, `{"data":[{"id":"m","max_model_len":100}]}`}},
			want:  Info{Capacity: 4, CapacitySource: "total_slots, /props", Context: 8192, ContextSource: "n_ctx, /props", Models: []string{"m"}},
			asked: []string{"GET /get_server_info", "GET /server_info", "GET /props", "GET /v1/models"}},
		{name: "/props with a context and no slots",
			routes: map[string]answer{"GET /props": {200, `{"default_generation_settings":{"n_ctx":8192}}`}},
			want:   Info{Context: 8192, ContextSource: "n_ctx, /props"},
			asked:  []string{"GET /get_server_info", "GET /server_info", "GET /props", "GET /v1/models"}},
		{name: "vLLM: the first listed model's max_model_len",
			routes: map[string]answer{"GET /v1/models": {200, `{"data":[{"id":"a","max_model_len":1000},{"id":"b","max_model_len":2000}]}`}},
			want:   Info{Context: 1000, ContextSource: "max_model_len, /v1/models", Models: []string{"a", "b"}},
			asked:  []string{"GET /get_server_info", "GET /server_info", "GET /props", "GET /v1/models"}},
		{name: "vLLM with --model: that model's max_model_len",
			routes: map[string]answer{"GET /v1/models": {200, `{"data":[{"id":"a","max_model_len":1000},{"id":"b","max_model_len":2000}]}`}},
			model:  "b",
			want:   Info{Context: 2000, ContextSource: "max_model_len, /v1/models", Models: []string{"a", "b"}},
			asked:  []string{"GET /get_server_info", "GET /server_info", "GET /props", "GET /v1/models"}},
		{name: "a model list that does not parse",
			routes: map[string]answer{"GET /v1/models": {200, `{"data":`}},
			asked:  []string{"GET /get_server_info", "GET /server_info", "GET /props", "GET /v1/models"}},
	}
}

// discoverOllamaCases are the cases of Ollama and what follows them.
func discoverOllamaCases() []discoverCase {
	return []discoverCase{
		{name: "Ollama: the num_ctx /api/show gives the first model",
			routes: map[string]answer{"GET /v1/models": {200, ollamaList},
				"POST /api/show": {200, `{"parameters":"stop \"<|im_end|>\"\nnum_ctx 4096","model_info":{"general.architecture":"llama"}}`}},
			want:  Info{Context: 4096, ContextSource: "num_ctx, /api/show", Models: []string{"tiny:latest"}},
			asked: []string{"GET /get_server_info", "GET /server_info", "GET /props", "GET /v1/models", `POST /api/show {"model":"tiny:latest"}`, "GET /api/ps"}},
		{name: "Ollama: the context of the loaded model where /api/ps says it (newer releases)",
			routes: map[string]answer{"GET /v1/models": {200, ollamaList},
				"POST /api/show": {200, `{"parameters":"","model_info":{"general.architecture":"llama"}}`},
				"GET /api/ps":    {200, `{"models":[{"name":"tiny:latest","model":"tiny:latest","context_length":512}]}`}},
			want:  Info{Context: 512, ContextSource: "context_length, /api/ps", Models: []string{"tiny:latest"}},
			asked: []string{"GET /get_server_info", "GET /server_info", "GET /props", "GET /v1/models", `POST /api/show {"model":"tiny:latest"}`, "GET /api/ps"}},
		{name: "Ollama with --model: /api/show asked for it",
			routes: map[string]answer{"GET /v1/models": {200, ollamaList},
				"POST /api/show": {200, `{"parameters":"num_ctx 4096","model_info":{}}`}},
			model: "tiny",
			want:  Info{Context: 4096, ContextSource: "num_ctx, /api/show", Models: []string{"tiny:latest"}},
			asked: []string{"GET /get_server_info", "GET /server_info", "GET /props", "GET /v1/models", `POST /api/show {"model":"tiny"}`, "GET /api/ps"}},
		{name: "Ollama: a trained context under the default",
			routes: map[string]answer{"GET /v1/models": {200, ollamaList},
				"POST /api/show": {200, `{"model_info":{"general.architecture":"llama","llama.context_length":1024}}`}},
			want:  Info{Context: 1024, ContextSource: "llama.context_length, /api/show", Models: []string{"tiny:latest"}},
			asked: []string{"GET /get_server_info", "GET /server_info", "GET /props", "GET /v1/models", `POST /api/show {"model":"tiny:latest"}`, "GET /api/ps"}},
		{name: "Ollama: its default, no num_ctx set",
			routes: map[string]answer{"GET /v1/models": {200, ollamaList},
				"POST /api/show": {200, `{"model_info":{"general.architecture":"llama","llama.context_length":8192}}`}},
			want:  Info{Context: 2048, ContextSource: "Ollama's default num_ctx: the model sets none in /api/show", Models: []string{"tiny:latest"}},
			asked: []string{"GET /get_server_info", "GET /server_info", "GET /props", "GET /v1/models", `POST /api/show {"model":"tiny:latest"}`, "GET /api/ps"}},
		{name: "Ollama: /api/show refused",
			routes: map[string]answer{"GET /v1/models": {200, ollamaList}},
			want:   Info{Models: []string{"tiny:latest"}},
			asked:  []string{"GET /get_server_info", "GET /server_info", "GET /props", "GET /v1/models", `POST /api/show {"model":"tiny:latest"}`, "GET /api/ps"}},
		{name: "Ollama listing no model: nothing to show",
			routes: map[string]answer{"GET /v1/models": {200, `{"data":[]}`}},
			asked:  []string{"GET /get_server_info", "GET /server_info", "GET /props", "GET /v1/models"}},
		{name: "Ollama among others listed: /api/show asked",
			routes: map[string]answer{"GET /v1/models": {200, `{"data":[{"id":"tiny:latest","owned_by":"library"},{"id":"other","owned_by":"someone"}]}`},
				"POST /api/show": {200, `{"parameters":"num_ctx 4096","model_info":{}}`}},
			want:  Info{Context: 4096, ContextSource: "num_ctx, /api/show", Models: []string{"tiny:latest", "other"}},
			asked: []string{"GET /get_server_info", "GET /server_info", "GET /props", "GET /v1/models", `POST /api/show {"model":"tiny:latest"}`, "GET /api/ps"}},
		{name: "Ollama with a context said already: /api/show not asked",
			routes: map[string]answer{"GET /props": {200, `{"default_generation_settings":{"n_ctx":8192}}`}, "GET /v1/models": {200, ollamaList}},
			want:   Info{Context: 8192, ContextSource: "n_ctx, /props", Models: []string{"tiny:latest"}},
			asked:  []string{"GET /get_server_info", "GET /server_info", "GET /props", "GET /v1/models"}},
		{name: "a gateway: models only",
			routes: map[string]answer{"GET /v1/models": {200, `{"data":[{"id":"gpt","owned_by":"openai"}]}`}},
			want:   Info{Models: []string{"gpt"}},
			asked:  []string{"GET /get_server_info", "GET /server_info", "GET /props", "GET /v1/models"}},
		{name: "--context-length over what the server says",
			routes: map[string]answer{"GET /get_server_info": {200, sglangInfo}},
			ctxLen: 999,
			want:   Info{Capacity: 48, CapacitySource: "max_running_requests, /get_server_info", Context: 999, ContextSource: "--context-length"},
			asked:  []string{"GET /get_server_info", "GET /v1/models"}},
		{name: "--context-length over Ollama's: /api/show asked all the same",
			routes: map[string]answer{"GET /v1/models": {200, ollamaList}},
			ctxLen: 999,
			want:   Info{Context: 999, ContextSource: "--context-length", Models: []string{"tiny:latest"}},
			asked:  []string{"GET /get_server_info", "GET /server_info", "GET /props", "GET /v1/models", `POST /api/show {"model":"tiny:latest"}`, "GET /api/ps"}},
		{name: "nothing answers",
			asked: []string{"GET /get_server_info", "GET /server_info", "GET /props", "GET /v1/models"}},
	}
}
