package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tokenmill/lib/backoff"
	"tokenmill/lib/clock"
	"tokenmill/lib/fleet"
	"tokenmill/lib/forecast"
	"tokenmill/lib/openai"
)

// One level of the bench: n streamed requests kept in flight on every
// endpoint for the warm-up and the measured window, then cut off.

// benchRun is what every level shares.
type benchRun struct {
	cfg        *Config
	clk        clock.Clock
	kind       openai.StreamKind
	eps        []*fleet.Client
	pool       *fleet.Pool
	peps       []*fleet.Endpoint // the pool's endpoints behind eps, for their model names
	urls       []string
	maxRunning []int // per endpoint measured, 0 when the server does not say
	bodies     [][]byte
	// wantUsage: the requests ask for the answers' usage (include_usage,
	// or /generate's meta_info), so a stream without it was cut.
	wantUsage bool
	next      atomic.Uint64
	// lengths seen at every level, for the forecast's mean answer; with
	// --mix, also per arm (arms[i] is the arm of bodies[i], mix.go).
	obs    lengthObs
	arms   []int
	armObs []lengthObs
	// context is the model's context as the servers state it (0: not
	// stated): with no max_tokens, no answer is longer.
	context int
}

// uncapped is the longest an answer with no max_tokens can be: the
// model's context, else forecast.DefaultLimit. A sample answer longer than
// the context shows a server that shifts its context (Ollama) rather than
// cut the answer: the context then bounds nothing.
func (r *benchRun) uncapped() int {
	r.obs.mu.Lock()
	longest := r.obs.longest
	r.obs.mu.Unlock()
	if r.context > 0 && longest <= float64(r.context) {
		return r.context
	}
	return forecast.DefaultLimit
}

// newBenchRun measures the ready endpoints of p (their indexes), each
// with its own streaming client, sending the sample s.
func newBenchRun(cfg *Config, clk clock.Clock, p *fleet.Pool, ready []int, s sample) *benchRun {
	r := &benchRun{cfg: cfg, clk: clk, kind: cfg.API.StreamKind(), bodies: s.bodies, wantUsage: s.wantUsage, pool: p, context: p.Context()}
	r.setArms(s.arms)
	views, eps := p.View(), p.Endpoints()
	for _, i := range ready {
		t := eps[i].Target()
		r.eps = append(r.eps, fleet.NewClient(t, cfg.APIKey, true))
		r.peps = append(r.peps, eps[i])
		r.urls = append(r.urls, t.URL)
		r.maxRunning = append(r.maxRunning, views[i].MaxRunning)
	}
	return r
}

// scaled is a real duration in the servers' time.
func (r *benchRun) scaled(d time.Duration) float64 { return d.Seconds() * r.cfg.TimeScale }

// real is a duration of the servers' time in real time.
func (r *benchRun) real(d time.Duration) time.Duration {
	return time.Duration(float64(d) / r.cfg.TimeScale)
}

// levelRun is one level in progress.
type levelRun struct {
	r        *benchRun
	n        int
	measure  time.Time
	window   window
	stopAt   time.Time    // the end of the measured window
	end      atomic.Int64 // UnixNano when the level ended
	ended    chan struct{}
	endOnce  sync.Once
	deadline time.Time
	finished atomic.Int64 // answers finished in the window

	mu   sync.Mutex
	reqs []*reqStats
}

// newLevel begins a level of n requests per endpoint now: the warm-up,
// then the measured window.
func (r *benchRun) newLevel(n int) *levelRun {
	c := r.cfg
	lv := &levelRun{r: r, n: n, ended: make(chan struct{})}
	lv.measure = r.clk.Now().Add(r.real(c.Warmup))
	lv.window = window{measure: lv.measure, slice: max(r.real(c.Duration)/windowSlices, time.Microsecond)}
	lv.stopAt = lv.measure.Add(r.real(c.Duration))
	// A request still going at the end is cut off; this is only a backstop.
	lv.deadline = lv.stopAt.Add(5 * time.Second)
	return lv
}

func (lv *levelRun) add(rs *reqStats) {
	lv.mu.Lock()
	lv.reqs = append(lv.reqs, rs)
	lv.mu.Unlock()
}

func (lv *levelRun) stop() {
	lv.endOnce.Do(func() {
		lv.end.Store(lv.r.clk.Now().UnixNano())
		close(lv.ended)
	})
}

func (lv *levelRun) isEnded() bool {
	select {
	case <-lv.ended:
		return true
	default:
		return false
	}
}

