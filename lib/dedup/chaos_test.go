package dedup

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

// TestChaosKilledMidWrite kills `dedup --state S -o OUT --dups DUPS` with
// SIGKILL at seeded moments (some timed, some once the output's temporary
// file has grown to a drawn size) and checks what each kill left: OUT and
// DUPS absent or complete, never short; the state either as it was before
// the run or the run's whole state, and the latter only once OUT is
// complete (otherwise a rerun would drop what the lost output held). A
// run that left the old state is run again and must give the full output.
func TestChaosKilledMidWrite(t *testing.T) {
	n, kills := chaos.Size(20000, 60000, 660000), chaos.Size(4, 6, 20)
	dir := t.TempDir()
	input, _ := corpusPrompts(n, 11)
	cutAt := 0
	for range n / 5 {
		cutAt += bytes.IndexByte(input[cutAt:], '\n') + 1
	}
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	os.WriteFile(a, input[:cutAt], 0o644)
	os.WriteFile(b, input[cutAt:], 0o644)
	// The state of an earlier run over a, which every run over b loads.
	state0 := filepath.Join(dir, "a.state")
	if r := testbin.Run(t, "", nil, nil, "dedup", "--state", state0, "-o", os.DevNull, a); r.Code != 0 {
		t.Fatalf("run over a: exit %d\n%s", r.Code, r.Stderr)
	}
	old, _ := os.ReadFile(state0)

	// run sets up a work directory holding a copy of the old state and
	// returns the arguments of a run over b there.
	run := func(work string) (state, out, dups string, args []string) {
		state, out, dups = filepath.Join(work, "seen.state"), filepath.Join(work, "out.jsonl"), filepath.Join(work, "dups.jsonl")
		if err := os.WriteFile(state, old, 0o644); err != nil {
			t.Fatal(err)
		}
		return state, out, dups, []string{"--state", state, "-o", out, "--dups", dups, b}
	}
	refDir := t.TempDir()
	refState, refOut, refDups, args := run(refDir)
	began := time.Now()
	if r := testbin.Run(t, "", nil, nil, "dedup", args...); r.Code != 0 {
		t.Fatalf("reference run: exit %d\n%s", r.Code, r.Stderr)
	}
	span := time.Since(began)
	wantOut, _ := os.ReadFile(refOut)
	wantDups, _ := os.ReadFile(refDups)
	wantState, _ := os.ReadFile(refState)
	if len(wantDups) == 0 || bytes.Equal(wantState, old) {
		t.Fatal("the reference run found no duplicates or did not update the state")
	}

	outcomes := map[string]int{}
	landed, litter, reruns := 0, 0, 0
	work := t.TempDir()
	for i, m := range chaos.Moments(20250611, kills, span, filepath.Join(work, "out.jsonl.tmp-*"), int64(len(wantOut))) {
		os.RemoveAll(work)
		os.Mkdir(work, 0o755)
		state, out, dups, args := run(work)
		if chaos.Kill(t, m, "dedup", args...) {
			landed++
		}
		o, d := chaos.FileIs(out, wantOut), chaos.FileIs(dups, wantDups)
		s := "old"
		switch st, _ := os.ReadFile(state); {
		case bytes.Equal(st, wantState):
			s = "new"
		case !bytes.Equal(st, old):
			s = "damaged"
		}
		outcomes[fmt.Sprintf("output %s, dups %s, state %s", o, d, s)]++
		if o == chaos.Short || d == chaos.Short || s == "damaged" || (s == "new" && (o != chaos.Complete || d != chaos.Complete)) {
			t.Fatalf("kill %d (%v) left output %s, dups %s, state %s", i, m, o, d, s)
		}
		litter += chaos.Litter(t, work)
		if s == "old" {
			// A kill between putting OUT in place and saving the state
			// leaves a complete OUT: the rerun replaces it (--force).
			if r := testbin.Run(t, "", nil, nil, "dedup", append([]string{"--force"}, args...)...); r.Code != 0 {
				t.Fatalf("rerun after kill %d: exit %d\n%s", i, r.Code, r.Stderr)
			}
			if chaos.FileIs(out, wantOut) != chaos.Complete || chaos.FileIs(dups, wantDups) != chaos.Complete || chaos.FileIs(state, wantState) != chaos.Complete {
				t.Fatalf("the rerun after kill %d (%v, which left output %s, dups %s) gave output %s, dups %s, state %s", i, m, o, d, chaos.FileIs(out, wantOut), chaos.FileIs(dups, wantDups), chaos.FileIs(state, wantState))
			}
			reruns++
		}
	}
	if landed < kills/2 {
		t.Errorf("only %d of %d kills landed before the run ended", landed, kills)
	}
	t.Logf("%d kills landed of %d; %v; %d temporary files left; %d reruns", landed, kills, outcomes, litter, reruns)

	var rep strings.Builder
	fmt.Fprintf(&rep, "### dedup: killed mid-write (%s run)\n\n", chaos.RunName())
	fmt.Fprintf(&rep, "`dedup --state S -o OUT --dups DUPS b.jsonl` over %d prompt records (%d MB, %d loaded from an earlier run's state), "+
		"an uninterrupted run taking %v, killed with SIGKILL at %d seeded moments: half timed, half once OUT's temporary file reached a drawn size.\n\n",
		n-n/5, len(input[cutAt:])>>20, n/5, span.Round(time.Millisecond), kills)
	rep.WriteString(chaos.Table("what a kill left", "kills", outcomes))
	fmt.Fprintf(&rep, "\nKills that landed before the run ended: %d. Outputs found short: **0**; states damaged or ahead of the output: **0**. "+
		"Reruns after a kill (state unchanged): %d, each giving the reference output, dups and state byte for byte. "+
		"Temporary files left by the kills (`OUT.tmp-*` and `DUPS.tmp-*`, removed by the test): %d.\n\n", landed, reruns, litter)
	rep.WriteString(chaos.Reproduce("TestChaosKilledMidWrite", "lib/dedup"))
	chaos.Report(t, "dedup", rep.String())
}
