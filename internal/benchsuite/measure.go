package benchsuite

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/lifeline"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
	"tokenmill/lib/serve"
)

// Spec is one measured command: what to run, how often, and how its input
// and output are accounted for.
type Spec struct {
	Group, Name string
	Ours        bool // tokenmill's row: the group's other rows are compared with it
	Note        string
	Size        string   // input size label (growth tables)
	Runs        int      // 0: the harness's --runs
	BytesOf     []string // input files, for MB/s (and records/s, their lines)
	Records     int64    // input records, for records/s (0: the lines of BytesOf)
	Stdin       string   // file fed to stdin, shown as "< file"
	Stdout      string   // where stdout goes (empty: a temporary file)
	Count       []string // globs whose lines are the output, instead of stdout
	NoCount     bool
	Clean       []string // removed before each run and after the last
	Mkdir       []string // made empty before each run, removed after the last
	Shell       bool     // Argv is one bash script, e.g. a peer's pipeline
	Exit        []int    // exit codes that count as success (default: 0)
	Alias       []string // OLD=NEW: NEW is shown in place of OLD
	// Fresh starts what a run needs afresh (a server whose clock starts with
	// it) before its clock starts: words for Argv's placeholders, and a stop.
	Fresh func(ctx context.Context) (replace map[string]string, stop func(), err error)
	Argv  []string
}

const runTimeout = 30 * time.Minute

// measureRow runs a spec's runs in the scratch directory with the built
// tools and returns its row. A run that fails, or writes a different number
// of records than the first, fails it: nothing half-measured is reported.
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
	res := &Result{Group: s.Group, Name: s.Name, Ours: s.Ours, Command: show, Note: s.Note, Size: s.Size, OutRecords: -1, Load1: loadAverage()}
	var inputs []string
	for _, f := range s.BytesOf {
		if st, err := os.Stat(h.path(f)); err == nil { // one missing fails countLines
			res.Bytes += st.Size()
		}
		inputs = append(inputs, h.path(f))
	}
	lines, err := countLines(inputs...)
	if err != nil {
		return nil, err
	}
	res.Records = cmp.Or(s.Records, lines)
	stdout := h.path(cmp.Or(s.Stdout, fmt.Sprintf("tmp/stdout-%d", time.Now().UnixNano())))
	stderr := h.path("logs/" + s.Group + "-" + regexp.MustCompile(`[^a-zA-Z0-9]`).ReplaceAllString(s.Name, "_") + ".err")
	if s.Stdout == "" {
		defer os.Remove(stdout)
	}
	clean := func() {
		for _, p := range append(s.Clean, s.Mkdir...) {
			os.RemoveAll(h.path(p))
		}
	}
	defer clean()
	var busy [][2]time.Duration // the CPU time all processes had spent at each run's start and end
	for i := range cmp.Or(s.Runs, h.runs) {
		clean()
		for _, d := range s.Mkdir {
			os.MkdirAll(h.path(d), 0o755) // a failure shows as the command's
		}
		args := argv
		if s.Fresh != nil {
			replace, stop, err := s.Fresh(ctx)
			if err != nil {
				return nil, err
			}
			defer stop()
			args = slices.Clone(argv)
			for old, repl := range replace {
				for k := range args {
					args[k] = strings.ReplaceAll(args[k], old, repl)
				}
			}
		}
		start := cpuBusy()
		run, floor, err := h.runOnce(ctx, &s, args, stdout, stderr)
		busy = append(busy, [2]time.Duration{start, cpuBusy()})
		if err != nil {
			log, _ := os.ReadFile(stderr)
			return nil, fmt.Errorf("%s/%s run %d: %v\n%s", s.Group, s.Name, i+1, err, tail(log, 2000))
		}
		res.Runs, res.RSSFloorKB = append(res.Runs, run), max(res.RSSFloorKB, floor)
		if s.NoCount {
			continue
		}
		files := []string{stdout}
		if len(s.Count) > 0 {
			files = nil
		}
		for _, pattern := range s.Count {
			m, _ := filepath.Glob(h.path(pattern))
			files = append(files, m...)
		}
		n, err := countLines(files...)
		if err != nil {
			return nil, err
		} else if i > 0 && n != res.OutRecords {
			return nil, fmt.Errorf("%s/%s: run %d wrote %d records, run 1 wrote %d", s.Group, s.Name, i+1, n, res.OutRecords)
		}
		res.OutRecords = n
	}
	res.Metrics = map[string]float64{"others_cores": othersCores(busy, res.Runs)}
	m := res.medianRun()
	h.logf("%s/%s %s: median of %d, %.2f s, CPU %.2f s, peak RSS %.1f MB, %d records out (load %.2f, others %.2f cores)", s.Group, s.Name, s.Size,
		len(res.Runs), m.Wall.Seconds(), (m.User + m.Sys).Seconds(), float64(m.MaxRSSKB)/1024, res.OutRecords, res.Load1, res.Metrics["others_cores"])
	return res, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// runOnce runs the command through the rusage helper, stdout emptied first:
