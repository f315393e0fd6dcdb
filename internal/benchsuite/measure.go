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
// and output are accounted for. The harness (RunCmd) and `benchsuite time`
// both measure through it.
type Spec struct {
	Group, Name string
	Ours        bool // tokenmill's row: the group's other rows are compared with it
	Note        string
	Size        string // input size label (growth tables)
	Runs        int
	Bytes       int64    // input bytes, for MB/s
	BytesOf     []string // files whose sizes add up to more input bytes
	Records     int64    // input records, for records/s
	Stdin       string   // file fed to stdin (empty: nothing)
	Stdout      string   // where stdout goes, emptied before each run (empty: a temporary file)
	Count       []string // globs whose lines are the output, instead of stdout
	NoCount     bool
	Clean       []string // removed before each run and after the last
	Mkdir       []string // made empty before each run, removed after the last
	Shell       bool     // Argv is one bash script, e.g. a peer's pipeline
	Show        string   // the command as shown (default: Argv quoted for a shell)
	Exit        []int    // exit codes that count as success (default: 0)
	Timeout     time.Duration
	StderrFile  string   // keeps the last run's stderr
	Alias       []string // OLD=NEW: NEW is shown in place of OLD
	Rusage      string   // the rusage helper (internal/cmd/rusage), for exact small peaks
	Dir         string   // working directory; relative paths above are resolved against it
	Env         []string // the command's environment (nil: this process's)
	// Fresh, when set, starts what each run needs afresh (a server whose
	// clock starts with the run) before the run's clock starts; it returns
	// the words that replace placeholders in Argv for that run, and a stop
	// called once the run is over.
	Fresh func(ctx context.Context) (replace map[string]string, stop func(), err error)
	Argv  []string
}

// unavailable is the row of a tool that could not be measured, and why.
func unavailable(group, name, why string) *Result {
	return &Result{Group: group, Name: name, OutRecords: -1, Load1: loadAverage(), Note: "not available: " + why}
}

// path resolves a path of the spec against its working directory.
func (s *Spec) path(p string) string {
	if s.Dir == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(s.Dir, p)
}

// command is the argv run and the text shown for it.
func (s *Spec) command() (argv []string, show string, err error) {
	argv, show = s.Argv, s.Show
	if len(argv) == 0 {
		return nil, "", fmt.Errorf("%s/%s: no command to run", s.Group, s.Name)
	}
	if s.Shell {
		if len(argv) != 1 {
			return nil, "", fmt.Errorf("%s/%s: a shell command is one script", s.Group, s.Name)
		}
		if show == "" {
			show = argv[0]
		}
		argv = []string{"bash", "-o", "pipefail", "-c", argv[0]}
	} else if show == "" {
		show = shellJoin(argv)
	}
	for _, a := range s.Alias {
		old, repl, ok := strings.Cut(a, "=")
		if !ok || old == "" {
			return nil, "", fmt.Errorf("alias %q: want OLD=NEW", a)
		}
		show = strings.ReplaceAll(show, old, repl)
	}
	return argv, show, nil
}

