package infer

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tokenmill/internal/fakeclock"
	"tokenmill/internal/llmsim"
	"tokenmill/lib/cli"
	"tokenmill/lib/record"
)

// infer against every kind of server, through the real binaries: llmsim's
// flavours imitate SGLang, vLLM (two releases), llama.cpp's server,
// Ollama and an OpenAI-style gateway.

// flavorReady is what infer says of each kind when it is ready.
var flavorReady = map[llmsim.Flavor]string{
	llmsim.FlavorSGLang:   ": /health 200: ready; capacity 48 (max_running_requests, /get_server_info), up to 50 in flight (--queue-depth 2); context 32768 tokens (context_length, /get_server_info)",
	llmsim.FlavorVLLM:     ": /health 200: ready; capacity not reported, in flight adapted to the server from 16 (--concurrency N fixes it); context 32768 tokens (max_model_len, /v1/models)",
	llmsim.FlavorVLLM0100: ": /health 200: ready; capacity not reported, in flight adapted to the server from 16 (--concurrency N fixes it); context 32768 tokens (max_model_len, /v1/models)",
	llmsim.FlavorLlamaCpp: ": /health 200: ready; capacity 48 (total_slots, /props), up to 50 in flight (--queue-depth 2); context 32768 tokens (n_ctx, /props)",
	llmsim.FlavorOllama:   ": /health 404 (no such route), /v1/models 200: ready; capacity not reported, in flight adapted to the server from 16 (it may run 4, Ollama's default OLLAMA_NUM_PARALLEL, which it reports nowhere; --concurrency N fixes it); context 32768 tokens (num_ctx, /api/show)",
	llmsim.FlavorOpenAI:   ": /health 404 (no such route), /v1/models 200: ready; capacity not reported, in flight adapted to the server from 16 (--concurrency N fixes it); context length not reported (--context-length N sets it)",
}

// simFlavor runs the llmsim binary as one endpoint of flavour fl.
func simFlavor(t *testing.T, fl llmsim.Flavor, extra ...string) string {
	t.Helper()
	return startSimBinary(t, 1, append([]string{"--flavor", string(fl)}, extra...)...)[0]
}

// A plain run on each kind of server: ready by the route it has, its
// capacity read where it says it (else adapted), every answer exactly
// once; --concurrency auto adapts on every kind.
func TestFlavorsRun(t *testing.T) {
	t.Parallel()
	for _, fl := range llmsim.Flavors {
		t.Run(string(fl), func(t *testing.T) {
			t.Parallel()
			url := simFlavor(t, fl, "--time-scale", "500", "--max-running", "8")
			for _, extra := range [][]string{nil, {"--concurrency", "auto"}} {
				s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 30})
				r := runBinary(t, append(s.args("-e", url, "--max-tokens", "8"), extra...)...)
				if r.Code != cli.ExitOK {
					t.Fatalf("%v: exit %d\n%s", extra, r.Code, r.Stderr)
				}
				want := strings.ReplaceAll(flavorReady[fl], "48", "8")
				want = strings.ReplaceAll(want, "up to 50", "up to 10")
				if extra != nil {
					want = "in flight adapted to the server from 16 (--concurrency N fixes it)"
					switch {
					case strings.Contains(flavorReady[fl], "capacity 48"):
						want = "in flight adapted to the server from 10 (8 + 2 spare; --concurrency N fixes it)"
					case fl == llmsim.FlavorOllama:
						want = "in flight adapted to the server from 16 (it may run 4, Ollama's default OLLAMA_NUM_PARALLEL, which it reports nowhere; --concurrency N fixes it)"
					}
				}
				if !strings.Contains(r.Stderr, url+want) && !strings.Contains(r.Stderr, want) {
					t.Errorf("%v: stderr lacks %q:\n%s", extra, want, r.Stderr)
				}
				acc := s.check(t, 1)
				if acc.ok != 30 || acc.byEndpoint[url] != 30 {
					t.Errorf("%v: %d ok, %v", extra, acc.ok, acc.byEndpoint)
				}
			}
		})
	}
}

