package benchsuite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// RunCmd is `just bench`: it builds the tools, makes the data, measures
// every section (or the ones named) next to the tools users would run
// instead, keeps the rows, and writes BENCHMARKS.md from them: the whole
// report when every section was measured, else each section measured
// spliced into the report in place of its old one.
type RunCmd struct {
	Section     []string `short:"s" help:"Sections to measure (comma-separated; default: all, and the report is written whole). Each one measured alone replaces its own part of --out. --list names them." sep:"," placeholder:"NAME" env:"TOKENMILL_BENCHSUITE_SECTION,BENCH_ONLY"`
	List        bool     `help:"Print the sections, with what each measures and the data it needs, and exit." env:"TOKENMILL_BENCHSUITE_LIST"`
	Render      bool     `help:"Measure nothing: write the report again from the rows the last run kept in --dir (results.jsonl, run.json)." env:"TOKENMILL_BENCHSUITE_RENDER"`
	Quick       bool     `help:"Small sizes: a smoke test of the harness (a few minutes), not figures to quote." env:"TOKENMILL_BENCHSUITE_QUICK,BENCH_QUICK"`
	Runs        int      `help:"Runs per measurement; the median is reported (short runs on a shared machine swing, and a median of 5 rides out one bad window)." default:"5" env:"TOKENMILL_BENCHSUITE_RUNS,BENCH_RUNS"`
	ServersRuns int      `help:"Runs per row of the in-flight tables, taken in turns (0: 3, or 1 with --quick)." default:"0" env:"TOKENMILL_BENCHSUITE_SERVERS_RUNS,SERVERS_RUNS"`
	Dir         string   `help:"Scratch directory: data, binaries, results and logs (default: .bench in the repository)." env:"TOKENMILL_BENCHSUITE_DIR,BENCH_DIR"`
	Out         string   `help:"The report (default: BENCHMARKS.md in the repository; with --quick, BENCHMARKS.md in --dir)." env:"TOKENMILL_BENCHSUITE_OUT,BENCH_OUT"`
	ReuseData   bool     `help:"Keep the data files an earlier run made with the same commands and sizes instead of making them again." env:"TOKENMILL_BENCHSUITE_REUSE_DATA,BENCH_REUSE_DATA"`
	Peers       string   `help:"Where .ci/install-peers put the peers it installs without root: node/ (the Node packages) and bin/ (the DuckDB peer) (default: $TOKENMILL_CACHE/bench, else ~/.cache/tokenmill/bench)." env:"TOKENMILL_BENCHSUITE_PEERS"`
	// UpdateBaseline records the cost section's figures as the baseline
	// instead of failing the run on them.
	UpdateBaseline bool `help:"Record the cost section's figures in internal/benchsuite/baseline.json as the new baseline, instead of failing the run when they grow by half over it." env:"TOKENMILL_BENCHSUITE_UPDATE_BASELINE"`
}

// Run measures (or, with --render, reads what was measured) and writes
// the report.
func (c *RunCmd) Run(ctx context.Context, env *cli.Env) error {
	secs, steps, err := plan(c.Section)
	switch {
	case err != nil:
		return cli.Usagef("%v", err)
	case c.List:
		return listSections(env.Stdout)
	case c.Runs < 1:
		return cli.Usagef("--runs must be at least 1")
	}
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	repo, err := findRepo(wd)
	if err != nil {
		return cli.Usagef("%v", err)
	}
	h := &harness{repo: repo, dir: absPath(cmp(c.Dir, filepath.Join(repo, ".bench"))), runs: c.Runs, quick: c.Quick, reuse: c.ReuseData,
		updateBaseline: c.UpdateBaseline, sz: sizes(c.Quick, c.ServersRuns), log: env, remade: map[string]bool{}}
	h.bin, h.out, h.peers = h.path("bin"), absPath(cmp(c.Out, filepath.Join(repo, "BENCHMARKS.md"))), absPath(c.Peers)
	if c.Quick && c.Out == "" {
		h.out = h.path("BENCHMARKS.md")
	}
	if cache := os.Getenv("TOKENMILL_CACHE"); c.Peers == "" && cache != "" {
		h.peers = filepath.Join(cache, "bench")
	} else if home, _ := os.UserHomeDir(); c.Peers == "" {
		h.peers = filepath.Join(home, ".cache", "tokenmill", "bench")
	}
	if c.Render {
		return h.rerender()
	}
	return h.run(ctx, secs, steps)
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// findRepo is the directory holding tokenmill's go.mod, from dir upward.
func findRepo(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		data, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module tokenmill\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("%s is not inside the tokenmill repository", dir)
		}
	}
}

// harness is one benchmark run: where things are, the sizes, what was
// measured so far.
type harness struct {
	repo, dir, bin, out, peers string
	prebuilt                   bool // bin is given: nothing is built
	runs                       int
	quick, reuse               bool
	updateBaseline             bool
	sz                         Sizes
	log                        *cli.Env
	environ                    []string // the measured commands' environment
	results                    []*Result
	collect                    *[]*Result // set: rows go here instead (inTurns merges them)
	remade                     map[string]bool
	pin                        []string // taskset -c 0, where taskset exists
	info                       runInfo
	failures                   []string // what fails the run once the report is written
}

// runInfo is what the report says of the run besides its rows: kept in
// run.json beside results.jsonl, so that the report can be written again
// from them alone.
type runInfo struct {
	Sections    []string          `json:"sections"` // measured, in the report's order
	Started     time.Time         `json:"started"`
	Took        time.Duration     `json:"took"`
	LoadBefore  string            `json:"load_before"`
	LoadAfter   string            `json:"load_after"`
	Runs        int               `json:"runs"`
	Quick       bool              `json:"quick,omitempty"`
	ServersRuns int               `json:"servers_runs"`
	Facts       map[string]string `json:"facts"` // the machine, the peers' versions, the data files' sizes
}

