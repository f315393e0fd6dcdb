package benchsuite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// cannedResults are rows as a run measures them, with round figures.
func cannedResults() []*Result {
	wall := func(s ...float64) []Run {
		runs := make([]Run, len(s))
		for i, v := range s {
			runs[i] = Run{Wall: time.Duration(v * float64(time.Second)), User: time.Duration(v * 0.9 * float64(time.Second)), MaxRSSKB: 20 << 10}
		}
		return runs
	}
	rs := []*Result{
		{Group: "dedup", Name: "dedup", Ours: true, Command: "dedup data/prompts.jsonl", Bytes: 400e6, Records: 660000, Runs: wall(0.5, 0.4, 0.41), OutRecords: 655840, Load1: 1},
		{Group: "dedup", Name: "awk", Command: "awk '!seen[$0]++' data/prompts.jsonl", Note: "compares whole lines", Bytes: 400e6, Records: 660000, Runs: wall(2, 2, 2), OutRecords: 660000, Load1: 1},
		{Group: "dedup", Name: "gawk", Note: "not available: gawk is not installed on this machine", OutRecords: -1, Load1: 1.5},
		{Group: "dedup", Name: "dedup, first 1000", Ours: true, Command: "dedup data/prompts-slurp.jsonl", Bytes: 1e6, Records: 1000, Runs: wall(0.01), OutRecords: 990, Load1: 1},
		{Group: "dedup", Name: "jq -s unique_by, first 1000", Command: "jq -c -s 'unique_by(.messages)[]' data/prompts-slurp.jsonl", Bytes: 1e6, Records: 1000, Runs: wall(0.5), OutRecords: 990, Load1: 1},
		{Group: "client", Name: "infer", Ours: true, Command: "infer -e $URL -o tmp/client-gen.jsonl data/client-infer.jsonl", Records: 100000, Runs: wall(2), OutRecords: 100000, Load1: 1.2},
		{Group: "client", Name: "xargs -P 64 curl", Command: "xargs -P 64 curl < data/client-curl-bodies.jsonl", Records: 4000, Runs: wall(10), OutRecords: 4000, Load1: 2},
		{Group: "fleet", Name: "least-outstanding", Command: "llmsim --listen 127.0.0.1:0 &\ninfer -e URLS data/fleet-prompts.jsonl", Records: 8000, OutRecords: 8000, Load1: 3,
			Runs: wall(34.8), Metrics: map[string]float64{"tok_s": 8362, "ideal_tok_s": 8454, "ideal_pct": 98.9, "ideal_prefill_pct": 99.9, "util_pct": 99.9,
				"whole_pct": 83.8, "down_sim_s": 100, "failed": 0, "retries": 51}},
	}
	for _, size := range []string{"10k", "1M"} {
		f := 1.0
		if size == "1M" {
			f = 100
		}
		rs = append(rs,
			&Result{Group: "growth", Name: "extract", Size: size, Command: "extract data/corpus-" + size + ".jsonl", Bytes: int64(18e6 * f), Records: int64(1e4 * f),
				Runs: []Run{{Wall: time.Duration(f * float64(50*time.Millisecond)), MaxRSSKB: 13 << 10}}, OutRecords: int64(1e4 * f)},
			&Result{Group: "growth", Name: "merge", Size: size, Command: "merge data/gens-" + size + ".jsonl", Bytes: int64(16e6 * f), Records: int64(1e4 * f),
				Runs: []Run{{Wall: time.Duration(f * float64(100*time.Millisecond)), MaxRSSKB: int64(36*f) << 10}}, OutRecords: int64(1e4 * f)})
	}
	return rs
}