// its wall and CPU time (with its children's), the largest single process's
// peak RSS, and the floor under that peak (the spawning process's own).
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
	ctx, cancel := context.WithTimeoutCause(ctx, runTimeout, fmt.Errorf("timed out after %v", runTimeout))
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
	if err = cmd.Run(); ctx.Err() != nil {
		return Run{}, 0, context.Cause(ctx)
	}
	var run Run
	var code, floor int64
	data, _ := os.ReadFile(stats) // none: the scan says so
	if _, serr := fmt.Sscan(string(data), &code, &run.Wall, &run.User, &run.Sys, &run.MaxRSSKB, &floor); serr != nil {
		return Run{}, 0, fmt.Errorf("the rusage helper left no figures (%v): %v", err, serr)
	}
	if !slices.Contains(s.Exit, int(code)) && (len(s.Exit) > 0 || code != 0) {
		return run, floor, fmt.Errorf("exit status %d", code)
	}
	return run, floor, nil
}

// countLines counts the lines of files, a last one without a newline too.
func countLines(paths ...string) (n int64, err error) {
	buf := make([]byte, 1<<20)
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return 0, err
		}
		last := byte('\n')
		for err == nil {
			var k int
			if k, err = f.Read(buf); k > 0 {
				n, last = n+int64(bytes.Count(buf[:k], []byte{'\n'})), buf[k-1]
			}
		}
		f.Close()
		if n += int64(b2i(last != '\n')); err != io.EOF {
			return 0, err
		}
	}
	return n, nil
}

func tail(b []byte, n int) string { return string(b[max(0, len(b)-n):]) }

// shellJoin quotes argv the way a POSIX shell would read it back.
var shellJoin = serve.ShellJoin

func (h *harness) add(r *Result) {
	to := cmp.Or(h.collect, &h.results)
	*to = append(*to, r)
}

// unavailable keeps the row of a tool that could not be had.
func (h *harness) unavailable(group, name, why string) {
	h.logf("%s/%s: not available: %s", group, name, why)
	h.add(unavailable(group, name, why))
}

// group is the rows of one table, in the order measured.
func (h *harness) group(name string) []*Result {
	return slices.DeleteFunc(slices.Clone(h.results), func(r *Result) bool { return r.Group != name })
}

