package benchsuite

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/testbin"
)

// rusageBin is the rusage helper, built once for the tests that need it.
var rusageBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "benchmark-test-*")
	if err != nil {
		panic(err)
	}
	rusageBin = filepath.Join(dir, "rusage")
	if err := testbin.Build(dir, "rusage"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestMeasure runs commands as a row measures them: their lines counted
// (of stdout or of files), their peak RSS, a failure, an exit allowed, a
// file on stdin.
func TestMeasure(t *testing.T) {
	h := testHarness(t)
	h.bin, h.runs = filepath.Dir(rusageBin), 1
	dir := h.dir
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("line\n", 1000)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		spec   Spec
		fails  bool
		out    int64
		minRSS float64 // MB
		maxRSS float64
	}{
		{"lines", Spec{Runs: 2, Argv: []string{"printf", `a\nb\nc`}}, false, 3, 0, 8},
		// sort holds a 64 MB line: the pipeline's peak RSS is above that.
		{"memory", Spec{Shell: true, Argv: []string{`head -c 64000000 /dev/zero | sort | wc -c`}}, false, 1, 61, 1000},
		{"files", Spec{Runs: 3, Mkdir: []string{"o"}, Count: []string{"o/*"}, Shell: true, Argv: []string{"seq 5 > o/a && seq 7 > o/b"}}, false, 12, 0, 8},
		{"failing", Spec{Argv: []string{"false"}}, true, 0, 0, 0},
		{"allowed exit", Spec{Exit: []int{0, 1}, Argv: []string{"false"}}, false, 0, 0, 8},
		{"stdin", Spec{Stdin: "big", Argv: []string{"cat"}}, false, 1000, 0, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Group, tc.spec.Name = "g", tc.name
			r, err := h.measureRow(context.Background(), tc.spec)
			if tc.fails {
				if err == nil {
					t.Fatal("a failed measurement gave a row")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.OutRecords != tc.out {
				t.Errorf("records out %d, want %d", r.OutRecords, tc.out)
			}
			rss, _ := r.Metric("rss_mb")
			if rss < tc.minRSS || rss > tc.maxRSS {
				t.Errorf("peak RSS %.1f MB, want %.0f..%.0f", rss, tc.minRSS, tc.maxRSS)
			}
			if wall, _ := r.Metric("wall_s"); wall <= 0 || wall > 60 {
				t.Errorf("wall time %v s", wall)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "o")); err == nil {
		t.Error("the Mkdir directory was left behind")
	}
	r, err := h.measureRow(context.Background(), Spec{Group: "g", Name: "echo", Stdin: "big", Alias: []string{"127.0.0.1:4321=$URL"}, Argv: []string{"echo", "http://127.0.0.1:4321/v1"}})
	if err != nil || r.Command != "echo http://$URL/v1 < big" {
		t.Fatalf("the command shown: %+v, %v", r, err)
	}
	var b strings.Builder
	streamTable(&b, []*Result{r, unavailable("g", "jq", "jq is not installed")}, "records/s", false)
	if !strings.Contains(b.String(), "jq (_not available: jq is not installed_)") {
		t.Fatalf("the unavailable row is not marked:\n%s", b.String())
	}
}

func secs(s ...float64) []Run {
	runs := make([]Run, len(s))
	for i, v := range s {
		runs[i] = Run{Wall: time.Duration(v * float64(time.Second)), User: time.Second, MaxRSSKB: int64(1024 * (i + 10))}
	}
	return runs
}

func TestTableAndTargets(t *testing.T) {
	rows := []*Result{
		{Group: "d", Name: "dedup", Ours: true, Command: "dedup p.jsonl", Bytes: 400e6, Records: 100, Runs: secs(2, 1, 9), OutRecords: 90, RSSFloorKB: 2000},
		{Group: "d", Name: "awk", Command: "awk '!seen[$0]++' p.jsonl | cat", Bytes: 400e6, Records: 100, Runs: secs(4, 4, 4), OutRecords: 100, RSSFloorKB: 2000},
		{Group: "d", Name: "split", Command: "split", Bytes: 400e6, Records: 100, Runs: []Run{{Wall: time.Second / 4, MaxRSSKB: 1000}}, OutRecords: 100, RSSFloorKB: 2000},
		{Group: "d", Name: "dedup, sub", Ours: true, Command: "dedup s.jsonl", Bytes: 100e6, Records: 25, Runs: secs(0.5), OutRecords: 20},
		{Group: "d", Name: "jq, sub", Command: "jq -s", Bytes: 100e6, Records: 25, Runs: secs(10), OutRecords: 20},
	}
	var b strings.Builder
	streamTable(&b, rows, "records/s", false)
	table := b.String()
	for _, want := range []string{
		"| **dedup** | 400 MB, 100 rec | 200.0 | 50 | — | 2.00 |", // median of 1, 2, 9 s
		"| awk | 400 MB, 100 rec | 100.0 | 25 | 2.0× faster |",
		"| split | 400 MB, 100 rec | 1600.0 | 400 | 8.0× slower |",
		"| ≤ 1.0 |", // below the spawner's floor
		"| jq, sub | 100 MB, 25 rec | 10.0 | 3 | 20× faster |", // against the same input
		"- awk: `awk '!seen[$0]++' p.jsonl | cat`",
		"| 12.0 | 90 |", // the highest peak RSS of the runs
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	b.Reset()
	if err := writeTargets(&b, rows, []string{
		"dedup ≥ 150 MB/s := d/dedup:mbps >= 150",
		"dedup ≥ 3× awk := d/dedup:mbps / d/awk:mbps >= 3",
		"dedup small := d/dedup:rss_mb <= 64",
		"ratio on subsets := d/dedup, sub:mbps / d/jq, sub:mbps >= 20",
		"missing := d/nothing:mbps >= 1",
	}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| dedup ≥ 150 MB/s | 200 MB/s | yes |",
		"| dedup ≥ 3× awk | 2.0× | **no** |",
		"| dedup small | 12.0 MB | yes |",
		"| ratio on subsets | 20× | yes |",
		"| missing | not measured (d/nothing:mbps) | ? |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("targets lack %q:\n%s", want, b.String())
		}
	}
	if err := writeTargets(&b, rows, []string{"no operator := d/dedup:mbps"}); err == nil {
		t.Errorf("a malformed target was written")
	}
}

func TestGrowthTable(t *testing.T) {
	var rows []*Result
	for i, size := range []string{"10k", "100k", "1M"} {
		rows = append(rows,
			&Result{Group: "g", Name: "dedup", Size: size, Command: "dedup p-" + size, Bytes: 1e6, Records: 10, Runs: []Run{{Wall: time.Second, MaxRSSKB: 20 * 1024}}},
			&Result{Group: "g", Name: "awk", Size: size, Command: "awk", Bytes: 1e6, Records: 10, Runs: []Run{{Wall: time.Second, MaxRSSKB: int64(10*(i+1)*(i+1)) * 1024}}})
	}
	var b strings.Builder
	growthTable(&b, rows)
	for _, want := range []string{"| peak RSS MB | 10k | 100k | 1M | 1M ÷ 10k |", "| dedup | 20.0 | 20.0 | 20.0 | 1.0× |", "| awk | 10.0 | 40.0 | 90.0 | 9.0× |", "| dedup | 10 (1) | 10 (1) | 10 (1) |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("growth table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestBenchFigures(t *testing.T) {
	out := `goos: linux
BenchmarkInstantChat-2   	  200000	      4021 ns/op	 248692 req/s	      68 B/op
BenchmarkInstantChat-2   	  200000	      3901 ns/op	 256312 req/s	      68 B/op
PASS`
	got := benchFigures([]byte(out))["BenchmarkInstantChat"]["req/s"]
	if len(got) != 2 || got[0] != 248692 || got[1] != 256312 {
		t.Fatalf("got %v", got)
	}
	if got := benchFigures([]byte(out))["BenchmarkInstantChat"]["tok/s"]; len(got) != 0 {
		t.Fatalf("found a figure that is not there: %v", got)
	}
}

// TestAnalyse feeds the fleet analysis a made-up run: two endpoints of 48
// slots, the second three times slower and down for the middle tenth of
// the run, the client delivering a steady 1,000 tok/s of real time at
// time scale 10.
func TestAnalyse(t *testing.T) {
	var samples []fleetSample
	for i := 0; i <= 100; i++ {
		at := time.Duration(i) * 100 * time.Millisecond
		up := []bool{true, i < 45 || i >= 55}
		running := []float64{48, 24}
		if !up[1] {
			running[1] = 0
		}
		// Endpoint 0 decodes a full batch all along; endpoint 1 half of
		// one, prefilling 1,000 prompt tokens every interval.
		sim := at.Seconds() * 10
		full := 48 / 0.0406784
		generated := []float64{full * sim, full / 3 / 2 * sim}
		samples = append(samples, fleetSample{at: at, delivered: 1000 * at.Seconds(), up: up, running: running, generated: generated,
			prompted: []float64{0, 1000 * float64(i)}, through: []float64{sim, sim}, clock: []float64{sim, sim}})
	}
	fr, err := analyse(samples, []float64{48, 48}, []float64{1, 3}, 10000, 10*time.Second, 10)
	if err != nil {
		t.Fatal(err)
	}
	near := func(name string, got, want float64) {
		if d := got - want; d > want*0.02 || d < -want*0.02 {
			t.Errorf("%s = %.2f, want %.2f", name, got, want)
		}
	}
	near("steady tok/s", fr["tok_s"], 100)
	full := 48 / 0.0406784 // calibrated tok/s of a full batch
	// Steady window: samples 10..90, endpoint 1 down for 10 of 80 intervals.
	near("ideal", fr["ideal_tok_s"], full+full/3*70/80)
	// Decoded: endpoint 0's full rate over 80 intervals, endpoint 1's half
	// over the 69 with it up at both ends; with prefill, endpoint 1's 1,000
	// tokens an interval take 1000 × 40 µs × 3 = 0.12 s of its 1 s.
	near("decoded % of ideal", fr["ideal_pct"], 100*(80+0.5/3*69)/(80+69.0/3))
	near("decoded % of ideal with prefill", fr["ideal_prefill_pct"], 100*(80+0.5/3*69)/(80+69*0.88/3))
	near("utilisation", fr["util_pct"], 100*(48*80+24*70)/float64(48*80+48*70))
	near("downtime (simulated s)", fr["down_sim_s"], 10)
	near("whole run", fr["whole_pct"], 100*100/(full+full/3*90/100))
}

// A run whose answers drain inside the window: the fleet decodes a full
// batch steadily, but infer's delivered tokens come in a late burst (long
// answers all finishing at once), so the window between 10% and 90% of the
// delivered tokens is short and what was delivered in it was decoded
// mostly before it. Delivered tokens over the ideal pass 100% there; the
// share of the ideal counted from the tokens decoded cannot, wherever the
// readings fall on the simulator's steps.
func TestAnalyseDrainNeverPassesTheIdeal(t *testing.T) {
	const scale = 20
	full := 48 / 0.0406784 // a full batch's tok/s (simulated)
	step := 0.0406784      // s (simulated) a full step takes
	var samples []fleetSample
	final := 0.0
	for i := 0; i <= 200; i++ {
		at := time.Duration(i) * 10 * time.Millisecond
		sim := at.Seconds() * scale
		// The counters move a step at a time, read at the end of the last
		// step counted: up to a step behind the samples' time.
		steps := math.Floor(sim / step)
		delivered := 0.0
		if i >= 150 {
			delivered = full * 4 * float64(min(i-150, 10)) / 10 // the drain: 4 s of decoding in 0.1 s
		}
		final = delivered
		samples = append(samples, fleetSample{at: at, delivered: delivered, up: []bool{true}, running: []float64{48},
			generated: []float64{48 * steps}, prompted: []float64{0}, through: []float64{steps * step}, clock: []float64{sim}})
	}
	fr, err := analyse(samples, []float64{48}, []float64{1}, final, 2*time.Second, scale)
	if err != nil {
		t.Fatal(err)
	}
	if delivered := fr["delivered_pct"]; delivered <= 100 {
		t.Fatalf("delivered tokens over the ideal are %.1f%%: the case does not drain in its window", delivered)
	}
	if fr["ideal_pct"] > 100 || fr["ideal_prefill_pct"] > 100 {
		t.Errorf("decoded share of the ideal %.2f%% (with prefill %.2f%%): above 100%%", fr["ideal_pct"], fr["ideal_prefill_pct"])
	}
	if fr["ideal_pct"] < 95 {
		t.Errorf("decoded share of the ideal %.2f%%: a fleet decoding a full batch all along is near 100%%", fr["ideal_pct"])
	}
}

// TestStartSim: llmsim comes up on the endpoints asked for and answers
// there until it is stopped; one that cannot start says why, with its log.
func TestStartSim(t *testing.T) {
	if testing.Short() {
		t.Skip("builds llmsim: not in -short")
	}
	h := testHarness(t)
	h.bin = t.TempDir()
	if err := testbin.Build(h.bin, "llmsim"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sim, err := h.startSim(ctx, 2, h.path("logs/llmsim.log"), "--instant")
	if err != nil {
		t.Fatal(err)
	}
	if len(sim.urls) != 2 {
		t.Fatalf("endpoints %v, want 2", sim.urls)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, u := range sim.urls {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		resp.Body.Close()
	}
	sim.stop()
	if resp, err := client.Get(sim.urls[0]); err == nil {
		resp.Body.Close()
		t.Errorf("%s still answers after stop", sim.urls[0])
	}
	if _, err := os.Stat(sim.dir); err == nil {
		t.Errorf("%s left behind", sim.dir)
	}
	if _, err := h.startSim(ctx, 1, h.path("logs/bad.log"), "--no-such-flag"); err == nil || !strings.Contains(err.Error(), "llmsim --no-such-flag: exited") {
		t.Errorf("a llmsim that cannot start: %v", err)
	}
}
