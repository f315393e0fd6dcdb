// Package benchsuite is the benchmark harness behind `just bench`: it
// builds the tools, makes the data, times each tokenmill command next to
// the commands users would run instead (jq, awk, sort, split, curl, the
// OpenAI Node SDK, Python, DuckDB), takes their peak memory, drives infer
// against simulated fleets and a real Ollama server, keeps the rows, and
// writes the report from them. It installs nothing: .ci/install-peers installs the peers, and a peer that
// is missing gets a row saying so.
package benchsuite

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/lifeline"
	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// RunCmd is `just bench`: it builds the tools, makes the data, measures
// every section (or the ones named), keeps the rows, and writes the
// report from them.
type RunCmd struct {
	Section     []string `short:"s" help:"Sections to measure (comma-separated; default: all). Only a run of every section writes BENCHMARKS.md, so that its figures all come from one run; a run of some writes its report into --dir." sep:"," placeholder:"NAME" env:"TOKENMILL_BENCHSUITE_SECTION,BENCH_ONLY"`
	Render      bool     `help:"Measure nothing: write the report again from the rows the last run kept in --dir (results.jsonl, run.json)." env:"TOKENMILL_BENCHSUITE_RENDER"`
	Quick       bool     `help:"Small sizes: a smoke test of the harness (a few minutes), not figures to quote." env:"TOKENMILL_BENCHSUITE_QUICK,BENCH_QUICK"`
	Runs        int      `help:"Runs per measurement; the median is reported (short runs on a shared machine swing, and a median of 5 rides out one bad window)." default:"5" env:"TOKENMILL_BENCHSUITE_RUNS,BENCH_RUNS"`
	ServersRuns int      `help:"Runs per row of the in-flight tables, taken in turns (0: 3, or 1 with --quick)." default:"0" env:"TOKENMILL_BENCHSUITE_SERVERS_RUNS,SERVERS_RUNS"`
	Dir         string   `help:"Scratch directory: data, binaries, results and logs (default: .bench in the repository)." env:"TOKENMILL_BENCHSUITE_DIR,BENCH_DIR"`
	Out         string   `help:"The report (default: BENCHMARKS.md in the repository; with --quick or --section, BENCHMARKS.md in --dir)." env:"TOKENMILL_BENCHSUITE_OUT,BENCH_OUT"`
	Peers       string   `help:"Where .ci/install-peers put the peers it installs without root: node/ (the Node packages) and bin/ (the DuckDB peer) (default: $TOKENMILL_CACHE/bench, else ~/.cache/tokenmill/bench)." env:"TOKENMILL_BENCHSUITE_PEERS"`
}

// Run measures (or, with --render, reads what was measured) and writes
// the report.
func (c *RunCmd) Run(ctx context.Context, env *cli.Env) error {
	secs, steps, err := plan(c.Section)
	switch {
	case err != nil:
		return cli.Usagef("%v", err)
	case c.Runs < 1:
		return cli.Usagef("--runs must be at least 1")
	}
	wd, err := os.Getwd()
	if err == nil {
		wd, err = findRepo(wd)
	}
	if err != nil {
		return cli.Usagef("%v", err)
	}
	h := &harness{repo: wd, dir: absPath(cmp.Or(c.Dir, filepath.Join(wd, ".bench"))), runs: c.Runs, quick: c.Quick,
		sz: sizes(c.Quick, c.ServersRuns), log: env}
	h.bin, h.peers = h.path("bin"), absPath(cmp.Or(c.Peers, filepath.Join(lifeline.CacheDir(), "bench")))
	if c.Render {
		return h.rerender(c.Out)
	}
	h.info.Quick, h.info.Sections = c.Quick, sectionNamesOf(secs)
	if err := h.setOut(c.Out); err != nil {
		return err
	}
	return h.run(ctx, secs, steps)
}

