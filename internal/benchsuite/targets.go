package benchsuite

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"tokenmill/lib/cli"
)

// A target reads LABEL := REF [/ REF] OP VALUE, where REF is
// GROUP/NAME[@SIZE]:METRIC (a metric as Result.Metric names it) and OP is
// >= or <=, e.g.
//
//	dedup ≥ 3× awk := dedup/dedup:mbps / dedup/awk:mbps >= 3
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

func parseTarget(s string) (t target, err error) {
	label, expr, ok := strings.Cut(s, " := ")
	op := " >= "
	t.label, t.atLeast = strings.TrimSpace(label), true
	if !strings.Contains(expr, op) {
		op, t.atLeast = " <= ", false
	}
	lhs, rhs, ok2 := strings.Cut(expr, op)
	if !ok || !ok2 {
		return t, fmt.Errorf("target %q: want LABEL := EXPR >= VALUE (or <=)", s)
	}
	if t.value, err = strconv.ParseFloat(strings.TrimSpace(rhs), 64); err != nil {
		return t, fmt.Errorf("target %q: %v", s, err)
	}
	num, den, isRatio := strings.Cut(lhs, " / ")
	t.num, err = parseRef(num)
	if t.ratio = isRatio; err == nil && isRatio {
		t.den, err = parseRef(den)
	}
	if err != nil {
		return t, fmt.Errorf("target %q: %v", s, err)
	}
	return t, nil
}

func parseRef(s string) (ref, error) {
	s = strings.TrimSpace(s)
	group, rest, ok := strings.Cut(s, "/")
	i := strings.LastIndexByte(rest, ':')
	if !ok || i < 0 {
		return ref{}, fmt.Errorf("%q: want GROUP/NAME:METRIC", s)
	}
	name, size, _ := strings.Cut(rest[:i], "@")
	return ref{group, name, size, rest[i+1:]}, nil
}

// lookup finds a referenced figure; the last row of that name wins.
func lookup(results []*Result, r ref) (float64, bool) {
	for i := len(results) - 1; i >= 0; i-- {
		if res := results[i]; res.Group == r.group && res.Name == r.name && (r.size == "" || res.Size == r.size) {
			return res.Metric(r.metric)
		}
	}
	return 0, false
}

// writeTargets checks the results against each target and writes the
// verdicts. A figure that was not measured is said to be so, never
// counted as met.
func writeTargets(w io.Writer, results []*Result, specs []string) error {
	tb := newTable("target", "measured", "met")
	for _, spec := range specs {
		t, err := parseTarget(spec)
		if err != nil {
			return err
		}
		v, ok := lookup(results, t.num)
		missing := t.num
		if ok && t.ratio {
			d, okd := lookup(results, t.den)
			v, ok, missing = v/d, okd && d > 0, t.den
		}
		if !ok {
			tb.add(t.label, "not measured ("+missing.String()+")", "?")
			continue
		}
		met := "yes"
		if t.atLeast && v < t.value || !t.atLeast && v > t.value {
			met = "**no**"
		}
		tb.add(t.label, formatMeasured(v, t), met)
	}
	tb.write(w)
	return nil
}

func formatMeasured(v float64, t target) string {
	switch m := t.num.metric; {
	case t.ratio && !t.atLeast && t.value < 1.1:
		// A ceiling a few hundredths above 1: two significant digits
		// would show 1.04 as the 1.0 it must not pass.
		return strconv.FormatFloat(v, 'f', 3, 64) + "×"
	case t.ratio:
		return trimFloat(v) + "×"
	case m == "mbps":
		return fmt.Sprintf("%.0f MB/s", v)
	case m == "rps":
		return cli.Thousands(int64(v)) + "/s"
	case m == "rss_mb":
		return fmt.Sprintf("%.1f MB", v)
	case strings.HasSuffix(m, "_pct"):
		return fmt.Sprintf("%.1f%%", v)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}