// level runs one level and measures it.
func (r *benchRun) level(ctx context.Context, n int) Level {
	lv := r.newLevel(n)
	var wg sync.WaitGroup
	for i := range r.eps {
		for k := 0; k < n; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fails := 0
				for !lv.isEnded() {
					k := (r.next.Add(1) - 1) % uint64(len(r.bodies))
					rs := r.request(lv, i, r.bodies[k])
					rs.arm = r.armOf(int(k))
					lv.add(rs)
					if rs.err == nil {
						fails = 0
						continue
					}
					// Back off on failures, as infer does: a server that
					// fails at once is not asked again at once.
					fails++
					select {
					case <-lv.ended:
					case <-r.clk.After(failureBackoff.Delay(fails)):
					}
				}
			}()
		}
	}
	timer := r.clk.NewTimer(lv.stopAt.Sub(r.clk.Now()))
	select {
	case <-timer.C():
	case <-lv.ended: // --requests reached
	case <-ctx.Done():
	}
	timer.Stop()
	lv.stop()
	// Cut off what is in flight: closing the connection frees its slot.
	// Again until every worker is out, for a request that was just
	// connecting.
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	for {
		for _, ep := range r.eps {
			ep.CloseAll()
		}
		select {
		case <-done:
			// The connections closed stay in the clients' pools as idle
			// ones: drop them, so that the next level dials afresh instead
			// of failing its first requests on them.
			for _, ep := range r.eps {
				ep.CloseIdle()
			}
			return lv.result()
		case <-r.clk.After(50 * time.Millisecond):
		}
	}
}

// failureBackoff is how long a bench worker waits after its n-th failure
// in a row: 50ms, doubling, at most 2s.
var failureBackoff = backoff.Exp{First: 50 * time.Millisecond, Max: 2 * time.Second}

// slots is how many answers the fleet runs at once with n requests in
// flight per endpoint: n, or the server's max_running_requests if lower.
func (r *benchRun) slots(n int) float64 {
	var total float64
	for _, mr := range r.maxRunning {
		if mr > 0 {
			total += float64(min(n, mr))
		} else {
			total += float64(n)
		}
	}
	return total
}

// request sends one streamed request to endpoint i and reads its answer.
func (r *benchRun) request(lv *levelRun, i int, body []byte) *reqStats {
	ep := r.eps[i]
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	if r.pool != nil {
		body = r.pool.BodyFor(r.peps[i], body)
	}
	ep.Post(req, r.cfg.API.Path(), body)
	rs := &reqStats{ep: i, sent: r.clk.Now(), total: -1}
	if err := ep.DoDeadline(req, resp, lv.deadline); err != nil {
		rs.err = lv.failure(err)
		return rs
	}
	defer resp.CloseBodyStream()
	if status := resp.StatusCode(); status != fasthttp.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.BodyStream(), 4<<10))
		rs.err = lv.failure(fmt.Errorf("HTTP %d: %s", status, openai.ErrorMessage(msg)))
		return rs
	}
	events := openai.NewEventReader(resp.BodyStream())
	dec := openai.StreamDecoder{Kind: r.kind}
	for {
		data, err := events.Next()
		if err != nil {
			if err != io.EOF {
				rs.err = lv.failure(err)
			}
			break
		}
		d, err := dec.Decode(data)
		if err != nil {
			rs.err = lv.failure(err)
			break
		}
		if d.Done {
			rs.done = true
			// Read the body's end too (the chunked stream's last chunk), so
			// the connection goes back to the pool: left unread it is
			// closed, and every request pays a new connection the run
			// the bench forecasts does not. Bounded: a server sending on
			// past [DONE] is not waited for.
			io.Copy(io.Discard, io.LimitReader(resp.BodyStream(), afterDoneLimit))
			break
		}
		lv.event(rs, r.clk.Now(), d)
	}
	if rs.err == nil {
		rs.err = lv.failure(r.incomplete(rs))
	}
	return rs
}

// afterDoneLimit is the most read after a stream's [DONE] to keep its
// connection.
const afterDoneLimit = 64 << 10

// incomplete says what a stream that ended lacked: its end marker (it
// was cut, perhaps in the middle of an event), or the token count asked
// for with stream_options.include_usage; nil when it was whole.
func (r *benchRun) incomplete(rs *reqStats) error {
	switch {
	case !rs.done:
		return errors.New("the stream ended without [DONE]: cut off")
	case r.wantUsage && !rs.usage:
		return errors.New("the stream ended without the answer's usage (stream_options.include_usage asked for it)")
	}
	return nil
}

// event counts one event of rs that arrived at now; the level ends early
// once --requests answers finished in its window.
func (lv *levelRun) event(rs *reqStats, now time.Time, d openai.Delta) {
	rs.event(now, lv.window, d)
	if d.FinishReason != "" && !now.Before(lv.measure) {
		if k := lv.finished.Add(1); lv.r.cfg.Requests > 0 && k >= int64(lv.r.cfg.Requests) {
			lv.stop()
		}
	}
}

// failure is err unless the level ended, which cuts requests off on
// purpose.
func (lv *levelRun) failure(err error) error {
	if lv.isEnded() {
		return nil
	}
	return err
}
