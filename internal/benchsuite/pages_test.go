package benchsuite

import (
	"strings"
	"testing"
	"time"
)

// TestParquetFloorLine: the line under the Parquet table puts the pages'
// cost beside the JSONL line's, from the rows measured.
func TestParquetFloorLine(t *testing.T) {
	h := testHarness(t)
	row := func(name string, cpu float64) *Result {
		return &Result{Group: "extract-parquet", Name: name, Records: 1e6, OutRecords: 1e6,
			Runs: []Run{{Wall: time.Duration(cpu * float64(time.Second)), User: time.Duration(cpu * float64(time.Second))}}}
	}
	h.results = []*Result{row("JSONL, 1 core", 2.4), row("Parquet, 1 core", 3.5), row(pagesRow, 1.7)}
	var b strings.Builder
	renderParquetFloor(&b, h)
	for _, want := range []string{"costs 3.5 µs of CPU against 2.4 µs", "pages alone cost 1.7 µs (71% of", "leaves 0.7 µs a row", "extract spends\n1.8 µs on it"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("lacks %q:\n%s", want, b.String())
		}
	}
	// Parquet no dearer than JSONL: nothing to explain.
	h.results = []*Result{row("JSONL, 1 core", 2.4), row("Parquet, 1 core", 2.3), row(pagesRow, 1.7)}
	b.Reset()
	if renderParquetFloor(&b, h); b.Len() > 0 {
		t.Errorf("wrote %q", b.String())
	}
}
