package benchsuite

import (
	"context"
	"io"
)

// costModes are BenchmarkRequestCost's sub-benchmarks, each a row named
// by what it runs.
var (
	costModes  = []string{"plain", "context", "token-ids"}
	costLabels = map[string]string{
		"plain":     "infer (context unknown)",
		"context":   "infer --context-length 32768 (every request fitted)",
		"token-ids": "infer --token-ids",
	}
)

var costSection = &section{
	name: "cost", heading: "## infer: CPU and allocations a request",
	measure: func(ctx context.Context, h *harness) error {
		return h.subBench(ctx, "cost", "BenchmarkRequestCost", "3x", "./lib/infer/", costModes, func(mode string) (string, bool) { return mode, true })
	},
}

func init() {
	parts["cost"] = func(w io.Writer, h *harness) {
		t := newTable("mode", "CPU µs/request", "allocations/request", "bytes/request")
		for _, r := range h.group("cost") {
			t.add(costLabels[r.Name], figureCell(r, "cpu-µs/req"), figureCell(r, "allocs/req"), figureCell(r, "B/req"))
		}
		t.write(w)
	}
}
