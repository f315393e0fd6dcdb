package benchsuite

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// tokenIDsModes are BenchmarkTokenIDs' sub-benchmarks: the same run
// without and with --token-ids, on the instant simulator and on the
// calibrated fleet.
var tokenIDsModes = []string{"without", "with", "fleet-without", "fleet-with"}

// tokenIDsMetrics are what BenchmarkTokenIDs reports, in the table's order.
var tokenIDsMetrics = []struct{ unit, label string }{
	{"client-cpu-µs/req", "client CPU per request (µs)"},
	{"answers/s", "answers/s against the instant simulator (client and simulator sharing the cores)"},
	{"gen-jsonl-KB/1k", "generation records (JSONL) per 1,000 answers (KB)"},
	{"rows-jsonl-KB/1k", "token rows, JSONL, per 1,000 answers (KB)"},
	{"rows-parquet-KB/1k", "token rows, Parquet (zstd), per 1,000 answers (KB)"},
}

// tokenIDsFleetMetrics are the fleet modes' rows, after the instant ones.
var tokenIDsFleetMetrics = []struct{ unit, label string }{
	{"answers/s", "answers/s on the calibrated fleet (2 endpoints of 48 slots, `--time-scale 20`)"},
	{"client-cpu-µs/req", "client CPU per request on the calibrated fleet (µs)"},
}

var tokenIDsSection = &section{
	name: "tokenids", heading: "## infer --token-ids: what the ids cost",
	about: "infer with and without --token-ids on the instant simulator and on a calibrated fleet: client CPU, answers/s, output sizes (go test -bench)",
	measure: func(ctx context.Context, h *harness) error {
		argv, load, medians, err := h.subBench(ctx, "BenchmarkTokenIDs", "5x", "./pipelines/", tokenIDsModes)
		if err != nil {
			return err
		}
		for _, mode := range tokenIDsModes {
			r := &Result{Group: "tokenids", Name: mode + " --token-ids", Ours: strings.HasSuffix(mode, "with"), Command: shellJoin(argv),
				OutRecords: -1, Load1: load, Metrics: medians[mode]}
			h.logf("tokenids/%s: %v (load %.2f)", mode, r.Metrics, load)
			if err := h.add(r); err != nil {
				return err
			}
		}
		return nil
	},
	render: func(w io.Writer, h *harness) {
		fmt.Fprint(w, "The infer binary (its own process) answers 5,000 chat prompts of 256-token answers\n"+
			"(`--max-tokens 256 --concurrency 64`) on two `llmsim --instant --chat-template chatml` endpoints\n"+
			"(another process), without and with `--token-ids`, five times each per run (`BenchmarkTokenIDs`,\n"+
			"`pipelines/tokens_bench_test.go`); the client's CPU is infer's own user + system time (the\n"+
			"simulator's is not counted), the answers per second infer's wall time. The token rows are what\n"+
			"`merge --to tokens` makes of the `--token-ids` output. Against the instant simulator the machine's\n"+
			"CPU is the bottleneck, so the client's extra CPU shows whole in the answers per second; on a real\n"+
			"fleet an answer takes seconds and the same microseconds are a vanishing share of a run. The last\n"+
			"rows measure that: 288 of the prompts (three waves of the slots, `--concurrency 96`) on two llmsim\n"+
			"endpoints at their calibrated timing (48 slots each, 26.5 tok/s alone and 1,180 tok/s with 48\n"+
			"running, so a 256-token answer takes about ten seconds), run 20 times faster (`--time-scale 20`,\n"+
			"the fleet section's), without and with `--token-ids`, five times each per run.\n\n")
		rows := h.group("tokenids")
		find := func(mode string) *Result {
			for _, r := range rows {
				if r.Name == mode+" --token-ids" {
					return r
				}
			}
			return nil
		}
		writeRow(w, []string{"", "without `--token-ids`", "with `--token-ids`", "ratio"})
		writeRule(w, 4)
		writeTokenIDsRows(w, find("without"), find("with"), tokenIDsMetrics)
		writeTokenIDsRows(w, find("fleet-without"), find("fleet-with"), tokenIDsFleetMetrics)
	},
	targets: func(*harness) []string {
		return []string{
			"--token-ids costs at most 1.5× the client CPU a request := tokenids/with --token-ids:client-cpu-µs/req / tokenids/without --token-ids:client-cpu-µs/req <= 1.5",
			"--token-ids throughput on the simulated fleet within 5% of without := tokenids/fleet-with --token-ids:answers/s / tokenids/fleet-without --token-ids:answers/s >= 0.95",
		}
	},
}

