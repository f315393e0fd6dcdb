package infer

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"tokenmill/internal/chaos"
	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
)

// runBinary runs the infer binary with args, bounded by testbin.Timeout.
func runBinary(t *testing.T, args ...string) testbin.Result {
	t.Helper()
	return testbin.Exec(t, testbin.Command("infer", args...))
}

// The bad inputs every tool is tried on, through the binary: bad lines
// are rejected (exit 3) and the good prompts around them still answered.
func TestBadInputFiles(t *testing.T) {
	fleet := startFleet(t, llmsim.Config{Instant: true}, 1)
	// --max-prompt-bytes below the huge line in either test tier (16 MiB,
	// or 100 MiB in the long one).
	args := append([]string{"-e", fleet.URLs()[0], "--max-tokens", "8", "--max-prompt-bytes", "8MiB"}, fastFlags...)
	// Lines that are not objects are not_an_object; the repeated records
	// before the gzip cut are duplicate ids, answered once; the huge line
	// is past --max-prompt-bytes, skipped as it is read.
	chaos.TryBadInputs(t, testbin.Path("infer"), args, chaos.Prompts, chaos.ReaderExpect(2, map[string]chaos.Expect{
		chaos.Garbage:       {Code: 3, Out: 0, Stderr: "garbage.bin:1: not_an_object"},
		chaos.TruncatedGzip: {Code: 3, Out: 2, Stderr: "unreadable: input ends early"},
		chaos.HugeLine:      {Code: 3, Out: 2, Stderr: "huge.jsonl:2: line_too_long: line longer than 8388608 bytes (--max-prompt-bytes)"},
	}))
}

// Records of the wrong kind: answers (generation or error records) are
// prompts again, their old output or error replaced by the new answer; a
// dataset row that extract has not turned into a prompt is rejected.
func TestBadInputWrongKind(t *testing.T) {
	s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 0})
	os.WriteFile(s.in, []byte(`{"id":"g","messages":[{"role":"user","content":"What is a prime?"}],"output":{"text":"old","finish_reason":"stop","sample":0}}
{"id":"e","messages":[{"role":"user","content":"Name a colour."}],"error":{"status":500,"message":"old","attempts":9,"retriable":true,"sample":0}}
{"id":"row","conversations":[{"from":"human","value":"Hello?"},{"from":"gpt","value":"Hi."}]}
`), 0o644)
	r := runBinary(t, s.args("--max-tokens", "8")...)
	if r.Code != cli.ExitRejects || !strings.Contains(r.Stderr, `prompts.jsonl:3: no_prompt: neither "messages" nor "prompt"`) {
		t.Fatalf("exit %d, want 3 with the dataset row rejected:\n%s", r.Code, r.Stderr)
	}
	outs := readRecords(t, s.out)
	if len(outs) != 2 {
		t.Fatalf("%d records out, want the 2 answers regenerated", len(outs))
	}
	for _, g := range outs {
		if g.Error != nil || g.Output == nil || g.Output.Text == "old" || !strings.HasPrefix(g.Output.Text, digestOf(&g, true)) || strings.Count(g.raw, `"output"`) != 1 {
			t.Errorf("%s: not one new answer to its prompt: %s", g.ID.Text, g.raw)
		}
	}
}

