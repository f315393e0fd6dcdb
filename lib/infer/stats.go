package infer

import (
	"sync"
	"sync/atomic"
	"time"
)

// counters are the run's figures, shared by the progress display, the
// metrics endpoint and the final summary, so all three always agree.
//
// Accounting: every record read is rejected, a duplicate, or a prompt;
// every prompt is --samples answers; every answer is skipped (already in
// the output), ok, failed (in the errors file), or not done (the run was
// interrupted, or stopped on a fatal error, first):
//
//	read    = rejected + duplicates + prompts
//	answers = prompts * samples = skipped + ok + failed + notDone
type counters struct {
	read       atomic.Int64
	duplicates atomic.Int64
	prompts    atomic.Int64
	answers    atomic.Int64
	skipped    atomic.Int64
	ok         atomic.Int64
	failed     atomic.Int64
	retries    atomic.Int64 // attempts that were tried again
	backingOff atomic.Int64 // answers waiting out a backoff
	queued     atomic.Int64 // answers read, not yet dispatched

	promptTokens     atomic.Int64
	completionTokens atomic.Int64
	cachedTokens     atomic.Int64
	finishStop       atomic.Int64
	finishLength     atomic.Int64
	finishOther      atomic.Int64

	tokenRate  rateWindow // completion tokens per second, whole fleet
	answerRate rateWindow
}

// rateWindow counts events in one-second buckets to give a rate over the
// last minute.
type rateWindow struct {
	mu      sync.Mutex
	counts  [64]int64
	seconds [64]int64
	first   time.Time
}

func (w *rateWindow) add(now time.Time, n int64) {
	sec := now.Unix()
	i := sec & 63
	w.mu.Lock()
	if w.first.IsZero() {
		w.first = now
	}
	if w.seconds[i] != sec {
		w.seconds[i], w.counts[i] = sec, 0
	}
	w.counts[i] += n
	w.mu.Unlock()
}

// rate is events per second over the last span (at most a minute), or
// since the first event when that is more recent.
func (w *rateWindow) rate(now time.Time, span time.Duration) float64 {
	span = min(span, 60*time.Second)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first.IsZero() {
		return 0
	}
	sec := now.Unix()
	oldest := sec - int64(span/time.Second) + 1
	var sum int64
	for i := range w.counts {
		if s := w.seconds[i]; s >= oldest && s <= sec {
			sum += w.counts[i]
		}
	}
	elapsed := now.Sub(w.first)
	if elapsed > span {
		elapsed = span
	}
	if elapsed < time.Second {
		elapsed = time.Second
	}
	return float64(sum) / elapsed.Seconds()
}

// Summary is the outcome of a run, as printed at the end.
type Summary struct {
	Read, Rejected, Duplicates, Prompts int64
	Samples                             int
	Answers, Skipped, OK, Failed        int64
	NotDone                             int64
	Retries                             int64
	PromptTokens, CompletionTokens      int64
	CachedTokens                        int64
	FinishStop, FinishLength            int64
	FinishOther                         int64
	Wall                                time.Duration
	Endpoints                           []EndpointSummary
}

// EndpointSummary is one endpoint's share of a run.
type EndpointSummary struct {
	Name             string
	Requests, OK     int64
	Failures         int64
	Ejections        int64
	CompletionTokens int64
	Slots            int
}
