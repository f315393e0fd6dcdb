package llmsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Fleet is a running set of simulated endpoints.
type Fleet struct {
	cfg Config
	// model is Config.Tokenizer loaded, shared by every endpoint (nil:
	// llmsim's own tokenizers).
	model     *modelTokenizer
	log       *requestLog // nil without Config.RequestLog
	logErr    error
	bearer    []byte // "Bearer <APIKey>", nil without a key
	clock     Clock
	ctx       context.Context
	cancel    context.CancelFunc
	endpoints []*Endpoint
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// Start opens n endpoints (addresses from cfg.Listen, then 127.0.0.1:0)
// and serves them until ctx ends or Close is called. It returns once every
// endpoint listens.
func Start(ctx context.Context, cfg Config, n int) (*Fleet, error) {
	if n <= 0 {
		return nil, fmt.Errorf("llmsim: %d endpoints asked for, want at least 1", n)
	}
	if len(cfg.Listen) > n {
		return nil, fmt.Errorf("llmsim: %d listen addresses for %d endpoints", len(cfg.Listen), n)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("llmsim: %w", err)
	}
	for i := range c.PerEndpoint {
		if i < 0 || i >= n {
			return nil, fmt.Errorf("llmsim: faults given for endpoint %d of %d", i, n)
		}
	}
	for i := range c.Flavors {
		if i < 0 || i >= n {
			return nil, fmt.Errorf("llmsim: flavor given for endpoint %d of %d", i, n)
		}
	}
	f := &Fleet{cfg: c, clock: c.Clock, log: newRequestLog(c.RequestLog)}
	if c.Tokenizer != "" {
		if f.model, err = newModelTokenizer(c.Tokenizer, c.TemplateDrift); err != nil {
			return nil, fmt.Errorf("llmsim: tokenizer: %w", err)
		}
	}
	if c.APIKey != "" {
		f.bearer = []byte("Bearer " + c.APIKey)
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	for i := 0; i < n; i++ {
		addr := "127.0.0.1:0"
		if i < len(c.Listen) {
			addr = c.Listen[i]
		}
		e := newEndpoint(f, i, addr)
		if err := e.start(false); err != nil {
			f.Close()
			return nil, fmt.Errorf("llmsim: endpoint %d: %w", i, err)
		}
		f.endpoints = append(f.endpoints, e)
	}
	if ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				f.Close()
			case <-f.ctx.Done():
			}
		}()
	}
	return f, nil
}

// URLs are the endpoints' base URLs ("http://127.0.0.1:30000"), in order.
func (f *Fleet) URLs() []string {
	out := make([]string, len(f.endpoints))
	for i, e := range f.endpoints {
		out[i] = e.url
	}
	return out
}

// Len is the number of endpoints.
func (f *Fleet) Len() int { return len(f.endpoints) }

// Endpoint returns endpoint i (0-based).
func (f *Fleet) Endpoint(i int) *Endpoint { return f.endpoints[i] }

// Config is the fleet's configuration, defaults filled in.
func (f *Fleet) Config() Config { return f.cfg }

// Clock is the fleet's simulated time.
func (f *Fleet) Clock() Clock { return f.clock }

// Stats adds up every endpoint's counters (maxima are the largest of any
// endpoint).
func (f *Fleet) Stats() Stats {
	var t Stats
	for _, e := range f.endpoints {
		t.add(e.Stats())
	}
	return t
}

// Close stops every endpoint: listeners close, connections drop, pending
// requests are abandoned. It waits for the endpoints' goroutines, then
// flushes the request log and reports its first write error.
func (f *Fleet) Close() error {
	f.closeOnce.Do(func() {
		f.cancel()
		for _, e := range f.endpoints {
			e.stop(false)
		}
		f.wg.Wait()
		f.logErr = f.log.flush()
	})
	return f.logErr
}