// Measure runs the command s.Runs times and returns its row. A run that
// fails, or writes a different number of records than the first, fails the
// measurement: nothing half-measured is reported.
func Measure(ctx context.Context, s Spec, logf func(string, ...any)) (*Result, error) {
	argv, show, err := s.command()
	if err != nil {
		return nil, err
	}
	if s.Runs < 1 {
		return nil, fmt.Errorf("%s/%s: runs must be at least 1", s.Group, s.Name)
	}
	if s.Timeout <= 0 {
		s.Timeout = 30 * time.Minute
	}
	if len(s.Exit) == 0 {
		s.Exit = []int{0}
	}
	res := &Result{Group: s.Group, Name: s.Name, Ours: s.Ours, Command: show, Note: s.Note, Size: s.Size,
		Bytes: s.Bytes, Records: s.Records, OutRecords: -1, Load1: loadAverage()}
	for _, f := range s.BytesOf {
		st, err := os.Stat(s.path(f))
		if err != nil {
			return nil, err
		}
		res.Bytes += st.Size()
	}

	stdout := s.Stdout
	if stdout == "" {
		f, err := os.CreateTemp("", "benchsuite-stdout-*")
		if err != nil {
			return nil, err
		}
		f.Close()
		stdout = f.Name()
		defer os.Remove(stdout)
	} else {
		stdout = s.path(stdout)
	}
	defer func() {
		for _, p := range append(s.Clean, s.Mkdir...) {
			os.RemoveAll(s.path(p))
		}
	}()

	var others othersMeter
	for i := 0; i < s.Runs; i++ {
		if err := s.prepare(); err != nil {
			return nil, err
		}
		others.begin()
		run, floor, stderr, err := s.runFresh(ctx, argv, stdout)
		others.end(run)
		if s.StderrFile != "" {
			os.WriteFile(s.path(s.StderrFile), stderr, 0o644)
		}
		if err != nil {
			return nil, fmt.Errorf("%s/%s run %d: %v\n%s", s.Group, s.Name, i+1, err, tail(stderr, 2000))
		}
		res.Runs = append(res.Runs, run)
		res.RSSFloorKB = max(res.RSSFloorKB, floor)
		if s.NoCount {
			continue
		}
		n, err := s.countOutput(stdout)
		if err != nil {
			return nil, err
		}
		if i > 0 && n != res.OutRecords {
			return nil, fmt.Errorf("%s/%s: run %d wrote %d records, run 1 wrote %d", s.Group, s.Name, i+1, n, res.OutRecords)
		}
		res.OutRecords = n
	}
	if res.Metrics == nil {
		res.Metrics = map[string]float64{}
	}
	res.Metrics["others_cores"] = others.cores()
	if logf != nil {
		logf("%s", describe(res))
	}
	return res, nil
}

