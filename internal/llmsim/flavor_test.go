package llmsim

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/testbin"
)

// flavorCase is what one flavour answers on the routes every client
// touches; the exact bodies are pinned by testdata/llmsim/<flavour>.
type flavorCase struct {
	flavor      Flavor
	health      string // the path a client probes, "" none
	noHealth    string // a path that must not exist
	metric      string // a metric /metrics must carry, "" no /metrics
	wrongModel  int    // status for a model the server does not serve
	info        string // a path that tells the context length
	infoContext string // what the info body says about a 64-token context
	malformed   int    // status for a body that is not JSON
}

var flavorCases = []flavorCase{
	{FlavorSGLang, pathHealth, "/api/tags", "sglang:num_running_reqs", 200, pathServerInfo, `"context_length":64`, 400},
	{FlavorVLLM, pathHealth, pathServerInfo, "vllm:num_requests_running", 404, pathModels, `"max_model_len":64`, 400},
	{FlavorVLLM0100, pathHealth, pathServerInfo, "vllm:num_requests_waiting", 404, pathModels, `"max_model_len":64`, 400},
	{FlavorLlamaCpp, pathHealth, pathServerInfo, "llamacpp:requests_deferred", 200, pathLlamaProps, `"n_ctx":64`, 500},
	{FlavorOllama, pathOllamaRoot, pathHealth, "", 404, pathOllamaTags, "", 400},
	{FlavorOpenAI, "", pathHealth, "", 404, pathModels, "", 400},
}

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := testClient.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func postJSON(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := testClient.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// Every flavour serves its own routes, answers a chat (whole and
// streamed) whose text starts with the prompt digest, and refuses what its
// server refuses.
func TestFlavorRoutes(t *testing.T) {
	for _, fc := range flavorCases {
		t.Run(string(fc.flavor), func(t *testing.T) {
			fleet := startFleet(t, Config{Instant: true, Flavor: fc.flavor, ContextLength: 64, LlamaMetrics: true}, 1)
			base := fleet.URLs()[0]
			if fleet.Endpoint(0).Flavor() != fc.flavor {
				t.Fatalf("endpoint flavor %s", fleet.Endpoint(0).Flavor())
			}
			if fc.health != "" {
				if s, _ := getBody(t, base+fc.health); s != 200 {
					t.Errorf("%s: %d", fc.health, s)
				}
			}
			if s, _ := getBody(t, base+fc.noHealth); s != 404 {
				t.Errorf("%s: %d, want 404", fc.noHealth, s)
			}
			s, body := getBody(t, base+pathMetrics)
			if fc.metric == "" && s != 404 || fc.metric != "" && (s != 200 || !strings.Contains(body, fc.metric+"{") && !strings.Contains(body, fc.metric+" ")) {
				t.Errorf("/metrics: %d, want %q in\n%.300s", s, fc.metric, body)
			}
			if s, body := getBody(t, base+fc.info); s != 200 || !strings.Contains(body, fc.infoContext) {
				t.Errorf("%s: %d %.300s, want %q", fc.info, s, body, fc.infoContext)
			}
			if s, body := getBody(t, base+pathModels); s != 200 || !strings.Contains(body, DefaultModelName) {
				t.Errorf("/v1/models: %d %.200s", s, body)
			}

			user := "which flavour? " + string(fc.flavor)
			digest := PromptDigest(Prompt{Messages: []Message{{"user", user}}})
			chat := func(model string, stream bool, extra string) (int, []byte) {
				return postJSON(t, base+pathChat, `{"model":"`+model+`","messages":[{"role":"user","content":"`+user+`"}],"max_tokens":5,"stream":`+
					map[bool]string{true: "true", false: "false"}[stream]+extra+`}`)
			}
			s, b := chat(DefaultModelName, false, "")
			var a plainAnswer
			if s != 200 || json.Unmarshal(b, &a) != nil || len(a.Choices) != 1 || !strings.HasPrefix(a.Choices[0].Message.Content, digest) ||
				len(strings.Fields(a.Choices[0].Message.Content)) != a.Usage.CompletionTokens {
				t.Errorf("chat: %d %s", s, b)
			}
			s, b = chat(DefaultModelName, true, `,"stream_options":{"include_usage":true}`)
			text, usage := streamedText(t, b)
			if s != 200 || !strings.HasPrefix(text, digest) || usage != len(strings.Fields(text)) {
				t.Errorf("stream: %d text %q usage %d\n%s", s, text, usage, b)
			}
			if s, b := chat("no-such-model", false, ""); s != fc.wrongModel {
				t.Errorf("wrong model: %d %s, want %d", s, b, fc.wrongModel)
			}
			if s, b := postJSON(t, base+pathChat, `{"messages": [}`); s != fc.malformed {
				t.Errorf("malformed JSON: %d %s, want %d", s, b, fc.malformed)
			}
		})
	}
}

// streamedText joins the content deltas of a chat stream and returns the
// completion tokens of its usage chunk (-1 without one).
func streamedText(t *testing.T, body []byte) (string, int) {
	t.Helper()
	content, _, usage := streamed(t, body)
	return content, usage
}

// streamed joins the content and the reasoning deltas of a chat stream
// and returns the completion tokens of its usage chunk (-1 without one).
func streamed(t *testing.T, body []byte) (content, reasoning string, usage int) {
	t.Helper()
	events, err := testbin.SSEEvents(body)
	if err != nil {
		t.Fatalf("%v in %s", err, body)
	}
	var text, thought strings.Builder
	usage = -1
	for _, ev := range events {
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content   *string `json:"content"`
					Reasoning *string `json:"reasoning"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if string(ev) == `"[DONE]"` {
			continue
		}
		if err := json.Unmarshal(ev, &chunk); err != nil {
			t.Fatalf("event %s: %v", ev, err)
		}
		for _, c := range chunk.Choices {
			if c.Delta.Content != nil {
				text.WriteString(*c.Delta.Content)
			}
			if c.Delta.Reasoning != nil {
				thought.WriteString(*c.Delta.Reasoning)
			}
		}
		if chunk.Usage != nil && len(chunk.Choices) == 0 {
			usage = chunk.Usage.CompletionTokens
		}
	}
	return text.String(), thought.String(), usage
}

// While starting, each flavour shows it the way its server does: SGLang
// 503 on /health (and holds requests), vLLM refuses connections (uvicorn
// listens once the engine is up), llama.cpp 503 "Loading model" on /health
// and on generation, Ollama answers / at once.
func TestFlavorStarting(t *testing.T) {
	cases := []struct {
		flavor Flavor
		path   string
		status int
		body   string
		genNow int // status of a chat sent while starting, 0: held
	}{
		{FlavorSGLang, pathHealth, 503, "", 0},
		{FlavorVLLM, pathHealth, 0, "", 0}, // refused
		{FlavorVLLM0100, pathHealth, 0, "", 0},
		{FlavorLlamaCpp, pathHealth, 503, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`, 503},
		{FlavorOllama, pathOllamaRoot, 200, "Ollama is running", 0},
	}
	for _, c := range cases {
		t.Run(string(c.flavor), func(t *testing.T) {
			clock := NewManualClock()
			fleet := startFleet(t, Config{Instant: true, Clock: clock, Flavor: c.flavor, Faults: Faults{StartupDelay: time.Minute}}, 1)
			base := fleet.URLs()[0]
			if c.status == 0 {
				if _, err := testClient.Get(base + c.path); err == nil || !strings.Contains(err.Error(), "refused") {
					t.Fatalf("%s while starting: %v, want the connection refused", c.path, err)
				}
				clock.Advance(time.Minute)
				waitFor(t, "the server to listen once ready", func() bool {
					resp, err := testClient.Get(base + c.path)
					if err == nil {
						resp.Body.Close()
					}
					return err == nil && resp.StatusCode == 200
				})
				return
			}
			if s, b := getBody(t, base+c.path); s != c.status || b != c.body {
				t.Errorf("%s while starting: %d %q, want %d %q", c.path, s, b, c.status, c.body)
			}
			body := `{"model":"` + DefaultModelName + `","messages":[{"role":"user","content":"early"}],"max_tokens":3}`
			if c.genNow != 0 {
				if s, b := postJSON(t, base+pathChat, body); s != c.genNow {
					t.Errorf("chat while loading: %d %s", s, b)
				}
				return
			}
			done := make(chan int, 1)
			go func() {
				resp, err := testClient.Post(base+pathChat, "application/json", strings.NewReader(body))
				if err != nil {
					done <- -1
					return
				}
				resp.Body.Close()
				done <- resp.StatusCode
			}()
			waitFor(t, "the request to be held", func() bool { return fleet.Stats().Requests == 1 })
			clock.Advance(time.Minute)
			if s := <-done; s != 200 {
				t.Errorf("held chat: %d", s)
			}
		})
	}
}