// A run the servers cannot serve is refused before anything is sent or
// written: a model none of them lists (exit 2, naming what they serve),
// --api generate where there is no /generate. Ollama lists "name:latest"
// and takes the bare name: that is served.
func TestFlavorsRefuseAtStart(t *testing.T) {
	t.Parallel()
	for _, fl := range llmsim.Flavors {
		t.Run(string(fl), func(t *testing.T) {
			t.Parallel()
			url := simFlavor(t, fl, "--instant")
			listed := llmsim.DefaultModelName
			if fl == llmsim.FlavorOllama {
				listed += ":latest"
			}
			s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 5, completion: true})
			r := runBinary(t, s.args("-e", url, "--model", "nope", "--max-tokens", "4")...)
			if want := fmt.Sprintf(`--model "nope" is not served by %s: they serve %q`, url, listed); r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, want) {
				t.Errorf("wrong model: exit %d, want 2 and %q:\n%s", r.Code, want, r.Stderr)
			}
			if _, err := os.Stat(s.out); !os.IsNotExist(err) {
				t.Errorf("wrong model: the output was created")
			}
			r = runBinary(t, s.args("-e", url, "--api", "generate", "--max-tokens", "4")...)
			if fl == llmsim.FlavorSGLang {
				if r.Code != cli.ExitOK || checkAPI(t, false, s.lines, 1, readRecords(t, s.out), readRecords(t, s.errs())).ok != 5 {
					t.Errorf("--api generate on SGLang: exit %d\n%s", r.Code, r.Stderr)
				}
				os.Remove(s.out)
			} else if want := "--api generate: " + url + " has no /generate (SGLang's native API; GET /generate answered 404): use --api chat or --api completions"; r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, want) {
				t.Errorf("--api generate: exit %d, want 2 and %q:\n%s", r.Code, want, r.Stderr)
			}
			if fl == llmsim.FlavorOllama {
				r := runBinary(t, s.args("-e", url, "--model", llmsim.DefaultModelName, "--max-tokens", "4")...)
				if r.Code != cli.ExitOK || s.check(t, 1).ok != 5 {
					t.Errorf("the bare name of %s: exit %d\n%s", listed, r.Code, r.Stderr)
				}
			}
		})
	}
}

// When every endpoint refuses the first requests with the same error, the
// run stops with one message naming the fix, instead of writing every
// prompt to the errors file: a field every kind refuses, and the stream
// options the vLLM and gateway kinds refuse. 200 prompts, of which a
// handful are written.
func TestFlavorsSystematic(t *testing.T) {
	t.Parallel()
	type refusal struct {
		extra, hint string
	}
	cases := map[llmsim.Flavor][]refusal{}
	for _, fl := range llmsim.Flavors {
		cases[fl] = []refusal{{`{"messages":"x"}`, "every request is refused: check --api, --model, --extra-body and the sampling flags"}}
	}
	cases[llmsim.FlavorVLLM] = append(cases[llmsim.FlavorVLLM], refusal{`{"stream_options":{"include_usage":true}}`, "the servers refuse stream_options: take it out of --extra-body"})
	cases[llmsim.FlavorOpenAI] = append(cases[llmsim.FlavorOpenAI], refusal{`{"stream":false,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`, "the servers refuse stream_options: take it out of --extra-body"})
	for _, fl := range llmsim.Flavors {
		t.Run(string(fl), func(t *testing.T) {
			t.Parallel()
			urls := startSimBinary(t, 2, "--flavor", string(fl), "--instant")
			for _, c := range cases[fl] {
				s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 200})
				// --concurrency 4 bounds what is in flight when the detector
				// fires: the kinds that report their capacity would start at 50.
				r := runBinary(t, s.args("-e", strings.Join(urls, ","), "--concurrency", "4", "--max-tokens", "4", "--extra-body", c.extra)...)
				if r.Code != cli.ExitFailure || !strings.Contains(r.Stderr, "every endpoint refused the first requests the same way (HTTP 400: ") ||
					!strings.Contains(r.Stderr, c.hint) || !strings.Contains(r.Stderr, "run again with --resume") {
					t.Errorf("%s: exit %d, want 1 and %q:\n%s", c.extra, r.Code, c.hint, r.Stderr)
				}
				// The run stops once three prompts, and one on every endpoint
				// in service, were refused alike: how many the quicker
				// endpoint refused by then is a race between the two, so what
				// holds on any machine is that the errors file is not every
				// prompt's.
				if errs := readRecords(t, s.errs()); len(errs) == 0 || len(errs) >= 200 {
					t.Errorf("%s: %d error records written for 200 prompts\n%s", c.extra, len(errs), r.Stderr)
				}
			}
		})
	}
}

