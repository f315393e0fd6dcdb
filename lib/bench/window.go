package bench

import (
	"sort"
	"time"

	"tokenmill/lib/openai"
	"tokenmill/lib/quantile"
)

// reqStats is one streamed request as the bench saw it.
type reqStats struct {
	ep          int
	sent, first time.Time // first: the first text or token
	finishedAt  time.Time
	finish      string
	err         error
	exact       bool // the server counts tokens in every event
	decided     bool
	done        bool // the stream's end marker came
	usage       bool // a token count came with or after the finish
	tokens      int  // exact: tokens so far
	bytes       int  // otherwise: text so far
	total       int  // the answer's tokens, once said (-1: not yet)
	arm         int  // 1 + the arm's index in --mix, 0 none
	// arrivals in the window: tokens (exact) or bytes, by time slice.
	arrivals []arrival
}

// arrival is what came in one slice of the window.
type arrival struct {
	slice  int32
	amount float32
}

// window places events in a level's measured window: its start and the
// width of its slices.
type window struct {
	measure time.Time
	slice   time.Duration
}

// event counts one event that arrived at now. Whether the server counts
// tokens in every event is decided by the first that carries text: SGLang
// and vLLM (continuous_usage_stats) put a count of one or more in it;
// Ollama's completion streams put a usage of zeros in every chunk, which
// counts nothing, and the others none.
func (r *reqStats) event(now time.Time, c window, d openai.Delta) {
	n := len(d.Text) + len(d.Reasoning)
	if !r.decided && n > 0 {
		r.decided, r.exact = true, d.CompletionTokens > 0
	}
	// The answer's count: a usage after its finish, or with it (not
	// Ollama's zeros).
	if d.CompletionTokens >= 0 && r.finish != "" || d.CompletionTokens > 0 && d.FinishReason != "" {
		r.usage = true
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
func (lv *levelRun) result() Level {
	r := lv.r
	end := time.Unix(0, lv.end.Load())
	out := Level{Concurrency: lv.n, InFlight: lv.n * len(r.eps), Seconds: r.scaled(end.Sub(lv.measure))}
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
	slices := min(max(int(end.Sub(lv.measure)/lv.window.slice), 1), windowSlices)
	covered := float64(slices) * r.scaled(lv.window.slice)
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
			if rs.arm > 0 {
				r.armObs[rs.arm-1].add(sofar, rs.finish)
			}
		}
	}
	var total float64
	for _, x := range byEP {
		total += x
	}
	out.TokPerSec = total / covered
	width := r.scaled(lv.window.slice)
	if rate, ok := slope(series, width); ok {
		out.TokPerSec = max(rate, 0)
	}
	// Each half of the window alone, to see whether the level was steady.
	if h1, ok := slope(series[:slices/2], width); ok {
		if h2, ok := slope(series[slices/2:], width); ok {
			out.Halves = []float64{max(h1, 0), max(h2, 0)}
		}
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