func TestParseFlavor(t *testing.T) {
	for _, f := range Flavors {
		if got, err := ParseFlavor(string(f)); err != nil || got != f {
			t.Errorf("ParseFlavor(%s) = %s %v", f, got, err)
		}
	}
	if got, err := ParseFlavor(""); err != nil || got != FlavorSGLang {
		t.Errorf("default flavor %s %v", got, err)
	}
	if _, err := ParseFlavor("tgi"); err == nil {
		t.Error("ParseFlavor(tgi) succeeded")
	}
	if f, err := Start(t.Context(), Config{Flavor: "tgi"}, 1); err == nil {
		f.Close()
		t.Error("a fleet of an unknown flavor started")
	}
}

// One fleet mixes flavours (--fault N=flavor:NAME).
func TestMixedFleet(t *testing.T) {
	fleet := startFleet(t, Config{Instant: true, Flavors: map[int]Flavor{1: FlavorOllama}}, 2)
	if s, _ := getBody(t, fleet.URLs()[0]+pathHealth); s != 200 {
		t.Errorf("sglang endpoint /health: %d", s)
	}
	if s, b := getBody(t, fleet.URLs()[1]+pathOllamaRoot); s != 200 || b != "Ollama is running" {
		t.Errorf("ollama endpoint /: %d %q", s, b)
	}
	if s, _ := getBody(t, fleet.URLs()[1]+pathHealth); s != 404 {
		t.Errorf("ollama endpoint /health: %d", s)
	}
}