// A password in an endpoint's URL is never shown: not in the records, the
// messages, the summary, the live display or the metrics' labels; nor in
// the usage error of an endpoint written wrong.
func TestFlavorsCredentials(t *testing.T) {
	t.Parallel()
	const secret = "S3cr3tPw"
	for _, fl := range llmsim.Flavors {
		t.Run(string(fl), func(t *testing.T) {
			t.Parallel()
			url := simFlavor(t, fl, "--instant")
			withCreds := strings.Replace(url, "http://", "http://admin:"+secret+"@", 1)
			shown := strings.Replace(url, "http://", "http://admin:***@", 1)
			s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 10})
			r := runBinary(t, s.args("-e", withCreds, "--max-tokens", "4")...)
			if r.Code != cli.ExitOK {
				t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
			}
			if acc := s.check(t, 1); acc.byEndpoint[shown] != 10 {
				t.Errorf("records name the endpoint %v, want %s", acc.byEndpoint, shown)
			}
			out, _ := os.ReadFile(s.out)
			if strings.Contains(r.Stderr+string(out)+string(r.Stdout), secret) || !strings.Contains(r.Stderr, shown) {
				t.Errorf("the password shows, or the endpoint is not named %s:\n%s", shown, r.Stderr)
			}
			r = runBinary(t, s.args("-e", strings.Replace(withCreds, "127.0.0.1:", "bad host:", 1))...)
			if r.Code != cli.ExitUsage || strings.Contains(r.Stderr, secret) || !strings.Contains(r.Stderr, "admin:***@") {
				t.Errorf("usage error: exit %d\n%s", r.Code, r.Stderr)
			}
		})
	}
	// The live display and the metrics, in a run long enough to look at.
	f := startFleet(t, llmsim.Config{TimeScale: 20, MaxRunning: 4}, 1)
	url := strings.Replace(f.URLs()[0], "http://", "http://admin:"+secret+"@", 1)
	s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 30})
	var scraped atomic.Value
	done := make(chan result, 1)
	var stderr lockedBuffer
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		env := &cli.Env{Name: "infer", Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr, Interactive: true}
		code := cli.Run(ctx, env, Description, &Generate{}, s.args("-e", url, "--max-tokens", "64", "--progress", "20ms", "--metrics-addr", "127.0.0.1:0"))
		done <- result{code: code, stderr: stderr.String()}
	}()
	metricsRE := regexp.MustCompile(`metrics at (http://127\.0\.0\.1:\d+/metrics)`)
	waitFor(t, 30*time.Second, "the metrics address on stderr", func() bool { return metricsRE.MatchString(stderr.String()) })
	addr := metricsRE.FindStringSubmatch(stderr.String())[1]
	waitFor(t, 30*time.Second, "a scrape naming the endpoint", func() bool {
		resp, err := http.Get(addr)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		scraped.Store(string(b))
		return strings.Contains(string(b), "tokenmill_infer_endpoint_inflight{endpoint=")
	})
	res := <-done
	if res.code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	all := res.stderr + scraped.Load().(string)
	if strings.Contains(all, secret) || !strings.Contains(all, `endpoint="http://admin:***@127.0.0.1:`) || !strings.Contains(res.stderr, "  http://admin:***@127.0.0.1:") {
		t.Errorf("the password shows, or the endpoint is not named with ***:\n%s", all)
	}
}

