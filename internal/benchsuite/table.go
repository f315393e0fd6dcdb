package benchsuite

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"tokenmill/lib/cli"
)

// TableCmd renders the results of one group as a Markdown table.
type TableCmd struct {
	Results      string `help:"Results file (JSONL) to read." required:""`
	Group        string `help:"Group to render." required:""`
	Kind         string `help:"Table layout: stream (throughput rows compared with tokenmill's), fleet, or growth (tools by input size)." enum:"stream,fleet,growth" default:"stream"`
	CPUPerRecord bool   `help:"Add a column of CPU time per record (stream tables)."`
	Rate         string `help:"Heading of the records/s column (stream tables), e.g. requests/s." default:"records/s"`
}

// Run prints the table.
func (c *TableCmd) Run(ctx context.Context, env *cli.Env) error {
	all, err := readResults(c.Results)
	if err != nil {
		return err
	}
	var rows []*Result
	for _, r := range all {
		if r.Group == c.Group {
			rows = append(rows, r)
		}
	}
	renderTable(env.Stdout, rows, c.Group, tableOptions{kind: c.Kind, cpuPerRecord: c.CPUPerRecord, rate: c.Rate})
	return nil
}

// tableOptions say how a group is laid out.
type tableOptions struct {
	kind         string // stream (the default), fleet or growth
	cpuPerRecord bool   // stream: a column of CPU time per record
	rate         string // stream: the records/s column's heading
}

// renderTable writes one group's rows as its Markdown table.
func renderTable(w io.Writer, rows []*Result, group string, o tableOptions) {
	if len(rows) == 0 {
		fmt.Fprintf(w, "_No results for %s: see the log of the run._\n", group)
		return
	}
	if o.rate == "" {
		o.rate = "records/s"
	}
	switch o.kind {
	case "fleet":
		fleetTable(w, rows)
	case "growth":
		growthTable(w, rows)
	default:
		streamTable(w, rows, o.cpuPerRecord, o.rate)
	}
}

// baseline is the tokenmill row a row is compared with: the first one that
// read the same input, else the group's first (rates of different inputs,
// as for requests/s).
func baseline(rows []*Result, r *Result) *Result {
	if r.Ours {
		return nil
	}
	var first *Result
	for _, o := range rows {
		if !o.Ours || len(o.Runs) == 0 && len(o.Metrics) == 0 {
			continue
		}
		if o.Bytes == r.Bytes && o.Records == r.Records {
			return o
		}
		if first == nil {
			first = o
		}
	}
	return first
}

// speed is the figure rows are compared by: MB/s when the input has a
// size, records (or requests) per second otherwise.
func speed(r *Result) (float64, bool) {
	if v, ok := r.Metric("mbps"); ok {
		return v, true
	}
	return r.Metric("rps")
}

func streamTable(w io.Writer, rows []*Result, cpuPerRecord bool, rate string) {
	hasBytes := false
	for _, r := range rows {
		hasBytes = hasBytes || r.Bytes > 0
	}
	head := []string{"tool", "input"}
	if hasBytes {
		head = append(head, "MB/s")
	}
	head = append(head, rate, "tokenmill is", "wall s (median)", "spread", "CPU s")
	if cpuPerRecord {
		head = append(head, "CPU µs/"+strings.TrimSuffix(strings.TrimSuffix(rate, "/s"), "s"))
	}
	head = append(head, "peak RSS MB", "records out", "load")
	writeRow(w, head)
	writeRule(w, len(head))
	for _, r := range rows {
		cells := []string{nameCell(r), inputCell(r)}
		if hasBytes {
			cells = append(cells, metricCell(r, "mbps", 1))
		}
		cells = append(cells, metricCell(r, "rps", 0), ratioCell(rows, r), metricCell(r, "wall_s", 2), spreadCell(r), metricCell(r, "cpu_s", 2))
		if cpuPerRecord {
			cells = append(cells, metricCell(r, "cpu_us_per_record", 1))
		}
		rss := metricCell(r, "rss_mb", 1)
		if r.rssAtFloor() {
			rss = "≤ " + rss
		}
		cells = append(cells, rss, outCell(r), othersCell(r))
		writeRow(w, cells)
	}
	fmt.Fprintln(w)
	commandList(w, rows)
}

// nameCell is a row's name as a table shows it: tokenmill's in bold, an
// unavailable one with the reason.
func nameCell(r *Result) string {
	name := r.Name
	if r.Ours {
		name = "**" + name + "**"
	}
	if strings.HasPrefix(r.Note, "not available") {
		name += " (_" + r.Note + "_)"
	}
	return name
}

// outCell is the records a row wrote, or a dash when not counted.
func outCell(r *Result) string {
	if r.OutRecords < 0 {
		return "—"
	}
	return cli.Thousands(r.OutRecords)
}

// commandList writes each row's command, with its note, under a table.
func commandList(w io.Writer, rows []*Result) {
	for _, r := range rows {
		if r.Command == "" {
			continue
		}
		fmt.Fprintf(w, "- %s: `%s`", r.Name, r.Command)
		if r.Note != "" {
			fmt.Fprintf(w, " (%s)", r.Note)
		}
		fmt.Fprintln(w)
	}
}

