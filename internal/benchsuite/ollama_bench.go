package benchsuite

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"tokenmill/lib/bench"
	"tokenmill/lib/cli"
)

// infer bench runs once on the real Ollama server; the run it forecasts
// is measured in turns with the section's other rows.
const (
	ollamaBenchGroup = "ollama-bench"
	ollamaBenchRow   = "infer bench (defaults)"
)

// benchOllama runs the bench once against url and keeps its row; it
// returns the concurrency the bench recommended (0: none).
func (h *harness) benchOllama(ctx context.Context, url, prompts string, alias []string) (int, error) {
	const out = "tmp/ollama-bench.json"
	argv := []string{"infer", "bench", "--json", "-e", url, "--max-tokens", "32", "--mean-answer-tokens", "32", prompts}
	// Exit 1: the bench found nothing to recommend; its report says why.
	r, err := h.measureRow(ctx, Spec{Group: ollamaBenchGroup, Name: ollamaBenchRow, Ours: true, Runs: 1, Stdout: out, NoCount: true,
		Exit: []int{0, 1}, Alias: alias, Argv: argv})
	if err != nil {
		return 0, err
	}
	var rep *bench.Report
	if err = eachJSON(h.path(out), func(r *bench.Report) error { rep = r; return nil }); err != nil || rep == nil {
		return 0, fmt.Errorf("infer bench's report (%s): %v", out, err)
	}
	r.Metrics, r.Note = benchMetrics(rep), benchNote(rep)
	h.add(r)
	return rep.Recommended, nil
}

// benchMetrics are the figures of the report the section reads back.
func benchMetrics(rep *bench.Report) map[string]float64 {
	m := map[string]float64{"recommended": float64(rep.Recommended)}
	if f := rep.Forecast; f != nil {
		m["forecast_s"], m["forecast_low_s"], m["forecast_high_s"] = f.Seconds, f.LowSeconds, f.HighSeconds
	}
	return m
}

// benchNote says what the bench's report said, in a sentence.
func benchNote(rep *bench.Report) string {
	var levels []string
	for _, lv := range rep.Levels {
		s := fmt.Sprintf("%d: %s tok/s", lv.Concurrency, cli.Thousands(int64(lv.TokPerSec+0.5)))
		switch {
		case lv.Unsteady:
			s += " (unsteady, measured twice)"
		case lv.Repeated:
			s += " (measured twice)"
		}
		if lv.Remeasured {
			s += fmt.Sprintf(" (after the ladder; %s in it)", cli.Thousands(int64(lv.FirstTokPerSec+0.5)))
		}
		levels = append(levels, s)
	}
	parts := []string{"measured " + strings.Join(levels, ", ")}
	said := func(yes bool, text string) { // what the report said of the ladder, where it did
		if yes {
			parts = append(parts, text)
		}
	}
	said(rep.Held != "", "held: "+rep.Held)
	said(rep.Drift != "", "found the server changed during the ladder and measured every level again")
	said(rep.Unsettled != "", "said it could not measure the server settled (the knee measured a third time disagreed)")
	said(rep.Unsteady, "said it could not measure steadily (no level settled)")
	said(rep.Recommended > 0, fmt.Sprintf("knee and recommendation %d", rep.Recommended))
	if f := rep.Forecast; f != nil {
		parts = append(parts, fmt.Sprintf("forecast %s (%s-%s) for %s answers", secondsText(f.Seconds), secondsText(f.LowSeconds), secondsText(f.HighSeconds), cli.Thousands(f.Answers)))
	}
	said(rep.Forecast == nil && rep.ForecastNote != "", "no forecast: "+rep.ForecastNote)
	return strings.Join(parts, "; ")
}

func secondsText(s float64) string { return strconv.FormatFloat(s, 'f', 1, 64) + " s" }

// benchRunRow is the row of the run at the bench's recommendation k: the
// section's own --concurrency 4 where k is Ollama's parallelism.
func benchRunRow(k int) string {
	if k == ollamaParallel {
		return ollamaRows[1]
	}
	return fmt.Sprintf("infer --concurrency %d (infer bench's recommendation)", k)
}

// benchRow is the bench's row, nil when it was not measured.
func (h *harness) benchRow() *Result { return h.find(ollamaBenchGroup, ollamaBenchRow) }

// renderOllamaBench writes what the bench did, and how the run it forecast went.
func renderOllamaBench(w io.Writer, h *harness) {
	r := h.benchRow()
	if len(r.Runs) == 0 {
		fmt.Fprintf(w, "%s.\n", r.Note)
		return
	}
	fmt.Fprintf(w, "it took %s; %s.\n", secondsText(r.medianRun().Wall.Seconds()), r.Note)
	k := int(r.Metrics["recommended"])
	f, ok := r.Metrics["forecast_s"]
	if run := h.find("ollama", benchRunRow(k)); k > 0 && ok && run != nil && len(run.Runs) > 0 {
		got := run.medianRun().Wall.Seconds()
		fmt.Fprintln(w)
		newTable("the run it forecast", "forecast", "its range", "measured (median)", "measured / forecast").
			add(fmt.Sprintf("`infer --concurrency %d` on the same prompts", k), secondsText(f), secondsText(r.Metrics["forecast_low_s"])+"-"+secondsText(r.Metrics["forecast_high_s"]),
				secondsText(got), fmt.Sprintf("%.2f×", got/f)).write(w)
	}
}

func init() { parts["ollama-bench"] = renderOllamaBench }
