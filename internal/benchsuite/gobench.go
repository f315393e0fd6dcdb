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
	res := &Result{Group: c.Group, Name: c.Name, Ours: c.Ours, Note: c.Note, Command: shellJoin(argv), OutRecords: -1, Load1: loadAverage()}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v\n%s", res.Command, err, tail(out.Bytes(), 3000))
	}
	values := benchMetric(out.Bytes(), c.Metric)
	if len(values) == 0 {
		return fmt.Errorf("%s: no %q figure in the output:\n%s", res.Command, c.Metric, tail(out.Bytes(), 3000))
	}
	slices.Sort(values)
	res.Metrics = map[string]float64{c.As: values[(len(values)-1)/2], "runs": float64(len(values))}
	env.Logf("%s/%s: median %s %.0f of %d runs (load %.2f)", c.Group, c.Name, c.Metric, res.Metrics[c.As], len(values), res.Load1)
	return appendResult(c.Results, res)
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