// Cached prompt tokens are written where the server reported them and
// only there: SGLang and vLLM (with their cache report, when non-zero),
// the gateway always, llama.cpp in its timings; Ollama never.
func TestFlavorsCachedTokens(t *testing.T) {
	t.Parallel()
	reports := map[llmsim.Flavor]string{llmsim.FlavorSGLang: "non-zero", llmsim.FlavorVLLM: "non-zero", llmsim.FlavorVLLM0100: "non-zero",
		llmsim.FlavorOpenAI: "always", llmsim.FlavorLlamaCpp: "always", llmsim.FlavorOllama: "never"}
	long := strings.Repeat("You answer briefly and to the point. ", 20)
	for _, fl := range llmsim.Flavors {
		t.Run(string(fl), func(t *testing.T) {
			t.Parallel()
			url := simFlavor(t, fl, "--instant", "--kv-tokens", "1000000", "--cache-report")
			s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 12, extra: func(i int) string {
				return fmt.Sprintf(`,"params":{"x":%d}`, i)
			}})
			// One system prompt for all, so later prompts find it cached.
			b, _ := os.ReadFile(s.in)
			os.WriteFile(s.in, []byte(strings.ReplaceAll(string(b), `"content":"Be brief."`, `"content":"`+long+`"`)), 0o644)
			for id, line := range s.lines {
				s.lines[id] = strings.ReplaceAll(line, `"content":"Be brief."`, `"content":"`+long+`"`)
			}
			r := runBinary(t, s.args("-e", url, "--max-tokens", "4", "--concurrency", "1")...)
			if r.Code != cli.ExitOK {
				t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
			}
			s.check(t, 1)
			with, zero := 0, 0
			for _, g := range readRecords(t, s.out) {
				if c := g.Output.Usage.CachedTokens; c != nil {
					with++
					if *c == 0 {
						zero++
					}
				}
			}
			switch reports[fl] {
			case "never":
				if with != 0 {
					t.Errorf("%d records carry cached_tokens the server never reported", with)
				}
			case "always":
				if with != 12 {
					t.Errorf("%d of 12 records carry cached_tokens", with)
				}
			case "non-zero":
				if with == 0 || zero != 0 {
					t.Errorf("%d records carry cached_tokens, %d of them 0 (the server reports none when none are cached)", with, zero)
				}
			}
		})
	}
}

