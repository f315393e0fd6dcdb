package llmsim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// rawConn is one client connection to an endpoint, requests written and
// answers read by hand, so that what the server does with the connection
// is seen.
type rawConn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, url string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, r: bufio.NewReader(c)}
}

// do sends a POST of body to path and reads the whole answer, in at most
// 10 s.
func (rc *rawConn) do(path, body string) (*http.Response, string) {
	rc.t.Helper()
	rc.c.SetDeadline(time.Now().Add(10 * time.Second))
	defer rc.c.SetDeadline(time.Time{})
	fmt.Fprintf(rc.c, "POST %s HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
	resp, err := http.ReadResponse(rc.r, nil)
	if err != nil {
		rc.t.Fatalf("POST %s: %v", path, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		rc.t.Fatalf("POST %s: reading the answer: %v", path, err)
	}
	return resp, string(b)
}

// closedWithin says whether the server closed the connection: the next
// read ends within d, rather than times out. A test expecting it closed
// waits long (a loaded machine runs the server late); one expecting it
// open waits briefly: a close later than that would go unseen, never
// fail it wrongly.
func (rc *rawConn) closedWithin(d time.Duration) bool {
	rc.t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(d))
	_, err := rc.r.ReadByte()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	if err == nil {
		rc.t.Fatal("the server sent bytes nobody asked for")
	}
	return true
}

// wait is how long closedWithin waits for a close expected or not: at
// most half the servers' 5 s idle timeout, which closes any connection.
func wait(closed bool) time.Duration {
	if closed {
		return uvicornKeepAlive / 2
	}
	return 200 * time.Millisecond
}

func capChat(stream bool) string {
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":%v}`, DefaultModelName, stream)
}

// llama.cpp's server advertises keep-alive on every answer but closes the
// connection right after a streamed one (cpp-httplib ends its keep-alive
// loop once a chunked answer's provider is done), and after an error,
// which says Connection: close. Every other flavour keeps the connection
// for the next request.
func TestFlavorConnectionAfterAnswers(t *testing.T) {
	for _, f := range Flavors {
		t.Run(string(f), func(t *testing.T) {
			fleet := startFleet(t, Config{Instant: true, Flavor: f}, 1)
			url := fleet.URLs()[0]
			llama := f == FlavorLlamaCpp
			rc := dialRaw(t, url)
			for _, stream := range []bool{false, false, true} {
				resp, body := rc.do(pathChat, capChat(stream))
				if resp.StatusCode != 200 || !strings.Contains(body, `"finish_reason":"length"`) {
					t.Fatalf("stream %v: %d %s", stream, resp.StatusCode, body)
				}
				if stream && !strings.HasSuffix(strings.TrimSpace(body), "data: [DONE]") {
					t.Errorf("the stream did not end whole:\n%s", body)
				}
				if resp.Close || resp.Header.Get("Connection") != "" {
					t.Errorf("stream %v: the answer says Connection: %q", stream, resp.Header.Get("Connection"))
				}
				if ka := resp.Header.Get("Keep-Alive"); llama && ka != "timeout=5, max=100" || !llama && ka != "" {
					t.Errorf("stream %v: Keep-Alive %q", stream, ka)
				}
			}
			if closed := rc.closedWithin(wait(llama)); closed != llama {
				t.Errorf("after a streamed answer the connection closed: %v, want %v", closed, llama)
			}
			if llama {
				// An error answer says it closes, and does.
				rc := dialRaw(t, url)
				resp, body := rc.do(pathChat, `{"messages":`)
				if resp.StatusCode < 400 || !resp.Close || !rc.closedWithin(wait(true)) {
					t.Errorf("an error answer (%d %s) with Connection %q: want it closed", resp.StatusCode, body, resp.Header.Get("Connection"))
				}
			}
		})
	}
}

// llama.cpp's server answers a connection's 100th request with Connection:
// close (keep_alive_max_count), and closes it.
func TestLlamaCppHundredRequestsAConnection(t *testing.T) {
	fleet := startFleet(t, Config{Instant: true, Flavor: FlavorLlamaCpp}, 1)
	rc := dialRaw(t, fleet.URLs()[0])
	for k := 1; k <= 100; k++ {
		resp, body := rc.do(pathChat, capChat(false))
		if resp.StatusCode != 200 || resp.Close != (k == 100) {
			t.Fatalf("request %d: %d, Connection %q: %s", k, resp.StatusCode, resp.Header.Get("Connection"), body)
		}
	}
	if !rc.closedWithin(wait(true)) {
		t.Error("the connection stayed open after its 100th answer")
	}
}
