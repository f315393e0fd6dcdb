package dedup

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/dedup")

// TestGolden pins what dedup writes for a small hand-made input in every
// normalization mode: kept records, dups with dup_of, rejects and the
// summary. Run with -update after an intended change, and read the diff.
func TestGolden(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "dedup")
	input, err := os.ReadFile(filepath.Join(dir, "input.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range modeNames {
		t.Run(mode, func(t *testing.T) {
			tmp := t.TempDir()
			dups, rejects := filepath.Join(tmp, "dups.jsonl"), filepath.Join(tmp, "rejects.jsonl")
			code, stdout, stderr := runDedup(t, input, "--exact", "--normalize", mode, "--dups", dups, "--rejects", rejects)
			if code != 3 {
				t.Fatalf("exit %d, want 3 (the input has rejects): %s", code, stderr)
			}
			dupData, _ := os.ReadFile(dups)
			rejData, _ := os.ReadFile(rejects)
			got := "# kept\n" + stdout + "# dups\n" + string(dupData) + "# rejects\n" + string(rejData) + "# stderr\n" + stderr
			golden := filepath.Join(dir, "golden-"+mode+".txt")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("output differs from %s:\n%s", golden, diffLines(string(want), got))
			}
		})
	}
}

// diffLines lists the lines only one side has, enough to see what changed.
func diffLines(want, got string) string {
	count := map[string]int{}
	for _, l := range strings.Split(want, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(got, "\n") {
		count[l]--
	}
	var b strings.Builder
	for l, n := range count {
		switch {
		case n > 0:
			b.WriteString("- " + l + "\n")
		case n < 0:
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
