package merge

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/chaos"
	"tokenmill/internal/testbin"
)

// TestChaosKilledMidWrite kills `merge --errors E -o OUT` (spilling to a
// temporary directory under a small memory budget) with SIGKILL at seeded
// moments, some timed, some once OUT's temporary file has grown to a drawn
// size. Each kill must leave OUT and E absent or complete, never short,
// and no spill file; a rerun with --force must give the full output.
func TestChaosKilledMidWrite(t *testing.T) {
	prompts, answers, kills := chaos.Size(5000, 20000, 200000), chaos.Size(25000, 100000, 1000000), chaos.Size(4, 6, 20)
	dir := t.TempDir()
	var inputs []string
	var size int
	for i, f := range newBruteRun(20250611, prompts, 2, answers).files {
		inputs = append(inputs, writeLines(t, filepath.Join(dir, fmt.Sprintf("gen-%d.jsonl", i)), f))
		for _, l := range f {
			size += len(l) + 1
		}
	}
	args := func(work string) []string {
		return append([]string{"--memory", chaos.Size("2MiB", "8MiB", "8MiB"), "--temp-dir", filepath.Join(work, "spill"), "--force",
			"-o", filepath.Join(work, "final.jsonl"), "--errors", filepath.Join(work, "final.errors.jsonl")}, inputs...)
	}
	fresh := func(work string) {
		os.RemoveAll(work)
		if err := os.MkdirAll(filepath.Join(work, "spill"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ref := t.TempDir()
	fresh(ref)
	began := time.Now()
	if r := testbin.Run(t, "", nil, nil, "merge", args(ref)...); r.Code != 0 || !strings.Contains(r.Stderr, "spill") {
		t.Fatalf("reference run: exit %d, or it did not spill:\n%s", r.Code, r.Stderr)
	}
	span := time.Since(began)
	wantOut, _ := os.ReadFile(filepath.Join(ref, "final.jsonl"))
	wantErrs, _ := os.ReadFile(filepath.Join(ref, "final.errors.jsonl"))
	if len(wantOut) == 0 || len(wantErrs) == 0 {
		t.Fatal("the reference run wrote no answers or no errors")
	}

	outcomes := map[string]int{}
	landed, litter := 0, 0
	work := filepath.Join(t.TempDir(), "w")
	for i, m := range chaos.Moments(20250611, kills, span, filepath.Join(work, "final.jsonl.tmp-*"), int64(len(wantOut))) {
		fresh(work)
		if chaos.Kill(t, m, "merge", args(work)...) {
			landed++
		}
		o := chaos.FileIs(filepath.Join(work, "final.jsonl"), wantOut)
		e := chaos.FileIs(filepath.Join(work, "final.errors.jsonl"), wantErrs)
		spilled, _ := os.ReadDir(filepath.Join(work, "spill"))
		outcomes[fmt.Sprintf("output %s, errors %s", o, e)]++
		if o == chaos.Short || e == chaos.Short || len(spilled) > 0 {
			t.Fatalf("kill %d (%v) left output %s, errors %s, %d spill files", i, m, o, e, len(spilled))
		}
		litter += chaos.Litter(t, work)
		if r := testbin.Run(t, "", nil, nil, "merge", args(work)...); r.Code != 0 {
			t.Fatalf("rerun after kill %d: exit %d\n%s", i, r.Code, r.Stderr)
		}
		if chaos.FileIs(filepath.Join(work, "final.jsonl"), wantOut) != chaos.Complete || chaos.FileIs(filepath.Join(work, "final.errors.jsonl"), wantErrs) != chaos.Complete {
			t.Fatalf("the rerun after kill %d (%v) did not give the reference output and errors", i, m)
		}
	}
	if landed < kills/2 {
		t.Errorf("only %d of %d kills landed before the run ended", landed, kills)
	}
	t.Logf("%d kills landed of %d; %v; %d temporary files left", landed, kills, outcomes, litter)

	var rep strings.Builder
	fmt.Fprintf(&rep, "### merge: killed mid-write (%s run)\n\n", chaos.RunName())
	fmt.Fprintf(&rep, "`merge --memory 8MiB --temp-dir SPILL --force -o OUT --errors ERRS gen-*.jsonl` over %d answer records (%d MB) for %d prompts × 2 samples, "+
		"an uninterrupted run taking %v and spilling, killed with SIGKILL at %d seeded moments: half timed, half once OUT's temporary file reached a drawn size.\n\n",
		answers, size>>20, prompts, span.Round(time.Millisecond), kills)
	rep.WriteString(chaos.Table("what a kill left", "kills", outcomes))
	fmt.Fprintf(&rep, "\nKills that landed before the run ended: %d. Outputs found short: **0**; spill files left: **0**. "+
		"Every rerun gave the reference output and errors byte for byte. Temporary files left by the kills (`OUT.tmp-*` and `ERRS.tmp-*`, removed by the test): %d.\n\n", landed, litter)
	rep.WriteString(chaos.Reproduce("TestChaosKilledMidWrite", "lib/merge"))
	chaos.Report(t, "merge", rep.String())
}
