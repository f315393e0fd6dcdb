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

	"tokenmill/lib/cli"
)

// TimeCmd runs a command --runs times and records each run.
type TimeCmd struct {
	Results     string        `help:"Append the result to this JSONL file." required:""`
	Group       string        `help:"Table the result belongs to." required:""`
	Name        string        `help:"Row name, e.g. the tool." required:""`
	Ours        bool          `help:"This is tokenmill's row: the group's other rows are compared with it."`
	Note        string        `help:"A remark shown with the row."`
	Size        string        `help:"Input size label (growth tables)."`
	Runs        int           `help:"Times to run the command; the median run is reported." default:"3"`
	Bytes       int64         `help:"Input bytes, for MB/s." default:"0"`
	BytesOf     []string      `help:"Input files whose sizes add up to the input bytes." sep:"none"`
	Records     int64         `help:"Input records, for records/s." default:"0"`
	Stdin       string        `help:"Feed this file to the command's stdin (default: nothing)."`
	Stdout      string        `help:"Write the command's stdout here (opened for appending, emptied before each run; default: a temporary file, removed at the end)."`
	Count       []string      `help:"Count the lines of these files (globs allowed) as the output, instead of stdout." sep:"none"`
	NoCount     bool          `help:"Do not count output lines."`
	Clean       []string      `help:"Remove this path before each run and after the last one." sep:"none"`
	Mkdir       []string      `help:"Create this directory (empty) before each run; removed after the last one." sep:"none"`
	Shell       bool          `help:"The command is one bash script (bash -c), e.g. a pipeline."`
	Show        string        `help:"The command as shown in the table (default: the command, quoted as for a shell)."`
	Exit        []int         `help:"Exit codes that count as success." default:"0"`
	Timeout     time.Duration `help:"Longest time one run may take." default:"30m"`
	StderrOut   string        `help:"Keep the last run's stderr in this file." name:"stderr"`
	Alias       []string      `help:"OLD=NEW: show NEW for OLD in the command shown, e.g. a random port (repeatable)." sep:"none"`
	Unavailable string        `help:"Do not run: record the row as not available, for this reason."`
	Rusage      string        `help:"Run commands through this rusage helper (built from pipelines/bench/rusage), whose small footprint makes small peak RSS figures exact; without it they read as at least this program's own (~12 MB)."`
	Argv        []string      `arg:"" passthrough:"" help:"The command and its arguments (after --)."`
}

// Run measures the command.
func (c *TimeCmd) Run(ctx context.Context, env *cli.Env) error {
	argv := c.Argv
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return cli.Usagef("no command to run (put it after --)")
	}
	if c.Runs < 1 {
		return cli.Usagef("--runs must be at least 1")
	}
	show := c.Show
	if c.Shell {
		if len(argv) != 1 {
			return cli.Usagef("--shell takes the script as one argument")
		}
		if show == "" {
			show = argv[0]
		}
		argv = []string{"bash", "-o", "pipefail", "-c", argv[0]}
	} else if show == "" {
		show = shellJoin(argv)
	}
	for _, a := range c.Alias {
		old, repl, ok := strings.Cut(a, "=")
		if !ok || old == "" {
			return cli.Usagef("--alias %q: want OLD=NEW", a)
		}
		show = strings.ReplaceAll(show, old, repl)
	}
	res := &Result{Group: c.Group, Name: c.Name, Ours: c.Ours, Command: show, Note: c.Note, Size: c.Size,
		Bytes: c.Bytes, Records: c.Records, OutRecords: -1, Load1: loadAverage()}
	if c.Unavailable != "" {
		res.Note, res.Command = "not available: "+c.Unavailable, ""
		env.Logf("%s/%s: not available: %s", c.Group, c.Name, c.Unavailable)
		return appendResult(c.Results, res)
	}
	for _, f := range c.BytesOf {
		st, err := os.Stat(f)
		if err != nil {
			return err
		}
		res.Bytes += st.Size()
	}

	stdout := c.Stdout
	if stdout == "" {
		f, err := os.CreateTemp("", "benchmark-stdout-*")
		if err != nil {
			return err
		}
		f.Close()
		stdout = f.Name()
		defer os.Remove(stdout)
	}
	defer func() {
		for _, p := range append(c.Clean, c.Mkdir...) {
			os.RemoveAll(p)
		}
	}()

	for i := 0; i < c.Runs; i++ {
		if err := c.prepare(); err != nil {
			return err
		}
		// The previous run's output is still being written back to disk;
		// flush it now so that its writeback is not timed as this run's.
		syscall.Sync()
		run, floor, stderr, err := c.runOnce(ctx, argv, stdout)
		if c.StderrOut != "" {
			os.WriteFile(c.StderrOut, stderr, 0o644)
		}
		if err != nil {
			return fmt.Errorf("%s/%s run %d: %v\n%s", c.Group, c.Name, i+1, err, tail(stderr, 2000))
		}
		res.Runs = append(res.Runs, run)
		res.RSSFloorKB = max(res.RSSFloorKB, floor)
		if c.NoCount {
			continue
		}
		n, err := c.countOutput(stdout)
		if err != nil {
			return err
		}
		if i > 0 && n != res.OutRecords {
			return fmt.Errorf("%s/%s: run %d wrote %d records, run 1 wrote %d", c.Group, c.Name, i+1, n, res.OutRecords)
		}
		res.OutRecords = n
	}
	if err := appendResult(c.Results, res); err != nil {
		return err
	}
	env.Logf("%s", describe(res))
	return nil
}

