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

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// RunCmd is `just bench`: it builds the tools, makes the data, measures
// every section (or the ones named) next to the tools users would run
// instead, and writes BENCHMARKS.md: the whole report when every section
// was measured, else each section measured spliced into the report in
// place of its old one.
type RunCmd struct {
	Section     []string `short:"s" help:"Sections to measure (comma-separated; default: all, and the report is written whole). Each one measured alone replaces its own part of --out. --list names them." sep:"," placeholder:"NAME" env:"TOKENMILL_BENCHSUITE_SECTION,BENCH_ONLY"`
	List        bool     `help:"Print the sections, with what each measures and the data it needs, and exit." env:"TOKENMILL_BENCHSUITE_LIST"`
	Quick       bool     `help:"Small sizes: a smoke test of the harness (a few minutes), not figures to quote." env:"TOKENMILL_BENCHSUITE_QUICK,BENCH_QUICK"`
	Runs        int      `help:"Runs per measurement; the median is reported (short runs on a shared machine swing, and a median of 5 rides out one bad window)." default:"5" env:"TOKENMILL_BENCHSUITE_RUNS,BENCH_RUNS"`
	ServersRuns int      `help:"Runs per row of the in-flight tables, taken in turns (0: 3, or 1 with --quick)." default:"0" env:"TOKENMILL_BENCHSUITE_SERVERS_RUNS,SERVERS_RUNS"`
	Dir         string   `help:"Scratch directory: data, binaries, node modules, results and logs (default: .bench in the repository)." env:"TOKENMILL_BENCHSUITE_DIR,BENCH_DIR"`
	Out         string   `help:"The report (default: BENCHMARKS.md in the repository; with --quick, BENCHMARKS.md in --dir)." env:"TOKENMILL_BENCHSUITE_OUT,BENCH_OUT"`
	ReuseData   bool     `help:"Keep the data files an earlier run made with the same commands and sizes instead of making them again." env:"TOKENMILL_BENCHSUITE_REUSE_DATA,BENCH_REUSE_DATA"`
	Repo        string   `help:"The tokenmill repository (default: the one holding the working directory)." env:"TOKENMILL_BENCHSUITE_REPO"`
	Bin         string   `help:"Take the tools from this directory instead of building them into --dir/bin." env:"TOKENMILL_BENCHSUITE_BIN"`
	Install     bool     `help:"Install missing peers where it can: jq with apt-get (as root), the OpenAI Node SDK with npm into --dir/node." default:"true" negatable:"" env:"TOKENMILL_BENCHSUITE_INSTALL"`
	// UpdateBaseline records the cost section's figures as the baseline
	// instead of failing the run on them.
	UpdateBaseline bool `help:"Record the cost section's figures in internal/benchsuite/baseline.json as the new baseline, instead of failing the run when they grow by half over it." env:"TOKENMILL_BENCHSUITE_UPDATE_BASELINE"`
}

// Run measures and writes the report.
func (c *RunCmd) Run(ctx context.Context, env *cli.Env) error {
	secs, steps, err := plan(c.Section)
	if err != nil {
		return cli.Usagef("%v", err)
	}
	if c.List {
		return listSections(env.Stdout)
	}
	if c.Runs < 1 {
		return cli.Usagef("--runs must be at least 1")
	}
	sz := FullSizes()
	if c.Quick {
		sz = QuickSizes()
	}
	if c.ServersRuns > 0 {
		sz.ServersRuns = c.ServersRuns
	}
	h, err := c.harness(env, sz)
	if err != nil {
		return err
	}
	return h.run(ctx, secs, steps)
}

