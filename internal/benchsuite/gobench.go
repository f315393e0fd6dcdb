package benchsuite

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"tokenmill/lib/cli"
)

// GobenchCmd runs `go test -bench` (with -count for several runs) and
// records the median of one reported metric, e.g. req/s.
type GobenchCmd struct {
	Results string   `help:"Append the result to this JSONL file." required:""`
	Group   string   `help:"Table the result belongs to." required:""`
	Name    string   `help:"Row name." required:""`
	Ours    bool     `help:"This is tokenmill's row."`
	Note    string   `help:"A remark shown with the row."`
	Metric  string   `help:"Unit of the metric to record, as the benchmark reports it (e.g. req/s)." required:""`
	As      string   `help:"Name the metric is recorded under (e.g. rps)." required:""`
	Argv    []string `arg:"" passthrough:"" help:"The go test command (after --)."`
}

// Run runs the benchmark and records its median.
func (c *GobenchCmd) Run(ctx context.Context, env *cli.Env) error {
	argv := c.Argv
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return cli.Usagef("no command to run (put it after --)")
	}
	res, err := gobench(ctx, "", &Result{Group: c.Group, Name: c.Name, Ours: c.Ours, Note: c.Note}, argv, c.Metric, c.As, env.Logf)
	if err != nil {
		return err
	}
	return appendResult(c.Results, res)
}

// gobench runs a go test -bench command in dir and fills row with the
// median of the metric reported in unit, recorded under the name as.
func gobench(ctx context.Context, dir string, row *Result, argv []string, unit, as string, logf func(string, ...any)) (*Result, error) {
	row.Command, row.OutRecords, row.Load1 = shellJoin(argv), -1, loadAverage()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %v\n%s", row.Command, err, tail(out.Bytes(), 3000))
	}
	values := benchMetric(out.Bytes(), unit)
	if len(values) == 0 {
		return nil, fmt.Errorf("%s: no %q figure in the output:\n%s", row.Command, unit, tail(out.Bytes(), 3000))
	}
	slices.Sort(values)
	row.Metrics = map[string]float64{as: values[(len(values)-1)/2], "runs": float64(len(values))}
	logf("%s/%s: median %s %.0f of %d runs (load %.2f)", row.Group, row.Name, unit, row.Metrics[as], len(values), row.Load1)
	return row, nil
}

// benchMetric collects the values reported with unit in go test -bench
// output lines ("BenchmarkX-2  1000  123 ns/op  45000 req/s").
func benchMetric(out []byte, unit string) []float64 {
	var values []float64
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		for i := 3; i < len(f); i++ {
			if f[i] == unit {
				if v, err := strconv.ParseFloat(f[i-1], 64); err == nil {
					values = append(values, v)
				}
			}
		}
	}
	return values
}
