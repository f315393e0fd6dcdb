package benchsuite

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/encoding/json"
)

// Run is one execution of a measured command. Durations are kept as
// integer nanoseconds in the file.
type Run struct {
	Wall     time.Duration `json:"-"`
	User     time.Duration `json:"-"`
	Sys      time.Duration `json:"-"`
	MaxRSSKB int64         `json:"max_rss_kb"`
}

type runJSON struct {
	Wall     int64 `json:"wall_ns"`
	User     int64 `json:"user_ns"`
	Sys      int64 `json:"sys_ns"`
	MaxRSSKB int64 `json:"max_rss_kb"`
}

// MarshalJSON writes the durations as nanoseconds.
func (r Run) MarshalJSON() ([]byte, error) {
	return json.Marshal(runJSON{int64(r.Wall), int64(r.User), int64(r.Sys), r.MaxRSSKB})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (r *Run) UnmarshalJSON(b []byte) error {
	var v runJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = Run{time.Duration(v.Wall), time.Duration(v.User), time.Duration(v.Sys), v.MaxRSSKB}
	return nil
}

// Result is one row of a table: a command measured over several runs.
type Result struct {
	Group   string `json:"group"`
	Name    string `json:"name"`
	Ours    bool   `json:"ours,omitempty"` // tokenmill's row, which the others are compared with
	Command string `json:"command"`
	Note    string `json:"note,omitempty"`
	Size    string `json:"size,omitempty"` // input size label, for growth tables
	Bytes   int64  `json:"bytes,omitempty"`
	Records int64  `json:"records,omitempty"`
	// OutRecords counts the lines the command wrote (to stdout, or to the
	// files it was told to count); -1 when not counted.
	OutRecords int64 `json:"out_records"`
	Runs       []Run `json:"runs,omitempty"`
	// RSSFloorKB is the measuring process's own peak RSS when the command
	// started: a child's peak RSS is reported as at least this much, since
	// the kernel carries the parent's peak into a child made by vfork.
	RSSFloorKB int64              `json:"rss_floor_kb,omitempty"`
	Load1      float64            `json:"load1"` // 1-minute load average when the measurement started
	Metrics    map[string]float64 `json:"metrics,omitempty"`
}

// median of the runs' wall times, and the same run's CPU time.
func (r *Result) medianRun() Run {
	if len(r.Runs) == 0 {
		return Run{}
	}
	runs := slices.Clone(r.Runs)
	slices.SortFunc(runs, func(a, b Run) int { return int(a.Wall - b.Wall) })
	return runs[(len(runs)-1)/2]
}

// Metric returns a named figure of the result: mbps, rps (records/s),
// wall_s, spread_pct, cpu_s, mb_per_cpu_s, rss_mb, or one of Metrics. ok is false when the figure
// does not exist for this result.
func (r *Result) Metric(name string) (float64, bool) {
	if v, ok := r.Metrics[name]; ok {
		return v, true
	}
	m := r.medianRun()
	switch name {
	case "mbps":
		if r.Bytes == 0 || m.Wall == 0 {
			return 0, false
		}
		return float64(r.Bytes) / 1e6 / m.Wall.Seconds(), true
	case "rps":
		if r.Records == 0 || m.Wall == 0 {
			return 0, false
		}
		return float64(r.Records) / m.Wall.Seconds(), true
	case "wall_s":
		return m.Wall.Seconds(), len(r.Runs) > 0
	case "spread_pct": // (slowest - fastest) / median wall time: how far one run can be trusted
		if len(r.Runs) < 2 || m.Wall == 0 {
			return 0, false
		}
		lo, hi := r.Runs[0].Wall, r.Runs[0].Wall
		for _, run := range r.Runs[1:] {
			lo, hi = min(lo, run.Wall), max(hi, run.Wall)
		}
		return 100 * float64(hi-lo) / float64(m.Wall), true
	case "cpu_s":
		return (m.User + m.Sys).Seconds(), len(r.Runs) > 0
	case "mb_per_cpu_s": // MB per CPU second: what one core does, whatever the load
		if r.Bytes == 0 || m.User+m.Sys == 0 {
			return 0, false
		}
		return float64(r.Bytes) / 1e6 / (m.User + m.Sys).Seconds(), true
	case "cpu_us_per_record":
		if r.Records == 0 || len(r.Runs) == 0 {
			return 0, false
		}
		return float64((m.User + m.Sys).Microseconds()) / float64(r.Records), true
	case "rss_mb":
		if len(r.Runs) == 0 {
			return 0, false
		}
		var peak int64
		for _, run := range r.Runs {
			peak = max(peak, run.MaxRSSKB)
		}
		return float64(peak) / 1024, true
	}
	return 0, false
}

// rssAtFloor reports whether the peak RSS is no more than the measuring
// process's own, so that the true figure is only known to be below it.
func (r *Result) rssAtFloor() bool {
	rss, ok := r.Metric("rss_mb")
	return ok && r.RSSFloorKB > 0 && rss*1024 <= float64(r.RSSFloorKB)*1.05
}

// appendResult adds one JSON line to the results file.
func appendResult(path string, r *Result) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readResults loads every result of the file, in order.
func readResults(path string) ([]*Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []*Result
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		r := new(Result)
		if err := json.Unmarshal(sc.Bytes(), r); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// loadAverage is the 1-minute load average, or -1 when unknown.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// selfPeakRSSKB is this process's peak RSS (VmHWM), 0 when unknown.
func selfPeakRSSKB() int64 {
	return procPeakRSSKB("self")
}

// procPeakRSSKB reads VmHWM of /proc/<pid>/status, 0 when unknown.
func procPeakRSSKB(pid string) int64 {
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			v, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return v
		}
	}
	return 0
}