// Retry-After on a 429 or a 503 is honoured, capped by --max-backoff,
// each counting toward --retries: a server that asks for an hour three
// times is asked again after --max-backoff each time, and the answer
// comes on the fourth attempt with --retries 3. On the run's clock, which
// moves only when the test moves it: each wait is measured in its time.
func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	fake := fakeclock.New(simEpoch)
	var mu sync.Mutex
	var times []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
		case "/v1/models":
			w.Write([]byte(`{"object":"list","data":[{"id":"m"}]}`))
		case "/v1/chat/completions":
			io.Copy(io.Discard, r.Body)
			mu.Lock()
			times = append(times, fake.Now())
			n := len(times)
			mu.Unlock()
			if n <= 3 {
				w.Header().Set("Retry-After", "3600")
				status := http.StatusTooManyRequests
				if n == 2 {
					status = http.StatusServiceUnavailable
				}
				w.WriteHeader(status)
				w.Write([]byte(`{"error":{"message":"slow down"}}`))
				return
			}
			w.Write([]byte(`{"choices":[{"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 1})
	done := make(chan result, 1)
	go func() {
		done <- runCommand(t, context.Background(), time.Minute, false, "", &Generate{clock: fake},
			s.args("-e", srv.URL, "--concurrency", "1", "--retries", "3", "--backoff", "1ms", "--max-backoff", "150ms")...)
	}()
	// 10 ms of the run's time for every millisecond of the test's: the
	// server's hour would take the test ten minutes, past runCommand's
	// bound of one.
	var res result
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for running := true; running; {
		select {
		case res = <-done:
			running = false
		case <-tick.C:
			fake.Advance(10 * time.Millisecond)
		}
	}
	if res.code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	outs := readRecords(t, s.out)
	if len(outs) != 1 || outs[0].Output.Attempts != 4 {
		t.Fatalf("records %+v\n%s", outs, res.stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap < 150*time.Millisecond || gap >= time.Hour {
			t.Errorf("attempt %d came %v of the run's time after the one the server asked to wait an hour after (--max-backoff 150ms)", i+1, gap)
		}
	}
}

// --wait-ready 1s against a server that accepts and never answers ends
// at the deadline: the probe's connection is closed rather than waited
// for (its timeout here is ten seconds), and the message says what the
// probe saw.
func TestWaitReadyAgainstAHangingServer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	fake := fakeclock.New(simEpoch)
	s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 3})
	done := make(chan result, 1)
	go func() {
		done <- runCommand(t, context.Background(), time.Minute, false, "", &Generate{clock: fake},
			s.args("-e", ln.Addr().String(), "--wait-ready", "1s", "--request-timeout", "1h")...)
	}()
	for deadline := time.Now().Add(10 * time.Second); fake.Pending() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d timers on the run's clock, want the wait's deadline and notice", fake.Pending())
		}
	}
	fake.Advance(time.Second)
	var res result
	select {
	case res = <-done:
	case <-time.After(8 * time.Second):
		t.Fatal("infer went on past --wait-ready 1s: it waits for the probe the server never answers (10s)")
	}
	if res.code != cli.ExitFailure || !strings.Contains(res.stderr, "no endpoint was ready within 1s (--wait-ready): http://"+ln.Addr().String()+": ") {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
}

// "in flight" never shows more requests than slots, an endpoint out of
// service included: its requests still in flight hold its slots.
func TestInFlightWithAnEndpointDown(t *testing.T) {
	t.Parallel()
	f := startFleet(t, llmsim.Config{TimeScale: 50, MaxRunning: 4, PerEndpoint: map[int]llmsim.Faults{0: {HangRate: 0.5, FailRate: 0.5}}}, 2)
	s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 60})
	s.fleet = f
	res := runInferEnv(t, context.Background(), time.Minute, true, "", s.args("--max-tokens", "16", "--eject-after", "1", "--request-timeout", "500ms", "--progress", "10ms", "--concurrency", "4")...)
	if res.code != cli.ExitOK && res.code != cli.ExitRejects {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	s.check(t, 1)
	total := regexp.MustCompile(`in flight (\d+)/(\d+) \|`)
	perEP := regexp.MustCompile(`  (http://\S+)\s+(\w+)\s+(\d+)/(\d+)\s`)
	downWithWork := false
	sc := bufio.NewScanner(strings.NewReader(res.stderr))
	for sc.Scan() {
		line := sc.Text()
		if m := total.FindStringSubmatch(line); m != nil && atoiCommas(m[1]) > atoiCommas(m[2]) {
			t.Errorf("more in flight than slots: %s", line)
		}
		if m := perEP.FindStringSubmatch(line); m != nil {
			if atoiCommas(m[3]) > atoiCommas(m[4]) {
				t.Errorf("an endpoint with more in flight than slots: %s", line)
			}
			downWithWork = downWithWork || m[2] == "down" && atoiCommas(m[3]) > 0
		}
	}
	_ = downWithWork // a matter of timing here; TestProgressEndpointDown sets it up
	if !strings.Contains(res.stderr, "is out of service after 1 failure(s)") {
		t.Errorf("endpoint 0 was never taken out of service:\n%s", lastLines(res.stderr, 20))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// An answer's reasoning under either of vLLM's names: current vLLM sends
// "reasoning", 0.10 (and SGLang, llama.cpp) "reasoning_content"; infer
// keeps it in output.reasoning and says which field it came in.
func TestReasoningFields(t *testing.T) {
	t.Parallel()
	for fl, field := range map[llmsim.Flavor]string{llmsim.FlavorVLLM: "reasoning", llmsim.FlavorVLLM0100: "reasoning_content", llmsim.FlavorSGLang: "reasoning_content"} {
		t.Run(string(fl), func(t *testing.T) {
			t.Parallel()
			url := simFlavor(t, fl, "--instant", "--reasoning")
			s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 12})
			if r := runBinary(t, s.args("-e", url, "--max-tokens", "64")...); r.Code != cli.ExitOK {
				t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
			}
			acc := s.check(t, 1)
			if acc.ok != 12 {
				t.Fatalf("%d ok of 12", acc.ok)
			}
			for key, g := range acc.outputs {
				o := g.Output
				if o.Reasoning == "" || o.ReasoningField != field {
					t.Errorf("%s: reasoning %q in field %q, want some in %q", key, o.Reasoning, o.ReasoningField, field)
				}
			}
		})
	}
}

// A wrong address fails fast, through the binary: a path prefix the
// server does not have (every readiness route 404) exits 2 after the
// first probe round, --wait-ready 10m notwithstanding, naming what each
// route answered and the fix, and writes nothing; a URL pasted with
// /v1/chat/completions is taken as its base, said once; a server still
// starting (503) is waited for, to --wait-ready.
func TestWrongAddressFailsFast(t *testing.T) {
	t.Parallel()
	url := simFlavor(t, llmsim.FlavorSGLang, "--instant")
	s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 5})
	p := startInfer(t, append(s.args("-e", url+"/api", "--max-tokens", "8"), "--wait-ready", "10m")...)
	if code := p.wait(t, 60*time.Second); code != cli.ExitUsage {
		t.Fatalf("exit %d, want 2:\n%s", code, p.stderr.String())
	}
	want := url + "/api: /health 404 (no such route), /v1/models 404 (no such route); give the server's base URL, likely without /api"
	if !strings.Contains(p.stderr.String(), want) || strings.Contains(p.stderr.String(), "waiting for") {
		t.Errorf("stderr lacks %q (or waited):\n%s", want, p.stderr.String())
	}
	if _, err := os.Stat(s.out); !os.IsNotExist(err) {
		t.Errorf("-o written after a wrong address: %v", err)
	}

	r := runBinary(t, s.args("-e", url+"/v1/chat/completions", "--max-tokens", "8")...)
	note := url + "/v1/chat/completions: taken as the base URL " + url
	if r.Code != cli.ExitOK || strings.Count(r.Stderr, note) != 1 {
		t.Fatalf("exit %d, want 0 with %q once:\n%s", r.Code, note, r.Stderr)
	}
	if acc := s.check(t, 1); acc.ok != 5 {
		t.Errorf("%d ok of 5", acc.ok)
	}

	starting := simFlavor(t, llmsim.FlavorLlamaCpp, "--instant", "--startup-delay", "1h")
	r = runBinary(t, append(s.args("-e", starting, "--max-tokens", "8", "--force"), "--wait-ready", "3s")...)
	if r.Code != cli.ExitFailure || !strings.Contains(r.Stderr, "no endpoint was ready within 3s (--wait-ready): "+starting+": /health 503 (starting: Loading model)") {
		t.Errorf("a server loading its model: exit %d, want 1 after --wait-ready:\n%s", r.Code, r.Stderr)
	}
}

