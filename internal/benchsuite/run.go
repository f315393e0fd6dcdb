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
	Repo        string   `help:"The tokenmill repository (default: the one holding the working directory)." env:"TOKENMILL_BENCHSUITE_REPO"`
	Bin         string   `help:"Take the tools from this directory instead of building them into --dir/bin." env:"TOKENMILL_BENCHSUITE_BIN"`
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
	h, err := c.harness(env)
	if err != nil {
		return err
	}
	if c.Render {
		return h.rerender()
	}
	return h.run(ctx, secs, steps)
}

// harness makes the harness the flags describe: the repository found, the
// paths settled.
func (c *RunCmd) harness(env *cli.Env) (*harness, error) {
	repo := c.Repo
	if repo == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		if repo, err = findRepo(wd); err != nil {
			return nil, cli.Usagef("%v (or give --repo)", err)
		}
	}
	if !fileExists(filepath.Join(repo, "go.mod")) {
		return nil, cli.Usagef("--repo %s: no go.mod there", repo)
	}
	dir, out, peers := c.Dir, c.Out, c.Peers
	if dir == "" {
		dir = filepath.Join(repo, ".bench")
	}
	switch {
	case out == "" && c.Quick:
		out = filepath.Join(dir, "BENCHMARKS.md")
	case out == "":
		out = filepath.Join(repo, "BENCHMARKS.md")
	}
	if peers == "" {
		peers = filepath.Join(os.Getenv("TOKENMILL_CACHE"), "bench")
		if os.Getenv("TOKENMILL_CACHE") == "" {
			home, _ := os.UserHomeDir()
			peers = filepath.Join(home, ".cache", "tokenmill", "bench")
		}
	}
	h := &harness{repo: absPath(repo), dir: absPath(dir), out: absPath(out), peers: absPath(peers), bin: absPath(filepath.Join(dir, "bin")),
		prebuilt: c.Bin != "", runs: c.Runs, quick: c.Quick, reuse: c.ReuseData, updateBaseline: c.UpdateBaseline,
		sz: sizes(c.Quick, c.ServersRuns), log: env, remade: map[string]bool{}}
	if h.prebuilt {
		h.bin = absPath(c.Bin)
	}
	return h, nil
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
	prebuilt                   bool // bin was given: nothing is built
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
	Took        time.Duration     `json:"took_ns"`
	LoadBefore  string            `json:"load_before"`
	LoadAfter   string            `json:"load_after"`
	Runs        int               `json:"runs"`
	Quick       bool              `json:"quick,omitempty"`
	ServersRuns int               `json:"servers_runs"`
	Facts       map[string]string `json:"facts"` // the machine, the peers' versions, the data files' sizes
}

func (h *harness) logf(format string, args ...any) { h.log.Logf(format, args...) }

// path is a path inside the scratch directory.
func (h *harness) path(rel string) string { return filepath.Join(h.dir, rel) }

// tool is the built binary of a tokenmill command.
func (h *harness) tool(name string) string { return filepath.Join(h.bin, name) }

// repoFile is a file of the repository, as the measured commands reach it.
func (h *harness) repoFile(rel string) string { return filepath.Join(h.repo, rel) }

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
func (h *harness) fact(key string) string {
	if v, ok := h.info.Facts[key]; ok {
		return v
	}
	return "?"
}

// have reports whether a peer is installed.
func have(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

func missing(names string) string {
	return names + " is not installed on this machine (.ci/install-peers installs it)"
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
	if err := h.tools(ctx); err != nil {
		return err
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
	if err := h.keep(); err != nil {
		return err
	}
	if err := h.writeReport(); err != nil {
		return err
	}
	if len(h.failures) > 0 {
		return errors.New(strings.Join(h.failures, "\n"))
	}
	return nil
}

// tools builds tokenmill's binaries (unless given) and finds the CPU
// pinning tool. Peers are never installed here: .ci/install-peers does.
func (h *harness) tools(ctx context.Context) error {
	if !h.prebuilt {
		h.logf("building the tools into %s", h.bin)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", h.bin+string(os.PathSeparator), "./cmd/...", "./internal/cmd/...")
		cmd.Dir = h.repo
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, out)
		}
	}
	if !fileExists(h.tool("rusage")) {
		return fmt.Errorf("the tools in %s lack rusage", h.bin)
	}
	h.info.Facts["pin"] = "not pinned (taskset is not installed)"
	if have("taskset") {
		h.pin, h.info.Facts["pin"] = []string{"taskset", "-c", "0"}, "pinned to CPU 0 with taskset"
	}
	return nil
}

// nodeModules is the directory holding the Node packages of
// pipelines/bench/package.json, or why they cannot be used.
func (h *harness) nodeModules() (dir, why string) {
	dir = filepath.Join(h.peers, "node")
	if !have("node") {
		return "", missing("node")
	}
	if !fileExists(filepath.Join(dir, "node_modules", "openai")) {
		return "", "the OpenAI Node SDK is not in " + dir + " (.ci/install-peers installs it)"
	}
	return dir, ""
}

// nodeSDK is the OpenAI Node SDK's version, "" when it is not installed.
func (h *harness) nodeSDK() string {
	dir, why := h.nodeModules()
	var pkg struct{ Version string }
	data, err := os.ReadFile(filepath.Join(dir, "node_modules", "openai", "package.json"))
	if why != "" || err != nil || json.Unmarshal(data, &pkg) != nil {
		return ""
	}
	return pkg.Version
}

// add keeps a row.
func (h *harness) add(r *Result) error {
	if h.collect != nil {
		*h.collect = append(*h.collect, r)
	} else {
		h.results = append(h.results, r)
	}
	return nil
}

// measure runs one spec and keeps its row.
func (h *harness) measure(ctx context.Context, s Spec) error {
	r, err := h.measureRow(ctx, s)
	if err != nil {
		return err
	}
	return h.add(r)
}

// unavailable keeps the row of a tool that could not be had.
func (h *harness) unavailable(group, name, why string) error {
	h.logf("%s/%s: not available: %s", group, name, why)
	return h.add(unavailable(group, name, why))
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
	for _, r := range h.group(group) {
		if r.Name == name {
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

// stream writes a group as a stream table.
func (h *harness) stream(w io.Writer, group, rate string, cpuPerRecord bool) {
	if rows := h.rows(w, group); len(rows) > 0 {
		streamTable(w, rows, rate, cpuPerRecord)
	}
}

// keep writes the run's rows and what else its report says beside them.
func (h *harness) keep() error {
	if err := writeResults(h.path("results.jsonl"), h.results); err != nil {
		return err
	}
	data, err := json.MarshalIndent(h.info, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(h.path("run.json"), append(data, '\n'))
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
	h.runs, h.quick, h.sz = h.info.Runs, h.info.Quick, sizes(h.info.Quick, h.info.ServersRuns)
	return h.writeReport()
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
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	return "load average: " + strings.Join(f[:min(3, len(f))], ", ")
}
