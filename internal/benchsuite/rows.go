package benchsuite

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// Run is one execution of a measured command, its durations kept in
// nanoseconds (encoding/json's way; segmentio's would write them as text).
type Run struct {
	Wall     time.Duration `json:"wall_ns"`
	User     time.Duration `json:"user_ns"`
	Sys      time.Duration `json:"sys_ns"`
	MaxRSSKB int64         `json:"max_rss_kb"`
}

// Result is one row of a table: a command measured over several runs, or
// figures a section read some other way (Metrics).
type Result struct {
	Group      string `json:"group"`
	Name       string `json:"name"`
	Ours       bool   `json:"ours,omitempty"` // tokenmill's row, which the others are compared with
	Command    string `json:"command"`
	Note       string `json:"note,omitempty"`
	Size       string `json:"size,omitempty"` // input size label, for growth tables
	Bytes      int64  `json:"bytes,omitempty"`
	Records    int64  `json:"records,omitempty"`
	OutRecords int64  `json:"out_records"` // the lines the command wrote; -1 when not counted
	Runs       []Run  `json:"runs,omitempty"`
	// RSSFloorKB is the measuring process's peak RSS at the start: a child
	// made by vfork inherits it, so no child's peak is reported below it.
	RSSFloorKB int64              `json:"rss_floor_kb,omitempty"`
	Load1      float64            `json:"load1"` // 1-minute load average when the measurement started
	Metrics    map[string]float64 `json:"metrics,omitempty"`
}

// unavailable is the row of a tool that could not be measured, and why.
func unavailable(group, name, why string) *Result {
	return &Result{Group: group, Name: name, OutRecords: -1, Load1: loadAverage(), Note: "not available: " + why}
}

func (r *Result) available() bool { return !strings.HasPrefix(r.Note, "not available") }

// medianRun is the run of the median wall time.
func (r *Result) medianRun() Run {
	if len(r.Runs) == 0 {
		return Run{}
	}
	runs := slices.SortedFunc(slices.Values(r.Runs), func(a, b Run) int { return cmp.Compare(a.Wall, b.Wall) })
	return runs[(len(runs)-1)/2]
}

// Metric is a named figure of the result: one of Metrics, or one of its
// runs' below; ok is false when the result (nil: a row not there) has none.
func (r *Result) Metric(name string) (v float64, ok bool) {
	if r == nil {
		return 0, false
	}
	if v, ok := r.Metrics[name]; ok {
		return v, true
	}
	m, n := r.medianRun(), len(r.Runs)
	wall, cpu := m.Wall.Seconds(), (m.User + m.Sys).Seconds()
	lo, hi, rss := m.Wall, m.Wall, 0.0
	for _, run := range r.Runs {
		lo, hi, rss = min(lo, run.Wall), max(hi, run.Wall), max(rss, float64(run.MaxRSSKB)/1024)
	}
	f := map[string]struct {
		v  float64
		ok bool
	}{
		"mbps":   {float64(r.Bytes) / 1e6 / wall, r.Bytes > 0 && wall > 0},
		"rps":    {float64(r.Records) / wall, r.Records > 0 && wall > 0},
		"wall_s": {wall, n > 0},
		// (slowest - fastest) / median: how far one run can be trusted
		"spread_pct": {100 * float64(hi-lo) / float64(m.Wall), n > 1 && wall > 0},
		"cpu_s":      {cpu, n > 0},
		// what one core does, whatever the load
		"mb_per_cpu_s":      {float64(r.Bytes) / 1e6 / cpu, r.Bytes > 0 && cpu > 0},
		"cpu_us_per_record": {float64((m.User + m.Sys).Microseconds()) / float64(r.Records), r.Records > 0 && n > 0},
		"rss_mb":            {rss, n > 0},
	}[name]
	if !f.ok {
		return 0, false
	}
	return f.v, true
}

// writeResults puts rows in a file, one JSON line each, whole or not at all.
func writeResults(path string, rows []*Result) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return writeFile(path, b.Bytes())
}

func readResults(path string) (out []*Result, err error) {
	return out, eachJSON(path, func(r *Result) error { out = append(out, r); return nil })
}