// A fleet serving one model under different names (SGLang's name, two
// vLLM servers' fake/model): without --model each endpoint is sent the
// name it serves, said at start, and each answer's output.model names it;
// every prompt is answered. A server that joins late without the --model
// it is sent (404 model not found) is out of the run at once, and its
// prompts go to the others: none is filed as an error.
func TestMixedModelNames(t *testing.T) {
	t.Parallel()
	a := simFlavor(t, llmsim.FlavorSGLang, "--time-scale", "200", "--max-running", "4")
	bs := startSimBinary(t, 2, "--flavor", "vllm", "--model", "fake/model", "--time-scale", "200", "--max-running", "4")
	s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 60})
	r := runBinary(t, s.args("-e", a+","+bs[0]+","+bs[1], "--max-tokens", "16")...)
	if r.Code != cli.ExitOK {
		t.Fatalf("exit %d:\n%s", r.Code, r.Stderr)
	}
	if !strings.Contains(r.Stderr, " (/v1/models), which the others name otherwise") && !strings.Contains(r.Stderr, "the endpoints serve the model under different names, each sent its own: ") {
		t.Errorf("the names are not said at start:\n%s", r.Stderr)
	}
	acc := s.check(t, 1)
	if acc.ok != 60 || acc.failed != 0 {
		t.Fatalf("%d ok, %d failed of 60", acc.ok, acc.failed)
	}
	for key, g := range acc.outputs {
		want := "fake/model"
		if g.Output.Endpoint == a {
			want = llmsim.DefaultModelName
		}
		if g.Output.Model != want {
			t.Errorf("%s from %s: output.model %q, want %q", key, g.Output.Endpoint, g.Output.Model, want)
		}
	}
	if len(acc.byEndpoint) != 3 {
		t.Errorf("answers by endpoint %v, want all three", acc.byEndpoint)
	}

	slow := simFlavor(t, llmsim.FlavorSGLang, "--time-scale", "20", "--max-running", "4")
	late := startSimBinary(t, 1, "--flavor", "vllm", "--model", "fake/model", "--time-scale", "200", "--startup-delay", "100s")[0]
	s = newSetup(t, llmsim.Config{}, 0, promptSet{n: 200})
	r = runBinary(t, s.args("-e", slow+","+late, "--model", llmsim.DefaultModelName, "--max-tokens", "64", "--probe-interval", "100ms")...)
	if r.Code != cli.ExitOK {
		t.Fatalf("late: exit %d:\n%s", r.Code, r.Stderr)
	}
	if !strings.Contains(r.Stderr, late+" is out of service for the run: it does not serve model \"Qwen3.6-27B\" (The model `Qwen3.6-27B` does not exist.)") {
		t.Errorf("late: the endpoint without the model is not named:\n%s", r.Stderr)
	}
	if acc := s.check(t, 1); acc.ok != 200 || acc.failed != 0 || acc.byEndpoint[late] != 0 {
		t.Errorf("late: %d ok, %d failed of 200, %v", acc.ok, acc.failed, acc.byEndpoint)
	}
}

