package dedup

import (
	"os"
	"path/filepath"
	"testing"

	"tokenmill/internal/testbin"
)

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
			testbin.CheckGolden(t, golden, []byte(got))
		})
	}
}
