package bench

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
)

// simBinary runs the llmsim binary with n endpoints and flags, and
// returns its --endpoints value.
func simBinary(t *testing.T, n int, flags ...string) string {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "urls")
	listen := strings.TrimSuffix(strings.Repeat("127.0.0.1:0,", n), ",")
	testbin.Start(t, "llmsim", append([]string{"--listen", listen, "--ready-file", ready}, flags...)...)
	var urls []string
	for deadline := time.Now().Add(10 * time.Second); len(urls) != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("llmsim did not write its ready file within 10s")
		}
		b, _ := os.ReadFile(ready)
		urls = strings.Fields(string(b))
	}
	return strings.Join(urls, ",")
}

// The bench on every kind of server, through the binaries: every level
// answered with no error, the stream asked for as the server gives it
// (the gateway refuses continuous_usage_stats: the bench asks for less),
// no "sending up to 64" of infer's, a recommendation. On Ollama's
// completions, whose chunks carry a usage of zeros, the tokens are still
// counted as they stream (answers longer than the window: only streamed
// tokens can count); how many is TestBenchWindowZeroUsage's to check, at
// times it sets itself, not here against the wall clock.
func TestBenchFlavors(t *testing.T) {
	t.Parallel()
	for _, fl := range llmsim.Flavors {
		for _, api := range []string{"chat", "completions"} {
			t.Run(string(fl)+"/"+api, func(t *testing.T) {
				t.Parallel()
				endpoints := simBinary(t, 1, "--flavor", string(fl), "--time-scale", "50")
				r := testbin.Run(t, "", nil, nil, "infer", "bench", "--json", "-e", endpoints, "--api", api, "--concurrency", "1,4",
					"--warmup", "2s", "--duration", "30s", "--answer-tokens", "512", "--no-ignore-eos", "--prompt-tokens", "40", "--time-scale", "50")
				if r.Code != cli.ExitOK {
					t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
				}
				var rep Report
				if err := json.Unmarshal(r.Stdout, &rep); err != nil {
					t.Fatalf("%v\n%s", err, r.Stdout)
				}
				// Counting Ollama's zeros as tokens would count none.
				for _, lv := range rep.Levels {
					if lv.Errors != 0 || lv.TokPerSec <= 0 {
						t.Errorf("level %d: %d errors (%s), no tokens counted (%.1f tok/s)\n%s", lv.Concurrency, lv.Errors, lv.FirstError, lv.TokPerSec, r.Stderr)
					}
				}
				if rep.Recommended == 0 || strings.Contains(r.Stderr, "sending it up to") {
					t.Errorf("recommended %d\n%s", rep.Recommended, r.Stderr)
				}
				refuses := strings.Contains(r.Stderr, "refuses continuous_usage_stats (HTTP 400: Unrecognized request argument supplied: continuous_usage_stats): asking for less")
				if refuses != (fl == llmsim.FlavorOpenAI) {
					t.Errorf("the stream options asked for:\n%s", r.Stderr)
				}
			})
		}
	}
}

// A model no server lists is refused before any level (exit 2); so is
// --api generate where there is no /generate.
func TestBenchRefusesAtStart(t *testing.T) {
	t.Parallel()
	for _, fl := range llmsim.Flavors {
		t.Run(string(fl), func(t *testing.T) {
			t.Parallel()
			endpoints := simBinary(t, 1, "--flavor", string(fl), "--instant")
			r := testbin.Run(t, "", nil, nil, "infer", "bench", "-e", endpoints, "--model", "nope", "--concurrency", "1", "--duration", "1s")
			if r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, `--model "nope" is not served by `+endpoints) {
				t.Errorf("wrong model: exit %d\n%s", r.Code, r.Stderr)
			}
			r = testbin.Run(t, "", nil, nil, "infer", "bench", "-e", endpoints, "--api", "generate", "--concurrency", "1", "--warmup", "0s", "--duration", "1s")
			if fl == llmsim.FlavorSGLang {
				if r.Code != cli.ExitOK {
					t.Errorf("--api generate on SGLang: exit %d\n%s", r.Code, r.Stderr)
				}
			} else if r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, "has no /generate") {
				t.Errorf("--api generate: exit %d\n%s", r.Code, r.Stderr)
			}
		})
	}
}

// A stream that ends without [DONE], is cut in the middle of an event, or
// never sends the usage it was asked for, is an error of its level.
func TestBenchIncompleteStreams(t *testing.T) {
	t.Parallel()
	chunk := func(text, finish string) string {
		f := "null"
		if finish != "" {
			f = `"` + finish + `"`
		}
		return fmt.Sprintf(`data: {"choices":[{"index":0,"delta":{"content":%q},"finish_reason":%s}]}`+"\n\n", text, f)
	}
	usage := `data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}` + "\n\n"
	for _, tt := range []struct {
		name, stream, want string
		code               int // no answer ever finishes: nothing to recommend
	}{
		{"whole", chunk("a", "") + chunk("b", "stop") + usage + "data: [DONE]\n\n", "", 0},
		{"no [DONE]", chunk("a", "") + chunk("b", "stop") + usage, "the stream ended without [DONE]: cut off", 0},
		{"cut mid-event", chunk("a", "") + `data: {"choices":[{"index":0,"del`, "the stream ended without [DONE]: cut off", 1},
		{"no usage", chunk("a", "") + chunk("b", "stop") + "data: [DONE]\n\n", "the stream ended without the answer's usage", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url := streamStub(t, tt.stream)
			res := runBenchArgs(t, time.Minute, "--json", "-e", url, "--concurrency", "1", "--warmup", "0s", "--duration", "300ms")
			var rep Report
			if err := json.Unmarshal([]byte(res.stdout), &rep); res.code != tt.code || err != nil {
				t.Fatalf("exit %d, want %d (%v)\n%s", res.code, tt.code, err, res.stderr)
			}
			lv := levelAt(t, rep, 1)
			if tt.want == "" {
				if lv.Errors != 0 {
					t.Errorf("a whole stream counted as an error: %+v\n%s", lv, res.stderr)
				}
				return
			}
			if lv.Errors == 0 || !strings.Contains(lv.FirstError, tt.want) {
				t.Errorf("level %+v, want errors with %q", lv, tt.want)
			}
		})
	}
}

