package infer

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
)

// startClosingFront stands in front of a server and closes each connection
// right after one answer, although the answer advertises keep-alive, as
// llama.cpp's server does after a streamed answer: a client's next request
// on that connection finds it closed before any answer. Its Accepted
// counts the connections.
func startClosingFront(t *testing.T, upstream string) *testbin.Conns {
	t.Helper()
	client := &http.Client{}
	t.Cleanup(client.CloseIdleConnections)
	return testbin.ServeConns(t, func(c net.Conn, _ <-chan struct{}) {
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		out, err := http.NewRequest(req.Method, upstream+req.URL.RequestURI(), req.Body)
		if err != nil {
			return
		}
		out.Header = req.Header
		resp, err := client.Do(out)
		if err != nil {
			return
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nKeep-Alive: timeout=5, max=100\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n",
			resp.StatusCode, http.StatusText(resp.StatusCode), resp.Header.Get("Content-Type"), len(body))
		c.Write(body)
	})
}

// infer on llama.cpp servers: its own (llmsim's flavour, which keeps a
// connection after a whole answer and closes it after an error), and one
// that closes every connection after its answer. A closed connection is
// sent again, never counted: every prompt is answered at its first
// attempt, exactly once. Real failures (the server's 500s) still count,
// one attempt each.
func TestInferClosedConnectionsAreNotFailures(t *testing.T) {
	const prompts = 40
	for _, tt := range []struct {
		name     string
		closing  bool
		failRate float64
	}{
		{"llama.cpp", false, 0},
		{"every connection closed after its answer", true, 0},
		{"every connection closed after its answer, and 500s", true, 0.2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newSetup(t, llmsim.Config{Instant: true, Flavor: llmsim.FlavorLlamaCpp, Faults: llmsim.Faults{FailRate: tt.failRate}}, 1, promptSet{n: prompts})
			url := s.fleet.URLs()[0]
			var front *testbin.Conns
			if tt.closing {
				front = startClosingFront(t, url)
				url = front.URL
			}
			args := append([]string{"-o", s.out, s.in, "-e", url, "--max-tokens", "8", "--concurrency", "4", "--retries", "50"}, fastFlags...)
			res := runWant(t, cli.ExitOK, args...)
			acc := s.check(t, 1)
			if acc.ok != prompts || acc.failed != 0 {
				t.Fatalf("ok %d, failed %d; want %d and 0\n%s", acc.ok, acc.failed, prompts, res.stderr)
			}
			retried := 0
			for key, g := range acc.outputs {
				if g.Output.Attempts < 1 {
					t.Fatalf("%s: %d attempts", key, g.Output.Attempts)
				}
				retried += g.Output.Attempts - 1
			}
			served := s.fleet.Stats()
			if int64(retried) != served.Failed {
				t.Errorf("%d attempts failed, the server failed %d requests\n%s", retried, served.Failed, res.stderr)
			}
			if tt.failRate > 0 && served.Failed == 0 {
				t.Errorf("the server failed no request: nothing counted")
			}
			if want := fmt.Sprintf("(%d ok, %d failed attempts,", prompts, retried); !strings.Contains(res.stderr, want) {
				t.Errorf("the summary does not say %q:\n%s", want, res.stderr)
			}
			if front != nil && front.Accepted.Load() < int64(prompts) {
				t.Errorf("%d connections for %d prompts: the front did not close them", front.Accepted.Load(), prompts)
			}
		})
	}
}
