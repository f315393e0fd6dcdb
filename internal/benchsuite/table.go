package benchsuite

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"tokenmill/lib/cli"
)

// table is a Markdown table: every table of the report is one, written by
// write, so that they all read alike.
type table struct {
	head []string
	rows [][]string
}

func newTable(head ...string) *table { return &table{head: head} }

func (t *table) add(cells ...string) *table {
	t.rows = append(t.rows, cells)
	return t
}

// write writes the header, the rule and the rows; a "|" in a cell is
// escaped, and a header of empty cells is written as "| | |".
func (t *table) write(w io.Writer) {
	if strings.Join(t.head, "") == "" {
		fmt.Fprintf(w, "|%s\n", strings.Repeat(" |", len(t.head)))
	} else {
		writeRow(w, t.head)
	}
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(t.head)))
	for _, r := range t.rows {
		writeRow(w, r)
	}
}

func writeRow(w io.Writer, cells []string) {
	esc := make([]string, len(cells))
	for i, c := range cells {
		esc[i] = strings.ReplaceAll(c, "|", `\|`)
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(esc, " | "))
}

// streamTable writes rows measured as commands, each compared with
// tokenmill's on the same input, and their commands under it. rate heads
// the records/s column (e.g. requests/s); cpuPerRecord adds CPU µs a record.
func streamTable(w io.Writer, rows []*Result, rate string, cpuPerRecord bool) {
	hasBytes := slices.ContainsFunc(rows, func(r *Result) bool { return r.Bytes > 0 })
	head := []string{"tool", "input"}
	if hasBytes {
		head = append(head, "MB/s")
	}
	head = append(head, rate, "tokenmill is", "wall s (median)", "spread", "CPU s")
	if cpuPerRecord {
		head = append(head, "CPU µs/"+strings.TrimSuffix(strings.TrimSuffix(rate, "/s"), "s"))
	}
	t := newTable(append(head, "peak RSS MB", "records out", "load")...)
	for _, r := range rows {
		cells := []string{nameCell(r), inputCell(r)}
		if hasBytes {
			cells = append(cells, metricCell(r, "mbps", 1))
		}
		cells = append(cells, metricCell(r, "rps", 0), ratioCell(rows, r), metricCell(r, "wall_s", 2), spreadCell(r), metricCell(r, "cpu_s", 2))
		if cpuPerRecord {
			cells = append(cells, metricCell(r, "cpu_us_per_record", 1))
		}
		t.add(append(cells, rssCell(r), outCell(r), othersCell(r))...)
	}
	t.write(w)
	fmt.Fprintln(w)
	commandList(w, rows)
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

// bySize arranges rows measured at several sizes: the tools and the sizes
// in the order first measured, and the row of a tool at a size (nil if none).
func bySize(rows []*Result) (tools, sizes []string, at func(tool, size string) *Result) {
	cell := map[[2]string]*Result{}
	for _, r := range rows {
		if !slices.Contains(sizes, r.Size) {
			sizes = append(sizes, r.Size)
		}
		if !slices.Contains(tools, r.Name) {
			tools = append(tools, r.Name)
		}
		cell[[2]string{r.Name, r.Size}] = r
	}
	return tools, sizes, func(t, s string) *Result { return cell[[2]string{t, s}] }
}

// pivot is a table of tools (rows) by sizes (columns) of one metric, a
// cell's text made by value, with the growth from the first size to the
// last when growth is set.
func pivot(rows []*Result, corner, metric string, growth bool, value func(*Result) string) *table {
	tools, sizes, at := bySize(rows)
	first, last := sizes[0], sizes[len(sizes)-1]
	head := append([]string{corner}, sizes...)
	if growth {
		head = append(head, fmt.Sprintf("%s ÷ %s", last, first))
	}
	t := newTable(head...)
	for _, tool := range tools {
		cells := []string{tool}
		for _, s := range sizes {
			if r := at(tool, s); r != nil {
				cells = append(cells, value(r))
			} else {
				cells = append(cells, "—")
			}
		}
		if growth {
			cells = append(cells, "—")
			if a, b := at(tool, first), at(tool, last); a != nil && b != nil {
				x, _ := a.Metric(metric)
				y, ok := b.Metric(metric)
				if x > 0 && ok {
					cells[len(cells)-1] = fmt.Sprintf("%.1f×", y/x)
				}
			}
		}
		t.add(cells...)
	}
	return t
}

// growthTable shows peak RSS and throughput per tool (rows) and input
// size (columns), and each tool's command at its first size.
func growthTable(w io.Writer, rows []*Result) {
	pivot(rows, "peak RSS MB", "rss_mb", true, rssCell).write(w)
	fmt.Fprintln(w)
	pivot(rows, "records/s (MB/s)", "", false, func(r *Result) string {
		v := metricCell(r, "rps", 0)
		if mb, ok := r.Metric("mbps"); ok {
			v += fmt.Sprintf(" (%.0f)", mb)
		}
		return v
	}).write(w)
	fmt.Fprintln(w)
	sizeCommands(w, rows)
}

// sizeCommands lists each tool's command at the first size measured.
func sizeCommands(w io.Writer, rows []*Result) {
	tools, sizes, at := bySize(rows)
	for _, t := range tools {
		for _, s := range sizes {
			if r := at(t, s); r != nil {
				fmt.Fprintf(w, "- %s, %s: `%s`\n", t, s, r.Command)
				break
			}
		}
	}
}

// nameCell is a row's name: tokenmill's in bold, an unavailable one with
// the reason.
func nameCell(r *Result) string {
	name := r.Name
	if r.Ours {
		name = "**" + name + "**"
	}
	if !r.available() {
		name += " (_" + r.Note + "_)"
	}
	return name
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

// outCell is the records a row wrote, or a dash when not counted.
func outCell(r *Result) string {
	if r.OutRecords < 0 {
		return "—"
	}
	return cli.Thousands(r.OutRecords)
}

// rssCell is a row's peak RSS, "≤" when it is the measuring process's own.
func rssCell(r *Result) string {
	if r.rssAtFloor() {
		return "≤ " + metricCell(r, "rss_mb", 1)
	}
	return metricCell(r, "rss_mb", 1)
}

// speed is the figure rows are compared by: MB/s when the input has a
// size, records (or requests) per second otherwise.
func speed(r *Result) (float64, bool) {
	if v, ok := r.Metric("mbps"); ok {
		return v, true
	}
	return r.Metric("rps")
}

// ratioCell compares a row with tokenmill's row that read the same input,
// else with the group's first (rates of different inputs, as requests/s).
func ratioCell(rows []*Result, r *Result) string {
	var base *Result
	for _, o := range rows {
		if r.Ours || !o.Ours || len(o.Runs) == 0 && len(o.Metrics) == 0 {
			continue
		}
		if o.Bytes == r.Bytes && o.Records == r.Records {
			base = o
			break
		}
		if base == nil {
			base = o
		}
	}
	if base == nil {
		return "—"
	}
	return faster(base, r, speed)
}

// faster says how much faster a is than b by a speed: "3.1× faster", or
// "2.0× slower"; a dash without both figures.
func faster(a, b *Result, by func(*Result) (float64, bool)) string {
	x, ok1 := by(a)
	y, ok2 := by(b)
	switch {
	case !ok1 || !ok2 || x <= 0 || y <= 0:
		return "—"
	case x < y:
		return trimFloat(y/x) + "× slower"
	}
	return trimFloat(x/y) + "× faster"
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

// spreadCell is half the range of a row's wall times over their median:
// a ratio between two rows is only as good as their spreads.
func spreadCell(r *Result) string {
	if v, ok := r.Metric("spread_pct"); ok {
		return fmt.Sprintf("±%.0f%%", v/2)
	}
	return "—"
}

func metricCell(r *Result, name string, decimals int) string {
	v, ok := r.Metric(name)
	switch {
	case !ok || math.IsNaN(v):
		return "—"
	case decimals == 0:
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

// othersCell is the 1-minute load at the start and the cores others kept
// busy during the runs.
func othersCell(r *Result) string {
	if v, ok := r.Metric("others_cores"); ok && v >= 0 {
		return loadCell(r.Load1) + "; others " + strconv.FormatFloat(v, 'f', 1, 64)
	}
	return loadCell(r.Load1)
}
