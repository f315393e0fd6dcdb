package benchsuite

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/jsonl"
)

// Run is one execution of a measured command, kept with its durations in
// nanoseconds (the JSON library would write them as text).
type Run struct {
	Wall, User, Sys time.Duration
	MaxRSSKB        int64
}

type runJSON struct {
	Wall     int64 `json:"wall_ns"`
	User     int64 `json:"user_ns"`
	Sys      int64 `json:"sys_ns"`
	MaxRSSKB int64 `json:"max_rss_kb"`
}

func (r Run) MarshalJSON() ([]byte, error) {
	return json.Marshal(runJSON{int64(r.Wall), int64(r.User), int64(r.Sys), r.MaxRSSKB})
}

func (r *Run) UnmarshalJSON(b []byte) error {
	var v runJSON
	err := json.Unmarshal(b, &v)
	*r = Run{time.Duration(v.Wall), time.Duration(v.User), time.Duration(v.Sys), v.MaxRSSKB}
	return err
}

// Result is one row of a table: a command measured over several runs, or
// figures a section read some other way (Metrics).
type Result struct {
	Group   string `json:"group"`
	Name    string `json:"name"`
	Ours    bool   `json:"ours,omitempty"` // tokenmill's row, which the others are compared with
	Command string `json:"command"`
	Note    string `json:"note,omitempty"`
	Size    string `json:"size,omitempty"` // input size label, for growth tables
	Bytes   int64  `json:"bytes,omitempty"`
	Records int64  `json:"records,omitempty"`
	// OutRecords counts the lines the command wrote; -1 when not counted.
	OutRecords int64 `json:"out_records"`
	Runs       []Run `json:"runs,omitempty"`
	// RSSFloorKB is the measuring process's own peak RSS when the command
	// started: the kernel carries it into a child made by vfork, so a
	// child's peak is never reported below it.
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
	runs := slices.Clone(r.Runs)
	slices.SortFunc(runs, func(a, b Run) int { return int(a.Wall - b.Wall) })
	return runs[(len(runs)-1)/2]
}

// Metric is a named figure of the result: one of Metrics, or mbps, rps,
// wall_s, spread_pct, cpu_s, mb_per_cpu_s, cpu_us_per_record or rss_mb
// of its runs; ok is false when the result has no such figure.
func (r *Result) Metric(name string) (float64, bool) {
	if v, ok := r.Metrics[name]; ok {
		return v, true
	}
	m, n := r.medianRun(), len(r.Runs)
	cpu := (m.User + m.Sys).Seconds()
	var v float64
	ok := n > 0
	switch name {
	case "mbps":
		v, ok = float64(r.Bytes)/1e6/m.Wall.Seconds(), r.Bytes > 0 && m.Wall > 0
	case "rps":
		v, ok = float64(r.Records)/m.Wall.Seconds(), r.Records > 0 && m.Wall > 0
	case "wall_s":
		v = m.Wall.Seconds()
	case "spread_pct": // (slowest - fastest) / median: how far one run can be trusted
		lo, hi := m.Wall, m.Wall
		for _, run := range r.Runs {
			lo, hi = min(lo, run.Wall), max(hi, run.Wall)
		}
		v, ok = 100*float64(hi-lo)/float64(m.Wall), n > 1 && m.Wall > 0
	case "cpu_s":
		v = cpu
	case "mb_per_cpu_s": // what one core does, whatever the load
		v, ok = float64(r.Bytes)/1e6/cpu, r.Bytes > 0 && cpu > 0
	case "cpu_us_per_record":
		v, ok = float64((m.User+m.Sys).Microseconds())/float64(r.Records), r.Records > 0 && n > 0
	case "rss_mb":
		for _, run := range r.Runs {
			v = max(v, float64(run.MaxRSSKB)/1024)
		}
	default:
		ok = false
	}
	if !ok {
		return 0, false
	}
	return v, true
}

// rssAtFloor reports whether the peak RSS is no more than the measuring
// process's own, so that the true figure is only known to be below it.
func (r *Result) rssAtFloor() bool {
	rss, ok := r.Metric("rss_mb")
	return ok && r.RSSFloorKB > 0 && rss*1024 <= float64(r.RSSFloorKB)*1.05
}

// writeResults puts rows in a file, one JSON line each, whole or not at all.
func writeResults(path string, rows []*Result) error {
	var b bytes.Buffer
	for _, r := range rows {
		data, err := json.Marshal(r)
		if err != nil {
			return err
		}
		b.Write(append(data, '\n'))
	}
	return writeFile(path, b.Bytes())
}