// eachJSON calls fn with every value of a JSONL file, decoded; an error
// names the value's place in the file (its line, when one a line).
func eachJSON[T any](path string, fn func(*T) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReaderSize(f, 1<<20))
	for n := 1; ; n++ {
		v := new(T)
		if err = dec.Decode(v); err == io.EOF {
			return nil
		} else if err == nil {
			err = fn(v)
		}
		if err != nil {
			return fmt.Errorf("%s:%d: %v", path, n, err)
		}
	}
}

// writeFile puts a file in place whole or not at all.
func writeFile(path string, data []byte) error {
	return jsonl.WriteFile(path, jsonl.CreateFileOptions{Replace: true}, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// loadLine is the 1-, 5- and 15-minute load averages of /proc/loadavg as
// uptime(1) ends its line.
func loadLine() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	return "load average: " + strings.Join(f[:min(3, len(f))], ", ")
}

// loadAverage is the 1-minute load average, or -1 when unknown.
func loadAverage() float64 {
	v := -1.0
	data, _ := os.ReadFile("/proc/loadavg")
	fmt.Sscan(string(data), &v) // v is left as it is on an error
	return v
}

// cpuBusy is the CPU time all processes have spent so far, or -1.
func cpuBusy() time.Duration {
	data, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(data), "\n")
	return parseCPUBusy(line)
}

// parseCPUBusy sums user, nice, system, irq, softirq and steal of /proc/stat's
// "cpu" line (idle and iowait are not busy; guest time is already in user).
func parseCPUBusy(line string) time.Duration {
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return -1
	}
	var ticks int64
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return -1
		} else if i != 3 && i != 4 && i < 8 {
			ticks += n
		}
	}
	return time.Duration(ticks) * time.Second / 100 // ticks of USER_HZ, 100 on every Linux Go runs on
}

// othersCores is the cores other processes kept busy over runs (all CPU time
// between each run's start and end, less the run's own, over the wall time),
// -1 when unknown; held to the CPUs, as ticks of 10 ms swing over short runs.
func othersCores(busy [][2]time.Duration, runs []Run) float64 {
	var others, wall time.Duration
	for i, run := range runs {
		if busy[i][0] < 0 || busy[i][1] < 0 {
			return -1
		}
		others, wall = others+max(0, busy[i][1]-busy[i][0]-run.User-run.Sys), wall+run.Wall
	}
	if wall <= 0 {
		return -1
	}
	return min(others.Seconds()/wall.Seconds(), float64(runtime.NumCPU()))
}

// median of figures (the lower of the middle two); NaN of none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return slices.Sorted(slices.Values(v))[(len(v)-1)/2]
}

// mean of figures; -1 of none.
func mean(v []float64) float64 {
	if len(v) == 0 {
		return -1
	}
	var sum float64
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}

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
	row := func(cells []string) {
		esc := make([]string, len(cells))
		for i, c := range cells {
			esc[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(esc, " | "))
	}
	if strings.Join(t.head, "") == "" {
		fmt.Fprintf(w, "|%s\n", strings.Repeat(" |", len(t.head)))
	} else {
		row(t.head)
	}
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(t.head)))
	for _, r := range t.rows {
		row(r)
	}
}

// columns is a table of rows, a column each HEAD=CELL: CELL a metric as
// METRIC:DECIMALS, or one of the cells below (spread: half the range of
// the wall times over their median, as a ratio is only as sure as that).
func columns(rows []*Result, cols ...string) *table {
	t := newTable()
	for _, c := range cols {
		head, _, _ := strings.Cut(c, "=")
		t.head = append(t.head, head)
	}
	for _, r := range rows {
		var cells []string
		for _, c := range cols {
			_, cell, _ := strings.Cut(c, "=")
			metric, dec, isMetric := strings.Cut(cell, ":")
			if d, _ := strconv.Atoi(dec); isMetric {
				cell = metricCell(r, metric, d)
			} else {
				cell = map[string]func() string{"name": func() string { return nameCell(r) }, "**": func() string { return "**" + r.Name + "**" },
					"input": func() string { return inputCell(r) }, "ratio": func() string { return ratioCell(rows, r) }, "spread": func() string {
						return figureOf(r, "spread_pct", func(v float64) string { return fmt.Sprintf("±%.0f%%", v/2) })
					},
					"rss": func() string { return rssCell(r) }, "out": func() string { return outCell(r) }, "load": func() string { return loadCell(r.Load1) },
					"others": func() string { return othersCell(r) }}[cell]()
			}
			cells = append(cells, cell)
		}
		t.add(cells...)
	}
	return t
}

