package fleet

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tokenmill/internal/testbin"
	"tokenmill/lib/openai"
)

// scriptedServer speaks HTTP/1.1 by hand, so that a test decides what
// each connection does with each request: answer and keep the connection,
// answer and close it, close it without answering. It counts the
// connections it accepted and the requests it read.
type scriptedServer struct {
	*testbin.Conns
	requests atomic.Int64
}

// act is what the server does with the k-th request (from 1) read on a
// connection.
type act int

const (
	answerKeep  act = iota // answer, keep the connection
	answerClose            // answer advertising keep-alive, then close (llama.cpp after a stream)
	dropUnread             // close without answering
	answer500              // answer 500, keep the connection
	answerHalf             // send half an answer's head, then close
	stall                  // answer nothing, keep the connection open
)

const chatAnswer = `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`

func startScripted(t *testing.T, script func(k int) act) *scriptedServer {
	t.Helper()
	s := &scriptedServer{}
	s.Conns = testbin.ServeConns(t, func(c net.Conn, done <-chan struct{}) {
		r := bufio.NewReader(c)
		for k := 1; ; k++ {
			req, err := http.ReadRequest(r)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			s.requests.Add(1)
			head := "HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5, max=100\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(chatAnswer)) + "\r\n\r\n"
			switch script(k) {
			case answerKeep:
				io.WriteString(c, head+chatAnswer)
			case answerClose:
				io.WriteString(c, head+chatAnswer)
				return
			case dropUnread:
				return
			case answer500:
				io.WriteString(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
			case answerHalf:
				io.WriteString(c, head[:len(head)/2])
				return
			case stall:
				<-done
				return
			}
		}
	})
	return s
}

func scriptedPool(t *testing.T, url string) (*Pool, *Endpoint) {
	t.Helper()
	targets, err := ParseEndpoints(url)
	if err != nil {
		t.Fatal(err)
	}
	p := NewPool(context.Background(), targets, Config{EjectAfter: 1 << 20})
	t.Cleanup(p.Close)
	return p, p.Endpoints()[0]
}

// A connection the server closed while it waited in the pool (llama.cpp
// closes every one after a streamed answer, although it advertised
// keep-alive) is a reconnect: the request goes again on a new connection,
// uncounted, and reaches the server once. A request that fails on a
// connection dialled for it, or fails otherwise (a 5xx, a timeout, an
// answer cut short), is a failure, as before, and is not sent again.
func TestClosedIdleConnectionIsAReconnect(t *testing.T) {
	const n = 6
	for _, tt := range []struct {
		name   string
		script func(k int) act
		// what the client's n requests (one after another) get: answers,
		// failures (first failure's status), reconnects; what the server
		// saw: connections and requests.
		ok, failed, status int
		reconnects         int64
		conns, requests    int64
		timeout            time.Duration
		wantTimeout        bool
	}{
		{name: "kept open", script: func(int) act { return answerKeep },
			ok: n, conns: 1, requests: n},
		{name: "closed after every answer", script: func(int) act { return answerClose },
			ok: n, reconnects: n - 1, conns: n, requests: n},
		{name: "closed after every second answer", script: func(k int) act { return []act{answerKeep, answerClose}[(k-1)%2] },
			ok: n, reconnects: n/2 - 1, conns: n / 2, requests: n},
		// The server reads a request on a fresh connection and closes it
		// unanswered: a failure each time, never sent again.
		{name: "a new connection closed unanswered", script: func(int) act { return dropUnread },
			failed: n, conns: n, requests: n},
		{name: "500 on a kept connection", script: func(int) act { return answer500 },
			failed: n, status: 500, conns: 1, requests: n},
		// Part of an answer came before the close: the server had the
		// request, so it is a failure, not a reconnect.
		{name: "half an answer on a reused connection", script: func(k int) act { return []act{answerKeep, answerHalf}[(k-1)%2] },
			ok: n / 2, failed: n / 2, conns: n / 2, requests: n},
		{name: "no answer in time on a reused connection", script: func(k int) act { return []act{answerKeep, stall}[min(k-1, 1)] },
			ok: 1, failed: 1, conns: 1, requests: 2, timeout: 300 * time.Millisecond, wantTimeout: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := startScripted(t, tt.script)
			p, ep := scriptedPool(t, srv.URL)
			timeout := cmpOr(tt.timeout, 10*time.Second)
			var ok, failed int
			for i := 0; i < n; i++ {
				_, f := p.Complete(ep, openai.PathChat, []byte(`{"messages":[{"role":"user","content":"hi"}]}`), timeout, openai.ParseChat)
				if f == nil {
					ok++
					continue
				}
				failed++
				if failed == 1 {
					t.Logf("failure: %v", f)
					if f.Status != tt.status || !f.Retriable {
						t.Errorf("failure %+v, want status %d, retriable", f, tt.status)
					}
				}
				if tt.wantTimeout {
					break // the stalled connection holds the server's one
				}
			}
			if ok != tt.ok || failed != tt.failed {
				t.Errorf("%d answered, %d failed; want %d and %d", ok, failed, tt.ok, tt.failed)
			}
			if got := ep.gen.Reconnects(); got != tt.reconnects {
				t.Errorf("%d reconnects, want %d", got, tt.reconnects)
			}
			if c, r := srv.Accepted.Load(), srv.requests.Load(); c != tt.conns || r != tt.requests {
				t.Errorf("the server saw %d connections and %d requests, want %d and %d", c, r, tt.conns, tt.requests)
			}
		})
	}
}

// The client's own rule, apart: only a connection that had carried an
// answer before the request, closed before a byte of its answer, is a
// closed idle one, whenever it was dialled.
func TestClosedIdleRule(t *testing.T) {
	set := newConnSet()
	a, b := net.Pipe()
	defer b.Close()
	go io.Copy(io.Discard, b) // the server reads every request
	tc := set.track(a).(*trackedConn)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	resp.ParseNetConn(tc)
	// The first request on a new connection: it was dialled for one.
	tc.Write([]byte("request"))
	if set.closedIdle(resp, fasthttp.ErrConnectionClosed) {
		t.Fatal("a connection that had carried no answer taken for a closed idle one")
	}
	// Its answer comes, and the next request goes on it.
	go b.Write([]byte("answer"))
	if n, err := tc.Read(make([]byte, 16)); n == 0 || err != nil {
		t.Fatalf("read %d: %v", n, err)
	}
	tc.Write([]byte("request"))
	for _, tt := range []struct {
		name     string
		answered bool
		err      error
		want     bool
	}{
		{"reused, closed before the answer", false, fasthttp.ErrConnectionClosed, true},
		{"reused, the write refused", false, &net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPIPE)}, true},
		{"reused, another write error", false, &net.OpError{Op: "write", Err: errors.New("x")}, false},
		{"reused, part of an answer came", true, fasthttp.ErrConnectionClosed, false},
		{"reused, timed out", false, fasthttp.ErrTimeout, false},
	} {
		tc.answered.Store(tt.answered)
		if got := set.closedIdle(resp, tt.err); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	tc.answered.Store(false)
	if other := newConnSet(); other.closedIdle(resp, fasthttp.ErrConnectionClosed) {
		t.Error("a connection of another client's taken for one of this one's")
	}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
