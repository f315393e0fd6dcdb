package benchsuite

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
)

// buildTools builds the commands a section runs into a directory of their
// own, with rusage, as the harness does for a run.
func buildTools(t *testing.T, names ...string) string {
	t.Helper()
	bin := t.TempDir()
	if err := testbin.Build(bin, append(names, "rusage")...); err != nil {
		t.Fatal(err)
	}
	return bin
}

// distinctPrompts counts the prompts of a file of prompt records (the
// roles and contents of their messages, as dedup compares them), in its
// first n records.
func distinctPrompts(t *testing.T, path string, n int) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for i := 0; i < n && sc.Scan(); i++ {
		var r struct {
			Messages []struct{ Role, Content string } `json:"messages"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		var key strings.Builder
		for _, m := range r.Messages {
			key.WriteString(m.Role + "\x00" + m.Content + "\x00")
		}
		seen[key.String()] = true
	}
	return int64(len(seen))
}

// TestRunSectionEndToEnd runs the dedup section as `benchsuite run
// --section dedup` does, on a corpus of a few thousand records, with the
// peers this machine has: the data is made, every row measured or marked
// not available, the records each command wrote counted against an
// independent count, and the report of the section written into the
// scratch directory, never over BENCHMARKS.md.
func TestRunSectionEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tools and measures a section: not in -short")
	}
	bin := buildTools(t, "extract", "dedup", "corpus")
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "BENCHMARKS.md")
	sz := sizes(true, 0)
	sz.Main, sz.Slurp, sz.Exact = 3000, 1000, 3000
	var stderr bytes.Buffer
	newHarness := func(runs int) *harness {
		return &harness{repo: repo, dir: dir, bin: bin, prebuilt: true, runs: runs, sz: sz, log: &cli.Env{Name: "benchsuite", Stderr: &stderr},
			info: runInfo{Sections: []string{"dedup"}}}
	}
	secs, steps, err := plan([]string{"dedup"})
	if err != nil {
		t.Fatal(err)
	}
	if err := newHarness(1).setOut(filepath.Join(repo, "BENCHMARKS.md")); err == nil {
		t.Error("a run of one section may write BENCHMARKS.md")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := newHarness(2)
	if err := h.setOut(""); err != nil || h.out != out {
		t.Fatalf("a run of one section writes %s (%v), want %s", h.out, err, out)
	}
	if err := h.run(ctx, secs, steps); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}

	// Every row: measured with the records it should write, or not
	// available because its peer is missing here.
	n := int64(sz.Main)
	distinct := distinctPrompts(t, filepath.Join(dir, "data/prompts.jsonl"), sz.Main)
	distinctSlurp := distinctPrompts(t, filepath.Join(dir, "data/prompts.jsonl"), sz.Slurp)
	if distinct >= n || distinct < n*9/10 {
		t.Fatalf("%d distinct prompts of %d: the corpus should repeat a few", distinct, n)
	}
	rows := map[string]*Result{}
	for _, r := range h.results {
		rows[r.Name] = r
	}
	for _, want := range []struct {
		name  string
		out   int64
		needs []string
	}{
		{"dedup", distinct, nil},
		{"dedup --workers 1", distinct, nil},
		{"dedup --exact", distinct, nil},
		{"awk", n, []string{"awk"}},
		{"gawk", n, []string{"gawk"}},
		{"sort -u", n, []string{"sort"}},
		{"jq + sort", distinct, []string{"jq", "sort", "cut"}},
		{"dedup, first 1000", distinctSlurp, nil},
		{"jq -s unique_by, first 1000", distinctSlurp, []string{"jq"}},
		// the same corpus (same seed and size), made again for --exact
		{"dedup --exact, 3k", distinct, nil},
		// keyed on bytes, it keeps the repeats that differ in JSON escaping
		{"sort -u by prompt, 3k", -1, []string{"sort"}},
	} {
		r := rows[want.name]
		if r == nil {
			t.Errorf("no row %q", want.name)
			continue
		}
		present := true
		for _, p := range want.needs {
			present = present && have(p)
		}
		switch {
		case !present && (len(r.Runs) != 0 || !strings.Contains(r.Note, "not available")):
			t.Errorf("%s: its peer is missing here, yet the row is %+v", want.name, r)
		case present && want.out < 0 && (len(r.Runs) != 2 || r.OutRecords < distinct || r.OutRecords >= n):
			t.Errorf("%s: %d runs, %d records out; want 2 runs and from %d to %d", want.name, len(r.Runs), r.OutRecords, distinct, n-1)
		case present && want.out >= 0 && (len(r.Runs) != 2 || r.OutRecords != want.out):
			t.Errorf("%s: %d runs, %d records out; want 2 runs and %d", want.name, len(r.Runs), r.OutRecords, want.out)
		}
	}
	if len(rows) != 11 || len(h.results) != 11 {
		t.Errorf("%d rows, want 11", len(h.results))
	}

	doc, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := string(doc)
	for _, want := range []string{
		"# Benchmarks\n\nGenerated by `benchsuite run` (`just bench`; --section dedup) on ", "\n## Machine\n", "\n## Targets\n",
		"\n## dedup\n\n`dedup` keeps the first record",
		"| **dedup** | ", " | " + cli.Thousands(distinct) + " | ",
		"- awk: `awk '!seen[$0]++' data/prompts.jsonl`",
		"| dedup peak RSS ≤ 64 MB (bloom mode) | ",
		"\n## How to reproduce\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	if strings.Count(got, "\n## ") != 5 || strings.Contains(got, "## shard") {
		t.Errorf("the report holds other sections than dedup's:\n%s", got)
	}
}