// harness makes the harness the flags describe: the repository found, the
// scratch directory made, the report's path settled.
func (c *RunCmd) harness(env *cli.Env, sz Sizes) (*harness, error) {
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
	repo, err := filepath.Abs(repo)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(repo, "go.mod")); err != nil {
		return nil, cli.Usagef("--repo %s: no go.mod there", repo)
	}
	dir := c.Dir
	if dir == "" {
		dir = filepath.Join(repo, ".bench")
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	out := c.Out
	switch {
	case out == "" && c.Quick:
		out = filepath.Join(dir, "BENCHMARKS.md")
	case out == "":
		out = filepath.Join(repo, "BENCHMARKS.md")
	}
	if out, err = filepath.Abs(out); err != nil {
		return nil, err
	}
	h := &harness{repo: repo, dir: dir, out: out, runs: c.Runs, quick: c.Quick, reuse: c.ReuseData, install: c.Install, updateBaseline: c.UpdateBaseline,
		sz: sz, log: env, remade: map[string]bool{}, bin: filepath.Join(dir, "bin"), prebuilt: c.Bin != ""}
	if c.Bin != "" {
		if h.bin, err = filepath.Abs(c.Bin); err != nil {
			return nil, err
		}
	}
	return h, nil
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
	repo, dir, bin, out string
	prebuilt            bool // bin was given: nothing is built
	runs                int
	quick, reuse        bool
	install             bool
	sz                  Sizes
	log                 *cli.Env
	environ             []string // the measured commands' environment
	results             []*Result
	collect             *[]*Result // set: rows go here instead (inTurns merges them)
	regenRuns           []regenRun
	remade              map[string]bool // data steps made (not reused) in this run
	node                nodeSDK
	pin                 []string // taskset -c 0, where taskset exists
	pinNote             string
	started             time.Time
	loadBefore          string
	ollamaVersion       string
	measured            string // the sections of a run of some, as --section names them
	updateBaseline      bool
	baseline            *Baseline // the cost section's, as read
	failures            []string  // what fails the run once the report is written
}

// nodeSDK is the OpenAI Node SDK installed into dir/node, or why not.
type nodeSDK struct {
	ok           bool
	version, why string
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
	return []string{h.repo + "/=" + prefix, h.dir + "/="}
}

// have reports whether a peer is installed.
func have(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

func missing(names string) string { return names + " is not installed on this machine" }

// run does the whole job: tools, data, measurements, the report.
func (h *harness) run(ctx context.Context, secs []*section, steps []*dataStep) error {
	h.started = time.Now()
	for _, d := range []string{"", "data", "tmp", "node", "logs"} {
		if err := os.MkdirAll(h.path(d), 0o755); err != nil {
			return err
		}
	}
	if !h.prebuilt {
		if err := os.MkdirAll(h.bin, 0o755); err != nil {
			return err
		}
	}
	os.Remove(h.path("results.jsonl"))
	h.environ = commandEnv(os.Environ(), h.bin, h.path("tmp"))
	if err := h.tools(ctx, secs); err != nil {
		return err
	}
	h.loadBefore = uptime()
	h.logf("load before: %s", h.loadBefore)
	if err := h.makeData(ctx, steps); err != nil {
		return err
	}
	for _, s := range secs {
		h.logf("section %s", s.name)
		if err := s.measure(ctx, h); err != nil {
			return fmt.Errorf("section %s: %w", s.name, err)
		}
	}
	var err error
	if len(secs) == len(sections) {
		err = h.writeReport()
	} else {
		err = h.spliceSections(secs)
	}
	if err != nil {
		return err
	}
	if len(h.failures) > 0 {
		return errors.New(strings.Join(h.failures, "\n"))
	}
	return nil
}

// commandEnv is the environment of every command the harness runs: the
// built tools first on PATH, temporary files in the scratch directory.
func commandEnv(base []string, bin, tmp string) []string {
	out := slices.DeleteFunc(slices.Clone(base), func(kv string) bool {
		return strings.HasPrefix(kv, "PATH=") || strings.HasPrefix(kv, "TMPDIR=")
	})
	return append(out, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "TMPDIR="+tmp)
}

// tools builds tokenmill's binaries (unless given), installs missing peers
// where allowed and finds the CPU pinning tool.
func (h *harness) tools(ctx context.Context, secs []*section) error {
	if !h.prebuilt {
		h.logf("building the tools into %s", h.bin)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", h.bin+string(os.PathSeparator), "./cmd/...", "./internal/cmd/...")
		cmd.Dir = h.repo
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, out)
		}
	}
	for _, t := range []string{"rusage"} {
		if _, err := os.Stat(h.tool(t)); err != nil {
			return fmt.Errorf("the tools in %s lack %s: %v", h.bin, t, err)
		}
	}
	if !have("jq") && h.install {
		h.logf("installing jq with apt-get")
		err := asRoot(ctx, h.path("logs/apt.log"), "apt-get", "update", "-q")
		if err == nil {
			err = asRoot(ctx, h.path("logs/apt.log"), "apt-get", "install", "-y", "-q", "--no-install-recommends", "jq")
		}
		if err != nil {
			h.logf("could not install jq (%v; logs/apt.log): its rows are marked not available", err)
		}
	}
	h.pinNote = "not pinned (taskset is not installed)"
	if have("taskset") {
		h.pin, h.pinNote = []string{"taskset", "-c", "0"}, "pinned to CPU 0 with taskset"
	}
	for _, s := range secs {
		if s.node {
			h.node = h.installNode(ctx)
			break
		}
	}
	return nil
}

