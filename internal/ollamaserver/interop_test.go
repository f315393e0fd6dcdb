package ollamaserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"tokenmill/internal/testbin"
	"tokenmill/lib/openai"
)

// TestInterop starts one real server and checks what tokenmill relies on:
// the recorded answers (testdata/ollama), usage in plain and streamed
// answers, seeded sampling, parallel requests and the context length.
func TestInterop(t *testing.T) {
	testbin.Long(t, "a real Ollama server")
	srv := Start(t, Options{Parallel: interopConfig.Parallel, NumCtx: interopConfig.NumCtx})
	t.Logf("ollama %s: started in %v, model created in %v, loaded in %v, first answer in %v",
		srv.Version, srv.Timings.Start, srv.Timings.Create, srv.Timings.Load, srv.Timings.FirstAnswer)

	t.Run("golden", func(t *testing.T) { testGolden(t, srv) })
	t.Run("models", func(t *testing.T) {
		_, body := call(t, srv, http.MethodGet, "/v1/models", nil, http.StatusOK)
		var list struct {
			Data []struct{ ID string }
		}
		unmarshal(t, body, &list)
		if len(list.Data) != 1 || list.Data[0].ID != srv.Model+":latest" {
			t.Errorf("/v1/models lists %+v, want only %s:latest", list.Data, srv.Model)
		}
	})
	t.Run("usage", func(t *testing.T) { testUsage(t, srv) })
	t.Run("openai", func(t *testing.T) { testClientDecoder(t, srv) })
	t.Run("seed", func(t *testing.T) { testSeed(t, srv) })
	t.Run("parallel", func(t *testing.T) { testParallel(t, srv) })
	t.Run("context", func(t *testing.T) {
		_, body := call(t, srv, http.MethodPost, "/api/show", map[string]any{"model": srv.Model}, http.StatusOK)
		var show struct {
			Parameters string
			ModelInfo  map[string]any `json:"model_info"`
		}
		unmarshal(t, body, &show)
		if n := show.ModelInfo["llama.context_length"]; n != float64(4096) {
			t.Errorf("model_info llama.context_length %v, want the GGUF's 4096", n)
		}
		if !strings.Contains(strings.Join(strings.Fields(show.Parameters), " "), fmt.Sprintf("num_ctx %d", interopConfig.NumCtx)) {
			t.Errorf("parameters %q lack num_ctx %d", show.Parameters, interopConfig.NumCtx)
		}
	})
}

// call sends a request (body nil: none) and checks the status.
func call(t *testing.T, srv *Server, method, path string, body any, status int) (http.Header, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, srv.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	if resp.StatusCode != status {
		t.Fatalf("%s %s: %s, want %d: %s", method, path, resp.Status, status, b)
	}
	return resp.Header, b
}

func unmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}

// usage is the OpenAI usage object.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// answer is what the tests read of a chat or completion answer, plain or
// one streamed chunk.
type answer struct {
	Choices []struct {
		Text    string
		Message struct{ Content string }
		Delta   struct{ Content string }
		Finish  *string `json:"finish_reason"`
	}
	Usage *usage
}

func (a answer) text() string {
	var b strings.Builder
	for _, c := range a.Choices {
		b.WriteString(c.Text + c.Message.Content + c.Delta.Content)
	}
	return b.String()
}

// generate asks for an answer: a chat with one user turn when chat, else a
// completion; extra adds or overrides request fields.
func generate(t *testing.T, srv *Server, chat bool, prompt string, extra map[string]any) answer {
	t.Helper()
	path, body := openAIRequest(srv, chat, prompt, extra)
	_, b := call(t, srv, http.MethodPost, path, body, http.StatusOK)
	var a answer
	unmarshal(t, b, &a)
	return a
}

func openAIRequest(srv *Server, chat bool, prompt string, extra map[string]any) (string, map[string]any) {
	path, body := "/v1/completions", map[string]any{"model": srv.Model, "prompt": prompt}
	if chat {
		path, body = "/v1/chat/completions", map[string]any{"model": srv.Model,
			"messages": []map[string]string{{"role": "user", "content": prompt}}}
	}
	for k, v := range extra {
		body[k] = v
	}
	return path, body
}

// stream asks for a streamed answer and returns its chunks, [DONE] left out.
func stream(t *testing.T, srv *Server, chat bool, prompt string, extra map[string]any) []answer {
	t.Helper()
	path, body := openAIRequest(srv, chat, prompt, extra)
	body["stream"] = true
	h, b := call(t, srv, http.MethodPost, path, body, http.StatusOK)
	if ct := h.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("%s streamed as %q", path, ct)
	}
	evs, err := events(b)
	if err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	chunks := make([]answer, len(evs)-1)
	for i := range chunks {
		unmarshal(t, evs[i], &chunks[i])
	}
	return chunks
}

func checkUsage(t *testing.T, what string, u *usage, completion int) {
	t.Helper()
	if u == nil || u.CompletionTokens != completion || u.PromptTokens <= 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("%s: usage %+v, want %d completion tokens, some prompt tokens and their sum", what, u, completion)
	}
}

