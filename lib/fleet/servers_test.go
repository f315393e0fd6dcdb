package fleet

import (
	"context"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
	"tokenmill/lib/openai"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		h    string
		want time.Duration
	}{
		{"", 0}, {"3", 3 * time.Second}, {" 3600 ", time.Hour}, {"0", 0}, {"-5", 0}, {"soon", 0},
		{"Wed, 01 Jan 2025 12:00:30 GMT", 30 * time.Second}, {"Wed, 01 Jan 2025 11:00:00 GMT", 0},
		{"99999999999999999999", 0}, {"9223372036854775807", time.Duration(1<<31) * time.Second},
	} {
		if got := retryAfter([]byte(tt.h), now); got != tt.want {
			t.Errorf("Retry-After %q: %v, want %v", tt.h, got, tt.want)
		}
	}
}

// The running and waiting counts are read from each server's metrics as
// it writes them; an answer that is not Prometheus text, or holds values
// no count can have, is not believed.
func TestServerLoad(t *testing.T) {
	sglang := "# HELP sglang:num_running_reqs The number of running requests.\n# TYPE sglang:num_running_reqs gauge\n" +
		"sglang:num_running_reqs{model_name=\"m\"} 12.0\n# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"m\"} 3.0\n"
	vllm := "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\"} 4.0\nvllm:num_requests_running{engine=\"1\"} 5.0\n" +
		"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\"} 0.0\nvllm:num_requests_waiting{engine=\"1\"} 2.0\n"
	llama := "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 2\n# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 7\n"
	for _, tt := range []struct {
		name, body       string
		running, waiting int
	}{{"sglang", sglang, 12, 3}, {"vllm", vllm, 9, 2}, {"llamacpp", llama, 2, 7}} {
		m := findMetrics([]byte(tt.body))
		if m == nil {
			t.Fatalf("%s: not recognised", tt.name)
		}
		load, ok := m.read([]byte(tt.body), 0)
		if !ok || load.running != tt.running || load.waiting != tt.waiting {
			t.Errorf("%s: %+v %v", tt.name, load, ok)
		}
	}
	for _, bad := range []string{"", "<html>", "sglang:num_running_reqs NaN\nsglang:num_queue_reqs 1\n",
		"sglang:num_running_reqs 1e300\nsglang:num_queue_reqs 1\n", "sglang:num_running_reqs -1\nsglang:num_queue_reqs 1\n",
		"sglang:num_running_reqs 1\n", "sglang:num_running_reqs{ 1\nsglang:num_queue_reqs 1\n"} {
		if m := findMetrics([]byte(bad)); m != nil {
			t.Errorf("%q recognised as %+v", bad, m)
		}
	}
}

// Each llmsim flavour's /metrics is read by the pool's poller: the counts
// it shows while requests run are the server's own.
func TestServerLoadFromFlavors(t *testing.T) {
	for _, fl := range []llmsim.Flavor{llmsim.FlavorSGLang, llmsim.FlavorVLLM, llmsim.FlavorLlamaCpp} {
		sim := llmsim.Config{Flavor: fl, Instant: true, Faults: llmsim.Faults{HangRate: 1}}
		p, f, _ := simPool(t, sim, 1, Config{})
		if err := p.WaitReady(context.Background(), 20*time.Second); err != nil {
			t.Fatal(err)
		}
		// Three requests that hang: the server counts them running.
		ep := p.Endpoints()[0]
		for range 3 {
			go p.Complete(ep, openai.PathChat, []byte(`{"model":"`+llmsim.DefaultModelName+`","messages":[{"role":"user","content":"hi"}]}`), 10*time.Second, openai.ParseChat)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			p.mu.Lock()
			m := ep.metrics
			p.mu.Unlock()
			if m.running == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: metrics %+v, want 3 running; the sim saw %+v", fl, m, f.Stats())
			}
			time.Sleep(5 * time.Millisecond)
		}
		ep.gen.CloseAll()
	}
}

// The limit on virtual time, from what the server's metrics say (vLLM's
// num_requests_running and num_requests_waiting): a queue ends the climb
// at the number the server runs, and the spare.
func TestLimiterMetricsQueue(t *testing.T) {
	run := simulate(t, simSetup{flavour: simFlavours[1], plan: slotPlan{{Slots: 12}}, mode: modeDefault, work: simWork{answers: 1500, maxTokens: 256}})
	t.Logf("limits:%s\n%s", run, run.notes)
	if n := run.limitAfter(run.wall / 2); n != 14 {
		t.Errorf("limit %d half way, want 14: the server ran 12 and queued the rest, and 2 spare", n)
	}
	if !strings.Contains(run.notes, "in flight settled at 14 (12 + 2 spare: the server's metrics count 12 running and requests waiting)") {
		t.Errorf("notes %q", run.notes)
	}
	// It took the server's word within a few readings, read 16 times as
	// often while the limit climbs: from 16 to 14 within the first second.
	if got := run.String(); got != " 0s:16 0s:14" {
		t.Errorf("limits%s, want 16, then 14 within a second", got)
	}
}