// A prompt longer than the context: refused with the flavour's 400, except
// by Ollama, which keeps what fits and says so in prompt_tokens. The
// routes that tell the context say 64.
func TestFlavorContext(t *testing.T) {
	long := strings.Repeat("word ", 80) // 100 tokens
	for _, fc := range flavorCases {
		t.Run(string(fc.flavor), func(t *testing.T) {
			fleet := startFleet(t, Config{Instant: true, Flavor: fc.flavor, ContextLength: 64}, 1)
			base := fleet.URLs()[0]
			s, b := postJSON(t, base+pathChat, `{"model":"`+DefaultModelName+`","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"`+long+`"}]}`)
			var a struct {
				Usage struct {
					PromptTokens int `json:"prompt_tokens"`
				} `json:"usage"`
			}
			switch {
			case fc.flavor == FlavorOllama:
				if s != 200 || json.Unmarshal(b, &a) != nil || a.Usage.PromptTokens != 64 {
					t.Errorf("ollama: %d %s, want 200 with the prompt cut to 64 tokens", s, b)
				}
				if s, body := postJSON(t, base+pathOllamaShow, `{"model":"`+DefaultModelName+`"}`); s != 200 || !strings.Contains(string(body), `num_ctx                        64`) {
					t.Errorf("/api/show: %d %s", s, body)
				}
			case s != 400 || !strings.Contains(string(b), "64"):
				t.Errorf("%d %s, want a 400 naming the 64-token context", s, b)
			}
		})
	}
}