func fleetTable(w io.Writer, rows []*Result) {
	head := []string{"policy", "delivered tok/s", "decoded tok/s", "fleet ideal tok/s", "decoded % of ideal", "% of ideal with prefill", "slot utilisation %",
		"whole run % of ideal", "endpoint downtime s", "answers ok", "failed", "retries", "infer wall s", "infer CPU s", "infer peak RSS MB", "load"}
	writeRow(w, head)
	writeRule(w, len(head))
	for _, r := range rows {
		writeRow(w, []string{"**" + r.Name + "**", metricCell(r, "tok_s", 0), metricCell(r, "sim_gen_tok_s", 0), metricCell(r, "ideal_tok_s", 0), metricCell(r, "ideal_pct", 1),
			metricCell(r, "ideal_prefill_pct", 1), metricCell(r, "util_pct", 1), metricCell(r, "whole_pct", 1), metricCell(r, "down_sim_s", 0),
			cli.Thousands(r.OutRecords), metricCell(r, "failed", 0), metricCell(r, "retries", 0), metricCell(r, "wall_s", 1), metricCell(r, "cpu_s", 1),
			metricCell(r, "rss_mb", 1), othersCell(r)})
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		fmt.Fprintf(w, "%s:\n\n```sh\n%s\n```\n\n", r.Name, r.Command)
	}
}

// cells are a growth table's rows by tool and size, in the order measured.
type cells struct {
	sizes, tools []string
	cell         map[[2]string]*Result
}

func cellsOf(rows []*Result) cells {
	c := cells{cell: map[[2]string]*Result{}}
	for _, r := range rows {
		if !slices.Contains(c.sizes, r.Size) {
			c.sizes = append(c.sizes, r.Size)
		}
		if !slices.Contains(c.tools, r.Name) {
			c.tools = append(c.tools, r.Name)
		}
		c.cell[[2]string{r.Name, r.Size}] = r
	}
	return c
}

func (c cells) at(t, s string) *Result { return c.cell[[2]string{t, s}] }

// bySize arranges rows measured at several sizes: the tools and the sizes
// in the order first measured, and the row of a tool at a size (nil if
// none).
func bySize(rows []*Result) (tools, sizes []string, at func(tool, size string) *Result) {
	c := cellsOf(rows)
	return c.tools, c.sizes, c.at
}

// growthTable shows peak RSS and throughput per tool (rows) and input
// size (columns, in the order first measured).
func growthTable(w io.Writer, rows []*Result) {
	tools, sizes, at := bySize(rows)
	last := sizes[len(sizes)-1]
	pivot(w, "peak RSS MB", tools, sizes, at, func(r *Result) string {
		v := metricCell(r, "rss_mb", 1)
		if r.rssAtFloor() {
			v = "≤ " + v
		}
		return v
	}, fmt.Sprintf("%s ÷ %s", last, sizes[0]), func(t string) string {
		first, end := at(t, sizes[0]), at(t, last)
		if first == nil || end == nil {
			return "—"
		}
		a, _ := first.Metric("rss_mb")
		b, _ := end.Metric("rss_mb")
		if a <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f×", b/a)
	})
	fmt.Fprintln(w)
	pivot(w, "records/s (MB/s)", tools, sizes, at, func(r *Result) string {
		v := metricCell(r, "rps", 0)
		if mb, ok := r.Metric("mbps"); ok {
			v += fmt.Sprintf(" (%.0f)", mb)
		}
		return v
	}, "", nil)
	fmt.Fprintln(w)
	for _, t := range tools {
		for _, s := range sizes {
			if r := at(t, s); r != nil {
				fmt.Fprintf(w, "- %s, %s: `%s`\n", t, s, r.Command)
				break
			}
		}
	}
}

// pivot writes a table of tools (rows) by sizes (columns), a cell's text
// made by value, and an extra column when extra is set.
func pivot(w io.Writer, corner string, tools, sizes []string, at func(t, s string) *Result, value func(*Result) string, extraHead string, extra func(t string) string) {
	head := append([]string{corner}, sizes...)
	if extra != nil {
		head = append(head, extraHead)
	}
	writeRow(w, head)
	writeRule(w, len(head))
	for _, t := range tools {
		cells := []string{t}
		for _, s := range sizes {
			if r := at(t, s); r != nil {
				cells = append(cells, value(r))
			} else {
				cells = append(cells, "—")
			}
		}
		if extra != nil {
			cells = append(cells, extra(t))
		}
		writeRow(w, cells)
	}
}

func inputCell(r *Result) string {
	var parts []string
	if r.Bytes > 0 {
		parts = append(parts, fmt.Sprintf("%.0f MB", float64(r.Bytes)/1e6))
	}
	if r.Records > 0 {
		parts = append(parts, cli.Thousands(r.Records)+" rec")
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, ", ")
}

func ratioCell(rows []*Result, r *Result) string {
	base := baseline(rows, r)
	if base == nil {
		return "—"
	}
	a, ok1 := speed(base)
	b, ok2 := speed(r)
	if !ok1 || !ok2 || b == 0 {
		return "—"
	}
	if a < b {
		return fmt.Sprintf("%s× slower", trimFloat(b/a))
	}
	return fmt.Sprintf("%s× faster", trimFloat(a/b))
}

// trimFloat prints a ratio with 2 significant digits below 10, whole above.
func trimFloat(v float64) string {
	switch {
	case v >= 10:
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// spreadCell is the range of a row's wall times as a share of its median,
// "±" half of it: a ratio between two rows is only as good as their spreads.
func spreadCell(r *Result) string {
	v, ok := r.Metric("spread_pct")
	if !ok {
		return "—"
	}
	return fmt.Sprintf("±%.0f%%", v/2)
}

func metricCell(r *Result, name string, decimals int) string {
	v, ok := r.Metric(name)
	if !ok {
		return "—"
	}
	if decimals == 0 {
		return cli.Thousands(int64(math.Round(v)))
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

func loadCell(v float64) string {
	if v < 0 {
		return "?"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func writeRow(w io.Writer, cells []string) {
	for i, c := range cells {
		cells[i] = strings.ReplaceAll(c, "|", `\|`)
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
}

func writeRule(w io.Writer, n int) {
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", n))
}
