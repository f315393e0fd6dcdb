package benchsuite

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The run fails on a figure grown by half or more, on a figure the
// benchmark no longer reports and on one the baseline lacks; below half,
// and on figures not gated (B/req), it does not.
func TestCostRegressions(t *testing.T) {
	base := &Baseline{RequestCost: map[string]map[string]float64{}}
	measured := func(cpu, allocs float64) map[string]map[string]float64 {
		m := map[string]map[string]float64{}
		for _, mode := range costModes {
			m[mode] = map[string]float64{"cpu-µs/req": cpu, "allocs/req": allocs, "B/req": 1e9}
		}
		return m
	}
	for _, mode := range costModes {
		base.RequestCost[mode] = map[string]float64{"cpu-µs/req": 30, "allocs/req": 40}
	}
	tests := []struct {
		name     string
		measured map[string]map[string]float64
		edit     func(map[string]map[string]float64)
		want     []string // substrings, one a regression
	}{
		{name: "as recorded", measured: measured(30, 40)},
		{name: "faster", measured: measured(10, 20)},
		{name: "just under half more", measured: measured(44.9, 59.9)},
		{name: "half more CPU", measured: measured(45, 40), want: []string{"plain cpu-µs/req: 45, 1.50×", "context cpu-µs/req", "token-ids cpu-µs/req"}},
		{name: "twice the allocations", measured: measured(30, 80), want: []string{"plain allocs/req: 80, 2.00×", "context allocs/req", "token-ids allocs/req"}},
		{name: "one mode slower", measured: measured(30, 40), edit: func(m map[string]map[string]float64) { m["token-ids"]["cpu-µs/req"] = 93 },
			want: []string{"token-ids cpu-µs/req: 93, 3.10× the baseline's 30"}},
		{name: "a figure not reported", measured: measured(30, 40), edit: func(m map[string]map[string]float64) { delete(m["context"], "allocs/req") },
			want: []string{"context allocs/req: not measured"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.edit != nil {
				tt.edit(tt.measured)
			}
			got := costRegressions(base, tt.measured)
			if len(got) != len(tt.want) {
				t.Fatalf("regressions %q, want %d like %q", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("regression %d %q, want it to say %q", i, got[i], w)
				}
			}
		})
	}
	t.Run("no baseline for a mode", func(t *testing.T) {
		got := costRegressions(&Baseline{RequestCost: map[string]map[string]float64{"plain": {"cpu-µs/req": 30, "allocs/req": 40}}}, measured(30, 40))
		if len(got) != 4 || !strings.Contains(got[0], "context cpu-µs/req: no baseline") {
			t.Errorf("regressions %q, want the four figures of context and token-ids without a baseline", got)
		}
	})
}

// The repository's baseline parses and has every gated figure; a baseline
// written from medians reads back as them.
func TestBaselineFile(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	repo, err := findRepo(wd)
	if err != nil {
		t.Fatal(err)
	}
	base, err := readBaseline(filepath.Join(repo, baselineFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range costModes {
		for _, unit := range costUnits {
			if v := base.RequestCost[mode][unit]; v <= 0 {
				t.Errorf("%s: %s %s is %v", baselineFile, mode, unit, v)
			}
		}
	}
	if !strings.Contains(base.Note, "--update-baseline") {
		t.Errorf("%s does not say how to update it: %q", baselineFile, base.Note)
	}
	medians := map[string]map[string]float64{}
	for i, mode := range costModes {
		medians[mode] = map[string]float64{"cpu-µs/req": float64(10 + i), "allocs/req": float64(40 + i), "B/req": 7000}
	}
	path := filepath.Join(t.TempDir(), "baseline.json")
	if err := writeBaseline(path, medians, "2026-12-02 00:00 UTC"); err != nil {
		t.Fatal(err)
	}
	back, err := readBaseline(path)
	if err != nil {
		t.Fatal(err)
	}
	if reg := costRegressions(back, medians); len(reg) != 0 {
		t.Errorf("the medians recorded are regressions of themselves: %q", reg)
	}
	if got := back.RequestCost["token-ids"]["allocs/req"]; got != 42 {
		t.Errorf("token-ids allocs/req read back as %v, want 42", got)
	}
	if _, ok := back.RequestCost["plain"]["B/req"]; ok {
		t.Errorf("a figure not gated was recorded")
	}
	delete(medians["context"], "cpu-µs/req")
	if err := writeBaseline(path, medians, "x"); err == nil {
		t.Errorf("a baseline without context's CPU figure was written")
	}
}
