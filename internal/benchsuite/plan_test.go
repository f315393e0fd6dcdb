package benchsuite

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"tokenmill/lib/cli"
)

func TestPlan(t *testing.T) {
	all := sectionNames()
	for _, tc := range []struct {
		names    []string
		sections []string
		steps    []string
		bad      string
	}{
		{names: nil, sections: all, steps: stepNames(dataSteps)},
		{names: []string{"all"}, sections: all, steps: stepNames(dataSteps)},
		{names: []string{"merge"}, sections: []string{"merge"}, steps: []string{"corpus", "prompts", "gens", "prompts-slurp", "gens-slurp"}},
		{names: []string{"llmsim"}, sections: []string{"llmsim"}},
		// the report's order, each step once
		{names: []string{"growth", "dedup", "dedup"}, sections: []string{"dedup", "growth"},
			steps: []string{"corpus", "prompts", "prompts-slurp", "corpus-big", "prompts-big", "prompts-exact"}},
		{names: []string{"filter"}, sections: []string{"filter"}, steps: []string{"corpus", "filter-gens", "filter-gens-lang"}},
		{names: []string{"ollama", "kinds", "inflight"}, sections: []string{"inflight", "kinds", "ollama"}, steps: []string{"servers-prompts", "ollama-prompts"}},
		{names: []string{"regen", " client"}, sections: []string{"client", "regen"}, steps: []string{"corpus-big", "prompts-big", "regen"}},
		{names: []string{"dedupe"}, bad: `no section "dedupe"`},
	} {
		t.Run(strings.Join(tc.names, ","), func(t *testing.T) {
			secs, steps, err := plan(tc.names)
			if tc.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tc.bad) || !strings.Contains(err.Error(), "extract, extract-scale, dedup") {
					t.Fatalf("got %v, want an error naming %q and the sections", err, tc.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range secs {
				got = append(got, s.name)
			}
			if !slices.Equal(got, tc.sections) {
				t.Errorf("sections %v, want %v", got, tc.sections)
			}
			if g := stepNames(steps); !slices.Equal(g, tc.steps) {
				t.Errorf("steps %v, want %v", g, tc.steps)
			}
		})
	}
}

func stepNames(steps []*dataStep) []string {
	var names []string
	for _, s := range steps {
		names = append(names, s.name)
	}
	return names
}

// TestPlanShape holds the registry together: every step after the steps
// it reads, every name and file once, every heading once, every section
// rendering and measuring.
func TestPlanShape(t *testing.T) {
	seen, files := map[string]bool{}, map[string]bool{}
	for _, st := range dataSteps {
		for _, d := range st.deps {
			if !seen[d] {
				t.Errorf("step %s reads %s, which does not come before it", st.name, d)
			}
		}
		if seen[st.name] || files[st.file] {
			t.Errorf("step %s (%s) twice", st.name, st.file)
		}
		if script, err := testHarness(t).command(st); err != nil || !strings.Contains(script, st.file) || strings.Contains(script, "no value") {
			t.Errorf("step %s: %q (%v), which does not write %s", st.name, script, err, st.file)
		}
		seen[st.name], files[st.file] = true, true
	}
	var headings []string
	for _, s := range sections {
		if !strings.HasPrefix(s.heading, "## ") || slices.Contains(headings, s.heading) {
			t.Errorf("heading %q is not a \"## \" heading, or is there twice", s.heading)
		}
		headings = append(headings, s.heading)
		if s.measure == nil || testHarness(t).templates().Lookup(s.name) == nil {
			t.Errorf("section %s lacks a measure or a text", s.name)
		}
		for _, n := range s.needs {
			if !seen[n] {
				t.Errorf("section %s needs %s, which is no step", s.name, n)
			}
		}
	}
}

// testHarness is a harness over a temporary scratch directory.
func testHarness(t *testing.T) *harness {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"data", "tmp", "logs"} {
		if err := os.MkdirAll(dir+"/"+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var stderr bytes.Buffer
	// The repository is a directory with no real datasets beside it, so
	// that what is rendered does not depend on the machine.
	return &harness{dir: dir, repo: t.TempDir(), runs: 1, sz: sizes(false, 0),
		log: &cli.Env{Name: "benchsuite", Stderr: &stderr}, info: runInfo{Facts: map[string]string{"pin": "pinned to CPU 0 with taskset"}}}
}

// TestMakeData: the steps run in order with the run's sizes, a step's
// keep filters what it made, and a step that fails is named.
func TestMakeData(t *testing.T) {
	h := testHarness(t)
	h.sz.Slurp = 2
	odd := func(line []byte) bool { return line[0]%2 == 1 }
	steps := []*dataStep{{name: "a", file: "data/a", cmd: "seq 5 > data/a"}, {name: "b", file: "data/b", deps: []string{"a"}, cmd: "head -n {{.Sz.Slurp}} data/a > data/b"},
		{name: "odd", file: "data/odd", cmd: "seq 5 > data/odd", keep: odd}}
	if err := h.makeData(context.Background(), steps); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"data/a": "1\n2\n3\n4\n5\n", "data/b": "1\n2\n", "data/odd": "1\n3\n5\n"} {
		if got, _ := os.ReadFile(h.path(file)); string(got) != want {
			t.Errorf("%s: %q, want %q", file, got, want)
		}
	}
	boom := &dataStep{name: "d", file: "data/d", cmd: "echo d > data/d; false"}
	if err := h.makeData(context.Background(), []*dataStep{boom}); err == nil || !strings.Contains(err.Error(), "data/d") {
		t.Fatalf("a failing step: %v", err)
	}
}

func TestSizeLabel(t *testing.T) {
	for n, want := range map[int]string{1000: "1k", 10000: "10k", 40000: "40k", 1000000: "1M", 1500: "1500", 999: "999"} {
		if got := sizeLabel(n); got != want {
			t.Errorf("sizeLabel(%d) = %q, want %q", n, got, want)
		}
	}
	for _, sz := range []Sizes{sizes(false, 0), sizes(true, 0)} {
		if sz.Growth[len(sz.Growth)-1] != sz.Big || sz.Slurp > sz.Main {
			t.Errorf("sizes %+v: the last growth size is not the big corpus, or the slurp subset is bigger than the corpus", sz)
		}
	}
}