// writeTokenIDsRows writes a table row per metric: without's figure,
// with's and their ratio, a dash where a row lacks the metric.
func writeTokenIDsRows(w io.Writer, without, with *Result, metrics []struct{ unit, label string }) {
	for _, m := range metrics {
		cells := []string{m.label, "—", "—", ""}
		var a, b float64
		var okA, okB bool
		if without != nil {
			if a, okA = without.Metric(m.unit); okA {
				cells[1] = trimFloat(a)
			}
		}
		if with != nil {
			if b, okB = with.Metric(m.unit); okB {
				cells[2] = trimFloat(b)
			}
		}
		if okA && okB && a > 0 {
			cells[3] = strconv.FormatFloat(b/a, 'f', 2, 64) + "×"
		}
		writeRow(w, cells)
	}
}

// subBench runs go test -bench of one benchmark --runs times and
// returns the command, the load when it started and, for each of its
// sub-benchmarks modes, the median of every metric over the runs. One
// go test a run, not -count: -count repeats each sub-benchmark back to
// back, and modes measured minutes apart on a shared machine would
// compare its load, not themselves; a go test a run interleaves them.
func (h *harness) subBench(ctx context.Context, name, benchtime, pkg string, modes []string) ([]string, float64, map[string]map[string]float64, error) {
	argv := []string{"go", "test", "-run", "^$", "-bench", "^" + name + "$", "-benchtime", benchtime, "-count", "1", pkg}
	var out bytes.Buffer
	load := loadAverage()
	for i := 0; i < h.runs; i++ {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = h.repo
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return nil, 0, nil, fmt.Errorf("%s (run %d): %v\n%s", shellJoin(argv), i+1, err, tail(out.Bytes(), 3000))
		}
	}
	medians, err := subBenchMedians(out.Bytes(), name, modes)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("%s: %v\n%s", shellJoin(argv), err, tail(out.Bytes(), 3000))
	}
	return argv, load, medians, nil
}

// subBenchMedians reads go test -bench output of one benchmark's
// sub-benchmarks (name/mode-P ...): for each mode, the median of every
// metric over the runs.
func subBenchMedians(out []byte, name string, modes []string) (map[string]map[string]float64, error) {
	values := map[string]map[string][]float64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], name+"/") {
			continue
		}
		mode := strings.TrimPrefix(f[0], name+"/")
		if i := strings.LastIndexByte(mode, '-'); i > 0 {
			if _, err := strconv.Atoi(mode[i+1:]); err == nil {
				mode = mode[:i] // the GOMAXPROCS suffix
			}
		}
		if !slices.Contains(modes, mode) {
			continue
		}
		for i := 3; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i-1], 64)
			if err != nil {
				continue
			}
			if values[mode] == nil {
				values[mode] = map[string][]float64{}
			}
			values[mode][f[i]] = append(values[mode][f[i]], v)
		}
	}
	medians := map[string]map[string]float64{}
	for _, mode := range modes {
		if len(values[mode]) == 0 {
			return nil, fmt.Errorf("no figures of %s/%s in the output", name, mode)
		}
		medians[mode] = map[string]float64{}
		for unit, vs := range values[mode] {
			slices.Sort(vs)
			medians[mode][unit] = vs[(len(vs)-1)/2]
		}
		medians[mode]["runs"] = float64(len(values[mode]["ns/op"]))
	}
	return medians, nil
}
