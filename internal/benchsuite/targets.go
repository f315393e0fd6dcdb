package benchsuite

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"tokenmill/lib/cli"
)

// TargetsCmd checks results against targets and renders the verdicts.
//
// A target reads LABEL := REF [/ REF] OP VALUE, where REF is
// GROUP/NAME[@SIZE]:METRIC (metrics as in the tables: mbps, rps, rss_mb, cpu_s,
// wall_s, or a recorded one such as ideal_pct) and OP is >= or <=, e.g.
//
//	dedup ≥ 3× awk := dedup/dedup:mbps / dedup/awk:mbps >= 3
type TargetsCmd struct {
	Results string   `help:"Results file (JSONL) to read." required:""`
	Target  []string `help:"A target (repeatable; see above)." sep:"none"`
}

// target is one parsed --target.
type target struct {
	label    string
	num, den ref
	ratio    bool
	atLeast  bool
	value    float64
}

// ref names a figure: GROUP/NAME[@SIZE]:METRIC.
type ref struct{ group, name, size, metric string }

func (r ref) String() string {
	s := r.group + "/" + r.name
	if r.size != "" {
		s += "@" + r.size
	}
	return s + ":" + r.metric
}

func parseTarget(s string) (target, error) {
	var t target
	label, expr, ok := strings.Cut(s, " := ")
	if !ok {
		return t, fmt.Errorf("target %q: want LABEL := EXPR OP VALUE", s)
	}
	t.label = strings.TrimSpace(label)
	op := " >= "
	t.atLeast = true
	if !strings.Contains(expr, op) {
		op, t.atLeast = " <= ", false
	}
	lhs, rhs, ok := strings.Cut(expr, op)
	if !ok {
		return t, fmt.Errorf("target %q: no >= or <=", s)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(rhs), 64)
	if err != nil {
		return t, fmt.Errorf("target %q: %v", s, err)
	}
	t.value = v
	num, den, isRatio := strings.Cut(lhs, " / ")
	if t.num, err = parseRef(num); err != nil {
		return t, fmt.Errorf("target %q: %v", s, err)
	}
	if isRatio {
		t.ratio = true
		if t.den, err = parseRef(den); err != nil {
			return t, fmt.Errorf("target %q: %v", s, err)
		}
	}
	return t, nil
}

func parseRef(s string) (ref, error) {
	s = strings.TrimSpace(s)
	group, rest, ok1 := strings.Cut(s, "/")
	i := strings.LastIndexByte(rest, ':')
	if !ok1 || i < 0 {
		return ref{}, fmt.Errorf("%q: want GROUP/NAME:METRIC", s)
	}
	name, size, _ := strings.Cut(rest[:i], "@")
	return ref{group, name, size, rest[i+1:]}, nil
}

// lookup finds a referenced figure; the last result of that name wins.
func lookup(results []*Result, r ref) (float64, bool) {
	for i := len(results) - 1; i >= 0; i-- {
		if results[i].Group == r.group && results[i].Name == r.name && (r.size == "" || results[i].Size == r.size) {
			return results[i].Metric(r.metric)
		}
	}
	return 0, false
}

// Run prints | target | measured | met |.
func (c *TargetsCmd) Run(ctx context.Context, env *cli.Env) error {
	results, err := readResults(c.Results)
	if err != nil {
		return err
	}
	if err := writeTargets(env.Stdout, results, c.Target); err != nil {
		return cli.Usagef("%v", err)
	}
	return nil
}

// writeTargets checks the results against each target and writes the
// verdicts as a Markdown table. A figure that was not measured is said to
// be so, never counted as met.
func writeTargets(w io.Writer, results []*Result, specs []string) error {
	targets := make([]target, len(specs))
	for i, spec := range specs {
		t, err := parseTarget(spec)
		if err != nil {
			return err
		}
		targets[i] = t
	}
	writeRow(w, []string{"target", "measured", "met"})
	writeRule(w, 3)
	for _, t := range targets {
		v, ok := lookup(results, t.num)
		missing := t.num.String()
		if ok && t.ratio {
			var d float64
			d, ok = lookup(results, t.den)
			missing = t.den.String()
			if ok && d > 0 {
				v /= d
			} else {
				ok = false
			}
		}
		if !ok {
			writeRow(w, []string{t.label, "not measured (" + missing + ")", "?"})
			continue
		}
		met := v >= t.value
		if !t.atLeast {
			met = v <= t.value
		}
		verdict := "yes"
		if !met {
			verdict = "**no**"
		}
		writeRow(w, []string{t.label, formatMeasured(v, t), verdict})
	}
	return nil
}

func formatMeasured(v float64, t target) string {
	if t.ratio {
		if !t.atLeast && t.value < 1.1 {
			// A ceiling a few hundredths above 1: two significant digits
			// would show 1.04 as the 1.0 it must not pass.
			return strconv.FormatFloat(v, 'f', 3, 64) + "×"
		}
		return trimFloat(v) + "×"
	}
	switch {
	case t.num.metric == "mbps":
		return fmt.Sprintf("%.0f MB/s", v)
	case t.num.metric == "rps":
		return cli.Thousands(int64(v)) + "/s"
	case t.num.metric == "rss_mb":
		return fmt.Sprintf("%.1f MB", v)
	case strings.HasSuffix(t.num.metric, "_pct"):
		return fmt.Sprintf("%.1f%%", v)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}