// A server that refuses the requests offering tools (Ollama's "does not
// support tools") is not a systematic stop: the records with tools go to
// the errors file as tools_unsupported, every record without tools is
// answered, and the run exits 3.
func TestToolsUnsupported(t *testing.T) {
	t.Parallel()
	url := badServer(t, true, func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) != "/v1/chat/completions" {
			ctx.SetStatusCode(404)
			return
		}
		if bytes.Contains(ctx.PostBody(), []byte(`"tools"`)) {
			ctx.SetStatusCode(400)
			ctx.SetBodyString(`{"error":{"message":"registry.ollama.ai/library/tiny:latest does not support tools","type":"api_error","param":null,"code":null}}`)
			return
		}
		ctx.SetBodyString(`{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Yes."},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`)
	})
	tools := `,"tools":[{"type":"function","function":{"name":"now","parameters":{"type":"object","properties":{}}}}]`
	s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 12, extra: func(i int) string {
		if i%3 == 0 {
			return tools
		}
		return ""
	}})
	r := runBinary(t, s.args("-e", url, "--max-tokens", "8")...)
	if r.Code != cli.ExitRejects || strings.Contains(r.Stderr, "every endpoint refused") {
		t.Fatalf("exit %d, want 3 with the run gone on:\n%s", r.Code, r.Stderr)
	}
	seen := map[string]string{}
	for _, g := range readRecords(t, s.out) {
		seen[g.ID.Text] += "answer "
		if strings.Contains(s.lines[g.ID.Text], `"tools"`) {
			t.Errorf("%s, offering tools, answered", g.ID.Text)
		}
	}
	for _, g := range readRecords(t, s.errs()) {
		seen[g.ID.Text] += "error "
		if !strings.Contains(s.lines[g.ID.Text], `"tools"`) || g.Error.Reason != record.ReasonToolsUnsupported || !strings.Contains(g.Error.Message, "does not support tools") {
			t.Errorf("%s: %+v", g.ID.Text, g.Error)
		}
	}
	for id := range s.lines {
		if seen[id] != "answer " && seen[id] != "error " {
			t.Errorf("%s: %q, want one answer or one error", id, seen[id])
		}
	}
}
