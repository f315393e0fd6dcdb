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
		{names: []string{"servers"}, sections: []string{"inflight", "kinds", "ollama"}, steps: []string{"servers-prompts", "ollama-prompts"}},
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
		seen[st.name], files[st.file] = true, true
	}
	order := docOrder()
	for i, hd := range order {
		if !strings.HasPrefix(hd, "## ") || slices.Contains(order[:i], hd) {
			t.Errorf("heading %q is not a \"## \" heading, or is there twice", hd)
		}
	}
	for _, s := range sections {
		if s.measure == nil || s.about == "" || testHarness(t).templates().Lookup(s.name) == nil {
			t.Errorf("section %s lacks a measure, a text or an about", s.name)
		}
		for _, n := range s.needs {
			if !seen[n] {
				t.Errorf("section %s needs %s, which is no step", s.name, n)
			}
		}
	}
	var out bytes.Buffer
	if err := listSections(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SECTION", "dedup ", "data/prompts-slurp.jsonl", "inflight", "ollama"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--list lacks %q:\n%s", want, out.String())
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
	return &harness{dir: dir, repo: t.TempDir(), runs: 1, sz: sizes(false, 0), remade: map[string]bool{},
		log: &cli.Env{Name: "benchsuite", Stderr: &stderr}, info: runInfo{Facts: map[string]string{"pin": "pinned to CPU 0 with taskset"}}}
}

// TestMakeDataReuse: with reuse, a file is kept when its stamp says the
// same command made it and nothing it was made from was made again; a
// file that is missing, empty or made another way is made again, and so
// is everything made from it. A step's keep filters what it made.
func TestMakeDataReuse(t *testing.T) {
	h := testHarness(t)
	keys := map[string]string{"a": "a", "b": "b from a", "c": "c"}
	step := func(name string, deps ...string) *dataStep {
		return &dataStep{name: name, deps: deps, file: "data/" + name,
			cmd: func(*harness) string { return "echo " + keys[name] + " >> made; echo " + name + " > data/" + name }}
	}
	steps := []*dataStep{step("a"), step("b", "a"), step("c")}
	run := func(reuse bool) string {
		t.Helper()
		h.reuse, h.remade = reuse, map[string]bool{}
		os.Remove(h.path("made"))
		if err := h.makeData(context.Background(), steps); err != nil {
			t.Fatal(err)
		}
		made, _ := os.ReadFile(h.path("made"))
		return strings.Join(strings.Fields(string(made)), ",")
	}
	for _, tc := range []struct {
		what   string
		before func()
		reuse  bool
		want   string
	}{
		{"first run", func() {}, true, "a,b,from,a,c"},
		{"nothing changed", func() {}, true, ""},
		{"without reuse", func() {}, false, "a,b,from,a,c"},
		{"a's command changed: b is made from it again", func() { keys["a"] = "A" }, true, "A,b,from,a"},
		{"b's file is empty", func() { os.WriteFile(h.path("data/b"), nil, 0o644) }, true, "b,from,a"},
		{"c's file is gone", func() { os.Remove(h.path("data/c")) }, true, "c"},
		{"c's stamp is gone", func() { os.Remove(h.path("data/c.done")) }, true, "c"},
	} {
		tc.before()
		if got := run(tc.reuse); got != tc.want {
			t.Errorf("%s: made %q, want %q", tc.what, got, tc.want)
		}
	}

	// A step that fails leaves no stamp: the next run makes it again.
	boom := &dataStep{name: "d", file: "data/d", cmd: cmd("echo d > data/d; false")}
	if err := h.makeData(context.Background(), []*dataStep{boom}); err == nil || !strings.Contains(err.Error(), "data/d") {
		t.Fatalf("a failing step: %v", err)
	}
	if _, err := os.Stat(h.path("data/d.done")); err == nil {
		t.Fatal("a failed step left its stamp")
	}
	// keep filters the lines made.
	odd := &dataStep{name: "e", file: "data/e", cmd: cmd("seq 5 > data/e"), keep: func(_ *harness, line []byte) bool { return line[0]%2 == 1 }}
	if err := h.makeData(context.Background(), []*dataStep{odd}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(h.path("data/e")); string(got) != "1\n3\n5\n" {
		t.Errorf("kept %q", got)
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
