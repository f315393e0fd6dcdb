package benchsuite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/segmentio/encoding/json"
)

// The run fails, after writing the report, when a figure of
// BenchmarkRequestCost grows by half over the baseline; the tests never
// gate on it: a timing figure is the machine's as much as the code's.

// baselineFile is the recorded baseline, relative to the repository.
const baselineFile = "internal/benchsuite/baseline.json"

// costGrowth is the growth over the baseline that fails the run.
const costGrowth = 1.5

// costModes are BenchmarkRequestCost's sub-benchmarks, each a row named
// by what it runs; costUnits are the figures gated, as it reports them.
var (
	costModes  = []string{"plain", "context", "token-ids"}
	costLabels = map[string]string{
		"plain":     "infer (context unknown)",
		"context":   "infer --context-length 32768 (every request fitted)",
		"token-ids": "infer --token-ids",
	}
	costUnits = []string{"cpu-µs/req", "allocs/req"}
)

// Baseline is baselineFile: the medians BenchmarkRequestCost gave when it
// was recorded, by mode and unit.
type Baseline struct {
	Note        string                        `json:"note"`
	Recorded    string                        `json:"recorded"`
	RequestCost map[string]map[string]float64 `json:"request_cost"`
}

// readBaseline reads the baseline file.
func readBaseline(path string) (*Baseline, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var b Baseline
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return &b, nil
}

// costRegressions are the gated figures of measured (by mode and unit)
// that grew by half or more over the baseline's; a gated figure missing
// from either side is one too, so that a renamed metric cannot pass
// unseen.
func costRegressions(base *Baseline, measured map[string]map[string]float64) []string {
	var out []string
	for _, mode := range costModes {
		for _, unit := range costUnits {
			b, okB := base.RequestCost[mode][unit]
			v, okV := measured[mode][unit]
			switch {
			case !okB || b <= 0:
				out = append(out, fmt.Sprintf("%s %s: no baseline in %s", mode, unit, baselineFile))
			case !okV:
				out = append(out, fmt.Sprintf("%s %s: not measured", mode, unit))
			case v >= costGrowth*b:
				out = append(out, fmt.Sprintf("%s %s: %s, %.2f× the baseline's %s", mode, unit, trimFloat(v), v/b, trimFloat(b)))
			}
		}
	}
	return out
}

var costSection = &section{
	name: "cost", heading: "## infer: CPU and allocations a request",
	about: "infer's CPU, allocations and bytes a request against llmsim --instant (BenchmarkRequestCost); the run fails when one grows by half over " + baselineFile,
	measure: func(ctx context.Context, h *harness) error {
		if err := h.subBench(ctx, "cost", "BenchmarkRequestCost", "3x", "./lib/infer/", costModes, func(mode string) (string, bool) { return mode, true }); err != nil {
			return err
		}
		medians := map[string]map[string]float64{}
		for _, r := range h.group("cost") {
			medians[r.Name] = r.Metrics
		}
		path := h.repoFile(baselineFile)
		if h.updateBaseline {
			if err := writeBaseline(path, medians, h.info.Started.UTC().Format("2006-01-02 15:04 UTC")); err != nil {
				return err
			}
		}
		base, err := readBaseline(path)
		if err != nil {
			return fmt.Errorf("the baseline of infer's cost a request: %w (record one with --update-baseline)", err)
		}
		if reg := costRegressions(base, medians); len(reg) > 0 {
			h.failures = append(h.failures, "infer's cost a request grew by half over "+baselineFile+": "+strings.Join(reg, "; "))
		}
		// The baseline compared with, kept with the rows it was compared with.
		for _, r := range h.group("cost") {
			for _, unit := range costUnits {
				if b, ok := base.RequestCost[r.Name][unit]; ok && b > 0 {
					r.Metrics["baseline "+unit] = b
				}
			}
		}
		return nil
	},
}

// writeBaseline records medians as the baseline.
func writeBaseline(path string, medians map[string]map[string]float64, when string) error {
	b := Baseline{
		Note: "Medians of BenchmarkRequestCost (lib/infer) that `benchsuite run` compares its run with: the run fails when " +
			"CPU or allocations a request grow by half. Record anew with `go run ./internal/cmd/benchsuite run --section cost --update-baseline`.",
		Recorded: when, RequestCost: map[string]map[string]float64{},
	}
	for _, mode := range costModes {
		b.RequestCost[mode] = map[string]float64{}
		for _, unit := range costUnits {
			v, ok := medians[mode][unit]
			if !ok {
				return errors.New("no " + unit + " figure of " + mode + " to record")
			}
			b.RequestCost[mode][unit] = v
		}
	}
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(path, append(data, '\n'))
}

func init() {
	parts["cost"] = func(w io.Writer, h *harness) {
		t := newTable("mode", "CPU µs/request", "allocations/request", "bytes/request", "baseline CPU µs", "baseline allocations", "CPU vs baseline", "allocations vs baseline")
		for _, r := range h.group("cost") {
			t.add(costLabels[r.Name], figureCell(r, "cpu-µs/req"), figureCell(r, "allocs/req"), figureCell(r, "B/req"),
				figureCell(r, "baseline cpu-µs/req"), figureCell(r, "baseline allocs/req"),
				overCell(r, "cpu-µs/req", r, "baseline cpu-µs/req"), overCell(r, "allocs/req", r, "baseline allocs/req"))
		}
		t.write(w)
	}
}