// badServer serves every request with answer; with healthy, /health and
// /get_server_info answer as SGLang does and only the rest is bad.
func badServer(t *testing.T, healthy bool, answer func(ctx *fasthttp.RequestCtx)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		switch p := string(ctx.Path()); {
		case healthy && p == "/health":
		case healthy && p == "/get_server_info":
			ctx.SetBodyString(`{"max_running_requests": 4}`)
		case healthy && p == "/v1/models":
			ctx.SetBodyString(`{"object":"list","data":[{"id":"m","object":"model"}]}`)
		default:
			answer(ctx)
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

const htmlPage = "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>"

// An endpoint that answers HTML or JSON that is not an answer: each
// attempt fails and is retried, and after --retries the prompt goes to
// the errors file saying what came back; nothing reaches the output.
func TestBadEndpointAnswers(t *testing.T) {
	body := func(status int, ct, b string) func(*fasthttp.RequestCtx) {
		return func(ctx *fasthttp.RequestCtx) {
			ctx.SetStatusCode(status)
			ctx.SetContentType(ct)
			ctx.SetBodyString(b)
		}
	}
	tests := []struct {
		name    string
		healthy bool // health and server info answer; generation is bad
		answer  func(*fasthttp.RequestCtx)
		status  int    // in every error record
		message string // in every error record's message
	}{
		{"HTML 502 from a proxy", true, body(502, "text/html", htmlPage), 502, "<title>502 Bad Gateway</title>"},
		{"HTML page with 200", true, body(200, "text/html", htmlPage), 200, "malformed response body: json: invalid character '<'"},
		{"invalid JSON", true, body(200, "application/json", `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"cut`), 200, "malformed response body"},
		{"JSON that is not an answer", true, body(200, "application/json", `{"object":"list","data":[]}`), 200, "choices"},
		// Answers that are not answers.
		{"empty choices", true, body(200, "application/json", `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":0}}`), 200, "no choices"},
		{"null choice", true, body(200, "application/json", `{"id":"x","choices":[null]}`), 200, "the choice is null"},
		{"null message", true, body(200, "application/json", `{"id":"x","choices":[{"index":0,"message":null,"finish_reason":"stop"}]}`), 200, "no message"},
		{"null content without calls", true, body(200, "application/json", `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":"stop"}]}`), 200, "null content"},
		{"no finish_reason", true, body(200, "application/json", `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":null}]}`), 200, "no finish_reason"},
	}
	// HTML on every path, /health and /v1/models too, is no server's API:
	// refused at start (exit 2), nothing sent.
	t.Run("HTML on every path", func(t *testing.T) {
		t.Parallel()
		s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 5})
		url := badServer(t, false, body(200, "text/html", htmlPage))
		r := runBinary(t, s.args("-e", url, "--retries", "2", "--max-tokens", "8")...)
		if r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, url+": /health 200 (a web page, not an API), /v1/models 200 (a web page, not an API)") {
			t.Fatalf("exit %d, want 2 naming the web page:\n%s", r.Code, r.Stderr)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 5})
			url := badServer(t, tt.healthy, tt.answer)
			r := runBinary(t, s.args("-e", url, "--retries", "2", "--max-tokens", "8")...)
			if r.Code != cli.ExitRejects || !strings.Contains(r.Stderr, "failed 5") {
				t.Fatalf("exit %d, want 3 with 5 failed:\n%s", r.Code, r.Stderr)
			}
			acc := s.check(t, 1)
			if acc.ok != 0 || acc.failed != 5 {
				t.Fatalf("%d answers, %d errors", acc.ok, acc.failed)
			}
			for key, g := range acc.errors {
				if e := g.Error; !e.Retriable || e.Attempts != 3 || e.Status != tt.status || !strings.Contains(e.Message, tt.message) {
					t.Errorf("%s: %+v", key, e)
				}
			}
		})
	}
}

// A non-answer is retried on another endpoint: with one endpoint that
// answers nothing and one that answers, every prompt gets its answer
// from the good one.
func TestNonAnswersRetriedElsewhere(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{TimeScale: 2000, MaxRunning: 4}, 1, promptSet{n: 30})
	bad := badServer(t, true, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"id":"x","choices":[{"index":0,"message":null,"finish_reason":null}]}`)
	})
	r := runBinary(t, s.args("-e", bad+","+endpointsFlag(s.fleet.URLs()), "--max-tokens", "8", "--eject-after", "1000")...)
	if r.Code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	acc := s.check(t, 1)
	if acc.ok != 30 || acc.byEndpoint[bad] != 0 {
		t.Fatalf("%d answers, %d of them from the endpoint that answers nothing", acc.ok, acc.byEndpoint[bad])
	}
	retried := 0
	for _, g := range acc.outputs {
		if g.Output.Attempts > 1 {
			retried++
		}
	}
	if retried == 0 || !strings.Contains(r.Stderr, "retries") {
		t.Errorf("no answer needed a retry: the bad endpoint got no request\n%s", r.Stderr)
	}
}

// An empty answer that stopped is an answer, counted as empty in the
// summary.
func TestEmptyAnswersCounted(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{TimeScale: 2000, MaxRunning: 8, EmptyRate: 0.3}, 1, promptSet{n: 60})
	res := runWant(t, cli.ExitOK, s.args("--max-tokens", "16")...)
	empty := 0
	for _, g := range readRecords(t, s.out) {
		if g.Output.Text == "" && g.Output.FinishReason == "stop" {
			empty++
		}
	}
	if empty == 0 {
		t.Fatal("llmsim gave no empty answer")
	}
	if want := fmt.Sprintf("empty answers (no text, no tool call, finish stop): %d", empty); !strings.Contains(res.stderr, want) {
		t.Errorf("summary lacks %q:\n%s", want, res.stderr)
	}
}
