package fleet

import (
	"sync"
	"time"
)

// RateWindow counts events in one-second buckets to give a rate over the
// last minute. The zero value is empty and ready to use.
type RateWindow struct {
	mu      sync.Mutex
	counts  [64]int64
	seconds [64]int64
	first   time.Time
}

// Add counts n events at now.
func (w *RateWindow) Add(now time.Time, n int64) {
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

// Rate is events per second over the last span (at most a minute), or
// since the first event when that is more recent.
func (w *RateWindow) Rate(now time.Time, span time.Duration) float64 {
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
