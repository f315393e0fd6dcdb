package extract

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

// sumsFile holds the SHA-256 of what extract writes (stdout, rejects and
// stderr) for every real dataset and our own samples in every turn mode
// and with the output options, so a change made for speed that alters one
// byte of any output fails here. The real datasets are not in the
// repository; their outputs' hashes are.
const sumsFile = ourData + "/golden/sums.txt"

// sumRuns are the argument sets each input is run with.
var sumRuns = []struct {
	name string
	args []string
}{
	{"first", nil},
	{"each", []string{"--turns", "each"}},
	{"all", []string{"--turns", "all"}},
	{"all-but-last", []string{"--turns", "all-but-last"}},
	{"options", []string{"--keep", "langdetect,label,source,category,tools", "--source", "s", "--id-prefix", "p-", "--min-chars", "30", "--max-chars", "3000"}},
}

// sumInputs are the runs' inputs, by name: each real dataset alone, and
// all our samples in one run (so records of one layout follow another's).
func sumInputs(t *testing.T) map[string][]string {
	t.Helper()
	ins := map[string][]string{}
	for _, f := range []string{"fastchat_dummy_conversation.json", "alpaca_en_demo.json", "glaive_toolcall_en_demo.json",
		"v1_sft_demo.jsonl", "mt_bench_question.jsonl", "ii_0625_style.parquet", "ii_3m_style.parquet"} {
		ins[f] = []string{testbin.RealData(t, f)}
	}
	var ours []string
	for _, pattern := range []string{"*.json", "*.jsonl", "csv/*"} {
		m, err := filepath.Glob(filepath.Join(ourData, pattern))
		if err != nil {
			t.Fatal(err)
		}
		ours = append(ours, m...)
	}
	slices.Sort(ours)
	ins["ours"] = ours
	return ins
}

// TestOutputSums compares every run's outputs with the recorded hashes
// (rewritten with -update), with one worker and with several: the order
// and bytes of the output do not depend on how many convert.
func TestOutputSums(t *testing.T) {
	ins := sumInputs(t)
	names := make([]string, 0, len(ins))
	for n := range ins {
		names = append(names, n)
	}
	slices.Sort(names)
	var lines []string
	for _, in := range names {
		for _, r := range sumRuns {
			key := in + " " + r.name
			var first string
			for _, workers := range sumWorkers {
				rejects := filepath.Join(t.TempDir(), "rejects.jsonl")
				args := append(append(append([]string{"--progress", "0", "--rejects", rejects}, workers...), r.args...), ins[in]...)
				res := run(t, nil, nil, args...)
				if res.code != 0 && res.code != 3 {
					t.Fatalf("%s %v: exit %d\n%s", key, workers, res.code, res.stderr)
				}
				checkAccounting(t, res)
				rj, err := os.ReadFile(rejects)
				if err != nil {
					t.Fatal(err)
				}
				h := sha256.New()
				for _, part := range [][]byte{res.stdout, rj, []byte(res.stderr)} {
					fmt.Fprintf(h, "%d\n", len(part))
					h.Write(part)
				}
				sum := hex.EncodeToString(h.Sum(nil))
				if first == "" {
					first = sum
				} else if sum != first {
					t.Errorf("%s: the output with %v differs from the one with %v", key, workers, sumWorkers[0])
				}
			}
			lines = append(lines, key+" "+first)
		}
	}
	got := strings.Join(lines, "\n") + "\n"
	if *update {
		if err := os.WriteFile(sumsFile, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(sumsFile)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	wantLines := strings.Split(strings.TrimSpace(string(want)), "\n")
	for i, l := range lines {
		if i >= len(wantLines) || l != wantLines[i] {
			t.Errorf("output changed: %s (run with -update if the change is intended)", l)
		}
	}
	if len(wantLines) != len(lines) {
		t.Errorf("%d runs, %s records %d", len(lines), sumsFile, len(wantLines))
	}
}

// sumWorkers are the worker settings every run is made with.
var sumWorkers = [][]string{nil}