// streamTable writes rows measured as commands, each compared with
// tokenmill's on the same input, and their commands under it. rate heads
// the records/s column (e.g. requests/s); cpuPerRecord adds CPU µs a record.
func streamTable(w io.Writer, rows []*Result, rate string, cpuPerRecord bool) {
	cols := []string{"tool=name", "input=input", "MB/s=mbps:1", rate + "=rps:0", "tokenmill is=ratio", "wall s (median)=wall_s:2", "spread=spread", "CPU s=cpu_s:2",
		"CPU µs/" + strings.TrimSuffix(strings.TrimSuffix(rate, "/s"), "s") + "=cpu_us_per_record:1", "peak RSS MB=rss", "records out=out", "load=others"}
	if !slices.ContainsFunc(rows, func(r *Result) bool { return r.Bytes > 0 }) {
		cols = slices.Delete(cols, 2, 3)
	}
	if !cpuPerRecord {
		cols = slices.DeleteFunc(cols, func(c string) bool { return strings.HasPrefix(c, "CPU µs/") })
	}
	columns(rows, cols...).write(w)
	fmt.Fprintln(w)
	commandList(w, rows)
}

// commandList writes each row's command, with its note, under a table.
func commandList(w io.Writer, rows []*Result) {
	for _, r := range rows {
		if r.Command != "" {
			fmt.Fprintf(w, "- %s: `%s`", r.Name, r.Command)
			if r.Note != "" {
				fmt.Fprintf(w, " (%s)", r.Note)
			}
			fmt.Fprintln(w)
		}
	}
}

