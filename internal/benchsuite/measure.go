package benchsuite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Spec is one measured command: what to run, how often, and how its input
// and output are accounted for.
type Spec struct {
	Group, Name string
	Ours        bool // tokenmill's row: the group's other rows are compared with it
	Note        string
	Size        string // input size label (growth tables)
	Runs        int    // 0: the harness's --runs
	BytesOf     []string
	Records     int64    // input records, for records/s
	Stdin       string   // file fed to stdin, shown as "< file"
	Stdout      string   // where stdout goes (empty: a temporary file)
	Count       []string // globs whose lines are the output, instead of stdout
	NoCount     bool
	Clean       []string // removed before each run and after the last
	Mkdir       []string // made empty before each run, removed after the last
	Shell       bool     // Argv is one bash script, e.g. a peer's pipeline
	Exit        []int    // exit codes that count as success (default: 0)
	Alias       []string // OLD=NEW: NEW is shown in place of OLD
	// Fresh starts what each run needs afresh (a server whose clock starts
	// with the run) before the run's clock starts; it returns the words
	// that replace placeholders in Argv for that run, and a stop.
	Fresh func(ctx context.Context) (replace map[string]string, stop func(), err error)
	Argv  []string
}

// runTimeout is the longest one run may take.
const runTimeout = 30 * time.Minute

// measureRow runs a spec from the scratch directory with the built tools,
// through the rusage helper, its runs times, and returns its row. A run
// that fails, or writes a different number of records than the first,
// fails the measurement: nothing half-measured is reported.
func (h *harness) measureRow(ctx context.Context, s Spec) (*Result, error) {
	argv, show := s.Argv, shellJoin(s.Argv)
	if s.Shell {
		argv, show = []string{"bash", "-o", "pipefail", "-c", s.Argv[0]}, s.Argv[0]
	}
	if s.Stdin != "" {
		show += " < " + s.Stdin
	}
	for _, a := range append(s.Alias, h.aliases()...) {
		old, repl, _ := strings.Cut(a, "=")
		show = strings.ReplaceAll(show, old, repl)
	}
	if s.Runs == 0 {
		s.Runs = h.runs
	}
	res := &Result{Group: s.Group, Name: s.Name, Ours: s.Ours, Command: show, Note: s.Note, Size: s.Size,
		Records: s.Records, OutRecords: -1, Load1: loadAverage()}
	for _, f := range s.BytesOf {
		st, err := os.Stat(h.path(f))
		if err != nil {
			return nil, err
		}
		res.Bytes += st.Size()
	}
	stdout, stderr := h.path(s.Stdout), h.path("logs/"+s.Group+"-"+safeName(s.Name)+".err")
	if s.Stdout == "" {
		f, err := os.CreateTemp(h.path("tmp"), "stdout-*")
		if err != nil {
			return nil, err
		}
		f.Close()
		stdout = f.Name()
		defer os.Remove(stdout)
	}
	clean := func() {
		for _, p := range append(s.Clean, s.Mkdir...) {
			os.RemoveAll(h.path(p))
		}
	}
	defer clean()
	var others othersMeter
	for i := range s.Runs {
		clean()
		for _, d := range s.Mkdir {
			if err := os.MkdirAll(h.path(d), 0o755); err != nil {
				return nil, err
			}
		}
		others.begin()
		run, floor, err := h.runFresh(ctx, &s, argv, stdout, stderr)
		others.end(run)
		if err != nil {
			log, _ := os.ReadFile(stderr)
			return nil, fmt.Errorf("%s/%s run %d: %v\n%s", s.Group, s.Name, i+1, err, tail(log, 2000))
		}
		res.Runs = append(res.Runs, run)
		res.RSSFloorKB = max(res.RSSFloorKB, floor)
		if s.NoCount {
			continue
		}
		files := []string{stdout}
		if len(s.Count) > 0 {
			files = nil
			for _, pattern := range s.Count {
				m, _ := filepath.Glob(h.path(pattern))
				files = append(files, m...)
			}
		}
		var n int64
		for _, f := range files {
			k, err := countLines(f)
			if err != nil {
				return nil, err
			}
			n += k
		}
		if i > 0 && n != res.OutRecords {
			return nil, fmt.Errorf("%s/%s: run %d wrote %d records, run 1 wrote %d", s.Group, s.Name, i+1, n, res.OutRecords)
		}
		res.OutRecords = n
	}
	res.Metrics = map[string]float64{"others_cores": others.cores()}
	m := res.medianRun()
	h.logf("%s/%s %s: median of %d, %.2f s, CPU %.2f s, peak RSS %.1f MB, %d records out (load %.2f, others %.2f cores)", s.Group, s.Name, s.Size,
		len(res.Runs), m.Wall.Seconds(), (m.User + m.Sys).Seconds(), float64(m.MaxRSSKB)/1024, res.OutRecords, res.Load1, res.Metrics["others_cores"])
	return res, nil
}

