package fleet

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// Client sends generation requests to one server over connections it
// tracks, so that all of them can be closed at once: fasthttp has no
// per-request cancellation, and a closed connection is also what makes
// the server drop the request and free its slot.
type Client struct {
	t     Target
	auth  string // the Authorization header, "" for none
	hc    *fasthttp.HostClient
	conns *connSet
}

// NewClient is a generation client for t, sending apiKey (if any) as a
// bearer token (or the URL's credentials); stream leaves answers' bodies
// to be read as they arrive.
func NewClient(t Target, apiKey string, stream bool) *Client {
	conns := newConnSet()
	hc := newHostClient(t, conns, 1<<16, maxGenerationBody)
	hc.StreamResponseBody = stream
	return &Client{t: t, auth: t.Authorization(apiKey), hc: hc, conns: conns}
}

// Post makes req a JSON POST of body to path on the client's server.
func (c *Client) Post(req *fasthttp.Request, path string, body []byte) {
	setURI(req, c.t, path)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	req.SetBodyRaw(body)
}

// DoTimeout sends req and waits at most timeout for the answer.
func (c *Client) DoTimeout(req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) error {
	return do(c.hc, c.conns, req, resp, time.Now().Add(timeout))
}

// DoDeadline sends req and waits until deadline at most for the answer.
func (c *Client) DoDeadline(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) error {
	return do(c.hc, c.conns, req, resp, deadline)
}

// Reconnects counts the requests sent again on a new connection because
// the one they went on had been closed by the server while idle.
func (c *Client) Reconnects() int64 { return c.conns.reconnects.Load() }

// CloseAll closes every connection, ending the requests on them.
func (c *Client) CloseAll() { c.conns.closeAll() }

// CloseIdle closes the connections no request uses.
func (c *Client) CloseIdle() { c.hc.CloseIdleConnections() }

// maxGenerationBody is what fasthttp may hold of a generation answer it
// reads whole; answers are streamed (readBody bounds them), so this is a
// backstop.
const maxGenerationBody = 256 << 20

// newHostClient is a client of t's with at most maxConns connections,
// reading at most maxBody bytes of an answer's body: past it the answer
// is an error (fasthttp.ErrBodyTooLarge) and nothing more of it is read.
func newHostClient(t Target, conns *connSet, maxConns, maxBody int) *fasthttp.HostClient {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &fasthttp.HostClient{
		Addr:                      t.Addr,
		IsTLS:                     t.TLS,
		Name:                      "tokenmill-infer",
		MaxConns:                  maxConns,
		MaxIdemponentCallAttempts: 1, // retries are ours: they go to another endpoint
		// Below uvicorn's 5 s keep-alive, so the client, not the server,
		// closes an idle connection and no request is sent on a dying one.
		MaxIdleConnDuration:    3 * time.Second,
		MaxResponseBodySize:    maxBody,
		ReadBufferSize:         16 << 10,
		DisablePathNormalizing: true,
		Dial: func(addr string) (net.Conn, error) {
			c, err := dialer.Dial("tcp", addr)
			if err != nil {
				return nil, &dialError{err}
			}
			if conns != nil {
				return conns.track(c), nil
			}
			return c, nil
		},
	}
}

func setURI(req *fasthttp.Request, t Target, path string) {
	scheme := "http"
	if t.TLS {
		scheme = "https"
	}
	u := req.URI()
	u.SetScheme(scheme)
	u.SetHost(t.Addr)
	u.SetPath(t.Path + path)
}

// maxReconnects bounds how many times one request is sent again after
// finding its connection closed. Each time closes that connection and
// the idle ones, so the next goes on a new connection; this is a
// backstop.
const maxReconnects = 8

// do sends req on hc, again on another connection whenever the one it
// went on turns out to have been closed by the server while it sat idle
// in the pool. Servers do that: llama.cpp's closes every connection after
// a streamed answer although it advertises keep-alive, and uvicorn closes
// one idle for 5 s. The request never reached the server, so that is a
// reconnect, not a failed request. A connection dialled for the request
// that fails is a failure, as is any other error.
func do(hc *fasthttp.HostClient, conns *connSet, req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) error {
	for i := 0; ; i++ {
		err := hc.DoDeadline(req, resp, deadline)
		if err == nil || i == maxReconnects || !conns.closedIdle(resp, err) {
			return err
		}
		conns.reconnects.Add(1)
		// The server's other idle connections are likely closed too.
		hc.CloseIdleConnections()
	}
}

// closedIdle says whether err, the failure of a request, is a closed idle
// connection: one that had carried an answer before (and waited in the
// pool), closed or reset before the server sent a byte of an answer to
// this request. Whether the connection was dialled before the attempt
// began does not tell: another request may dial one, be answered on it and
// leave it in the pool for this one meanwhile.
func (s *connSet) closedIdle(resp *fasthttp.Response, err error) bool {
	a, ok := resp.LocalAddr().(connAddr)
	if !ok || a.conn.set != s || !a.conn.reused.Load() || a.conn.answered.Load() {
		return false
	}
	// fasthttp reports any error on an answer's first byte as
	// ErrConnectionClosed; writing to a closed one can fail too.
	return errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// connSet tracks a client's open connections.
type connSet struct {
	mu         sync.Mutex
	conns      map[*trackedConn]struct{}
	reconnects atomic.Int64
}

type trackedConn struct {
	net.Conn
	set  *connSet
	once sync.Once
	// answered: a byte came since the last request was written; reused:
	// one came before it, so the request went on a connection that had
	// carried an answer.
	answered, reused atomic.Bool
}

func newConnSet() *connSet { return &connSet{conns: map[*trackedConn]struct{}{}} }

func (s *connSet) track(c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c, set: s}
	s.mu.Lock()
	s.conns[tc] = struct{}{}
	s.mu.Unlock()
	return tc
}

func (c *trackedConn) Write(b []byte) (int, error) {
	if c.answered.Swap(false) {
		c.reused.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.answered.Store(true)
	}
	return n, err
}

// LocalAddr carries the connection itself: fasthttp hands it to the
// response (Response.LocalAddr), which is how a failed request tells
// which connection it went on.
func (c *trackedConn) LocalAddr() net.Addr { return connAddr{c.Conn.LocalAddr(), c} }

// connAddr is a connection's local address and the connection.
type connAddr struct {
	net.Addr
	conn *trackedConn
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.conns, c)
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	list := make([]*trackedConn, 0, len(s.conns))
	for c := range s.conns {
		list = append(list, c)
	}
	s.mu.Unlock()
	for _, c := range list {
		c.Close()
	}
}