// setOut picks the report's path: BENCHMARKS.md only for a full run of
// every section, and never a smaller run's report in its place.
func (h *harness) setOut(out string) error {
	benchmarks := h.repoFile("BENCHMARKS.md")
	whole := !h.info.Quick && len(h.info.Sections) == len(sections)
	if h.out = absPath(out); out == "" {
		h.out = benchmarks
		if !whole {
			h.out = h.path("BENCHMARKS.md")
		}
	}
	if h.out == benchmarks && !whole {
		return cli.Usagef("%s holds a full run's figures; a --quick run or a run of some sections writes its report elsewhere (leave out --out)", benchmarks)
	}
	// The report replaces its old self, never the rows it is written from.
	rows := []jsonl.Output{{Flag: "results", Path: h.path("results.jsonl"), Kept: true}, {Flag: "run", Path: h.path("run.json"), Kept: true}}
	return jsonl.CheckPaths(nil, append(rows, jsonl.Output{Flag: "--out", Path: h.out, Kept: true}), false)
}

// findRepo is the directory holding tokenmill's go.mod, from dir upward.
func findRepo(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if data, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.HasPrefix(string(data), "module tokenmill\n") {
			return d, nil
		} else if filepath.Dir(d) == d {
			return "", fmt.Errorf("%s is not inside the tokenmill repository", dir)
		}
	}
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// harness is one benchmark run: where things are, the sizes, what was
// measured so far.
type harness struct {
	repo, dir, bin, out, peers string
	prebuilt                   bool // bin is given: nothing is built
	runs                       int
	quick                      bool
	sz                         Sizes
	log                        *cli.Env
	environ                    []string // the measured commands' environment
	results                    []*Result
	collect                    *[]*Result // set: rows go here instead (inTurns merges them)
	pin                        []string   // taskset -c 0, where taskset exists
	info                       runInfo
}

// runInfo is what the report says of the run besides its rows, kept in
// run.json beside results.jsonl so that the report can be written again.
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
func (h *harness) fact(key string) string          { return cmp.Or(h.info.Facts[key], "?") }
func (h *harness) lines(rel string) string         { return h.fact("lines " + rel) }
func (h *harness) mb(rel string) string            { return cmp.Or(h.info.Facts["mb "+rel], "? MB") }

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
	h.info = runInfo{Sections: sectionNamesOf(secs), Started: time.Now(), Runs: h.runs, Quick: h.quick, ServersRuns: h.sz.ServersRuns, Facts: map[string]string{}}
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
	h.info.LoadBefore = loadLine()
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
	h.info.LoadAfter, h.info.Took = loadLine(), time.Since(h.info.Started)
	h.keepFacts()
	if err := h.keep(); err != nil {
		return err
	}
	return h.writeReport()
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
func (h *harness) rerender(out string) error {
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
	if err := h.setOut(out); err != nil {
		return err
	}
	h.runs, h.quick, h.sz = h.info.Runs, h.info.Quick, sizes(h.info.Quick, h.info.ServersRuns)
	return h.writeReport()
}

// machineFacts are the Machine table's rows, kept as facts of the run.
var machineFacts = []string{"CPUs (nproc)", "CPU model", "memory", "kernel", "Go", "jq", "awk", "gawk", "node"}

// keepFacts notes what the report says of the machine, the peers and the
// data files, which a later rendering cannot ask again.
func (h *harness) keepFacts() {
	f := h.info.Facts
	first := func(argv ...string) string {
		out, err := exec.Command(argv[0], argv[1:]...).Output()
		if line, _, _ := strings.Cut(string(out), "\n"); err == nil && strings.TrimSpace(line) != "" {
			return strings.TrimSpace(line)
		}
		return "not installed"
	}
	f["CPUs (nproc)"], f["CPU model"], f["memory"] = strconv.Itoa(runtime.NumCPU()), procField("/proc/cpuinfo", "model name"), "unknown"
	if kb, err := strconv.ParseFloat(strings.TrimSuffix(procField("/proc/meminfo", "MemTotal"), " kB"), 64); err == nil {
		f["memory"] = fmt.Sprintf("%.1f GiB", kb/(1<<20))
	}
	f["kernel"], f["Go"] = first("uname", "-sr"), strings.TrimPrefix(first("go", "version"), "go version ")
	// awk -W version is how mawk says its version; gawk takes it too.
	f["jq"], f["gawk"], f["awk"] = first("jq", "--version"), first("gawk", "--version"), first("awk", "-W", "version")
	if f["node"] = first("node", "--version"); f["node"] != "not installed" {
		_, sdk, _ := h.nodePackage("openai")
		f["node"] += " (openai " + cmp.Or(sdk, "not installed") + ")"
	}
	var total int64
	filepath.WalkDir(h.dir, func(_ string, d os.DirEntry, err error) error {
		if fi, err2 := d.Info(); err == nil && err2 == nil && d.Type().IsRegular() {
			total += fi.Size()
		}
		return nil
	})
	f["scratch"] = fmt.Sprintf("%.1f GB", float64(total)/1e9)
	for _, rel := range []string{"corpus", "prompts", "gens", "rerun", "prompts-sources", "filter-gens", "ollama-prompts"} {
		rel = "data/" + rel + ".jsonl"
		if n, err := countLines(h.path(rel)); err == nil {
			fi, _ := os.Stat(h.path(rel))
			f["lines "+rel], f["mb "+rel] = cli.Thousands(n), fmt.Sprintf("%d MB", fi.Size()/1000000)
		}
	}
}

