// Package benchsuite is the benchmark harness behind `just bench`: it
// builds the tools, makes the data, times each tokenmill command next to
// the commands users would run instead (jq, awk, sort, split, curl, the
// OpenAI Node SDK, Python, DuckDB), takes their peak memory, drives infer
// against simulated fleets and a real Ollama server, keeps the rows, and
// writes BENCHMARKS.md from them, whole or one section at a time. It
// installs nothing: .ci/install-peers installs the peers, and a peer that
// is missing gets a row saying so.
package benchsuite

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/lifeline"
	"tokenmill/lib/cli"
)

// RunCmd is `just bench`: it builds the tools, makes the data, measures
// every section (or the ones named), keeps the rows, and writes
// BENCHMARKS.md from them: whole when every section was measured, else
// each section measured spliced in place of its old one.
type RunCmd struct {
	Section     []string `short:"s" help:"Sections to measure (comma-separated; default: all, and the report is written whole). Each one measured alone replaces its own part of --out. --list names them." sep:"," placeholder:"NAME" env:"TOKENMILL_BENCHSUITE_SECTION,BENCH_ONLY"`
	List        bool     `help:"Print the sections, with what each measures and the data it needs, and exit." env:"TOKENMILL_BENCHSUITE_LIST"`
	Render      bool     `help:"Measure nothing: write the report again from the rows the last run kept in --dir (results.jsonl, run.json)." env:"TOKENMILL_BENCHSUITE_RENDER"`
	Quick       bool     `help:"Small sizes: a smoke test of the harness (a few minutes), not figures to quote." env:"TOKENMILL_BENCHSUITE_QUICK,BENCH_QUICK"`
	Runs        int      `help:"Runs per measurement; the median is reported (short runs on a shared machine swing, and a median of 5 rides out one bad window)." default:"5" env:"TOKENMILL_BENCHSUITE_RUNS,BENCH_RUNS"`
	ServersRuns int      `help:"Runs per row of the in-flight tables, taken in turns (0: 3, or 1 with --quick)." default:"0" env:"TOKENMILL_BENCHSUITE_SERVERS_RUNS,SERVERS_RUNS"`
	Dir         string   `help:"Scratch directory: data, binaries, results and logs (default: .bench in the repository)." env:"TOKENMILL_BENCHSUITE_DIR,BENCH_DIR"`
	Out         string   `help:"The report (default: BENCHMARKS.md in the repository; with --quick, BENCHMARKS.md in --dir)." env:"TOKENMILL_BENCHSUITE_OUT,BENCH_OUT"`
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
	if err == nil {
		wd, err = findRepo(wd)
	}
	if err != nil {
		return cli.Usagef("%v", err)
	}
	h := &harness{repo: wd, dir: absPath(cmp.Or(c.Dir, filepath.Join(wd, ".bench"))), runs: c.Runs, quick: c.Quick,
		updateBaseline: c.UpdateBaseline, sz: sizes(c.Quick, c.ServersRuns), log: env}
	out := filepath.Join(wd, "BENCHMARKS.md")
	if c.Quick {
		out = filepath.Join(h.dir, "BENCHMARKS.md")
	}
	h.bin, h.out, h.peers = h.path("bin"), absPath(cmp.Or(c.Out, out)), absPath(cmp.Or(c.Peers, filepath.Join(lifeline.CacheDir(), "bench")))
	if c.Render {
		return h.rerender()
	}
	return h.run(ctx, secs, steps)
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
	quick, updateBaseline      bool
	sz                         Sizes
	log                        *cli.Env
	environ                    []string // the measured commands' environment
	results                    []*Result
	collect                    *[]*Result // set: rows go here instead (inTurns merges them)
	pin                        []string   // taskset -c 0, where taskset exists
	info                       runInfo
	failures                   []string // what fails the run once the report is written
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
		f["node"] += " (openai " + cmp.Or(h.nodeSDK(), "not installed") + ")"
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
// it needs and how it measures; its text, targets and runs note are
// report.tmpl's templates NAME, "NAME targets" and "NAME runs".
type section struct {
	name, heading string
	about         string   // for --list
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

// docOrder is every heading of the report, in order: the report's own
// parts, which only a run of every section writes, around the sections.
func docOrder() []string {
	order := []string{"## Machine", "## Targets", "## Data"}
	for _, s := range sections {
		order = append(order, s.heading)
	}
	return append(order, "## How to reproduce")
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

func sectionNames() (names []string) {
	for _, s := range sections {
		names = append(names, s.name)
	}
	return names
}

// listSections prints what --list shows.
func listSections(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "SECTION\tMEASURES\tDATA")
	for _, s := range sections {
		_, steps, _ := plan([]string{s.name})
		var data []string
		for _, st := range steps {
			data = append(data, st.file)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.name, s.about, strings.Join(data, " "))
	}
	return tw.Flush()
}

// writeReport writes BENCHMARKS.md from the rows kept: whole after a run
// of every section, else each section measured spliced in place of its old
// part; How to reproduce, which names no figure of a run, either way.
func (h *harness) writeReport() error {
	var secs []*section
	for _, s := range sections {
		if slices.Contains(h.info.Sections, s.name) {
			secs = append(secs, s)
		}
	}
	alone := len(secs) < len(sections)
	doc, err := os.ReadFile(h.out)
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	if !alone {
		title, err2 := textOf(func(w io.Writer) error { return h.text(w, "title", h.view()) })
		doc, err = []byte(title), err2
	}
	var texts []string
	for _, s := range secs {
		text, err2 := h.sectionText(s)
		if !alone {
			text, err2 = textOf(func(w io.Writer) error { return h.render(w, s) })
		}
		texts, err = append(texts, text), cmp.Or(err, err2)
	}
	reproduce, err2 := textOf(func(w io.Writer) error { return h.text(w, "reproduce", h.view()) })
	for _, text := range append(texts, reproduce) {
		if err = cmp.Or(err, err2); err == nil {
			doc, err = Splice(doc, []byte(text), docOrder())
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", h.out, err)
	}
	h.logf("wrote %d section(s) of %s (%s of measuring)", len(secs), h.out, elapsed(h.info.Took))
	return writeFile(h.out, doc)
}

// textOf is what write writes, normalised.
func textOf(write func(io.Writer) error) (string, error) {
	var b strings.Builder
	err := write(&b)
	return normalise(b.String()), err
}

// sectionText is a section measured alone as the report shows it: its
// heading, its body, the circumstances of the run and its targets.
func (h *harness) sectionText(s *section) (string, error) {
	var b strings.Builder
	v := h.view()
	v.Names = cmp.Or(strings.Join(h.info.Sections, ","), s.name)
	note, err := h.runsNote(s)
	targets, err2 := h.targets(s)
	if err = errors.Join(err, err2); err == nil {
		v.Note = note
		err = h.render(&b, s)
	}
	if err == nil {
		err = h.text(&b, "alone", v)
	}
	if err == nil && len(targets) > 0 {
		b.WriteString("\n")
		err = writeTargets(&b, h.results, targets)
	}
	return normalise(b.String()), err
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

// Splice puts a section (Markdown whose first line is its "## " heading)
// into doc, the one way a part of BENCHMARKS.md is replaced: in place of
// the part under the same heading, which runs to the next "#" or "##"
// heading outside a code fence; else before the first part whose heading
// comes after it in order; else at the end. Parts are separated by one
// blank line. A doc that holds the heading twice is refused: which of the
// two is meant cannot be told.
func Splice(doc, section []byte, order []string) ([]byte, error) {
	sec := strings.TrimRight(string(section), "\n")
	heading := headingOf(sec)
	if !strings.HasPrefix(heading, "## ") {
		first, _, _ := strings.Cut(sec, "\n")
		return nil, fmt.Errorf("a section starts with its \"## \" heading, not %q", first)
	}
	if len(bytes.TrimSpace(doc)) == 0 {
		doc = []byte("# Benchmarks\n")
	}
	parts := splitParts(string(doc))
	same := func(p string) bool { return headingOf(p) == heading }
	at := slices.IndexFunc(parts, same)
	switch {
	case at >= 0 && slices.ContainsFunc(parts[at+1:], same):
		return nil, fmt.Errorf("the report holds %q twice", heading)
	case at >= 0:
		parts[at] = sec
	default:
		k := slices.Index(order, heading)
		if at = slices.IndexFunc(parts, func(p string) bool { return k >= 0 && slices.Contains(order[k+1:], headingOf(p)) }); at < 0 {
			at = len(parts)
		}
		parts = slices.Insert(parts, at, sec)
	}
	return []byte(strings.Join(parts, "\n\n") + "\n"), nil
}

// headingOf is a part's "#" or "##" heading, "" for the preamble.
func headingOf(part string) string {
	first, _, _ := strings.Cut(part, "\n")
	if first = strings.TrimRight(first, " "); strings.HasPrefix(first, "# ") || strings.HasPrefix(first, "## ") {
		return first
	}
	return ""
}

// splitParts cuts a Markdown document into the text under each "#" and
// "##" heading (the preamble has none), without trailing blank lines; a
// line inside a code fence is never a heading.
func splitParts(doc string) []string {
	var parts []string
	var lines [][]string
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		fenced = fenced != strings.HasPrefix(line, "```")
		if len(lines) == 0 || !fenced && headingOf(line) != "" {
			lines = append(lines, nil)
		}
		lines[len(lines)-1] = append(lines[len(lines)-1], line)
	}
	for _, l := range lines {
		if text := strings.TrimRight(strings.Join(l, "\n"), "\n "); strings.TrimSpace(text) != "" {
			parts = append(parts, text)
		}
	}
	return parts
}
