package benchsuite

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// tokenIDsModes are BenchmarkTokenIDs' sub-benchmarks: without and with
// --token-ids, on the instant simulator and on the calibrated fleet.
var tokenIDsModes = []string{"without", "with", "fleet-without", "fleet-with"}

var tokenIDsSection = &section{
	name: "tokenids", heading: "## infer --token-ids: what the ids cost",
	measure: func(ctx context.Context, h *harness) error {
		return h.subBench(ctx, "tokenids", "BenchmarkTokenIDs", "5x", "./pipelines/", tokenIDsModes, func(mode string) (string, bool) {
			return mode + " --token-ids", strings.HasSuffix(mode, "with")
		})
	},
}

// goTest runs a command from the repository (go test, a peer's script, a
// tool on absolute paths), with env added; its output is stdout and stderr.
func (h *harness) goTest(ctx context.Context, argv []string, env ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = h.repo, append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s: %v\n%s", shellJoin(argv), err, tail(out, 3000))
	}
	return out, nil
}

// goBench runs `go test -bench '^name$' args...` times times and keeps a row made by
// row for each of modes ("" the benchmark itself) from its figures' medians.
func (h *harness) goBench(ctx context.Context, times int, name string, modes []string, row func(mode string, m map[string]float64) *Result,
	args ...string) error {
	argv := append([]string{"go", "test", "-run", "^$", "-bench", "^" + name + "$"}, args...)
	var out []byte
	load := loadAverage()
	for range times {
		o, err := h.goTest(ctx, argv)
		if err != nil {
			return err
		}
		out = append(out, o...)
	}
	medians, err := subBenchMedians(out, name, modes)
	if err != nil {
		return fmt.Errorf("%s: %v\n%s", shellJoin(argv), err, tail(out, 3000))
	}
	for _, mode := range modes {
		r := row(mode, medians[mode])
		r.Command, r.OutRecords, r.Load1 = shellJoin(argv), -1, load
		h.logf("%s/%s: %v (load %.2f)", r.Group, r.Name, r.Metrics, load)
		h.add(r)
	}
	return nil
}

// subBench keeps a row for each of a benchmark's modes over --runs go
// tests: -count would run each mode's runs back to back, and modes measured
// minutes apart on a shared machine compare its load, not themselves.
func (h *harness) subBench(ctx context.Context, group, name, benchtime, pkg string, modes []string, row func(mode string) (string, bool)) error {
	return h.goBench(ctx, h.runs, name, modes, func(mode string, m map[string]float64) *Result {
		r := &Result{Group: group, Metrics: m}
		r.Name, r.Ours = row(mode)
		return r
	}, "-benchtime", benchtime, "-count", "1", pkg)
}

// benchFigures reads go test -bench output ("BenchmarkX/mode-2  1000
// 123 ns/op  45000 req/s"): by benchmark (the GOMAXPROCS suffix cut) and
// unit, every figure of every line.
func benchFigures(out []byte) map[string]map[string][]float64 {
	procs := regexp.MustCompile(`-\d+$`)
	figs := map[string]map[string][]float64{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := procs.ReplaceAllString(f[0], "")
		for i := 3; i < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i-1], 64); err == nil {
				if figs[name] == nil {
					figs[name] = map[string][]float64{}
				}
				figs[name][f[i]] = append(figs[name][f[i]], v)
			}
		}
	}
	return figs
}

// subBenchMedians is, for each mode of a benchmark (name/mode; "": name
// itself), the median of every figure of go test -bench output.
func subBenchMedians(out []byte, name string, modes []string) (map[string]map[string]float64, error) {
	figs := benchFigures(out)
	medians := map[string]map[string]float64{}
	for _, mode := range modes {
		values := figs[strings.TrimSuffix(name+"/"+mode, "/")]
		if len(values) == 0 {
			return nil, fmt.Errorf("no figures of %s/%s in the output", name, mode)
		}
		medians[mode] = map[string]float64{"runs": float64(len(values["ns/op"]))}
		for unit, vs := range values {
			medians[mode][unit] = median(vs)
		}
	}
	return medians, nil
}

func init() {
	parts["tokenids"] = func(w io.Writer, h *harness) {
		t := newTable("", "without `--token-ids`", "with `--token-ids`", "ratio")
		for _, m := range []struct{ prefix, unit, label string }{
			{"", "client-cpu-µs/req", "client CPU per request (µs)"},
			{"", "answers/s", "answers/s against the instant simulator (client and simulator sharing the cores)"},
			{"", "gen-jsonl-KB/1k", "generation records (JSONL) per 1,000 answers (KB)"},
			{"", "rows-jsonl-KB/1k", "token rows, JSONL, per 1,000 answers (KB)"},
			{"", "rows-parquet-KB/1k", "token rows, Parquet (zstd), per 1,000 answers (KB)"},
			{"fleet-", "answers/s", "answers/s on the calibrated fleet (2 endpoints of 48 slots, `--time-scale 20`)"},
			{"fleet-", "client-cpu-µs/req", "client CPU per request on the calibrated fleet (µs)"},
		} {
			without, with := h.find("tokenids", m.prefix+"without --token-ids"), h.find("tokenids", m.prefix+"with --token-ids")
			t.add(m.label, figureCell(without, m.unit), figureCell(with, m.unit), overCell(with, m.unit, without, m.unit))
		}
		t.write(w)
	}
}