// asRoot runs a command as root (directly, or with sudo -n), its output
// appended to log.
func asRoot(ctx context.Context, log string, argv ...string) error {
	if os.Geteuid() != 0 {
		if !have("sudo") {
			return errors.New("not root, and no sudo")
		}
		argv = append([]string{"sudo", "-n"}, argv...)
	}
	f, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	cmd.Stdout, cmd.Stderr = f, f
	return cmd.Run()
}

// installNode makes the OpenAI Node SDK of pipelines/bench/package.json
// ready in dir/node.
func (h *harness) installNode(ctx context.Context) nodeSDK {
	if !have("node") || !have("npm") {
		return nodeSDK{why: "node and npm are not installed"}
	}
	want, err := os.ReadFile(h.repoFile("pipelines/bench/package.json"))
	if err != nil {
		return nodeSDK{why: err.Error()}
	}
	nodeDir := h.path("node")
	have, _ := os.ReadFile(filepath.Join(nodeDir, "package.json"))
	_, modErr := os.Stat(filepath.Join(nodeDir, "node_modules", "openai"))
	if modErr != nil || string(have) != string(want) {
		if !h.install {
			return nodeSDK{why: "the OpenAI Node SDK is not installed in " + nodeDir + " (and --no-install)"}
		}
		h.logf("installing the OpenAI Node SDK into %s", nodeDir)
		if err := os.WriteFile(filepath.Join(nodeDir, "package.json"), want, 0o644); err != nil {
			return nodeSDK{why: err.Error()}
		}
		cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = nodeDir
		if out, err := cmd.CombinedOutput(); err != nil {
			os.WriteFile(h.path("logs/npm.log"), out, 0o644)
			return nodeSDK{why: "npm install openai failed (see " + filepath.Base(h.dir) + "/logs/npm.log)"}
		}
	}
	out, err := exec.CommandContext(ctx, "node", "-p", "require('"+filepath.Join(nodeDir, "node_modules/openai/package.json")+"').version").Output()
	if err != nil {
		return nodeSDK{why: "the OpenAI Node SDK does not load: " + err.Error()}
	}
	return nodeSDK{ok: true, version: strings.TrimSpace(string(out))}
}

// add keeps a result, in memory for the report and in results.jsonl for
// `benchsuite table` by hand.
func (h *harness) add(r *Result) error {
	if h.collect != nil {
		*h.collect = append(*h.collect, r)
		return nil
	}
	h.results = append(h.results, r)
	return appendResult(h.path("results.jsonl"), r)
}

