package infer

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tokenmill/internal/llmsim"
	"tokenmill/lib/cli"
)

// stub is a test-local server that counts the connections of hung
// requests still open and those closed by the client.
type stub struct {
	url        string
	hangOpen   atomic.Int64
	hangClosed atomic.Int64
}

func startStub(t testing.TB, gen func(s *stub, ctx *fasthttp.RequestCtx)) *stub {
	t.Helper()
	s := &stub{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.url = "http://" + ln.Addr().String()
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Path()) {
		case "/health":
		case "/get_server_info":
			ctx.SetBodyString(`{"max_running_requests": 4}`)
		case "/v1/models":
			ctx.SetBodyString(`{"object":"list","data":[{"id":"stub-model","object":"model"}]}`)
		default:
			if !ctx.IsPost() {
				ctx.SetStatusCode(fasthttp.StatusNotFound) // a route it does not have
				return
			}
			gen(s, ctx)
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return s
}

// hang accepts a request and never answers, until the client closes.
func hang(s *stub, ctx *fasthttp.RequestCtx) {
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		s.hangOpen.Add(1)
		buf := make([]byte, 512)
		for {
			if _, err := c.Read(buf); err != nil {
				break
			}
		}
		s.hangOpen.Add(-1)
		s.hangClosed.Add(1)
	})
}

// A request that times out is closed, so the server can drop it and free
// its slot; after --retries it is an error record.
func TestTimeoutClosesConnection(t *testing.T) {
	t.Parallel()
	s := startStub(t, hang)
	su := newSetup(t, llmsim.Config{}, 0, promptSet{n: 3})
	runWant(t, cli.ExitRejects, su.args("-e", s.url, "--request-timeout", "200ms", "--retries", "1")...)
	acc := su.check(t, 1)
	if acc.failed != 3 {
		t.Fatalf("failed %d", acc.failed)
	}
	for key, g := range acc.errors {
		if e := g.Error; e.Attempts != 2 || !e.Retriable || e.Status != 0 || !strings.Contains(e.Message, "no answer within 200ms") {
			t.Errorf("%s: %+v", key, e)
		}
	}
	waitFor(t, 5*time.Second, "the server to see every hung connection closed", func() bool {
		return s.hangClosed.Load() == 6 && s.hangOpen.Load() == 0
	})
}

// On SIGINT, requests still in flight after --grace are closed (the
// servers drop them) and the run exits 130 with what was done flushed.
func TestInterruptClosesInFlight(t *testing.T) {
	t.Parallel()
	s := startStub(t, hang)
	su := newSetup(t, llmsim.Config{}, 0, promptSet{n: 20})
	args := su.args("-e", s.url, "--grace", "50ms")
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan result, 1)
	go func() { done <- runInferCtx(t, ctx, 20*time.Second, "", args...) }()
	waitFor(t, 10*time.Second, "6 requests in flight (the stub's 4 slots and 2 queued)", func() bool { return s.hangOpen.Load() == 6 })
	cancel(cli.ErrInterrupted)
	res := <-done
	if res.code != cli.ExitInterrupted {
		t.Fatalf("exit %d, want 130\n%s", res.code, res.stderr)
	}
	waitFor(t, 5*time.Second, "in-flight connections closed", func() bool { return s.hangOpen.Load() == 0 })
	if !strings.Contains(res.stderr, "not done 20") {
		t.Errorf("summary does not count the 20 answers left undone:\n%s", res.stderr)
	}
	if strings.Contains(res.stderr, "out of service") {
		t.Errorf("the connections the shutdown closed itself were blamed on the endpoint:\n%s", res.stderr)
	}
	if g := readRecords(t, su.out); len(g) != 0 {
		t.Errorf("%d records written, want none", len(g))
	}
}

// The API key goes to every request as a bearer token and never to stderr:
// the simulator, started with the key, refuses any request without it.
func TestAPIKey(t *testing.T) {
	const key = "sk-test-7f3a9c2e51"
	for _, how := range []string{"flag", "env", "openai env"} {
		t.Run(how, func(t *testing.T) {
			s := newSetup(t, llmsim.Config{Instant: true, APIKey: key}, 1, promptSet{n: 5})
			args := s.args()
			switch how {
			case "flag":
				args = append(args, "--api-key", key)
			case "env":
				t.Setenv("TOKENMILL_INFER_API_KEY", key)
			case "openai env":
				t.Setenv("OPENAI_API_KEY", key)
			}
			res := runWant(t, cli.ExitOK, args...)
			s.check(t, 1)
			if st := s.fleet.Stats(); st.Unauthorized != 0 || st.Completed != 5 {
				t.Errorf("server saw %d requests without the key, answered %d", st.Unauthorized, st.Completed)
			}
			if strings.Contains(res.stderr+res.stdout, key) {
				t.Errorf("the key was printed:\n%s", res.stderr)
			}
		})
	}
	t.Run("help", func(t *testing.T) {
		t.Setenv("TOKENMILL_INFER_API_KEY", key)
		res := runInfer(t, 5*time.Second, "", "--help")
		if res.code != cli.ExitOK || strings.Contains(res.stdout+res.stderr, key) {
			t.Errorf("--help exit %d printed the key: %v", res.code, strings.Contains(res.stdout, key))
		}
	})
}

// A server that refuses the key stops the run at once: every request would
// fail the same way.
func TestUnauthorizedIsFatal(t *testing.T) {
	t.Parallel()
	const key = "sk-wrong-0000"
	su := newSetup(t, llmsim.Config{Instant: true, APIKey: "sk-right-1111"}, 1, promptSet{n: 50})
	res := runWant(t, cli.ExitFailure, su.args("--api-key", key)...)
	if !strings.Contains(res.stderr, "HTTP 401: Unauthorized") || !strings.Contains(res.stderr, "--api-key") || strings.Contains(res.stderr, key) {
		t.Errorf("stderr:\n%s", res.stderr)
	}
	if errs := readRecords(t, su.errs()); len(errs) != 0 {
		t.Errorf("%d error records written for a fatal refusal", len(errs))
	}
	if st := su.fleet.Stats(); st.Unauthorized == 0 || st.Requests != 0 {
		t.Errorf("server stats: %d refused, %d generation requests reached it", st.Unauthorized, st.Requests)
	}
}
