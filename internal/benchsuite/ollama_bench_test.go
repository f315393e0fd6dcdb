package benchsuite

import (
	"strings"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/bench"
)

// The bench's report on a CPU server whose output falls (the levels as
// the real Ollama gave them before the bench held there): the row's note
// says what it measured, that it held and could not measure steadily, and
// its forecast, and that it measured the levels again after the ladder;
// the section's table sets the forecast beside the run it forecast, and
// the targets hold that run within 25% of the forecast.
func TestOllamaBenchRow(t *testing.T) {
	const report = `{"levels":[{"concurrency":1,"output_tokens_per_s":67,"answers":9,"unsteady":true,"repeated":true,"remeasured":true,"first_output_tokens_per_s":130},
		{"concurrency":2,"output_tokens_per_s":60,"answers":8},{"concurrency":4,"output_tokens_per_s":39.4,"answers":5,"repeated":true}],
		"knee":1,"recommended_concurrency":1,"held":"the output fell as more were sent at once (2 and 4 per endpoint gave 60 and 39 tok/s, 1 gave 67)",
		"unsteady":true,"drift":"the servers changed","unsettled":"could not measure the servers settled","forecast":{"answers":200,"seconds":95.5,"low_seconds":80,"high_seconds":130.25}}`
	var rep bench.Report
	if err := json.Unmarshal([]byte(report), &rep); err != nil {
		t.Fatal(err)
	}
	note := benchNote(&rep)
	if want := "measured 1: 67 tok/s (unsteady, measured twice) (after the ladder; 130 in it), 2: 60 tok/s, 4: 39 tok/s (measured twice); held: the output fell as more were sent at once " +
		"(2 and 4 per endpoint gave 60 and 39 tok/s, 1 gave 67); found the server changed during the ladder and measured every level again; " +
		"said it could not measure the server settled (the knee measured a third time disagreed); said it could not measure steadily (no level settled); knee and recommendation 1; " +
		"forecast 95.5 s (80.0 s-130.2 s) for 200 answers"; note != want {
		t.Errorf("note:\n%s\nwant\n%s", note, want)
	}
	h := testHarness(t)
	h.results = []*Result{
		{Group: ollamaBenchGroup, Name: ollamaBenchRow, Ours: true, Runs: []Run{{Wall: 212 * time.Second}}, OutRecords: -1, Metrics: benchMetrics(&rep), Note: note},
		{Group: "ollama", Name: benchRunRow(1), Records: 200, Runs: []Run{{Wall: 120 * time.Second}, {Wall: 110 * time.Second}, {Wall: 140 * time.Second}}, OutRecords: 200},
	}
	var b strings.Builder
	renderOllamaBench(&b, h)
	for _, want := range []string{"it took 212.0 s; measured 1: 67 tok/s", "| `infer --concurrency 1` on the same prompts | 95.5 s | 80.0 s-130.2 s | 120.0 s | 1.26× |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("section without %q:\n%s", want, b.String())
		}
	}
	var tb strings.Builder
	targets, err := h.targets(ollamaSection)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeTargets(&tb, h.results, targets); err != nil {
		t.Fatal(err)
	}
	if got := tb.String(); !strings.Contains(got, "no faster than 0.8× its forecast | 1.3× | yes") ||
		!strings.Contains(got, "no slower than 1.25× its forecast | 1.3× | **no**") {
		t.Errorf("targets:\n%s", got)
	}
	if benchRunRow(ollamaParallel) != ollamaRows[1] {
		t.Errorf("the run at 4 is not the section's own --concurrency 4 row")
	}
	// A bench that recommended nothing has no run and no target.
	h.results[0].Metrics = benchMetrics(&bench.Report{ForecastNote: "no level answered"})
	if got, err := h.targets(ollamaSection); err != nil || len(got) != 3 {
		t.Errorf("targets without a recommendation (%v): %q", err, got)
	}
}
