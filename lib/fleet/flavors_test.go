package fleet

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
	"tokenmill/lib/cli"
)

// simPool starts an in-process llmsim fleet of n endpoints and a pool on
// it (real clock: the servers are real), probing at once; both end with
// the test.
func simPool(t *testing.T, sim llmsim.Config, n int, cfg Config) (*Pool, *llmsim.Fleet, *logs) {
	t.Helper()
	if sim.Seed == 0 {
		sim.Seed = 7
	}
	f, err := llmsim.Start(context.Background(), sim, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var targets []Target
	for _, u := range f.URLs() {
		ts, err := ParseEndpoints(u)
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, ts...)
	}
	l := &logs{}
	cfg.Logf = l.logf
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = 20 * time.Millisecond
	}
	if cfg.EjectAfter == 0 {
		cfg.EjectAfter = 5
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := NewPool(ctx, targets, cfg)
	t.Cleanup(func() {
		cancel()
		p.Close()
	})
	p.Start()
	return p, f, l
}

// flavorWant is what the pool learns of each kind of server when it
// comes up: how it is found ready, its capacity, its context length and
// where its queue is counted.
var flavorWant = map[llmsim.Flavor]struct {
	ready, capacity, context, metrics string
}{
	llmsim.FlavorSGLang:   {"/health 200", "capacity 48 (max_running_requests, /get_server_info)", "context 32768 tokens (context_length, /get_server_info)", "/metrics sglang:num_running_reqs, sglang:num_queue_reqs"},
	llmsim.FlavorVLLM:     {"/health 200", "capacity not reported", "context 32768 tokens (max_model_len, /v1/models)", "/metrics vllm:num_requests_running, vllm:num_requests_waiting"},
	llmsim.FlavorVLLM0100: {"/health 200", "capacity not reported", "context 32768 tokens (max_model_len, /v1/models)", "/metrics vllm:num_requests_running, vllm:num_requests_waiting"},
	llmsim.FlavorLlamaCpp: {"/health 200", "capacity 48 (total_slots, /props)", "context 32768 tokens (n_ctx, /props)", "/slots is_processing"},
	llmsim.FlavorOllama:   {"/health 404 (no such route), /v1/models 200", "capacity not reported", "context 32768 tokens (num_ctx, /api/show)", ""},
	llmsim.FlavorOpenAI:   {"/health 404 (no such route), /v1/models 200", "capacity not reported", "context length not reported", ""},
}

// Every kind of server is found ready, and what it says of itself read,
// by the route it has; those that do not say their capacity get the
// adaptive limit, from 4, or held at Ollama's default parallelism.
func TestReadyAndDiscoveryPerFlavor(t *testing.T) {
	for _, fl := range llmsim.Flavors {
		t.Run(string(fl), func(t *testing.T) {
			want := flavorWant[fl]
			p, _, l := simPool(t, llmsim.Config{Flavor: fl}, 1, Config{QueueDepth: 2})
			if err := p.WaitReady(context.Background(), 20*time.Second); err != nil {
				t.Fatal(err)
			}
			line := l.text()
			for _, w := range []string{"http://127.0.0.1:", ": " + want.ready + ": ready; " + want.capacity, want.context} {
				if !strings.Contains(line, w) {
					t.Errorf("the ready line lacks %q:\n%s", w, line)
				}
			}
			v := p.View()[0]
			// The metrics are read beside the requests: once, or never.
			for deadline := time.Now().Add(10 * time.Second); want.metrics != "" && p.View()[0].Info.Metrics == "" && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			if got := p.View()[0].Info.Metrics; got != want.metrics {
				t.Errorf("metrics %q, want %q", got, want.metrics)
			}
			if want.capacity == "capacity not reported" {
				// From FirstLevel, Ollama's default parallelism said.
				slots, from := FirstLevel, "in flight adapted to the server from 16 (--concurrency N fixes it)"
				if fl == llmsim.FlavorOllama {
					from = "in flight adapted to the server from 16 (it may run 4, Ollama's default OLLAMA_NUM_PARALLEL, which it reports nowhere; --concurrency N fixes it)"
				}
				if !v.Adaptive || v.Slots != slots || v.Info.Parallel != 0 && fl != llmsim.FlavorOllama || !strings.Contains(line, from) {
					t.Errorf("capacity not reported: %+v\n%s", v, line)
				}
			} else if v.Adaptive || v.Slots != 50 || !strings.Contains(line, "up to 50 in flight (--queue-depth 2)") {
				t.Errorf("capacity 48 and --queue-depth 2: %+v\n%s", v, line)
			}
			if len(v.Info.Models) != 1 || !ModelMatches(llmsim.DefaultModelName, v.Info.Models[0]) {
				t.Errorf("models %q", v.Info.Models)
			}
		})
	}
}

