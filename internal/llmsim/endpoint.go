package llmsim

import (
	"context"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Endpoint is one simulated SGLang server of a fleet.
type Endpoint struct {
	f     *Fleet
	d     *dialect
	index int
	addr  string
	url   string
	seq   atomic.Uint64 // generation requests since the fleet started
	stats counters
	// idsLeft is how many more answers carry token ids
	// (StopTokenIDsAfter; math.MaxInt64: all).
	idsLeft atomic.Int64

	mu       sync.Mutex
	faults   Faults
	model    *Model
	cache    *prefixCache // nil without Config.KVTokens
	inc      *incarnation // nil while down
	unwell   bool         // SetHealthy(false)
	accepted int          // generation requests since the last (re)start
	crashGen int          // counts crashes, so a stale restart timer is ignored
	window   throughputWindow
}

// incarnation is one life of an endpoint, from (re)start to crash.
type incarnation struct {
	ctx    context.Context
	cancel context.CancelFunc
	ln     *trackListener
	wake   chan struct{}
	ready  chan struct{} // closed when the startup delay is over
}

const uvicornKeepAlive = 5 * time.Second

const (
	stateDown     = "down"
	stateStarting = "starting"
	stateReady    = "ready"
)

func newEndpoint(f *Fleet, i int, addr string) *Endpoint {
	e := &Endpoint{f: f, d: dialectOf(f.cfg.flavorFor(i)), index: i, addr: addr, faults: f.cfg.faultsFor(i)}
	e.idsLeft.Store(math.MaxInt64)
	e.model = e.newModel()
	return e
}

func (e *Endpoint) newModel() *Model {
	t := e.f.cfg.Timing
	t.Slow = e.faults.Slow
	m := NewModel(t, e.f.cfg.MaxRunning, e.f.cfg.MaxQueued)
	m.KVCapacity = e.f.cfg.KVTokens
	return m
}

// URL is the endpoint's base URL, e.g. "http://127.0.0.1:30003".
func (e *Endpoint) URL() string { return e.url }

// Addr is the endpoint's host:port.
func (e *Endpoint) Addr() string { return e.addr }

// Flavor is the kind of server the endpoint imitates.
func (e *Endpoint) Flavor() Flavor { return e.d.flavor }

// Index is the endpoint's position in the fleet.
func (e *Endpoint) Index() int { return e.index }

// Faults are the endpoint's current faults.
func (e *Endpoint) Faults() Faults {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.faults
}

// SetFaults replaces the endpoint's faults from now on. A changed Slow
// applies from the next scheduler step; a new CrashAfter counts the
// requests received since the endpoint last (re)started.
func (e *Endpoint) SetFaults(f Faults) error {
	if err := f.validate(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = f
	e.model.Timing.Slow = f.Slow
	return nil
}

// SetHealthy(false) makes /health and /health_generate answer 503 while
// generation goes on; SetHealthy(true) undoes it.
func (e *Endpoint) SetHealthy(ok bool) {
	e.mu.Lock()
	e.unwell = !ok
	e.mu.Unlock()
}

// State is "ready", "starting" (within the startup delay) or "down"
// (crashed).
func (e *Endpoint) State() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stateLocked()
}

func (e *Endpoint) stateLocked() string {
	if e.inc == nil {
		return stateDown
	}
	select {
	case <-e.inc.ready:
		return stateReady
	default:
		return stateStarting
	}
}

// Stats are the endpoint's counters.
func (e *Endpoint) Stats() Stats {
	c := &e.stats
	s := Stats{
		Requests: c.requests.Load(), Completed: c.completed.Load(), Aborted: c.aborted.Load(),
		Failed: c.failed.Load(), Hung: c.hung.Load(), Dropped: c.dropped.Load(),
		Rejected: c.rejected.Load(), Limited: c.limited.Load(), BadRequests: c.badRequests.Load(), Lost: c.lost.Load(),
		Unauthorized: c.unauthorized.Load(), Cancelled: c.cancelled.Load(),
		PromptTokens: c.promptTokens.Load(), GeneratedTokens: c.generatedTokens.Load(),
		MaxRunning: c.maxRunning.Load(), MaxWaiting: c.maxWaiting.Load(),
		Crashes: c.crashes.Load(), Restarts: c.restarts.Load(),
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inc != nil {
		s.Connections = int64(e.inc.ln.open())
	}
	if e.f.cfg.Instant {
		s.Running = c.inflight.Load()
		return s
	}
	s.Running, s.Waiting = int64(e.model.Running()), int64(e.model.Waiting())
	return s
}

// Crash takes the endpoint down at once: its listener closes, every open
// connection is dropped and every request in it is lost. With
// Faults.RestartAfter set it comes back after that long.
func (e *Endpoint) Crash() { e.stop(true) }

// Restart brings the endpoint back on the same address (crashing it first
// if it is up). It is starting for Faults.StartupDelay, then ready.
func (e *Endpoint) Restart() error {
	if e.State() != stateDown {
		e.stop(false)
	}
	if e.f.ctx.Err() != nil {
		return errDown
	}
	if err := e.start(true); err != nil {
		return err
	}
	e.stats.restarts.Add(1)
	return nil
}

// start opens the listener and launches the server, the scheduler and the
// startup timer.
func (e *Endpoint) start(retry bool) error {
	e.mu.Lock()
	delay := e.faults.StartupDelay
	e.mu.Unlock()
	// A server that listens once ready holds its port bound meanwhile:
	// connections are refused while it starts.
	late := e.d.listenWhenReady && delay > 0
	var ln net.Listener
	var held *heldPort
	var err error
	if late {
		held, err = holdPort(e.f.ctx, e.addr, retry)
	} else {
		ln, err = listen(e.f.ctx, e.addr, retry)
	}
	if err != nil {
		return err
	}
	if e.url == "" { // a restart binds the address already resolved
		if late {
			e.addr = held.addr
		} else {
			e.addr = ln.Addr().String()
		}
		e.url = "http://" + e.addr
	}
	inc := &incarnation{
		ln:    &trackListener{Listener: ln, held: held, conns: map[*trackConn]struct{}{}},
		wake:  make(chan struct{}, 1),
		ready: make(chan struct{}),
	}
	inc.ctx, inc.cancel = context.WithCancel(e.f.ctx)
	srv := &fasthttp.Server{
		Handler:               e.handle,
		Name:                  e.d.server,
		NoDefaultServerHeader: e.d.server == "",
		NoDefaultContentType:  true,
		MaxRequestBodySize:    256 << 20,
		// uvicorn, which serves SGLang, closes keep-alive connections idle
		// for 5 s (timeout_keep_alive=5); clients must cope with that.
		IdleTimeout: uvicornKeepAlive,
		Logger:      quietLogger{},
	}

	e.mu.Lock()
	e.inc = inc
	e.accepted = 0
	e.model = e.newModel()
	// The new model decodes from now on.
	e.stats.decodedAt.Store(int64(e.f.clock.Now()))
	if e.f.cfg.KVTokens > 0 { // a (re)started server has an empty cache
		e.cache = newPrefixCache(e.f.cfg.KVTokens)
	}
	e.mu.Unlock()

	// The server is ready delay after now, whenever its goroutines get to
	// run: the deadline is taken here, not in them, or a clock advanced
	// before a goroutine first runs (a loaded machine, a test's manual
	// clock) would push it a whole delay further.
	readyAt := e.f.clock.Now() + delay
	e.f.wg.Add(1)
	go func() {
		defer e.f.wg.Done()
		if late {
			if !e.f.clock.Sleep(inc.ctx, readyAt) || !inc.ln.listenHeld() {
				return
			}
			close(inc.ready)
		}
		_ = srv.Serve(inc.ln)
	}()
	if !e.f.cfg.Instant {
		e.f.wg.Add(1)
		go func() {
			defer e.f.wg.Done()
			e.schedule(inc)
		}()
	}
	switch {
	case delay <= 0:
		close(inc.ready)
	case late: // ready once it listens
	default:
		e.f.wg.Add(1)
		go func() {
			defer e.f.wg.Done()
			if e.f.clock.Sleep(inc.ctx, readyAt) {
				close(inc.ready)
			}
		}()
	}
	return nil
}

// stop takes the endpoint down; crash tells a fault (counted, may restart)
// from a shutdown.
func (e *Endpoint) stop(crash bool) {
	e.mu.Lock()
	inc := e.inc
	if inc == nil {
		e.mu.Unlock()
		return
	}
	e.inc = nil
	lost := e.model.Reset()
	e.crashGen++
	gen := e.crashGen
	restart := e.faults.RestartAfter
	e.mu.Unlock()

	inc.cancel()
	inc.ln.closeAll()
	for _, s := range lost {
		s.Ref.(*choiceState).f.fail()
	}
	if !crash {
		return
	}
	e.stats.crashes.Add(1)
	if restart > 0 && e.f.ctx.Err() == nil {
		restartAt := e.f.clock.Now() + restart // taken now, as start's readyAt
		e.f.wg.Add(1)
		go func() {
			defer e.f.wg.Done()
			if !e.f.clock.Sleep(e.f.ctx, restartAt) {
				return
			}
			e.mu.Lock()
			stale := e.crashGen != gen || e.inc != nil
			e.mu.Unlock()
			if !stale {
				_ = e.Restart()
			}
		}()
	}
}

// schedule is the scheduler loop of one incarnation: it steps the model
// while there is work, sleeping each step's duration on the clock, and
// hands the tokens of a step to the waiting requests once the step is
// over. A step that ends late (a coarse timer) does not delay the next:
// steps are laid end to end on the simulated timeline, so the loop catches
// up and throughput stays what the model says.
func (e *Endpoint) schedule(inc *incarnation) {
	clock := e.f.clock
	for {
		e.mu.Lock()
		for e.inc == inc && !e.model.Busy() {
			e.mu.Unlock()
			select {
			case <-inc.wake:
			case <-inc.ctx.Done():
				return
			}
			e.mu.Lock()
		}
		if e.inc != inc {
			e.mu.Unlock()
			return
		}
		m := e.model
		m.MaxRunning = e.faults.Slots.at(m.Now(), e.f.cfg.MaxRunning)
		d, _ := m.Step()
		produced := int64(m.LastTokens())
		end := m.Now()
		// The step's tokens and its end together, under e.mu: /metrics
		// reads them so, and what was decoded by a point in simulated
		// time is never more than the model allows in that time.
		e.stats.generatedTokens.Add(produced)
		e.stats.promptTokens.Add(int64(m.LastJoinTokens()))
		e.stats.decodedAt.Store(int64(end))
		storeMax(&e.stats.maxRunning, produced)
		e.window.add(produced, d)
		e.mu.Unlock()

		if !clock.Sleep(inc.ctx, end) {
			return
		}

		e.mu.Lock()
		if e.inc != inc {
			e.mu.Unlock()
			return
		}
		m.EachRunning(func(s *Seq) {
			if cs := s.Ref.(*choiceState); cs.f.stream && !cs.f.hung {
				cs.publish(s.Generated)
			}
		})
		for _, s := range m.Finished() {
			s.Ref.(*choiceState).finish(s.Generated)
		}
		e.mu.Unlock()
	}
}

// throughputWindow averages generation throughput over the last steps,
// as SGLang's scheduler does over its decode log interval (40 steps).
type throughputWindow struct {
	tokens [40]int64
	durs   [40]time.Duration
	i      int
	sumT   int64
	sumD   time.Duration
}

func (w *throughputWindow) add(tokens int64, d time.Duration) {
	w.sumT += tokens - w.tokens[w.i]
	w.sumD += d - w.durs[w.i]
	w.tokens[w.i], w.durs[w.i] = tokens, d
	w.i = (w.i + 1) % len(w.tokens)
}

func (w *throughputWindow) rate() float64 {
	if w.sumD <= 0 {
		return 0
	}
	return float64(w.sumT) / w.sumD.Seconds()
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}
