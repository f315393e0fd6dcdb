package benchsuite

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

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
	ServersMinutes  int // simulated minutes each in-flight case lasts about
	ServersRuns     int // rounds of the in-flight tables
	OllamaPrompts   int
	OllamaRuns      int   // rounds of the real Ollama table
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

// sizeLabel is 10000 -> "10k", 1000000 -> "1M".
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

// The report's own parts, which only a run of every section writes.
const (
	headingMachine   = "## Machine"
	headingTargets   = "## Targets"
	headingData      = "## Data"
	headingReproduce = "## How to reproduce"
)

// sections are the measured parts, in the report's order.
var sections []*section

func init() {
	sections = []*section{
		extractSection, extractScaleSection, dedupSection, neardupSection, shardSection, composeSection, mergeSection, statsSection, filterSection,
		clientSection, costSection, llmsimSection, fleetSection, regenSection, tokenIDsSection, tokenizerSection, inflightSection, kindsSection, ollamaSection, growthSection,
		memorySection, scaleSection,
	}
}

// servers names the servers' sections at once.
var servers = []string{"inflight", "kinds", "ollama"}

// docOrder is every heading of the report, in order.
func docOrder() []string {
	order := []string{headingMachine, headingTargets, headingData}
	for _, s := range sections {
		order = append(order, s.heading)
	}
	return append(order, headingReproduce)
}

// plan turns section names (none: every section) into the sections to
// measure, in the report's order, and the data steps they need, each once
// and after the steps it reads.
func plan(names []string) ([]*section, []*dataStep, error) {
	want := map[string]bool{}
	for _, n := range names {
		switch n = strings.TrimSpace(n); {
		case n == "servers":
			for _, a := range servers {
				want[a] = true
			}
		case n == "all" || slices.ContainsFunc(sections, func(s *section) bool { return s.name == n }):
			want[n] = true
		default:
			return nil, nil, fmt.Errorf("no section %q; the sections are %s (servers: inflight, kinds and ollama)", n, strings.Join(sectionNames(), ", "))
		}
	}
	var secs []*section
	needed := map[string]bool{}
	var need func(string)
	need = func(step string) {
		if !needed[step] {
			needed[step] = true
			for _, d := range stepByName(step).deps {
				need(d)
			}
		}
	}
	for _, s := range sections {
		if len(names) == 0 || want["all"] || want[s.name] {
			secs = append(secs, s)
			for _, n := range s.needs {
				need(n)
			}
		}
	}
	var steps []*dataStep
	for _, st := range dataSteps {
		if needed[st.name] {
			steps = append(steps, st)
		}
	}
	return secs, steps, nil
}

func sectionNames() []string {
	names := make([]string, len(sections))
	for i, s := range sections {
		names[i] = s.name
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