// --health-path is the one route asked; --concurrency and --context-length
// win over what servers say.
func TestReadyOverrides(t *testing.T) {
	for _, fl := range llmsim.Flavors {
		t.Run(string(fl), func(t *testing.T) {
			p, _, l := simPool(t, llmsim.Config{Flavor: fl}, 1, Config{HealthPath: "/v1/models", FixedSlots: 7, ContextLength: 4096})
			if err := p.WaitReady(context.Background(), 20*time.Second); err != nil {
				t.Fatal(err)
			}
			v := p.View()[0]
			if v.Slots != 7 || v.Adaptive || v.Info.Context != 4096 || v.Info.ContextSource != "--context-length" {
				t.Errorf("%+v", v)
			}
			if line := l.text(); !strings.Contains(line, ": /v1/models 200: ready; ") || !strings.Contains(line, ", 7 in flight (--concurrency)") {
				t.Errorf("ready line:\n%s", line)
			}
		})
	}
	// A route the server lacks is a wrong address: refused (a usage
	// error) after the first probe, naming the route and the fix.
	p, _, _ := simPool(t, llmsim.Config{Flavor: llmsim.FlavorOllama}, 1, Config{HealthPath: "/health"})
	err := p.WaitReady(context.Background(), time.Minute)
	var usage *cli.UsageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), ": /health 404 (no such route); give the server's base URL") || !strings.Contains(err.Error(), "--health-path PATH") {
		t.Errorf("%v", err)
	}
}

// An endpoint taken out of service is probed on the route that found it
// ready, and comes back on it.
func TestEjectedProbedOnItsRoute(t *testing.T) {
	for _, fl := range []llmsim.Flavor{llmsim.FlavorSGLang, llmsim.FlavorOllama, llmsim.FlavorOpenAI} {
		t.Run(string(fl), func(t *testing.T) {
			p, _, l := simPool(t, llmsim.Config{Flavor: fl}, 1, Config{EjectAfter: 1})
			if err := p.WaitReady(context.Background(), 20*time.Second); err != nil {
				t.Fatal(err)
			}
			route := "/health"
			if fl != llmsim.FlavorSGLang {
				route = "/v1/models"
			}
			p.Failed(p.eps[0], false, "boom")
			deadline := time.Now().Add(20 * time.Second)
			for p.View()[0].State != StateReady || !strings.Contains(l.text(), "back in service") {
				if time.Now().After(deadline) {
					t.Fatalf("not back in service within 20s:\n%s", l.text())
				}
				time.Sleep(5 * time.Millisecond)
			}
			text := l.text()
			if !strings.Contains(text, "is out of service after 1 failure(s) (last: boom); probing "+route+" until it recovers") ||
				!strings.Contains(text, "is back in service ("+route+" 200: ready; ") {
				t.Errorf("logs:\n%s", text)
			}
		})
	}
}