// 429 and 503 answers halve the limit at once.
func TestLimiterBusy(t *testing.T) {
	l := NewLimiter(LimiterConfig{Start: 32}, epoch)
	for i := 0; i < 32; i++ {
		l.Inflight(epoch, i+1)
		l.Sent(epoch)
	}
	now := epoch.Add(time.Second)
	l.Observe(now, epoch, time.Second, 0, false, true)
	if l.Limit() != 32 {
		t.Fatalf("one busy answer moved the limit to %d", l.Limit())
	}
	if !l.Observe(now, epoch, time.Second, 0, false, true) || l.Limit() != 16 {
		t.Errorf("two busy answers: limit %d, want 16", l.Limit())
	}
	if note := l.Note(); !strings.Contains(note, "32 in flight answered 429/503 (busy): down to 16") {
		t.Errorf("note %q", note)
	}
}

// A window the input did not fill (the run's tail) moves nothing.
func TestLimiterDemandBound(t *testing.T) {
	l := NewLimiter(LimiterConfig{}, epoch)
	now := epoch
	for round := 0; round < 20; round++ {
		l.Inflight(now, 1) // one in flight under a limit of 4
		l.Sent(now)
		sent := now
		now = now.Add(time.Second)
		l.Inflight(now, 0)
		l.Observe(now, sent, time.Second, 100, true, false)
	}
	if l.Limit() != 4 || l.Settled() {
		t.Errorf("limit %d (settled %v) from windows a single request filled", l.Limit(), l.Settled())
	}
}

// The systematic detector on the pool's endpoints: three prompts refused
// alike on every endpoint stop the run with the likely fix; a success or
// two refusals that differ disarm it.
func TestSystematic(t *testing.T) {
	p, _, _ := testPool(t, 2, Config{})
	p.setReady(0, 4)
	p.setReady(1, 4)
	p.mu.Lock()
	p.eps[0].info.Models = []string{"served-model"}
	p.mu.Unlock()
	a, b := p.eps[0], p.eps[1]
	notFound := &Failure{Status: 404, Message: "The model `nope` does not exist."}

	s := NewSystematic(p, openai.APIChat, "nope")
	for i, ep := range []*Endpoint{a, a} {
		if err := s.Failed(ep, notFound); err != nil {
			t.Fatalf("failure %d on one endpoint only: %v", i, err)
		}
	}
	err := s.Failed(b, notFound)
	if err == nil || !strings.Contains(err.Error(), "every endpoint refused the first requests the same way (HTTP 404: The model `nope` does not exist.)") ||
		!strings.Contains(err.Error(), `model "nope" is not served: they serve "served-model" (set --model)`) {
		t.Errorf("%v", err)
	}

	s = NewSystematic(p, openai.APIChat, "m")
	s.SucceededOn(a)
	for _, ep := range []*Endpoint{a, b, a, b} {
		if err := s.Failed(ep, notFound); err != nil {
			t.Errorf("after a success: %v", err)
		}
	}
	s = NewSystematic(p, openai.APIChat, "m")
	s.Failed(a, &Failure{Status: 400, Message: "The input (900 tokens) is longer than the model's context length (512 tokens)."})
	for _, ep := range []*Endpoint{b, a, b} {
		if err := s.Failed(ep, &Failure{Status: 400, Message: "The input (901 tokens) is longer than the model's context length (512 tokens)."}); err != nil {
			t.Errorf("prompts too long, each its own: %v", err)
		}
	}
	// Retriable failures are not the detector's.
	s = NewSystematic(p, openai.APIChat, "m")
	for _, ep := range []*Endpoint{a, b, a, b} {
		if err := s.Failed(ep, &Failure{Status: 500, Message: "boom", Retriable: true}); err != nil {
			t.Errorf("500s: %v", err)
		}
	}
	for _, tt := range []struct {
		f    *Failure
		api  openai.API
		hint string
	}{
		{&Failure{Status: 404, Message: "Not Found"}, openai.APIGenerate, "the servers have no /generate route (--api generate): use --api chat or --api completions"},
		{&Failure{Status: 400, Message: "Unrecognized request argument supplied: continuous_usage_stats"}, openai.APIChat, "the servers refuse stream_options: take it out of --extra-body"},
		{&Failure{Status: 400, Message: "Unrecognized request argument supplied: frobnicate"}, openai.APIChat, `the servers refuse the request field "frobnicate"`},
		{&Failure{Status: 422, Message: "Field required"}, openai.APIChat, "every request is refused: check --api, --model, --extra-body and the sampling flags"},
	} {
		s := NewSystematic(p, tt.api, "m")
		var err error
		for _, ep := range []*Endpoint{a, b, a} {
			err = s.Failed(ep, tt.f)
		}
		if err == nil || !strings.Contains(err.Error(), tt.hint) {
			t.Errorf("%v: %v, want %q", tt.f, err, tt.hint)
		}
	}
}