// pivot is a table of tools (rows) by sizes (columns), both in the order
// first measured, each cell made by value (nil: a dash), then the growth of
// metric from the first size to the last when growth is set.
func pivot(rows []*Result, corner, metric string, growth bool, value func(*Result) string) *table {
	var tools, sizes []string
	at := map[[2]string]*Result{}
	for _, r := range rows {
		if !slices.Contains(sizes, r.Size) {
			sizes = append(sizes, r.Size)
		}
		if !slices.Contains(tools, r.Name) {
			tools = append(tools, r.Name)
		}
		at[[2]string{r.Name, r.Size}] = r
	}
	first, last := sizes[0], sizes[len(sizes)-1]
	head := append([]string{corner}, sizes...)
	if growth {
		head = append(head, fmt.Sprintf("%s ÷ %s", last, first))
	}
	t := newTable(head...)
	for _, tool := range tools {
		cells := []string{tool}
		for _, s := range sizes {
			cells = append(cells, value(at[[2]string{tool, s}]))
		}
		x, _ := at[[2]string{tool, first}].Metric(metric)
		if y, ok := at[[2]string{tool, last}].Metric(metric); growth && x > 0 && ok {
			cells = append(cells, fmt.Sprintf("%.1f×", y/x))
		} else if growth {
			cells = append(cells, "—")
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
	seen := map[string]bool{}
	for _, r := range rows {
		if !seen[r.Name] {
			seen[r.Name] = true
			fmt.Fprintf(w, "- %s, %s: `%s`\n", r.Name, r.Size, r.Command)
		}
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
	return cmp.Or(strings.Join(parts, ", "), "—")
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

// outCell is the records a row wrote, or a dash when not counted.
func outCell(r *Result) string {
	if r.OutRecords < 0 {
		return "—"
	}
	return cli.Thousands(r.OutRecords)
}

// rssCell is a row's peak RSS, "≤" when it is no more than the measuring
// process's own, so that the true figure is only known to be below it.
func rssCell(r *Result) string {
	if rss, ok := r.Metric("rss_mb"); ok && r.RSSFloorKB > 0 && rss*1024 <= float64(r.RSSFloorKB)*1.05 {
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
	bases := slices.DeleteFunc(slices.Clone(rows), func(o *Result) bool { return r.Ours || !o.Ours || len(o.Runs) == 0 && len(o.Metrics) == 0 })
	if len(bases) == 0 {
		return "—"
	}
	same := slices.IndexFunc(bases, func(o *Result) bool { return o.Bytes == r.Bytes && o.Records == r.Records })
	return faster(bases[max(same, 0)], r, speed)
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
	if v >= 10 {
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1+b2i(v < 1), 64)
}

// figureOf is a row's figure as format prints it, or a dash without it.
func figureOf(r *Result, metric string, format func(float64) string) string {
	if v, ok := r.Metric(metric); ok && !math.IsNaN(v) {
		return format(v)
	}
	return "—"
}

func figureCell(r *Result, metric string) string { return figureOf(r, metric, trimFloat) }

// overCell is a's figure over b's as "1.23×", or nothing without both.
func overCell(a *Result, ma string, b *Result, mb string) string {
	x, ok1 := a.Metric(ma)
	y, ok2 := b.Metric(mb)
	if !ok1 || !ok2 || y <= 0 {
		return ""
	}
	return strconv.FormatFloat(x/y, 'f', 2, 64) + "×"
}

// metricCell is a row's figure with decimals, in thousands when whole.
func metricCell(r *Result, name string, decimals int) string {
	return figureOf(r, name, func(v float64) string {
		if decimals == 0 {
			return cli.Thousands(int64(math.Round(v)))
		}
		return strconv.FormatFloat(v, 'f', decimals, 64)
	})
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

// A target reads LABEL := REF [/ REF] OP VALUE, where REF is
// GROUP/NAME[@SIZE]:METRIC (a metric as Result.Metric names it) and OP is
// >= or <=, e.g. dedup ≥ 3× awk := dedup/dedup:mbps / dedup/awk:mbps >= 3.
// A figure that was not measured is said to be so, never counted as met.
var (
	targetSyntax = regexp.MustCompile(`^(.+?) := (.+?)(?: / (.+?))? (>=|<=) (\S+)$`)
	refSyntax    = regexp.MustCompile(`^([^/]+)/(.+?)(?:@(.+))?:([^:]+)$`)
)

func writeTargets(w io.Writer, results []*Result, specs []string) error {
	tb := newTable("target", "measured", "met")
	for _, spec := range specs {
		m := targetSyntax.FindStringSubmatch(spec)
		if m == nil {
			return fmt.Errorf("target %q: want LABEL := EXPR >= VALUE (or <=)", spec)
		}
		want, err := strconv.ParseFloat(m[5], 64)
		num, ok, err1 := lookup(results, m[2])
		den, okDen, err2 := lookup(results, m[3])
		if err = cmp.Or(err, err1, err2); err != nil {
			return fmt.Errorf("target %q: %v", spec, err)
		}
		label, v, atLeast := strings.TrimSpace(m[1]), num/den, m[4] == ">="
		switch measured := formatMeasured(v, m[2], m[3] != "", atLeast, want); {
		case !ok:
			tb.add(label, "not measured ("+m[2]+")", "?")
		case !okDen || den <= 0:
			tb.add(label, "not measured ("+m[3]+")", "?")
		case atLeast && v < want || !atLeast && v > want:
			tb.add(label, measured, "**no**")
		default:
			tb.add(label, measured, "yes")
		}
	}
	tb.write(w)
	return nil
}

// lookup finds the figure GROUP/NAME[@SIZE]:METRIC, of the last row of
// that name; no ref is 1.
func lookup(results []*Result, ref string) (v float64, ok bool, err error) {
	m := refSyntax.FindStringSubmatch(ref)
	if ref == "" {
		return 1, true, nil
	} else if m == nil {
		return 0, false, fmt.Errorf("%q: want GROUP/NAME:METRIC", ref)
	}
	var row *Result
	for _, r := range results {
		if r.Group == m[1] && r.Name == m[2] && (m[3] == "" || r.Size == m[3]) {
			row = r
		}
	}
	v, ok = row.Metric(m[4])
	return v, ok, nil
}

func formatMeasured(v float64, ref string, ratio, atLeast bool, want float64) string {
	switch m := ref[strings.LastIndexByte(ref, ':')+1:]; {
	case ratio && !atLeast && want < 1.1:
		// a ceiling just above 1: two digits would show 1.04 as a passing 1.0
		return strconv.FormatFloat(v, 'f', 3, 64) + "×"
	case ratio:
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