func (h *harness) logf(format string, args ...any) { h.log.Logf(format, args...) }
func (h *harness) path(rel string) string          { return filepath.Join(h.dir, rel) }
func (h *harness) tool(name string) string         { return filepath.Join(h.bin, name) }
func (h *harness) repoFile(rel string) string      { return filepath.Join(h.repo, rel) }

// aliases show paths as a reader finds them from the scratch directory.
func (h *harness) aliases() []string {
	prefix := h.repo + "/"
	if filepath.Dir(h.dir) == h.repo {
		prefix = "../"
	}
	a := []string{h.repo + "/=" + prefix, h.dir + "/="}
	if home, err := os.UserHomeDir(); err == nil && home != "/" {
		a = append(a, home+"/=~/")
	}
	return a
}

// fact is a fact of the run, "?" when it was not kept.
func (h *harness) fact(key string) string { return cmp(h.info.Facts[key], "?") }

// have reports whether a peer is installed.
func have(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

func missing(names string) string {
	return names + " is not installed on this machine (.ci/install-peers installs it)"
}

// cmp is a, or b when a is empty.
func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// run does the whole job: tools, data, measurements, the rows kept, the
// report written from them.
func (h *harness) run(ctx context.Context, secs []*section, steps []*dataStep) error {
	h.info = runInfo{Started: time.Now(), Runs: h.runs, Quick: h.quick, ServersRuns: h.sz.ServersRuns, Facts: map[string]string{}}
	for _, s := range secs {
		h.info.Sections = append(h.info.Sections, s.name)
	}
	for _, d := range []string{h.path("data"), h.path("tmp"), h.path("logs"), h.bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// The built tools first on PATH, then the peers installed without root.
	h.environ = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PATH=") || strings.HasPrefix(kv, "TMPDIR=")
	}), "PATH="+strings.Join([]string{h.bin, filepath.Join(h.peers, "bin"), os.Getenv("PATH")}, string(os.PathListSeparator)), "TMPDIR="+h.path("tmp"))
	if !h.prebuilt {
		h.logf("building the tools into %s", h.bin)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", h.bin+string(os.PathSeparator), "./cmd/...", "./internal/cmd/...")
		cmd.Dir = h.repo
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, out)
		}
	}
	h.info.Facts["pin"] = "not pinned (taskset is not installed)"
	if have("taskset") {
		h.pin, h.info.Facts["pin"] = []string{"taskset", "-c", "0"}, "pinned to CPU 0 with taskset"
	}
	h.info.LoadBefore = uptime()
	h.logf("load before: %s", h.info.LoadBefore)
	if err := h.makeData(ctx, steps); err != nil {
		return err
	}
	for _, s := range secs {
		h.logf("section %s", s.name)
		if err := s.measure(ctx, h); err != nil {
			return fmt.Errorf("section %s: %w", s.name, err)
		}
	}
	h.info.LoadAfter, h.info.Took = uptime(), time.Since(h.info.Started)
	h.keepFacts()
	err := h.keep()
	if err == nil {
		err = h.writeReport()
	}
	if err == nil && len(h.failures) > 0 {
		err = errors.New(strings.Join(h.failures, "\n"))
	}
	return err
}

// keep writes the run's rows and what its report says beside them.
func (h *harness) keep() error {
	info, err := json.MarshalIndent(h.info, "", "  ")
	if err == nil {
		err = writeResults(h.path("results.jsonl"), h.results)
	}
	if err == nil {
		err = writeFile(h.path("run.json"), append(info, '\n'))
	}
	return err
}

// rerender writes the report again from the last run's rows, as that run
// wrote it.
func (h *harness) rerender() error {
	data, err := os.ReadFile(h.path("run.json"))
	if err == nil {
		err = json.Unmarshal(data, &h.info)
	}
	if err == nil {
		h.results, err = readResults(h.path("results.jsonl"))
	}
	if err != nil {
		return fmt.Errorf("no rows kept to render (measure first): %w", err)
	}
	if h.info.Quick && h.out == h.repoFile("BENCHMARKS.md") {
		return cli.Usagef("the rows kept in %s are a --quick run's, not figures for BENCHMARKS.md: give --quick or --out", h.dir)
	}
	h.runs, h.quick, h.sz = h.info.Runs, h.info.Quick, sizes(h.info.Quick, h.info.ServersRuns)
	return h.writeReport()
}

// nodeModules is the directory holding the Node packages of
// pipelines/bench/package.json, or why they cannot be used.
func (h *harness) nodeModules() (dir, why string) {
	dir = filepath.Join(h.peers, "node")
	switch {
	case !have("node"):
		return "", missing("node")
	case !fileExists(filepath.Join(dir, "node_modules", "openai")):
		return "", "the OpenAI Node SDK is not in " + dir + " (.ci/install-peers installs it)"
	}
	return dir, ""
}

// nodeSDK is the OpenAI Node SDK's version, "" when it is not installed.
func (h *harness) nodeSDK() string {
	dir, _ := h.nodeModules()
	var pkg struct{ Version string }
	data, _ := os.ReadFile(filepath.Join(dir, "node_modules", "openai", "package.json"))
	if dir == "" || json.Unmarshal(data, &pkg) != nil {
		return ""
	}
	return pkg.Version
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

// uptime is uptime(1)'s line, which carries the load averages; /proc's
// figures where uptime is missing.
func uptime() string {
	if out, err := exec.Command("uptime").Output(); err == nil {
		return strings.TrimRight(string(out), "\n")
	}
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	return "load average: " + strings.Join(f[:min(3, len(f))], ", ")
}
