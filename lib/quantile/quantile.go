// Package quantile computes the percentiles that stats, infer's summaries
// and the throughput bench report, so they all agree on one definition.
package quantile

import (
	"math"
	"slices"
)

// Of returns the p-th percentile (0 <= p <= 100) of sorted values by the
// nearest-rank method: the smallest value with at least p% of the values at
// or below it. It is an actual observed value, which is what a reader of
// "p99 latency 41 s" expects. Of returns 0 for no values.
func Of(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if p <= 0 {
		return sorted[0]
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	if rank > n {
		rank = n
	}
	return sorted[rank-1]
}

// Summary is the usual description of a distribution.
type Summary struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// Summarize sorts values in place and describes them.
func Summarize(values []float64) Summary {
	if len(values) == 0 {
		return Summary{}
	}
	slices.Sort(values)
	var sum float64
	for _, v := range values {
		sum += v
	}
	return Summary{
		Count: len(values),
		Mean:  sum / float64(len(values)),
		P50:   Of(values, 50),
		P90:   Of(values, 90),
		P99:   Of(values, 99),
		Max:   values[len(values)-1],
	}
}