// runFresh starts what the run needs afresh, if anything, fills its
// placeholders in, and runs the command once.
func (h *harness) runFresh(ctx context.Context, s *Spec, argv []string, stdout, stderr string) (Run, int64, error) {
	if s.Fresh != nil {
		replace, stop, err := s.Fresh(ctx)
		if err != nil {
			return Run{}, 0, err
		}
		defer stop()
		argv = slices.Clone(argv)
		for i := range argv {
			for old, repl := range replace {
				argv[i] = strings.ReplaceAll(argv[i], old, repl)
			}
		}
	}
	return h.runOnce(ctx, s, argv, stdout, stderr)
}

// runOnce runs the command through the rusage helper with stdout emptied
// first, and returns its wall time, CPU time (its own and its children's),
// the largest single process's peak RSS, and the floor under that peak:
// the spawning process's own.
func (h *harness) runOnce(ctx context.Context, s *Spec, argv []string, stdout, stderr string) (Run, int64, error) {
	out, err := os.Create(stdout)
	if err != nil {
		return Run{}, 0, err
	}
	defer out.Close()
	errf, err := os.Create(stderr)
	if err != nil {
		return Run{}, 0, err
	}
	defer errf.Close()
	stats := stdout + ".rusage"
	defer os.Remove(stats)
	// The previous run's output is still being written back to disk; flush
	// it now so that its writeback is not timed as this run's.
	syscall.Sync()
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.tool("rusage"), append([]string{stats}, argv...)...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = h.dir, h.environ, out, errf
	if s.Stdin != "" {
		in, err := os.Open(h.path(s.Stdin))
		if err != nil {
			return Run{}, 0, err
		}
		defer in.Close()
		cmd.Stdin = in
	}
	err = cmd.Run()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return Run{}, 0, fmt.Errorf("timed out after %v", runTimeout)
	} else if ctx.Err() != nil {
		return Run{}, 0, ctx.Err()
	}
	var v [6]int64
	data, rerr := os.ReadFile(stats)
	if rerr == nil {
		_, rerr = fmt.Sscan(string(data), &v[0], &v[1], &v[2], &v[3], &v[4], &v[5])
	}
	if rerr != nil {
		return Run{}, 0, fmt.Errorf("the rusage helper left no figures (%v): %v", err, rerr)
	}
	run := Run{Wall: time.Duration(v[1]), User: time.Duration(v[2]), Sys: time.Duration(v[3]), MaxRSSKB: v[4]}
	if code := int(v[0]); !slices.Contains(s.Exit, code) && (len(s.Exit) > 0 || code != 0) {
		return run, v[5], fmt.Errorf("exit status %d", code)
	}
	return run, v[5], nil
}

// countLines counts the lines of a file, a last line without a newline
// included.
func countLines(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	last := byte('\n')
	for {
		k, err := f.Read(buf)
		if k > 0 {
			n += int64(bytes.Count(buf[:k], []byte{'\n'}))
			last = buf[k-1]
		}
		if err == io.EOF {
			break
		} else if err != nil {
			return 0, err
		}
	}
	if last != '\n' {
		n++
	}
	return n, nil
}

func tail(b []byte, n int) string { return string(b[max(0, len(b)-n):]) }

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
}

// shellJoin quotes argv the way a POSIX shell would read it back.
func shellJoin(argv []string) string {
	parts := make([]string, len(argv))
	for i, s := range argv {
		parts[i] = s
		if s == "" || strings.IndexFunc(s, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,+@%{}", r))
		}) >= 0 {
			parts[i] = "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return strings.Join(parts, " ")
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