// Stats are an endpoint's counters since the fleet started.
type Stats struct {
	// Requests is every generation request received (chat, completions,
	// /generate), whatever became of it.
	Requests int64
	// Completed were answered in full (finish_reason stop or length).
	Completed int64
	// Aborted were answered with finish_reason "abort" (the abort fault).
	Aborted int64
	// Failed were answered 500 (the fail fault).
	Failed int64
	// Hung were accepted and never answered; Dropped had their connection
	// closed mid-response.
	Hung, Dropped int64
	// Rejected were answered 503 because the waiting queue was full.
	Rejected int64
	// Limited were answered 429 (the limit fault).
	Limited int64
	// BadRequests were answered 400 (malformed, or longer than the context).
	BadRequests int64
	// Unauthorized were answered 401 (Config.APIKey), any path.
	Unauthorized int64
	// Cancelled were given up by their client (it closed the connection)
	// before the answer was ready; their slots were freed.
	Cancelled int64
	// Lost were in flight when the endpoint crashed or the fleet closed.
	Lost int64
	// PromptTokens were prefilled; GeneratedTokens were decoded (answers
	// cut by a crash or given up by their client, and hung requests,
	// included).
	PromptTokens, GeneratedTokens int64
	// Running and Waiting are the batch and queue now; MaxRunning and
	// MaxWaiting the largest seen. Connections are the client connections
	// open now.
	Running, Waiting       int64
	Connections            int64
	MaxRunning, MaxWaiting int64
	// Crashes and Restarts count the endpoint going away and coming back.
	Crashes, Restarts int64
}

func (s *Stats) add(o Stats) {
	s.Requests += o.Requests
	s.Completed += o.Completed
	s.Aborted += o.Aborted
	s.Failed += o.Failed
	s.Hung += o.Hung
	s.Dropped += o.Dropped
	s.Rejected += o.Rejected
	s.Limited += o.Limited
	s.BadRequests += o.BadRequests
	s.Unauthorized += o.Unauthorized
	s.Cancelled += o.Cancelled
	s.Lost += o.Lost
	s.PromptTokens += o.PromptTokens
	s.GeneratedTokens += o.GeneratedTokens
	s.Running += o.Running
	s.Waiting += o.Waiting
	s.Connections += o.Connections
	s.MaxRunning = max(s.MaxRunning, o.MaxRunning)
	s.MaxWaiting = max(s.MaxWaiting, o.MaxWaiting)
	s.Crashes += o.Crashes
	s.Restarts += o.Restarts
}

// counters are Stats kept with atomics, so the instant path takes no lock.
type counters struct {
	requests, completed, aborted, failed, hung, dropped, rejected, badRequests, lost, limited atomic.Int64
	unauthorized, cancelled                                                                   atomic.Int64
	cacheQueries, cachedTokens                                                                atomic.Int64
	promptTokens, generatedTokens                                                             atomic.Int64
	maxRunning, maxWaiting                                                                    atomic.Int64
	crashes, restarts                                                                         atomic.Int64
	inflight                                                                                  atomic.Int64 // instant mode's "running"
	// decodedAt is the simulated time (ns) at the end of the last step
	// counted in generatedTokens and promptTokens: its start, for a model
	// that has not stepped yet.
	decodedAt atomic.Int64
}

func storeMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// trackListener remembers every connection it accepted, so a crash can
// drop them all at once.
type trackListener struct {
	net.Listener
	held   *heldPort // while a server that listens once ready starts; nil else
	mu     sync.Mutex
	conns  map[*trackConn]struct{}
	closed bool
}

type trackConn struct {
	net.Conn
	ln   *trackListener
	once sync.Once
}

func (c *trackConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.ln.mu.Lock()
		delete(c.ln.conns, c)
		c.ln.mu.Unlock()
	})
	return err
}

func (l *trackListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackConn{Conn: c, ln: l}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		c.Close()
		return nil, net.ErrClosed
	}
	l.conns[tc] = struct{}{}
	l.mu.Unlock()
	return tc, nil
}

// listenHeld starts listening on the held port (a server that listens
// once ready): false when the incarnation was stopped meanwhile (closeAll
// let the port go) or the port cannot listen.
func (l *trackListener) listenHeld() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	ln, err := l.held.listen()
	if err != nil {
		return false
	}
	l.Listener = ln
	return true
}

// open is the number of connections open now.
func (l *trackListener) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// closeAll closes the listener and drops every connection.
func (l *trackListener) closeAll() {
	l.mu.Lock()
	l.closed = true
	conns := make([]*trackConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	ln := l.Listener
	if l.held != nil {
		l.held.close() // the port goes now, for a restart to bind it
	}
	l.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, c := range conns {
		c.Close()
	}
}

var errDown = errors.New("endpoint went down")

// listen binds addr; with retry it tries as retryInUse does.
func listen(ctx context.Context, addr string, retry bool) (net.Listener, error) {
	var ln net.Listener
	err := retryInUse(ctx, retry, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// retryInUse calls bind; with retry it tries for a second: a restarted
// endpoint may find its port still held by its previous incarnation.
func retryInUse(ctx context.Context, retry bool, bind func() error) error {
	attempts := 1
	if retry {
		attempts = 50
	}
	var err error
	for attempt := 0; attempt < attempts; attempt++ {
		if err = bind(); err == nil || !retry {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return err
}

func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}