// readResults loads every row of the file, in order.
func readResults(path string) (out []*Result, err error) {
	return out, eachJSON(path, func(r *Result) error { out = append(out, r); return nil })
}

// eachJSON calls fn with every line of a JSONL file, decoded.
func eachJSON[T any](path string, fn func(*T) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		v := new(T)
		err := json.Unmarshal(sc.Bytes(), v)
		if err == nil {
			err = fn(v)
		}
		if err != nil {
			return fmt.Errorf("%s:%d: %v", path, line, err)
		}
	}
	return sc.Err()
}

// loadAverage is the 1-minute load average, or -1 when unknown.
func loadAverage() float64 {
	data, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); len(f) > 0 {
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			return v
		}
	}
	return -1
}

// What else kept the machine busy while a command ran: the CPU time every
// process spent (/proc/stat) less the command's own (its rusage), over
// the run's wall time, in cores. On 2 cores a figure well below 1 says
// the second core was mostly free; near 1, a 2-worker row cannot scale.

// clockTick is USER_HZ, the unit of /proc/stat: 100 on every Linux Go runs on.
const clockTick = 100

// cpuBusy is the CPU time all processes have spent so far, or -1.
func cpuBusy() time.Duration {
	data, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(data), "\n")
	return parseCPUBusy(line)
}

// parseCPUBusy reads the "cpu" line of /proc/stat: user, nice, system,
// irq, softirq and steal (idle and iowait are not busy; guest time is
// already in user).
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
		}
		if i != 3 && i != 4 && i < 8 {
			ticks += n
		}
	}
	return time.Duration(ticks) * time.Second / clockTick
}

// othersMeter sums, over a measurement's runs, the CPU time other
// processes spent and the wall time the runs took.
type othersMeter struct {
	others, wall, start time.Duration
	unknown             bool
}

func (m *othersMeter) begin()      { m.start = cpuBusy() }
func (m *othersMeter) end(run Run) { m.add(m.start, cpuBusy(), run) }
func (m *othersMeter) add(start, now time.Duration, run Run) {
	if start < 0 || now < 0 {
		m.unknown = true
		return
	}
	m.others += max(0, now-start-run.User-run.Sys)
	m.wall += run.Wall
}

// cores is the others' mean use in cores, -1 when unknown. Counted in
// ticks of 10 ms, it swings over short runs: it is held to the CPUs.
func (m *othersMeter) cores() float64 {
	if m.unknown || m.wall <= 0 {
		return -1
	}
	return min(m.others.Seconds()/m.wall.Seconds(), float64(runtime.NumCPU()))
}

// add keeps a row.
func (h *harness) add(r *Result) {
	if h.collect != nil {
		*h.collect = append(*h.collect, r)
	} else {
		h.results = append(h.results, r)
	}
}

// measure runs one spec and keeps its row.
func (h *harness) measure(ctx context.Context, s Spec) error {
	r, err := h.measureRow(ctx, s)
	if err == nil {
		h.add(r)
	}
	return err
}

// unavailable keeps the row of a tool that could not be had.
func (h *harness) unavailable(group, name, why string) {
	h.logf("%s/%s: not available: %s", group, name, why)
	h.add(unavailable(group, name, why))
}

// group is the rows of one table, in the order measured.
func (h *harness) group(name string) []*Result {
	var rows []*Result
	for _, r := range h.results {
		if r.Group == name {
			rows = append(rows, r)
		}
	}
	return rows
}

// find is the row of group named name, or nil.
func (h *harness) find(group, name string) *Result {
	rows := h.group(group)
	if i := slices.IndexFunc(rows, func(r *Result) bool { return r.Name == name }); i >= 0 {
		return rows[i]
	}
	return nil
}

// rows is a group's rows, or none after saying so.
func (h *harness) rows(w io.Writer, group string) []*Result {
	rows := h.group(group)
	if len(rows) == 0 {
		fmt.Fprintf(w, "_No results for %s: see the log of the run._\n", group)
	}
	return rows
}

// stream writes a group as a stream table.
func (h *harness) stream(w io.Writer, group, rate string, cpuPerRecord bool) {
	if rows := h.rows(w, group); len(rows) > 0 {
		streamTable(w, rows, rate, cpuPerRecord)
	}
}

// writeFile puts a file in place whole or not at all.
func writeFile(path string, data []byte) error {
	return jsonl.WriteFile(path, jsonl.CreateFileOptions{Replace: true}, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