// procField is a field of a /proc file of "key: value" lines.
func procField(path, key string) string {
	data, _ := os.ReadFile(path)
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// nodePackage is the directory holding the Node packages of
// pipelines/bench/package.json and the version of one of them, or why
// that one cannot be used.
func (h *harness) nodePackage(name string) (dir, version, why string) {
	dir = filepath.Join(h.peers, "node")
	var pkg struct{ Version string }
	data, err := os.ReadFile(filepath.Join(dir, "node_modules", name, "package.json"))
	switch {
	case !have("node"):
		return "", "", missing("node")
	case err != nil || json.Unmarshal(data, &pkg) != nil:
		return "", "", name + " is not in " + dir + " (.ci/install-peers installs it)"
	}
	return dir, pkg.Version, ""
}

// Sizes are how much each section measures.
type Sizes struct {
	Main            int   // records of the corpus the stream tools read: the real job's 660k
	Big             int   // records of the growth point and the client's prompts
	Growth          []int // the growth table's sizes, the last one Big
	Slurp           int   // records the jq -s commands read, since they hold the whole input
	ClientInfer     int   // prompts of each client in the client table
	ClientNode      int
	ClientCurl      int
	FleetPrompts    int
	FleetRuns       int
	LLMSimBenchtime string // go test -benchtime of llmsim alone
	RegenCorpus     int    // conversations made for the regenerate section, before those of 3+ questions are kept
	FilterBytes     int64
	FilterLangBytes int64
	ServersMinutes  int   // simulated minutes each in-flight case lasts about
	ServersRuns     int   // rounds of the in-flight tables
	OllamaPrompts   int   // prompts of the real Ollama table
	OllamaRuns      int   // its rounds
	Exact           int   // prompts dedup --exact and a keyed sort read
	ScaleBase       int   // records of the scale table's 1× point (4× and 16× follow)
	InferMemory     []int // prompts of infer's memory rows
}

// sizes are the sizes BENCHMARKS.md is made with, or with quick small
// ones: a smoke test of the harness in minutes; serversRuns > 0 sets the
// in-flight tables' rounds.
func sizes(quick bool, serversRuns int) Sizes {
	sz := Sizes{Main: 660000, Big: 1000000, Growth: []int{10000, 100000, 1000000}, Slurp: 100000,
		ClientInfer: 100000, ClientNode: 20000, ClientCurl: 4000, FleetPrompts: 8000, FleetRuns: 3,
		LLMSimBenchtime: "200000x", RegenCorpus: 6000, FilterBytes: 1000000000, FilterLangBytes: 50000000,
		ServersMinutes: 20, ServersRuns: 3, OllamaPrompts: 200, OllamaRuns: 5, Exact: 5000000, ScaleBase: 62500,
		InferMemory: []int{65000, 650000, 6500000}}
	if quick {
		sz = Sizes{Main: 20000, Big: 40000, Growth: []int{1000, 10000, 40000}, Slurp: 5000,
			ClientInfer: 10000, ClientNode: 3000, ClientCurl: 500, FleetPrompts: 1500, FleetRuns: 1,
			LLMSimBenchtime: "20000x", RegenCorpus: 600, FilterBytes: 50000000, FilterLangBytes: 5000000,
			ServersMinutes: 2, ServersRuns: 1, OllamaPrompts: 40, OllamaRuns: 5, Exact: 50000, ScaleBase: 2500,
			InferMemory: []int{6500, 65000}}
	}
	if serversRuns > 0 {
		sz.ServersRuns = serversRuns
	}
	return sz
}

// sizeLabel is 10000 -> "10k", 1000000 -> "1M", 6500000 -> "6.5M".
func sizeLabel(n int) string {
	switch {
	case n >= 1000000 && n%100000 == 0:
		return strconv.FormatFloat(float64(n)/1e6, 'f', -1, 64) + "M"
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// section is one "##" part of BENCHMARKS.md that a run measures: the data
// it needs and how it measures; its text and targets are report.tmpl's
// templates NAME and "NAME targets".
type section struct {
	name, heading string
	needs         []string // data steps
	measure       func(context.Context, *harness) error
}

// sections are the measured parts, in the report's order.
var sections []*section

func init() {
	sections = []*section{
		extractSection, extractScaleSection, dedupSection, neardupSection, shardSection, composeSection, mergeSection, statsSection, filterSection,
		clientSection, costSection, llmsimSection, fleetSection, regenSection, tokenIDsSection, tokenizerSection, inflightSection, kindsSection, ollamaSection, growthSection,
		memorySection, scaleSection,
	}
}

// plan turns section names (none: every section) into the sections to
// measure, in the report's order, and the data steps they need, each once
// and after the steps it reads.
func plan(names []string) (secs []*section, steps []*dataStep, err error) {
	want, needed := map[string]bool{}, map[string]bool{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n != "all" && !slices.ContainsFunc(sections, func(s *section) bool { return s.name == n }) {
			return nil, nil, fmt.Errorf("no section %q; the sections are %s", n, strings.Join(sectionNames(), ", "))
		}
		want[n] = true
	}
	for _, s := range sections {
		if len(names) == 0 || want["all"] || want[s.name] {
			secs = append(secs, s)
			for _, n := range s.needs {
				needed[n] = true
			}
		}
	}
	// Each step comes after the steps it reads: from the last back, a step
	// needed needs those.
	for i := len(dataSteps) - 1; i >= 0; i-- {
		if st := dataSteps[i]; needed[st.name] {
			steps = append([]*dataStep{st}, steps...)
			for _, d := range st.deps {
				needed[d] = true
			}
		}
	}
	return secs, steps, nil
}

func sectionNames() []string { return sectionNamesOf(sections) }

func sectionNamesOf(secs []*section) (names []string) {
	for _, s := range secs {
		names = append(names, s.name)
	}
	return names
}

// writeReport writes the report whole from the rows kept: the title, the
// sections measured, How to reproduce.
func (h *harness) writeReport() error {
	var b strings.Builder
	err := h.text(&b, "title", h.view())
	for _, s := range sections {
		if err == nil && slices.Contains(h.info.Sections, s.name) {
			fmt.Fprintf(&b, "\n\n%s\n\n", s.heading)
			err = h.text(&b, s.name, h.view())
		}
	}
	if b.WriteString("\n\n"); err == nil {
		err = h.text(&b, "reproduce", h.view())
	}
	if err != nil {
		return fmt.Errorf("%s: %w", h.out, err)
	}
	h.logf("wrote %s (%s of measuring)", h.out, elapsed(h.info.Took))
	return writeFile(h.out, []byte(normalise(b.String())))
}

// runsText is "1 run", "3 runs".
func runsText(n int) string {
	if n == 1 {
		return "1 run"
	}
	return fmt.Sprintf("%d runs", n)
}

// normalise leaves one blank line between parts and one newline at the end.
func normalise(doc string) string {
	for strings.Contains(doc, "\n\n\n") {
		doc = strings.ReplaceAll(doc, "\n\n\n", "\n\n")
	}
	return strings.TrimRight(doc, "\n") + "\n"
}

// elapsed is "15 min 40 s".
func elapsed(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	return fmt.Sprintf("%d min %d s", s/60, s%60)
}