// measure runs one spec from the scratch directory with the built tools
// (through rusage) and keeps its row.
func (h *harness) measure(ctx context.Context, s Spec) error {
	r, err := h.measureRow(ctx, s)
	if err != nil {
		return err
	}
	return h.add(r)
}

// measureRow measures one spec as measure does, without keeping its row.
func (h *harness) measureRow(ctx context.Context, s Spec) (*Result, error) {
	if s.Runs == 0 {
		s.Runs = h.runs
	}
	s.Dir, s.Env, s.Rusage = h.dir, h.environ, h.tool("rusage")
	s.StderrFile = "logs/" + s.Group + "-" + safeName(s.Name) + ".err"
	s.Alias = append(s.Alias, h.aliases()...)
	return Measure(ctx, s, h.logf)
}

// unavailable keeps the row of a tool that could not be had.
func (h *harness) unavailable(group, name, why string) error {
	h.logf("%s/%s: not available: %s", group, name, why)
	return h.add(unavailable(group, name, why))
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
}

// group is the results of one table, in the order measured.
func (h *harness) group(name string) []*Result {
	var rows []*Result
	for _, r := range h.results {
		if r.Group == name {
			rows = append(rows, r)
		}
	}
	return rows
}

// table renders one group's results as its Markdown table.
func (h *harness) table(w io.Writer, group string, o tableOptions) {
	renderTable(w, h.group(group), group, o)
}

// spliceSections writes each section measured into the report in place of
// its old one, with the circumstances of this run and its targets.
func (h *harness) spliceSections(secs []*section) error {
	doc, err := os.ReadFile(h.out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	loadAfter := uptime()
	names := make([]string, len(secs))
	for i, s := range secs {
		names[i] = s.name
	}
	h.measured = strings.Join(names, ",")
	for _, s := range secs {
		text, err := h.sectionText(s, loadAfter)
		if err != nil {
			return err
		}
		if doc, err = Splice(doc, []byte(text), docOrder()); err != nil {
			return fmt.Errorf("%s: %w", h.out, err)
		}
	}
	// How to reproduce names no figure of a run: it follows the harness.
	var b strings.Builder
	h.reproduce(&b)
	if doc, err = Splice(doc, []byte(b.String()), docOrder()); err != nil {
		return fmt.Errorf("%s: %w", h.out, err)
	}
	if err := writeDoc(h.out, doc); err != nil {
		return err
	}
	h.logf("wrote %d section(s) of %s in %s", len(secs), h.out, elapsed(time.Since(h.started)))
	return nil
}

// sectionText is a section measured alone as the report shows it: its
// heading, its body, the circumstances of the run and its targets.
func (h *harness) sectionText(s *section, loadAfter string) (string, error) {
	var b strings.Builder
	b.WriteString(s.heading + "\n\n")
	s.render(&b, h)
	measured := h.measured
	if measured == "" {
		measured = s.name
	}
	fmt.Fprintf(&b, "\nMeasured alone (`benchsuite run --section %s`) on %s, %s;\nload before `%s`, after `%s`.\n",
		measured, h.started.UTC().Format("2006-01-02 15:04 UTC"), s.runsNote(h), h.loadBefore, loadAfter)
	if s.targets != nil {
		if t := s.targets(h); len(t) > 0 {
			b.WriteString("\n")
			if err := writeTargets(&b, h.results, t); err != nil {
				return "", err
			}
		}
	}
	return normalise(b.String()), nil
}

// writeDoc puts the report in place whole or not at all.
func writeDoc(path string, doc []byte) error {
	return jsonl.WriteFile(path, jsonl.CreateFileOptions{Replace: true}, func(w io.Writer) error {
		_, err := w.Write(doc)
		return err
	})
}

// elapsed is "15 min 40 s".
func elapsed(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	return fmt.Sprintf("%d min %d s", s/60, s%60)
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