// prepare clears what an earlier run left.
func (c *TimeCmd) prepare() error {
	for _, p := range c.Clean {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	for _, d := range c.Mkdir {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// runOnce runs the command with stdout emptied first, and returns its
// wall time, CPU time (its own and that of the children it waited for),
// peak RSS (the largest single process's) from wait4's rusage, and the
// floor under that peak: the spawning process's own peak RSS.
func (c *TimeCmd) runOnce(ctx context.Context, argv []string, stdout string) (run Run, floor int64, stderr []byte, err error) {
	out, err := os.OpenFile(stdout, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return run, 0, nil, err
	}
	defer out.Close()
	var stats string
	if c.Rusage != "" {
		f, err := os.CreateTemp("", "benchmark-rusage-*")
		if err != nil {
			return run, 0, nil, err
		}
		f.Close()
		stats = f.Name()
		defer os.Remove(stats)
		argv = append([]string{c.Rusage, stats}, argv...)
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout = out
	var errBuf bytes.Buffer
	cmd.Stderr = &limitedBuffer{buf: &errBuf, max: 1 << 20}
	if c.Stdin != "" {
		in, err := os.Open(c.Stdin)
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
		return run, 0, errBuf.Bytes(), fmt.Errorf("timed out after %v", c.Timeout)
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
			return run, 0, errBuf.Bytes(), fmt.Errorf("%s left no figures (exit status %d): %v", c.Rusage, code, err)
		}
		code = int(v[0])
		run = Run{Wall: time.Duration(v[1]), User: time.Duration(v[2]), Sys: time.Duration(v[3]), MaxRSSKB: v[4]}
		floor = v[5]
	} else if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		run.User = time.Duration(ru.Utime.Nano())
		run.Sys = time.Duration(ru.Stime.Nano())
		run.MaxRSSKB = ru.Maxrss
	}
	if !slices.Contains(c.Exit, code) {
		return run, floor, errBuf.Bytes(), fmt.Errorf("exit status %d", code)
	}
	return run, floor, errBuf.Bytes(), nil
}

// countOutput counts the lines written: of stdout, or of the --count files.
func (c *TimeCmd) countOutput(stdout string) (int64, error) {
	files := []string{stdout}
	if len(c.Count) > 0 {
		files = nil
		for _, pattern := range c.Count {
			m, err := filepath.Glob(pattern)
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
	fmt.Fprintf(&b, " (load %.2f)", r.Load1)
	return b.String()
}
