package benchsuite

import (
	"testing"
	"time"
)

func TestParseCPUBusy(t *testing.T) {
	for _, tc := range []struct {
		line string
		want time.Duration
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice
		{"cpu  100 20 30 5000 40 5 5 10 7 0", 170 * time.Second / 100},
		{"cpu  1 2 3 4 5 6 7", 19 * time.Second / 100},
		{"cpu0 1 2 3 4 5 6 7 8", -1},
		{"cpu 1 2", -1},
		{"cpu  1 x 3 4 5 6 7 8", -1},
	} {
		if got := parseCPUBusy(tc.line); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.line, got, tc.want)
		}
	}
}

func TestOthersCores(t *testing.T) {
	// The machine spent 3 s of CPU in a 2 s run, 1.5 s of it the command's;
	// then 1 s in a 1 s run that was all the command's.
	busy := [][2]time.Duration{{10 * time.Second, 13 * time.Second}, {20 * time.Second, 21 * time.Second}}
	runs := []Run{{Wall: 2 * time.Second, User: time.Second, Sys: 500 * time.Millisecond}, {Wall: time.Second, User: time.Second}}
	if got := othersCores(busy, runs); got != 0.5 {
		t.Errorf("cores %v, want 0.5 (1.5 s of others' CPU in 3 s)", got)
	}
	busy = append(busy, [2]time.Duration{-1, 5 * time.Second})
	if got := othersCores(busy, append(runs, Run{Wall: time.Second})); got != -1 {
		t.Errorf("a run that missed a reading gives %v", got)
	}
	if got := othersCores(nil, nil); got != -1 {
		t.Errorf("no runs give %v", got)
	}
	r := &Result{Load1: 1.25, Metrics: map[string]float64{"others_cores": 0.75}}
	if got := othersCell(r); got != "1.2; others 0.8" && got != "1.3; others 0.8" {
		t.Errorf("cell %q", got)
	}
	if got := othersCell(&Result{Load1: 2}); got != "2.0" {
		t.Errorf("cell without the figure %q", got)
	}
}
