package shard

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/chaos"
	"tokenmill/internal/testbin"
)

// TestChaosKilledPipeInput: `shard -n 8 -o 'part-{i}.jsonl'` reading its
// records from a pipe, killed with SIGKILL at seeded moments (half timed,
// half once a part's temporary file has grown to a drawn size). Shard
// writes all or nothing: after each kill the parts in place must be none,
// or all eight complete, and a rerun from the pipe, without --force, must
// give the reference parts byte for byte.
func TestChaosKilledPipeInput(t *testing.T) {
	n, kills := chaos.Size(10000, 40000, 400000), chaos.Size(4, 6, 20)
	input := []byte(strings.Join(syntheticInput(n), "\n") + "\n")
	parts := func(dir string) []string {
		var names []string
		for i := range 8 {
			names = append(names, filepath.Join(dir, fmt.Sprintf("part-%d.jsonl", i)))
		}
		return names
	}
	args := func(dir string) []string { return []string{"-n", "8", "-o", filepath.Join(dir, "part-{i}.jsonl")} }
	ref := t.TempDir()
	began := time.Now()
	if r := testbin.Run(t, "", bytes.NewReader(input), nil, "shard", args(ref)...); r.Code != 0 {
		t.Fatalf("reference run: exit %d\n%s", r.Code, r.Stderr)
	}
	span := time.Since(began)
	var want [][]byte
	var largest int64
	for _, p := range parts(ref) {
		b := readFile(t, p)
		want = append(want, b)
		largest = max(largest, int64(len(b)))
	}

	outcomes := map[string]int{}
	landed, litter, reruns := 0, 0, 0
	work := t.TempDir()
	for i, m := range chaos.Moments(20250611, kills, span, filepath.Join(work, "part-*.jsonl.tmp-*"), largest) {
		os.RemoveAll(work)
		os.Mkdir(work, 0o755)
		if chaos.KillFed(t, m, input, "shard", args(work)...) {
			landed++
		}
		var complete, absent int
		for k, p := range parts(work) {
			switch chaos.FileIs(p, want[k]) {
			case chaos.Complete:
				complete++
			case chaos.Absent:
				absent++
			}
		}
		switch {
		case absent == 8:
			outcomes["no part in place"]++
		case complete == 8:
			outcomes["all 8 parts complete"]++
		default:
			t.Fatalf("kill %d (%v) left %d parts complete, %d absent, %d short", i, m, complete, absent, 8-complete-absent)
		}
		litter += chaos.Litter(t, work)
		if absent == 8 {
			if r := testbin.Run(t, "", bytes.NewReader(input), nil, "shard", args(work)...); r.Code != 0 {
				t.Fatalf("rerun (no --force) after kill %d: exit %d\n%s", i, r.Code, r.Stderr)
			}
			for k, p := range parts(work) {
				if chaos.FileIs(p, want[k]) != chaos.Complete {
					t.Fatalf("the rerun after kill %d gave part %d unlike the reference", i, k)
				}
			}
			reruns++
		}
	}
	if landed < kills/2 {
		t.Errorf("only %d of %d kills landed before the run ended", landed, kills)
	}
	t.Logf("%d kills landed of %d; %v; %d temporary files left; %d reruns", landed, kills, outcomes, litter, reruns)

	var rep strings.Builder
	fmt.Fprintf(&rep, "### shard: killed while reading a pipe (%s run)\n\n", chaos.RunName())
	fmt.Fprintf(&rep, "`... | shard -n 8 -o 'part-{i}.jsonl'` over %d records (%d MB) on stdin from a pipe, an uninterrupted run taking %v, "+
		"killed with SIGKILL at %d seeded moments: half timed, half once a part's temporary file reached a drawn size.\n\n",
		n, len(input)>>20, span.Round(time.Millisecond), kills)
	rep.WriteString(chaos.Table("what a kill left", "kills", outcomes))
	fmt.Fprintf(&rep, "\nKills that landed before the run ended: %d. Parts found short, or some in place and others not: **0**. "+
		"Reruns from the pipe after a kill, without --force: %d, each giving the reference parts byte for byte. "+
		"Temporary files left by the kills (`part-K.jsonl.tmp-*`, removed by the test): %d.\n\n", landed, reruns, litter)
	rep.WriteString(chaos.Reproduce("TestChaosKilledPipeInput", "lib/shard"))
	chaos.Report(t, "shard", rep.String())
}