func (h *harness) find(group, name string) *Result {
	for _, r := range h.results {
		if r.Group == group && r.Name == name {
			return r
		}
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

// simProc is an llmsim the harness started in the background, under a
// lifeline: no llmsim outlives the run, however it ends.
type simProc struct {
	urls []string
	dir  string
	stop func() // SIGTERM (llmsim then writes its summary and request log), or kill
}

// startSim starts llmsim with endpoints endpoints on free loopback ports
// and flags, its output appended to log, and returns once it listens.
func (h *harness) startSim(ctx context.Context, endpoints int, log string, flags ...string) (*simProc, error) {
	dir, err := os.MkdirTemp(h.path("tmp"), "llmsim-")
	if err != nil {
		return nil, err
	}
	ready := filepath.Join(dir, "urls")
	proc, err := lifeline.Start("llmsim", dir, h.environ, log, append([]string{h.tool("llmsim"), "--listen",
		strings.TrimSuffix(strings.Repeat("127.0.0.1:0,", endpoints), ","), "--ready-file", ready}, flags...)...)
	s := &simProc{dir: dir, stop: func() {
		if proc != nil {
			proc.Stop(h.logf)
		}
		os.RemoveAll(dir)
	}}
	ctx, cancel := context.WithTimeoutCause(ctx, 30*time.Second, fmt.Errorf("not ready after 30 s"))
	defer cancel()
	for err == nil && len(s.urls) != endpoints {
		select {
		case <-proc.Done():
			err = fmt.Errorf("exited before it was ready")
		case <-ctx.Done():
			err = context.Cause(ctx)
		case <-time.After(20 * time.Millisecond):
			data, _ := os.ReadFile(ready)
			s.urls = strings.Fields(string(data))
		}
	}
	if err != nil {
		s.stop()
		data, _ := os.ReadFile(log)
		return nil, fmt.Errorf("llmsim %s: %v\n%s", strings.Join(flags, " "), err, tail(data, 2000))
	}
	return s, nil
}

// dataStep makes one data file in the scratch directory with a shell
// command of tokenmill's tools (a template of the report's view: the sizes
// are .Sz), then keeps the lines keep accepts where no tool can.
type dataStep struct {
	name string
	deps []string // steps whose files this one reads
	file string
	cmd  string
	keep func(line []byte) bool // nil: every line
}

// dataSteps are every data file a section can need, each after the ones
// it is made from.
var dataSteps = []*dataStep{
	{name: "corpus", file: "data/corpus.jsonl", cmd: "corpus --force -n {{.Sz.Main}} -o data/corpus.jsonl"},
	{name: "corpus-parquet", file: "data/corpus.parquet", cmd: "corpus --force -n {{.Sz.Main}} -o data/corpus.parquet"},
	{name: "prompts", file: "data/prompts.jsonl", deps: []string{"corpus"}, cmd: "extract --force --progress 0 -o data/prompts.jsonl data/corpus.jsonl"},
	{name: "gens", file: "data/gens.jsonl", deps: []string{"prompts"}, cmd: "benchsuite generations --rerun data/rerun.jsonl -o data/gens.jsonl data/prompts.jsonl"},
	{name: "prompts-slurp", file: "data/prompts-slurp.jsonl", deps: []string{"prompts"}, cmd: "head -n {{.Sz.Slurp}} data/prompts.jsonl > data/prompts-slurp.jsonl"},
	{name: "gens-slurp", file: "data/gens-slurp.jsonl", deps: []string{"prompts-slurp"},
		cmd: "benchsuite generations --rerun data/rerun-slurp.jsonl -o data/gens-slurp.jsonl data/prompts-slurp.jsonl"},
	{name: "corpus-big", file: "data/corpus-big.jsonl", cmd: "corpus --force -n {{.Sz.Big}} -o data/corpus-big.jsonl"},
	{name: "prompts-big", file: "data/prompts-big.jsonl", deps: []string{"corpus-big"}, cmd: "extract --force --progress 0 -o data/prompts-big.jsonl data/corpus-big.jsonl"},
	{name: "filter-gens", file: "data/filter-gens.jsonl", deps: []string{"corpus"},
		cmd: "benchsuite filter-gens --bytes {{.Sz.FilterBytes}} -o data/filter-gens.jsonl data/corpus.jsonl"},
	// The whole lines of the first FilterLangBytes of filter-gens.
	{name: "filter-gens-lang", file: "data/filter-gens-lang.jsonl", deps: []string{"filter-gens"},
		cmd: "head -c {{.Sz.FilterLangBytes}} data/filter-gens.jsonl > data/filter-gens-lang.jsonl", keep: func(line []byte) bool { return line[len(line)-1] == '\n' }},
	{name: "prompts-exact", file: "data/prompts-exact.jsonl", cmd: "corpus -n {{.Sz.Exact}} | extract --progress 0 > data/prompts-exact.jsonl"},
	{name: "servers-prompts", file: "data/servers-prompts.jsonl", cmd: "corpus -n 10000 | extract --progress 0 > data/servers-prompts.jsonl"},
	// The conversations of 3 questions or more.
	{name: "regen", file: "data/regen.jsonl", cmd: "corpus -n {{.Sz.RegenCorpus}} --conversations --seed 1 | extract --turns all --progress 0 > data/regen.jsonl",
		keep: func(line []byte) bool {
			var c struct{ Messages []message }
			return json.Unmarshal(line, &c) == nil && userTurns(c.Messages) >= 3
		}},
	// Alpaca's English instructions where the real datasets are, else the corpus's.
	{name: "ollama-prompts", file: "data/ollama-prompts.jsonl", cmd: `{{with shared "real/alpaca_en_demo.json"}}extract --progress 0 {{.}} | dedup` +
		`{{else}}corpus -n 10000 | extract --progress 0{{end}} | sed -n 1,{{.Sz.OllamaPrompts}}p > data/ollama-prompts.jsonl`},
	{name: "prompts-sources", file: "data/prompts-sources.jsonl", deps: []string{"corpus"},
		cmd: "extract --force --progress 0 --keep source -o data/prompts-sources.jsonl data/corpus.jsonl"},
}

func (h *harness) makeData(ctx context.Context, steps []*dataStep) error {
	for _, st := range steps {
		h.logf("data: making %s", st.file)
		script, err := h.command(st)
		if err == nil {
			err = h.sh(ctx, script)
		}
		if err == nil && st.keep != nil {
			err = copyLines(h.path(st.file), h.path(st.file), 0, st.keep)
		}
		if err != nil {
			return fmt.Errorf("making %s: %w", st.file, err)
		}
	}
	return nil
}

// command is a step's command with the run's figures.
func (h *harness) command(st *dataStep) (string, error) {
	var b strings.Builder
	t, err := h.templates().New(st.name).Parse(st.cmd)
	if err == nil {
		err = t.Execute(&b, h.view())
	}
	return b.String(), err
}

// sh runs a shell command of tokenmill's tools from the scratch directory,
// unmeasured, its diagnostics in logs/data.log.
func (h *harness) sh(ctx context.Context, script string) error {
	log, err := os.OpenFile(h.path("logs/data.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	fmt.Fprintf(log, "== %s\n", script)
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", script)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = h.dir, h.environ, log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v (see logs/data.log)", script, err)
	}
	return nil
}

// shared is a file of ../shared/data beside the repository, or "".
func (h *harness) shared(rel string) string {
	d := h.repo
	for range 5 {
		d = filepath.Dir(d)
		if p := filepath.Join(d, "shared", "data", rel); fileExists(p) {
			return p
		}
	}
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

type message = record.Message

func userTurns(msgs []message) (n int) {
	for _, m := range msgs {
		n += b2i(m.Role == "user")
	}
	return n
}

// head writes the first n whole lines of a data file to another.
func (h *harness) head(src, dst string, n int) error {
	return copyLines(h.path(src), h.path(dst), n, nil)
}

// copyLines writes to dst the first n (0: all) whole lines of src that keep
// accepts (nil: all; keep sees a last line without its newline too). dst
// may be src: the new file replaces it once written.
func copyLines(src, dst string, n int, keep func([]byte) bool) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return jsonl.WriteFile(dst, jsonl.CreateFileOptions{Replace: true}, func(w io.Writer) error {
		br, bw := bufio.NewReaderSize(in, 1<<20), bufio.NewWriterSize(w, 1<<20)
		for lines := 0; n == 0 || lines < n; {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 && (keep == nil && err == nil || keep != nil && keep(line)) {
				bw.Write(line)
				lines++
			}
			if err == io.EOF {
				break
			} else if err != nil {
				return err
			}
		}
		return bw.Flush()
	})
}