func TestModelMatches(t *testing.T) {
	for _, tt := range []struct {
		given, listed string
		want          bool
	}{
		{"tiny", "tiny:latest", true}, {"tiny:latest", "tiny", true}, {"Tiny", "tiny:latest", true}, {"tiny:7b", "tiny:latest", false},
		{"Qwen3.6-27B", "Qwen3.6-27B", true}, {"qwen", "Qwen3.6-27B", false}, {"", "x", false},
	} {
		if got := ModelMatches(tt.given, tt.listed); got != tt.want {
			t.Errorf("ModelMatches(%q, %q) = %v", tt.given, tt.listed, got)
		}
	}
}

// A server that accepts the connection and never answers does not hold
// the pool's end up: the probe's connection is closed rather than waited
// for its timeout.
func TestCloseWithAProbeHanging(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never answered
		}
	}()
	targets, _ := ParseEndpoints(ln.Addr().String())
	ctx, cancel := context.WithCancel(context.Background())
	p := NewPool(ctx, targets, Config{ProbeInterval: 10 * time.Millisecond, ControlTimeout: time.Hour})
	p.Start()
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the probe never connected")
	}
	if err := p.WaitReady(context.Background(), 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "no endpoint was ready within 50ms") {
		t.Fatalf("%v", err)
	}
	cancel()
	closed := make(chan struct{})
	go func() {
		p.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close waited on a probe the server never answers (its timeout is an hour)")
	}
}

// None of the limiter's figures is ever NaN or infinite, whatever it is
// told.
func TestLimiterDegenerate(t *testing.T) {
	l := NewLimiter(LimiterConfig{MinAnswers: 1, Start: 1}, epoch)
	l.Inflight(epoch, 1)
	l.Sent(epoch)
	l.Observe(epoch, epoch, 0, 0, true, false)   // no time, no tokens
	l.Observe(epoch, epoch, 0, 1e9, true, false) // no time
	l.Observe(epoch, epoch, -1, 10, true, false) // a latency from a clock gone back
	l.Observe(epoch.Add(time.Second), epoch, time.Second, 5, true, false)
	if n := l.Limit(); n < 1 || n > 256 {
		t.Errorf("limit %d", n)
	}
	for _, m := range l.climb {
		if math.IsNaN(m.out) || math.IsInf(m.out, 0) || math.IsNaN(m.perTok) || math.IsInf(m.perTok, 0) {
			t.Errorf("measure %+v", m)
		}
	}
}

func TestConcurrencyFlag(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Concurrency
		err  bool
	}{{"0", Concurrency{}, false}, {"48", Concurrency{N: 48}, false}, {"auto", Concurrency{Auto: true}, false}, {" AUTO ", Concurrency{Auto: true}, false},
		{"-1", Concurrency{}, true}, {"many", Concurrency{}, true}, {"", Concurrency{}, true}} {
		var c Concurrency
		err := c.UnmarshalText([]byte(tt.in))
		if (err != nil) != tt.err || !tt.err && c != tt.want {
			t.Errorf("%q: %+v %v", tt.in, c, err)
		}
		if !tt.err && c.String() != strings.ToLower(strings.TrimSpace(tt.in)) {
			t.Errorf("%q prints as %q", tt.in, c.String())
		}
	}
	for _, tt := range []struct {
		f   ServerFlags
		err string
	}{
		{ServerFlags{Endpoints: "h:1", HealthPath: "ping"}, "--health-path"},
		{ServerFlags{Endpoints: "h:1", HealthPath: "/a b"}, "--health-path"},
		{ServerFlags{Endpoints: "h:1", ContextLength: -1}, "--context-length"},
		{ServerFlags{Endpoints: "h:1", HealthPath: "/v1/health", ContextLength: 4096}, ""},
	} {
		_, err := tt.f.Targets()
		if (tt.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%+v: %v, want %q", tt.f, err, tt.err)
		}
	}
}