// TestSectionRendering renders sections from canned results as the
// report shows them: tables, commands, notes, targets.
func TestSectionRendering(t *testing.T) {
	h := testHarness(t)
	h.results = cannedResults()
	h.sz.Slurp, h.sz.Growth = 1000, []int{10000, 1000000}
	// In-flight rows taken in two rounds: merged, their load the mean.
	var rounds []*Result
	for round, loads := range [][]float64{{1, 2, 3}, {3, 4, 5}} {
		for i, name := range []string{"infer (adapted)", "infer --concurrency 2", "infer --concurrency 8"} {
			wall := []float64{26, 52, 26.5}[i] + float64(round)
			rounds = append(rounds, &Result{Group: "servers-4", Name: name, Ours: i == 0, Command: "infer -e $URL data/servers-4.jsonl", Records: 1100,
				Runs: []Run{{Wall: time.Duration(wall * float64(time.Second)), MaxRSSKB: 22 << 10}}, OutRecords: 1100, Load1: loads[i]})
		}
	}
	h.results = append(h.results, mergeRounds(rounds, 2)...)
	for _, r := range ollamaRows {
		u := unavailable("ollama", r, "no Ollama server: ollama not installed")
		u.Load1 = 0.5
		h.results = append(h.results, u)
	}
	// TestInFlightTable's cells: one kind's best fixed level beats the
	// default, which the targets then say.
	var cells strings.Builder
	for _, kind := range kindsOrder {
		for _, c := range []struct {
			mode  string
			fixed int
			wall  float64
		}{{"default", 0, 1564}, {"auto", 0, 1564}, {"4", 4, 1572}, {"8", 8, 1564}} {
			if kind == "ollama" && c.fixed == 8 {
				c.wall = 1500
			}
			fmt.Fprintf(&cells, `{"slots":4,"kind":%q,"mode":%q,"fixed":%d,"wall_s":%g,"answers":400,"max_tokens":512,"runs":3}`+"\n", kind, c.mode, c.fixed, c.wall)
		}
	}
	if err := os.WriteFile(h.path("data/cells.jsonl"), []byte(cells.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	kinds, err := readKindCells(h.path("data/cells.jsonl"))
	if err != nil || len(kinds) != 4 {
		t.Fatalf("%d rows: %v", len(kinds), err)
	}
	for _, r := range kinds {
		r.Command, r.Load1 = "go test ./lib/fleet -run TestInFlightTable", 0.5
	}
	for _, bad := range []string{`{"slots":4,"kind":"vllm"`, `{"slots":5,"kind":"vllm","mode":"auto","wall_s":1}`, `{"slots":4,"kind":"tgi","mode":"auto","wall_s":1}`, ""} {
		if err := os.WriteFile(h.path("data/bad-cells.jsonl"), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readKindCells(h.path("data/bad-cells.jsonl")); err == nil {
			t.Errorf("cells %q read without an error", bad)
		}
	}
	h.results = append(h.results, kinds...)
	// The token-ids rows: the instant modes with the output sizes, the
	// fleet modes with answers/s and CPU only.
	for mode, m := range map[string]map[string]float64{
		"without":       {"client-cpu-µs/req": 70, "answers/s": 7000, "gen-jsonl-KB/1k": 1600},
		"with":          {"client-cpu-µs/req": 77, "answers/s": 6000, "gen-jsonl-KB/1k": 3600, "rows-jsonl-KB/1k": 2300, "rows-parquet-KB/1k": 450},
		"fleet-without": {"client-cpu-µs/req": 90, "answers/s": 160},
		"fleet-with":    {"client-cpu-µs/req": 99, "answers/s": 156},
	} {
		h.results = append(h.results, &Result{Group: "tokenids", Name: mode + " --token-ids", Ours: strings.HasSuffix(mode, "with"),
			Command: "go test -run ^$ -bench ^BenchmarkTokenIDs$ -benchtime 5x -count 5 ./pipelines/", OutRecords: -1, Load1: 2, Metrics: m})
	}
	h.info.Started = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h.info.LoadBefore, h.info.LoadAfter = "load average: 1.00, 1.00, 1.00", "load average: 2.00, 1.50, 1.00"
	h.info.Facts["lines data/ollama-prompts.jsonl"] = "3"
	for _, name := range []string{"dedup", "client", "fleet", "inflight", "kinds", "ollama", "growth", "tokenids"} {
		t.Run(name, func(t *testing.T) {
			secs, _, err := plan([]string{name})
			if err != nil {
				t.Fatal(err)
			}
			text := renderSection(t, h, secs[0])
			golden(t, "sections/"+name+".md", []byte(text))
		})
	}
}

func TestMergeRounds(t *testing.T) {
	row := func(name string, wall time.Duration, load float64) *Result {
		return &Result{Group: "g", Name: name, Runs: []Run{{Wall: wall}}, Load1: load, RSSFloorKB: int64(load)}
	}
	merged := mergeRounds([]*Result{row("a", 1, 1), row("b", 5, 2), row("a", 2, 3), row("b", 6, 4), row("a", 3, 8), row("b", 7, 3)}, 3)
	if len(merged) != 2 || merged[0].Name != "a" || merged[1].Name != "b" {
		t.Fatalf("merged %d rows, in the wrong order: %+v", len(merged), merged)
	}
	a, b := merged[0], merged[1]
	if len(a.Runs) != 3 || a.Runs[2].Wall != 3 || a.Load1 != 4 || a.RSSFloorKB != 8 || len(b.Runs) != 3 || b.Runs[1].Wall != 6 || b.Load1 != 3 || b.RSSFloorKB != 4 {
		t.Fatalf("a %+v, b %+v", a, b)
	}
	if best := bestFixed(merged, "wall_s"); best == nil || best.Name != "a" {
		t.Errorf("best fixed %v, want a", best)
	}
	merged[0].Ours = true
	if best := bestFixed(merged, "wall_s"); best == nil || best.Name != "b" {
		t.Errorf("best fixed %v with a ours, want b", best)
	}
}

func TestRoundRobinImbalance(t *testing.T) {
	ids := []string{"1", "2", "3", "4"}
	for _, tc := range []struct {
		tokens map[string]float64
		want   float64
	}{
		{map[string]float64{"1": 10, "2": 10, "3": 10, "4": 10}, 0},
		{map[string]float64{"1": 30, "2": 10, "3": 10, "4": 10}, 100 * (40.0/30 - 1)}, // server 0 gets 1 and 3
		{map[string]float64{}, 0},
	} {
		if got := roundRobinImbalance(ids, tc.tokens, 2); fmt.Sprintf("%.6f", got) != fmt.Sprintf("%.6f", tc.want) {
			t.Errorf("%v: %v, want %v", tc.tokens, got, tc.want)
		}
	}
}

// TestMeasureFresh: a spec with Fresh starts what each run needs before
// the run, fills its placeholders in for that run only, and stops it
// after; the command shown keeps the placeholder's alias.
func TestMeasureFresh(t *testing.T) {
	h := testHarness(t)
	h.bin = filepath.Dir(rusageBin)
	starts, stops := 0, 0
	fresh := func(context.Context) (map[string]string, func(), error) {
		starts++
		n := starts
		return map[string]string{"@N@": fmt.Sprint(n)}, func() { stops++ }, nil
	}
	r, err := h.measureRow(context.Background(), Spec{Group: "g", Name: "fresh", Runs: 3, Fresh: fresh,
		Alias: []string{"@N@=$N"}, Argv: []string{"sh", "-c", "echo run @N@ >> runs.txt; echo one line"}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(h.path("runs.txt"))
	if string(got) != "run 1\nrun 2\nrun 3\n" || starts != 3 || stops != 3 {
		t.Fatalf("runs %q, %d starts, %d stops", got, starts, stops)
	}
	if r.Command != "sh -c 'echo run $N >> runs.txt; echo one line'" || len(r.Runs) != 3 || r.OutRecords != 1 {
		t.Fatalf("result %+v", r)
	}
	failing := func(context.Context) (map[string]string, func(), error) { return nil, nil, fmt.Errorf("no server") }
	if _, err := h.measureRow(context.Background(), Spec{Group: "g", Name: "x", Runs: 1, Fresh: failing, Argv: []string{"true"}}); err == nil ||
		!strings.Contains(err.Error(), "no server") {
		t.Fatalf("a fixture that fails: %v", err)
	}
}

// TestFailedSectionWritesNothing: a measurement that fails ends the run
// before the report is touched.
func TestFailedSectionWritesNothing(t *testing.T) {
	h := testHarness(t)
	h.bin, h.prebuilt = filepath.Dir(rusageBin), true
	h.out = filepath.Join(t.TempDir(), "BENCHMARKS.md")
	before := []byte("# Benchmarks\n\n## dedup\n\nthe old figures\n")
	if err := os.WriteFile(h.out, before, 0o644); err != nil {
		t.Fatal(err)
	}
	failing := *dedupSection
	failing.measure = func(ctx context.Context, h *harness) error {
		return h.measureAll(ctx, []peerSpec{ours(Spec{Group: "dedup", Name: "dedup", Argv: []string{"false"}})})
	}
	err := h.run(context.Background(), []*section{&failing}, nil)
	if err == nil || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("run: %v, want the failed measurement", err)
	}
	after, _ := os.ReadFile(h.out)
	if string(after) != string(before) {
		t.Fatalf("the report changed:\n%s", after)
	}
	if len(h.results) != 0 {
		t.Fatalf("a failed row was kept: %+v", h.results[0])
	}
}

func TestSubBenchMedians(t *testing.T) {
	out := []byte(`goos: linux
BenchmarkTokenIDs/without-2   5   1000 ns/op   50.0 client-cpu-µs/req   12000 answers/s
BenchmarkTokenIDs/with-2      5   1200 ns/op   70.0 client-cpu-µs/req   10000 answers/s   440 rows-parquet-KB/1k
BenchmarkTokenIDs/without-2   5   1000 ns/op   40.0 client-cpu-µs/req   13000 answers/s
BenchmarkTokenIDs/with-2      5   1200 ns/op   60.0 client-cpu-µs/req   11000 answers/s   450 rows-parquet-KB/1k
BenchmarkTokenIDs/without-2   5   1000 ns/op   45.0 client-cpu-µs/req   11000 answers/s
BenchmarkTokenIDs/with-2      5   1200 ns/op   65.0 client-cpu-µs/req    9000 answers/s   460 rows-parquet-KB/1k
BenchmarkOther/with-2         5   1 ns/op      1 client-cpu-µs/req
PASS
`)
	modes := []string{"without", "with"}
	got, err := subBenchMedians(out, "BenchmarkTokenIDs", modes)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]float64{
		"without": {"ns/op": 1000, "client-cpu-µs/req": 45, "answers/s": 12000, "runs": 3},
		"with":    {"ns/op": 1200, "client-cpu-µs/req": 65, "answers/s": 10000, "rows-parquet-KB/1k": 450, "runs": 3},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("medians\n got %v\nwant %v", got, want)
	}
	if _, err := subBenchMedians(out[:40], "BenchmarkTokenIDs", modes); err == nil {
		t.Error("no figures of a mode: want an error")
	}
	if _, err := subBenchMedians(out, "BenchmarkTokenIDs", tokenIDsModes); err == nil || !strings.Contains(err.Error(), "fleet-without") {
		t.Errorf("no fleet figures: %v, want an error naming the mode", err)
	}
}
