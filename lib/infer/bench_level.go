package infer

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tokenmill/lib/openai"
	"tokenmill/lib/quantile"
)

// One level of the bench: n streamed requests kept in flight on every
// endpoint for the warm-up and the measured window, then cut off.

// benchRun is what every level shares.
type benchRun struct {
	cfg        *Bench
	kind       openai.StreamKind
	eps        []*benchEndpoint
	maxRunning []int // per endpoint measured, 0 when the server does not say
	bodies     [][]byte
	next       atomic.Uint64
	// lengths seen at every level, for the forecast's mean answer.
	obs lengthObs
}

type benchEndpoint struct {
	t      Target
	client *fasthttp.HostClient
	conns  *connSet
}

func newBenchRun(c *Bench, p *pool, ready []int, bodies [][]byte) *benchRun {
	r := &benchRun{cfg: c, bodies: bodies}
	switch c.API {
	case APICompletions:
		r.kind = openai.StreamCompletion
	case APIGenerate:
		r.kind = openai.StreamGenerate
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, i := range ready {
		ep := p.eps[i]
		conns := newConnSet()
		client := newHostClient(ep.t, conns, 1<<16)
		client.StreamResponseBody = true
		r.eps = append(r.eps, &benchEndpoint{t: ep.t, client: client, conns: conns})
		r.maxRunning = append(r.maxRunning, ep.serverMR)
	}
	return r
}

// scaled is a real duration in the servers' time.
func (r *benchRun) scaled(d time.Duration) float64 { return d.Seconds() * r.cfg.TimeScale }

// real is a duration of the servers' time in real time.
func (r *benchRun) real(d time.Duration) time.Duration {
	return time.Duration(float64(d) / r.cfg.TimeScale)
}

// reqStats is one streamed request as the bench saw it.
type reqStats struct {
	ep          int
	sent, first time.Time // first: the first text or token
	finishedAt  time.Time
	finish      string
	err         error
	exact       bool // the server counts tokens in every event
	decided     bool
	tokens      int // exact: tokens so far
	bytes       int // otherwise: text so far
	total       int // the answer's tokens, once said (-1: not yet)
	// arrivals in the window: tokens (exact) or bytes, by time slice.
	arrivals []arrival
}

// arrival is what came in one slice of the window.
type arrival struct {
	slice  int32
	amount float32
}

// clock places events in the window: its start and the width of its
// slices.
type clock struct {
	measure time.Time
	slice   time.Duration
}

// event counts one event that arrived at now.
func (r *reqStats) event(now time.Time, c clock, d openai.Delta) {
	n := len(d.Text) + len(d.Reasoning)
	if !r.decided && (d.CompletionTokens >= 0 || n > 0) {
		r.decided, r.exact = true, d.CompletionTokens >= 0
	}
	if r.first.IsZero() && (n > 0 || d.CompletionTokens > 0) {
		r.first = now
	}
	amount := 0
	switch {
	case r.exact && d.CompletionTokens >= 0:
		amount = max(d.CompletionTokens-r.tokens, 0)
		r.tokens += amount
		r.total = r.tokens
	case !r.exact:
		amount = n
		r.bytes += n
		if d.CompletionTokens >= 0 {
			r.total = d.CompletionTokens // the usage chunk at the end
		}
	}
	if amount > 0 && !now.Before(c.measure) {
		k := int32(now.Sub(c.measure) / c.slice)
		if last := len(r.arrivals) - 1; last >= 0 && r.arrivals[last].slice == k {
			r.arrivals[last].amount += float32(amount)
		} else {
			r.arrivals = append(r.arrivals, arrival{k, float32(amount)})
		}
	}
	if d.FinishReason != "" && r.finish == "" {
		r.finish, r.finishedAt = d.FinishReason, now
	}
}

// tokensPer is the tokens one unit of the request's arrivals stands for,
// and its length so far in tokens; ratio converts text to tokens when the
// answer never said.
func (r *reqStats) tokensPer(ratio float64) (per, sofar float64) {
	if r.exact {
		return 1, float64(r.tokens)
	}
	if r.total >= 0 && r.bytes > 0 {
		ratio = float64(r.total) / float64(r.bytes)
	}
	return ratio, float64(r.bytes) * ratio
}

// levelRun is one level in progress.
type levelRun struct {
	r        *benchRun
	n        int
	measure  time.Time
	clock    clock
	end      atomic.Int64 // UnixNano when the level ended
	ended    chan struct{}
	endOnce  sync.Once
	deadline time.Time
	finished atomic.Int64 // answers finished in the window

	mu   sync.Mutex
	reqs []*reqStats
}

func (lv *levelRun) stop() {
	lv.endOnce.Do(func() {
		lv.end.Store(time.Now().UnixNano())
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
func (r *benchRun) level(ctx context.Context, n int) BenchLevel {
	c := r.cfg
	now := time.Now()
	lv := &levelRun{r: r, n: n, ended: make(chan struct{})}
	lv.measure = now.Add(r.real(c.Warmup))
	lv.clock = clock{measure: lv.measure, slice: max(r.real(c.Duration)/windowSlices, time.Microsecond)}
	stopAt := lv.measure.Add(r.real(c.Duration))
	// A request still going at the end is cut off; this is only a backstop.
	lv.deadline = stopAt.Add(5 * time.Second)
	var wg sync.WaitGroup
	for i := range r.eps {
		for k := 0; k < n; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !lv.isEnded() {
					body := r.bodies[(r.next.Add(1)-1)%uint64(len(r.bodies))]
					rs := r.request(lv, i, body)
					lv.mu.Lock()
					lv.reqs = append(lv.reqs, rs)
					lv.mu.Unlock()
				}
			}()
		}
	}
	timer := time.NewTimer(time.Until(stopAt))
	select {
	case <-timer.C:
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
			ep.conns.closeAll()
		}
		select {
		case <-done:
			return lv.result()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

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
	setPost(req, ep.t, r.cfg.API.Path(), r.cfg.APIKey, body)
	rs := &reqStats{ep: i, sent: time.Now(), total: -1}
	if err := ep.client.DoDeadline(req, resp, lv.deadline); err != nil {
		rs.err = lv.failure(err)
		if rs.err != nil {
			// Do not spin on a server that refuses connections.
			select {
			case <-lv.ended:
			case <-time.After(100 * time.Millisecond):
			}
		}
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
			break
		}
		now := time.Now()
		rs.event(now, lv.clock, d)
		if d.FinishReason != "" && !now.Before(lv.measure) {
			if k := lv.finished.Add(1); r.cfg.Requests > 0 && k >= int64(r.cfg.Requests) {
				lv.stop()
			}
		}
	}
	return rs
}

// failure is err unless the level ended, which cuts requests off on
// purpose.
func (lv *levelRun) failure(err error) error {
	if lv.isEnded() {
		return nil
	}
	return err
}

// BenchLevel is one level of the ladder, measured. Times are in seconds.
type BenchLevel struct {
	Concurrency          int       `json:"concurrency"` // per endpoint
	InFlight             int       `json:"in_flight"`   // the whole fleet
	Seconds              float64   `json:"seconds"`     // the measured window
	RequestsPerSec       float64   `json:"requests_per_s"`
	TokPerSec            float64   `json:"output_tokens_per_s"`
	TokPerSecPerEndpoint float64   `json:"output_tokens_per_s_per_endpoint"`
	ByEndpoint           []float64 `json:"output_tokens_per_s_by_endpoint"`
	Answers              int       `json:"answers"` // finished in the window
	LatencyP50           float64   `json:"latency_p50_s"`
	LatencyP99           float64   `json:"latency_p99_s"`
	TTFTP50              float64   `json:"ttft_p50_s"`
	TTFTP99              float64   `json:"ttft_p99_s"`
	Errors               int       `json:"errors"`
	FirstError           string    `json:"first_error,omitempty"`
	// RunSeconds is the forecast run's wall time at this level.
	RunSeconds float64 `json:"run_seconds,omitempty"`
}

// defaultBytesPerToken converts streamed text to tokens when no answer
// said how many tokens it had: English runs about four bytes a token.
const defaultBytesPerToken = 4

// windowSlices is how finely token arrivals are timed in the window.
const windowSlices = 256

// result turns the level's requests into its figures. Tokens count when
// they arrive inside the window, whatever the answer they belong to, so
// long answers that began before the window or end after it count for
// their part in it: a short window is not biased towards short answers.
// The rate is the slope of the tokens received over the window's time
// slices, so a stall of the client or the machine that delays tokens
// across the window's edges moves the count, not the rate.
func (lv *levelRun) result() BenchLevel {
	r := lv.r
	end := time.Unix(0, lv.end.Load())
	out := BenchLevel{Concurrency: lv.n, InFlight: lv.n * len(r.eps), Seconds: r.scaled(end.Sub(lv.measure))}
	if out.Seconds <= 0 {
		return out
	}
	// Streamed text to tokens, for servers that only count at the end.
	var rb, rt float64
	for _, rs := range lv.reqs {
		if !rs.exact && rs.total > 0 && rs.bytes > 0 {
			rt += float64(rs.total)
			rb += float64(rs.bytes)
		}
	}
	ratio := 1.0 / defaultBytesPerToken
	if rb > 0 {
		ratio = rt / rb
	}
	// Whole slices only: the last one was cut off by the level's end.
	slices := max(int(end.Sub(lv.measure)/lv.clock.slice), 1)
	covered := float64(slices) * r.scaled(lv.clock.slice)
	series := make([]float64, slices)
	byEP := make([]float64, len(r.eps))
	var lat, ttft []float64
	for _, rs := range lv.reqs {
		if rs.err != nil {
			out.Errors++
			if out.FirstError == "" {
				out.FirstError = rs.err.Error()
			}
		}
		per, sofar := rs.tokensPer(ratio)
		var in float64
		for _, a := range rs.arrivals {
			if int(a.slice) < slices {
				series[a.slice] += float64(a.amount) * per
				in += float64(a.amount) * per
			}
		}
		byEP[rs.ep] += in
		if rs.finish != "" && !rs.finishedAt.Before(lv.measure) {
			out.Answers++
			lat = append(lat, r.scaled(rs.finishedAt.Sub(rs.sent)))
		}
		if !rs.first.IsZero() && !rs.first.Before(lv.measure) {
			ttft = append(ttft, r.scaled(rs.first.Sub(rs.sent)))
		}
		if sofar > 0 {
			r.obs.add(sofar, rs.finish)
		}
	}
	var total float64
	for _, x := range byEP {
		total += x
	}
	out.TokPerSec = total / covered
	if rate, ok := slope(series, r.scaled(lv.clock.slice)); ok {
		out.TokPerSec = rate
	}
	// Endpoints' shares by the same measure.
	for i := range byEP {
		if total > 0 {
			byEP[i] *= out.TokPerSec / total
		}
	}
	out.ByEndpoint = byEP
	out.TokPerSecPerEndpoint = out.TokPerSec / float64(len(r.eps))
	sort.Float64s(lat)
	sort.Float64s(ttft)
	out.LatencyP50, out.LatencyP99 = quantile.Of(lat, 50), quantile.Of(lat, 99)
	out.TTFTP50, out.TTFTP99 = quantile.Of(ttft, 50), quantile.Of(ttft, 99)
	return out
}

// slope is the least-squares rate of the running total of counts, one
// count per slice of width seconds.
func slope(counts []float64, width float64) (float64, bool) {
	n := len(counts)
	if n < 8 || width <= 0 {
		return 0, false
	}
	var sumT, sumC, cum float64
	cums := make([]float64, n)
	for k, c := range counts {
		cum += c
		cums[k] = cum
		sumT += float64(k+1) * width
		sumC += cum
	}
	meanT, meanC := sumT/float64(n), sumC/float64(n)
	var sxy, sxx float64
	for k, c := range cums {
		dt := float64(k+1)*width - meanT
		sxy += dt * (c - meanC)
		sxx += dt * dt
	}
	return sxy / sxx, sxx > 0
}

// lengthObs are the answer lengths the bench saw: finished on their own
// (exact), cut by max_tokens, or cut off by the level's end (both
// censored: the answer would have been longer).
type lengthObs struct {
	mu    sync.Mutex
	exact logStats
	cens  []censor
	// answers that finished (stop or length): their count and tokens.
	finished, finishedTokens float64
}

func (o *lengthObs) add(tokens float64, finish string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if finish == "abort" {
		return // cut short by the server: says nothing of the length
	}
	if finish != "" {
		o.finished++
		o.finishedTokens += tokens
	}
	if finish != "" && finish != "length" {
		o.exact.add(int(tokens + 0.5))
		return
	}
	if tokens >= 1 {
		o.cens = append(o.cens, censor{x: logOf(tokens), w: 1})
	}
}