// A server that refuses the credentials on every route (a gateway with
// its key) is not waited for: the wait ends at once, saying so.
func TestReadyRefusedCredentials(t *testing.T) {
	p, _, _ := simPool(t, llmsim.Config{Flavor: llmsim.FlavorOpenAI, APIKey: "right"}, 1, Config{APIKey: "wrong"})
	err := p.WaitReady(context.Background(), time.Hour)
	if err == nil || !strings.Contains(err.Error(), "every endpoint refused the credentials: http://127.0.0.1:") ||
		!strings.Contains(err.Error(), "/health 401 (check --api-key)") {
		t.Errorf("%v", err)
	}
	// With the key it is ready on /v1/models.
	p, _, l := simPool(t, llmsim.Config{Flavor: llmsim.FlavorOpenAI, APIKey: "right"}, 1, Config{APIKey: "right"})
	if err := p.WaitReady(context.Background(), 20*time.Second); err != nil || !strings.Contains(l.text(), "/health 404 (no such route), /v1/models 200: ready") {
		t.Errorf("%v\n%s", err, l.text())
	}
}

// An address that is not a server's base URL is refused after the first
// probe round, naming what each route answered and the fix: every route
// 404 (a wrong path prefix, a URL pasted with an API path the pool does
// not drop), a web page; 503 and a refused connection still wait. One
// wrong endpoint among good ones refuses the run too: the list is wrong.
func TestWrongAddress(t *testing.T) {
	serve := func(status int, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			io.WriteString(w, body)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	refusedAt := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return "http://" + ln.Addr().String()
	}
	sim, err := llmsim.Start(context.Background(), llmsim.Config{Instant: true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	good := sim.URLs()[0]
	for _, tt := range []struct {
		name  string
		urls  []string
		wrong string // in the usage error; "" waits (and times out)
	}{
		{"every route 404", []string{serve(404, `{"detail":"Not Found"}`)},
			": /health 404 (no such route), /v1/models 404 (no such route); give the server's base URL (infer adds"},
		{"a path prefix", []string{good + "/api"},
			"/api: /health 404 (no such route), /v1/models 404 (no such route); give the server's base URL, likely without /api"},
		{"a web page", []string{serve(200, "<!DOCTYPE html><html><body>Welcome</body></html>")},
			": /health 200 (a web page, not an API), /v1/models 200 (a web page, not an API); "},
		{"one wrong among good ones", []string{good, serve(404, "404 page not found")},
			": /health 404 (no such route), /v1/models 404 (no such route); "},
		{"503: waits", []string{serve(503, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`)}, ""},
		{"a refused connection: waits", []string{refusedAt()}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var targets []Target
			for _, u := range tt.urls {
				ts, err := ParseEndpoints(u)
				if err != nil {
					t.Fatal(err)
				}
				targets = append(targets, ts...)
			}
			ctx, cancel := context.WithCancel(context.Background())
			p := NewPool(ctx, targets, Config{ProbeInterval: 20 * time.Millisecond, EjectAfter: 5})
			defer p.Close()
			defer cancel() // before Close, which waits for the probes to end
			p.Start()
			err := p.WaitReady(context.Background(), time.Second)
			var usage *cli.UsageError
			switch {
			case tt.wrong == "" && (err == nil || errors.As(err, &usage) || !strings.Contains(err.Error(), "no endpoint was ready within 1s")):
				t.Errorf("%v, want the wait to run out", err)
			case tt.wrong != "" && (!errors.As(err, &usage) || !strings.Contains(err.Error(), tt.wrong)):
				t.Errorf("%v, want a usage error with %q", err, tt.wrong)
			}
		})
	}
	// A 503's message is in the probe's note, for the wait line.
	p := NewPool(context.Background(), mustParse(t, serve(503, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`)), Config{ProbeInterval: time.Hour})
	if r := p.checkReady(p.eps[0]); r.note != "/health 503 (starting: Loading model)" || r.wrong {
		t.Errorf("%+v", r)
	}
	p.Close()
}

func mustParse(t *testing.T, s string) []Target {
	t.Helper()
	ts, err := ParseEndpoints(s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}