// streamStub is a server whose every chat completion is body, streamed.
func streamStub(t *testing.T, body string) string {
	t.Helper()
	return chatStub(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte(body))
	})
}

// chatStub is a server that is ready, serves model m, and answers chat
// completions with chat.
func chatStub(t *testing.T, chat http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
		case "/v1/models":
			w.Write([]byte(`{"object":"list","data":[{"id":"m"}]}`))
		case "/v1/chat/completions":
			chat(w, r)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// The bench fits its requests into the model's context as infer does:
// against servers of a 1,024-token context that state it (SGLang, vLLM,
// llama.cpp), sample prompts asking for 4,096 tokens are sent with
// max_tokens lowered to what each leaves, those too long for the context
// are left out, and no level sees a refusal for length.
func TestBenchFitsTheContext(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var b strings.Builder
	short, long := 0, 0
	for i := range 15 {
		words := 40 + 7*i
		if i%3 == 2 {
			words, long = 1500+i, long+1 // past 1,024 tokens whatever the count
		} else {
			short++
		}
		fmt.Fprintf(&b, `{"id":"p%d","messages":[{"role":"user","content":%q}]}`+"\n", i, strings.Repeat("word ", words))
	}
	in := filepath.Join(dir, "prompts.jsonl")
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, fl := range []llmsim.Flavor{llmsim.FlavorSGLang, llmsim.FlavorVLLM, llmsim.FlavorLlamaCpp} {
		t.Run(string(fl), func(t *testing.T) {
			t.Parallel()
			endpoints := simBinary(t, 1, "--flavor", string(fl), "--time-scale", "200", "--context-length", "1024")
			r := testbin.Run(t, "", nil, nil, "infer", "bench", "--json", "-e", endpoints, "--concurrency", "2",
				"--warmup", "1s", "--duration", "120s", "--max-tokens", "4096", "--time-scale", "200", in)
			if r.Code != cli.ExitOK {
				t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
			}
			var rep Report
			if err := json.Unmarshal(r.Stdout, &rep); err != nil {
				t.Fatalf("%v\n%s", err, r.Stdout)
			}
			want := fmt.Sprintf("%d sample prompts; fitted to the 1,024-token context: %d with max_tokens lowered, %d left out (too long)", short, short, long)
			if rep.PromptNote != want {
				t.Errorf("prompts: %q, want %q", rep.PromptNote, want)
			}
			for _, lv := range rep.Levels {
				if lv.Errors != 0 || lv.Answers == 0 {
					t.Errorf("level %d: %d answers, %d errors (%s)", lv.Concurrency, lv.Answers, lv.Errors, lv.FirstError)
				}
			}
		})
	}
}

// A server whose streams never end (events without a finish, for ever):
// the bench does not wait on its first request, stops the ladder at the
// first level, where no answer finished in the window, recommends
// nothing and exits 1 saying why. A server that fails every request is
// asked again only after a backoff that doubles.
func TestBenchEndlessAndFailingServers(t *testing.T) {
	t.Parallel()
	endless := chatStub(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for {
			if _, err := w.Write([]byte(`data: {"choices":[{"index":0,"delta":{"content":"and "},"finish_reason":null}]}` + "\n\n")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	res := runBenchArgs(t, 30*time.Second, "--json", "-e", endless, "--concurrency", "1,2,4", "--warmup", "0s", "--duration", "500ms")
	if res.code != cli.ExitFailure || !strings.Contains(res.stderr, "no answer finished within the level's") || !strings.Contains(res.stderr, "no answer finished at any level") {
		t.Fatalf("endless streams: exit %d\n%s", res.code, res.stderr)
	}
	var rep Report
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || len(rep.Levels) != 1 || rep.Recommended != 0 || rep.Levels[0].TokPerSec == 0 {
		t.Fatalf("report %+v %v", rep, err)
	}

	var requests atomic.Int64
	failing := chatStub(t, func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(`{"error":{"message":"broken"}}`))
	})
	res = runBenchArgs(t, 30*time.Second, "--json", "-e", failing, "--concurrency", "2", "--warmup", "0s", "--duration", "1s")
	if res.code != cli.ExitFailure || !strings.Contains(res.stderr, "HTTP 500") {
		t.Fatalf("failing server: exit %d\n%s", res.code, res.stderr)
	}
	// Two workers, each waiting 50ms, 100ms, 200ms, 400ms... after its
	// failures: a handful of requests each in the second, not thousands.
	t.Logf("%d requests to the failing server in its 1s level", requests.Load())
	if n := requests.Load(); n > 40 {
		t.Errorf("%d requests to a server that fails them all in 1s at 2 in flight: no backoff", n)
	}
}
