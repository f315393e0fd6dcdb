package fleet

import (
	"net"
	"sync"
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
	return c.hc.DoTimeout(req, resp, timeout)
}

// DoDeadline sends req and waits until deadline at most for the answer.
func (c *Client) DoDeadline(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) error {
	return c.hc.DoDeadline(req, resp, deadline)
}

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

// connSet tracks a client's open connections.
type connSet struct {
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

type trackedConn struct {
	net.Conn
	set  *connSet
	once sync.Once
}

func newConnSet() *connSet { return &connSet{conns: map[*trackedConn]struct{}{}} }

func (s *connSet) track(c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c, set: s}
	s.mu.Lock()
	s.conns[tc] = struct{}{}
	s.mu.Unlock()
	return tc
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