// The tokenize routes count what a generation request is charged: vLLM's
// for chat messages and text, llama.cpp's and SGLang's for text.
func TestTokenizeCountsLikePrompts(t *testing.T) {
	texts := []string{"", "a", "Hello, tokenizer!", "日本語のテキスト", strings.Repeat("pipes and filters ", 50)}
	count := func(t *testing.T, b []byte, field string) int {
		var v map[string]json.RawMessage
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if field == "tokens" {
			var ids []int
			json.Unmarshal(v["tokens"], &ids)
			return len(ids)
		}
		var n int
		json.Unmarshal(v[field], &n)
		return n
	}
	for _, c := range []struct {
		flavor       Flavor
		path, field  string
		body         func(string) string
		promptTokens func(string) int
	}{
		{FlavorVLLM, pathTokenize, "count", func(s string) string { return `{"messages":[{"role":"user","content":` + quote(s) + `}]}` },
			func(s string) int { return PromptTokens(&Prompt{Messages: []Message{{"user", s}}}) }},
		{FlavorVLLM, pathTokenize, "count", func(s string) string { return `{"prompt":` + quote(s) + `}` }, TextTokens},
		{FlavorLlamaCpp, pathTokenize, "tokens", func(s string) string { return `{"content":` + quote(s) + `}` }, TextTokens},
		{FlavorSGLang, pathSGLTokenize, "count", func(s string) string { return `{"prompt":` + quote(s) + `}` }, TextTokens},
	} {
		fleet := startFleet(t, Config{Instant: true, Flavor: c.flavor}, 1)
		for _, s := range texts {
			st, b := postJSON(t, fleet.URLs()[0]+c.path, c.body(s))
			if got, want := count(t, b, c.field), c.promptTokens(s); st != 200 || got != want {
				t.Errorf("%s %s %.20q: %d, %d tokens, want %d", c.flavor, c.path, s, st, got, want)
			}
		}
		// And a generation request is charged the same.
		st, b := postJSON(t, fleet.URLs()[0]+pathChat, `{"model":"`+DefaultModelName+`","messages":[{"role":"user","content":"Hello, tokenizer!"}],"max_tokens":1}`)
		var a struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal(b, &a); st != 200 || a.Usage.PromptTokens != PromptTokens(&Prompt{Messages: []Message{{"user", "Hello, tokenizer!"}}}) {
			t.Errorf("%s chat: %d %s", c.flavor, st, b)
		}
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// What each flavour does differently on the wire, from its dialect: the
// methods its routes take, what its API key guards, how it takes a model
// name it does not serve or none at all, and how it refuses a request its
// waiting queue has no room for.
func TestFlavorDifferences(t *testing.T) {
	type want struct {
		put, head        int    // PUT on the chat route, HEAD on /v1/models
		options, models  int    // OPTIONS and GET /v1/models with a key set and none sent
		noModel          string // status and what the answer holds for a chat naming no model
		wrongModel       string // ... naming "nope"
		otherCase        int    // a chat naming the served model in lower case
		busy, busyStream string // a chat (whole, streamed) the waiting queue has no room for
	}
	const full = "The request queue is full."
	for _, tt := range []struct {
		flavor Flavor
		want   want
	}{
		{FlavorSGLang, want{200, 405, 405, 401, `200 "model":"default"`, `200 "model":"nope"`, 200, "503 " + full, "200 " + full}},
		{FlavorVLLM, want{405, 405, 405, 401, `200 "model":"Qwen3.6-27B"`, `404 "param":"model"`, 404, "503 " + full, "503 " + full}},
		{FlavorVLLM0100, want{405, 405, 405, 401, `200 "model":"Qwen3.6-27B"`, `404 "param":null`, 404, "503 " + full, "503 " + full}},
		{FlavorLlamaCpp, want{404, 404, 404, 200, `200 "model":"Qwen3.6-27B"`, `200 "model":"nope"`, 200, "503 " + full, "503 " + full}},
		{FlavorOllama, want{404, 200, 404, 200, `400 model is required`, `404 model \"nope\" not found, try pulling it first`, 200,
			"503 " + msgOllamaBusy, "503 " + msgOllamaBusy}},
		{FlavorOpenAI, want{404, 404, 401, 401, `400 you must provide a model parameter`, `404 "code":"model_not_found"`, 404, "503 " + full, "503 " + full}},
	} {
		t.Run(string(tt.flavor), func(t *testing.T) {
			send := func(base, method, path, body string) (int, string) {
				t.Helper()
				a := do(t, base, testbin.Request{Method: method, Path: path, RawBody: body})
				return a.status, string(a.body)
			}
			chat := func(model, extra string) string {
				return `{` + model + `"messages":[{"role":"user","content":"hi"}],"max_tokens":4` + extra + `}`
			}
			holds := func(what string, status int, body, want string) {
				t.Helper()
				code, text, _ := strings.Cut(want, " ")
				if fmt.Sprint(status) != code || !strings.Contains(body, text) {
					t.Errorf("%s: %d %s, want %s", what, status, body, want)
				}
			}
			w := tt.want
			base := startFleet(t, Config{Instant: true, Seed: 7, Flavor: tt.flavor}, 1).URLs()[0]
			served := `"model":"` + DefaultModelName + `",`
			if s, _ := send(base, "PUT", pathChat, chat(served, "")); s != w.put {
				t.Errorf("PUT %s: %d, want %d", pathChat, s, w.put)
			}
			if s, _ := send(base, "HEAD", pathModels, ""); s != w.head {
				t.Errorf("HEAD %s: %d, want %d", pathModels, s, w.head)
			}
			s, b := send(base, "POST", pathChat, chat("", ""))
			holds("no model", s, b, w.noModel)
			s, b = send(base, "POST", pathChat, chat(`"model":"nope",`, ""))
			holds("model nope", s, b, w.wrongModel)
			if s, b := send(base, "POST", pathChat, chat(`"model":"`+strings.ToLower(DefaultModelName)+`",`, "")); s != w.otherCase {
				t.Errorf("the served model in lower case: %d %s, want %d", s, b, w.otherCase)
			}

			base = startFleet(t, Config{Instant: true, Seed: 7, Flavor: tt.flavor, APIKey: "k3y"}, 1).URLs()[0]
			if s, _ := send(base, "OPTIONS", pathModels, ""); s != w.options {
				t.Errorf("OPTIONS %s with no key: %d, want %d", pathModels, s, w.options)
			}
			if s, _ := send(base, "GET", pathModels, ""); s != w.models {
				t.Errorf("GET %s with no key: %d, want %d", pathModels, s, w.models)
			}

			base = startFleet(t, Config{Seed: 7, Flavor: tt.flavor, MaxQueued: 1}, 1).URLs()[0]
			s, b = send(base, "POST", pathChat, chat(served, `,"n":2`))
			holds("queue full", s, b, w.busy)
			s, b = send(base, "POST", pathChat, chat(served, `,"n":2,"stream":true`))
			holds("queue full, streamed", s, b, w.busyStream)
		})
	}
}

// Every flavour has its dialect, and every dialect says everything the
// endpoint asks of it: the code outside the table has no flavour of its
// own to fall back on.
func TestDialectTable(t *testing.T) {
	for _, fl := range Flavors {
		d, ok := dialects[fl]
		switch {
		case !ok || d.flavor != fl:
			t.Errorf("%s: no dialect", fl)
			continue
		case d.routes == nil || d.open == nil || d.fitContext == nil || d.errorBody == nil:
			t.Errorf("%s: routes, open paths, context rule or error body missing", fl)
		case d.notFound == nil || d.notAllowed == nil || d.unauthorized == nil:
			t.Errorf("%s: a refusal missing", fl)
		case d.busyMessage == "":
			t.Errorf("%s: no message for a full queue", fl)
		case d.modelNotFound == nil && !d.anyModel && !d.echoModel:
			t.Errorf("%s: refuses models it does not serve, with no answer for them", fl)
		}
	}
}