// prepare clears what an earlier run left.
func (s *Spec) prepare() error {
	for _, p := range s.Clean {
		if err := os.RemoveAll(s.path(p)); err != nil {
			return err
		}
	}
	for _, d := range s.Mkdir {
		if err := os.RemoveAll(s.path(d)); err != nil {
			return err
		}
		if err := os.MkdirAll(s.path(d), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// runFresh starts what the run needs afresh, if anything, fills its
// placeholders in, and runs the command once.
func (s *Spec) runFresh(ctx context.Context, argv []string, stdout string) (Run, int64, []byte, error) {
	if s.Fresh == nil {
		return s.runOnce(ctx, argv, stdout)
	}
	replace, stop, err := s.Fresh(ctx)
	if err != nil {
		return Run{}, 0, nil, err
	}
	defer stop()
	filled := make([]string, len(argv))
	for i, a := range argv {
		for old, repl := range replace {
			a = strings.ReplaceAll(a, old, repl)
		}
		filled[i] = a
	}
	return s.runOnce(ctx, filled, stdout)
}

// runOnce runs the command with stdout emptied first, and returns its
// wall time, CPU time (its own and that of the children it waited for),
// peak RSS (the largest single process's) from wait4's rusage, and the
// floor under that peak: the spawning process's own peak RSS.
func (s *Spec) runOnce(ctx context.Context, argv []string, stdout string) (run Run, floor int64, stderr []byte, err error) {
	out, err := os.OpenFile(stdout, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return run, 0, nil, err
	}
	defer out.Close()
	var stats string
	if s.Rusage != "" {
		f, err := os.CreateTemp("", "benchsuite-rusage-*")
		if err != nil {
			return run, 0, nil, err
		}
		f.Close()
		stats = f.Name()
		defer os.Remove(stats)
		argv = append([]string{s.Rusage, stats}, argv...)
	}
	// The previous run's output is still being written back to disk; flush
	// it now so that its writeback is not timed as this run's.
	syscall.Sync()
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = s.Dir, s.Env
	cmd.Stdout = out
	var errBuf bytes.Buffer
	cmd.Stderr = &limitedBuffer{buf: &errBuf, max: 1 << 20}
	if s.Stdin != "" {
		in, err := os.Open(s.path(s.Stdin))
		if err != nil {
			return run, 0, nil, err
		}
		defer in.Close()
		cmd.Stdin = in
	}
	floor = selfPeakRSSKB()
	start := time.Now()
	err = cmd.Run()
	run.Wall = time.Since(start)
	if cmd.ProcessState == nil {
		return run, 0, errBuf.Bytes(), err
	}
	if ctx.Err() != nil {
		if parent := context.Cause(ctx); errors.Is(parent, context.DeadlineExceeded) {
			return run, 0, errBuf.Bytes(), fmt.Errorf("timed out after %v", s.Timeout)
		}
		return run, 0, errBuf.Bytes(), context.Cause(ctx)
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return run, 0, errBuf.Bytes(), err
	}
	code := cmd.ProcessState.ExitCode()
	if stats != "" {
		data, err := os.ReadFile(stats)
		var v [6]int64
		if err == nil {
			_, err = fmt.Sscan(string(data), &v[0], &v[1], &v[2], &v[3], &v[4], &v[5])
		}
		if err != nil {
			return run, 0, errBuf.Bytes(), fmt.Errorf("%s left no figures (exit status %d): %v", s.Rusage, code, err)
		}
		code = int(v[0])
		run = Run{Wall: time.Duration(v[1]), User: time.Duration(v[2]), Sys: time.Duration(v[3]), MaxRSSKB: v[4]}
		floor = v[5]
	} else if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		run.User = time.Duration(ru.Utime.Nano())
		run.Sys = time.Duration(ru.Stime.Nano())
		run.MaxRSSKB = ru.Maxrss
	}
	if !slices.Contains(s.Exit, code) {
		return run, floor, errBuf.Bytes(), fmt.Errorf("exit status %d", code)
	}
	return run, floor, errBuf.Bytes(), nil
}

// countOutput counts the lines written: of stdout, or of the Count files.
func (s *Spec) countOutput(stdout string) (int64, error) {
	files := []string{stdout}
	if len(s.Count) > 0 {
		files = nil
		for _, pattern := range s.Count {
			m, err := filepath.Glob(s.path(pattern))
			if err != nil {
				return 0, err
			}
			files = append(files, m...)
		}
	}
	var n int64
	for _, f := range files {
		k, err := countLines(f)
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
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
		}
		if err != nil {
			return 0, err
		}
	}
	if last != '\n' {
		n++
	}
	return n, nil
}

// limitedBuffer keeps the last max bytes written to it at most (roughly):
// a chatty command cannot fill the memory being measured around it.
type limitedBuffer struct {
	buf *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.buf.Write(p)
	if l.buf.Len() > l.max {
		keep := l.buf.Bytes()[l.buf.Len()-l.max/2:]
		nb := bytes.NewBuffer(append([]byte(nil), keep...))
		*l.buf = *nb
	}
	return len(p), nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// shellJoin quotes argv the way a POSIX shell would read it back.
func shellJoin(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		parts[i] = shellQuote(a)
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,+@%{}", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// describe is the one-line summary of a result, for the log.
func describe(r *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s", r.Group, r.Name)
	if r.Size != "" {
		fmt.Fprintf(&b, " [%s]", r.Size)
	}
	if v, ok := r.Metric("wall_s"); ok {
		fmt.Fprintf(&b, ": median of %d, %.2f s", len(r.Runs), v)
	}
	if v, ok := r.Metric("mbps"); ok {
		fmt.Fprintf(&b, ", %.1f MB/s", v)
	}
	if v, ok := r.Metric("rps"); ok {
		fmt.Fprintf(&b, ", %.0f records/s", v)
	}
	if v, ok := r.Metric("cpu_s"); ok {
		fmt.Fprintf(&b, ", CPU %.2f s", v)
	}
	if v, ok := r.Metric("rss_mb"); ok {
		fmt.Fprintf(&b, ", peak RSS %.1f MB", v)
	}
	if r.OutRecords >= 0 {
		fmt.Fprintf(&b, ", %d records out", r.OutRecords)
	}
	fmt.Fprintf(&b, " (load %.2f", r.Load1)
	if v, ok := r.Metric("others_cores"); ok && v >= 0 {
		fmt.Fprintf(&b, ", others %.2f cores", v)
	}
	b.WriteString(")")
	return b.String()
}