// testUsage checks that answers run to max_tokens (the tiny model never
// ends one) and report it, plainly and, with include_usage, in a last
// chunk without choices; and that a stream says what the plain answer says.
func testUsage(t *testing.T, srv *Server) {
	const n = 24
	for _, chat := range []bool{true, false} {
		what := map[bool]string{true: "chat", false: "completion"}[chat]
		opts := map[string]any{"max_tokens": n, "seed": 11, "temperature": 0.9}
		plain := generate(t, srv, chat, "Tell me about the sea.", opts)
		if len(plain.Choices) != 1 || plain.Choices[0].Finish == nil || *plain.Choices[0].Finish != "length" {
			t.Fatalf("%s: choices %+v, want one that ends for length", what, plain.Choices)
		}
		checkUsage(t, what, plain.Usage, n)

		opts["stream_options"] = map[string]any{"include_usage": true}
		chunks := stream(t, srv, chat, "Tell me about the sea.", opts)
		last := chunks[len(chunks)-1]
		if len(last.Choices) != 0 {
			t.Errorf("%s stream: the usage chunk has choices %+v", what, last.Choices)
		}
		checkUsage(t, what+" stream", last.Usage, n)
		var text strings.Builder
		finishes := 0
		for _, c := range chunks[:len(chunks)-1] {
			// Ollama's completion chunks carry a zero usage each; chat chunks none.
			if c.Usage != nil && *c.Usage != (usage{}) {
				t.Errorf("%s stream: usage %+v before the last chunk", what, *c.Usage)
			}
			if len(c.Choices) != 1 {
				t.Fatalf("%s stream: chunk with %d choices", what, len(c.Choices))
			}
			if c.Choices[0].Finish != nil {
				finishes++
				if *c.Choices[0].Finish != "length" {
					t.Errorf("%s stream: finish_reason %q", what, *c.Choices[0].Finish)
				}
			}
			text.WriteString(c.text())
		}
		if finishes != 1 {
			t.Errorf("%s stream: %d chunks with a finish_reason, want 1", what, finishes)
		}
		if text.String() != plain.text() {
			t.Errorf("%s: the stream says %q, the plain answer with the same seed %q", what, text.String(), plain.text())
		}
		delete(opts, "stream_options")
		chunks = stream(t, srv, chat, "Tell me about the sea.", opts)
		if u := chunks[len(chunks)-1].Usage; u != nil && *u != (usage{}) {
			t.Errorf("%s stream without include_usage: usage %+v", what, *u)
		}
	}
}

// testClientDecoder reads Ollama's streams with tokenmill's own client
// code (lib/openai), which infer uses: the text it assembles is the plain
// answer's, and the usage it ends with is the answer's.
func testClientDecoder(t *testing.T, srv *Server) {
	const n = 12
	for _, kind := range []openai.StreamKind{openai.StreamChat, openai.StreamCompletion} {
		chat := kind == openai.StreamChat
		opts := map[string]any{"max_tokens": n, "seed": 5, "temperature": 0.7}
		plain := generate(t, srv, chat, "Where do rivers go?", opts).text()
		path, body := openAIRequest(srv, chat, "Where do rivers go?", opts)
		body["stream"], body["stream_options"] = true, map[string]any{"include_usage": true}
		_, raw := call(t, srv, http.MethodPost, path, body, http.StatusOK)
		events, dec := openai.NewEventReader(bytes.NewReader(raw)), openai.StreamDecoder{Kind: kind}
		var text strings.Builder
		var last openai.Delta
		finish := ""
		for {
			data, err := events.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			d, err := dec.Decode(data)
			if err != nil {
				t.Fatalf("kind %d: %v in %s", kind, err, data)
			}
			text.WriteString(d.Text)
			if d.FinishReason != "" {
				finish = d.FinishReason
			}
			if !d.Done {
				last = d
			}
		}
		if text.String() != plain || finish != "length" || last.CompletionTokens != n || last.PromptTokens <= 0 {
			t.Errorf("kind %d: decoded %q, finish %q, last usage %d+%d; want %q, length, %d completion tokens",
				kind, text.String(), finish, last.PromptTokens, last.CompletionTokens, plain, n)
		}
	}
}

// testSeed checks that a seed and a temperature give the same answer
// every time, another seed another answer, and no seed a fresh one.
func testSeed(t *testing.T, srv *Server) {
	ask := func(extra map[string]any) string {
		opts := map[string]any{"max_tokens": 16, "temperature": 0.8}
		for k, v := range extra {
			opts[k] = v
		}
		return generate(t, srv, true, "Write a line about the moon.", opts).text()
	}
	a, b := ask(map[string]any{"seed": 42}), ask(map[string]any{"seed": 42})
	if a != b {
		t.Errorf("seed 42 twice: %q and %q", a, b)
	}
	if c := ask(map[string]any{"seed": 43}); c == a {
		t.Errorf("seeds 42 and 43 both answer %q", a)
	}
	if x, y := ask(nil), ask(nil); x == y {
		t.Errorf("two answers without a seed are the same: %q", x)
	}
}

// testParallel sends as many requests at once as the server runs; each
// must be answered in full.
func testParallel(t *testing.T, srv *Server) {
	const n = 32
	got := make([]answer, interopConfig.Parallel)
	errs := make([]error, len(got))
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = post(srv, true, fmt.Sprintf("Count to %d.", i+1), map[string]any{"max_tokens": n})
		}()
	}
	wg.Wait()
	for i, a := range got {
		if errs[i] != nil {
			t.Errorf("request %d: %v", i, errs[i])
			continue
		}
		checkUsage(t, fmt.Sprintf("request %d", i), a.Usage, n)
	}
}

// post asks for a plain answer, for callers off the test's goroutine.
func post(srv *Server, chat bool, prompt string, extra map[string]any) (answer, error) {
	path, body := openAIRequest(srv, chat, prompt, extra)
	b, err := json.Marshal(body)
	if err != nil {
		return answer{}, err
	}
	resp, err := testClient.Post(srv.URL+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return answer{}, fmt.Errorf("%s: %s", resp.Status, raw)
	}
	var a answer
	if err := json.Unmarshal(raw, &a); err != nil {
		return answer{}, fmt.Errorf("%v: %s", err, raw)
	}
	return a, nil
}