func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"", "3", "3600", "-5", "Wed, 01 Jan 2025 12:00:30 GMT", "99999999999999999999", "1e9"} {
		f.Add(s)
	}
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		if d := retryAfter([]byte(s), now); d < 0 {
			t.Fatalf("%q: %v", s, d)
		}
	})
}

// A server's /metrics is hostile bytes too: whatever it says, a load is a
// pair of counts that could be.
func FuzzServerLoad(f *testing.F) {
	for _, s := range []string{"sglang:num_running_reqs 3\nsglang:num_queue_reqs 1\n", "vllm:num_requests_running{engine=\"0\"} 4\nvllm:num_requests_waiting 0\n",
		"llamacpp:requests_processing NaN\nllamacpp:requests_deferred 1\n", "# TYPE x gauge\n", "sglang:num_running_reqs 1e300\nsglang:num_queue_reqs 1\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m := findMetrics(b)
		if m == nil {
			return
		}
		load, ok := m.read(b, 0)
		if !ok || load.running < 0 || load.waiting < 0 || load.running > 1e9 || load.waiting > 1e9 {
			t.Fatalf("%q: %+v %v", b, load, ok)
		}
	})
}

// Each endpoint is sent its own name for the run's model: --model's list
// picks the first name each endpoint lists; BodyFor swaps the run's name
// for the endpoint's, and leaves a name a record chose; a refusal naming
// the model as unknown is the endpoint's.
func TestModelPerEndpoint(t *testing.T) {
	p, _, _ := testPool(t, 3, Config{Models: []string{"a", "b"}, Model: "a"})
	for i, listed := range [][]string{{"b", "x"}, {"a:latest"}, {"z"}} {
		m, src := p.pickModel(listed)
		want := []string{"b", "a", "a"}[i]
		if m != want || src != "--model" {
			t.Errorf("listing %v: model %q from %q, want %q", listed, m, src, want)
		}
	}
	if m, src := (&Pool{}).pickModel([]string{"q", "r"}); m != "q" || src != "/v1/models" {
		t.Errorf("no --model: %q from %q", m, src)
	}
	p.eps[0].info.Model, p.eps[1].info.Model = "Qwen3.6-27B", "fake/model"
	body := []byte(`{"model":"Qwen3.6-27B","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`)
	if got := string(p.BodyFor(p.eps[1], body)); got != `{"model":"fake/model","messages":[{"role":"user","content":"hi"}],"max_tokens":8}` {
		t.Errorf("BodyFor: %s", got)
	}
	if got := p.BodyFor(p.eps[0], body); string(got) != string(body) {
		t.Errorf("BodyFor its own model: %s", got)
	}
	own := []byte(`{"model":"special","messages":[]}`)
	if got := p.BodyFor(p.eps[1], own); string(got) != string(own) {
		t.Errorf("BodyFor a record's own model: %s", got)
	}
	if p.ModelsText() != "" {
		t.Error("ModelsText with no endpoint in service")
	}
	p.setReady(0, 4)
	p.setReady(1, 4)
	if got := p.ModelsText(); got != "Qwen3.6-27B (http://127.0.0.1:1); fake/model (http://127.0.0.1:2)" {
		t.Errorf("ModelsText %q", got)
	}
	for _, tt := range []struct {
		f    Failure
		want bool
	}{
		{Failure{Status: 404, Message: "The model `x` does not exist."}, true},
		{Failure{Status: 404, Message: `model "x" not found, try pulling it first`}, true},
		{Failure{Status: 404, Message: "The model `x` does not exist or you do not have access to it. (model_not_found)"}, true},
		{Failure{Status: 404, Message: "Not Found"}, false},
		{Failure{Status: 400, Message: "The model `x` does not exist."}, false},
	} {
		if got := ModelNotFound(&tt.f); got != tt.want {
			t.Errorf("%+v: %v, want %v", tt.f, got, tt.want)
		}
	}
	if !p.Misconfigured(p.eps[1], "it does not serve model") || p.eps[1].state != StateDown {
		t.Error("one endpoint misconfigured: the others are left, it is down")
	}
	p.Misconfigured(p.eps[0], "x")
	if p.Misconfigured(p.eps[2], "x") {
		t.Error("every endpoint misconfigured: none left")
	}
}
