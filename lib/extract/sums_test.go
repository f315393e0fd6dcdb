package extract

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"tokenmill/lib/cli"

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
	testbin.CheckGolden(t, sumsFile, []byte(strings.Join(lines, "\n")+"\n"))
}

// sumWorkers are the worker settings every run is made with.
var sumWorkers = [][]string{{"--workers", "1"}, {"--workers", "3"}}

// TestWorkersSameOutput runs a file of many batches, where flat
// OpenAssistant messages (held across records and batches) come between
// records of every other layout, with one worker and with several, whole
// and with --limit, from a file and from stdin: the outputs, rejects and
// summaries are the same.
func TestWorkersSameOutput(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(ourData, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var parts [][]byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, data)
	}
	var all []byte
	for i := range 200 { // ~6 MB: a dozen batches
		for k := range parts {
			all = append(all, parts[(i+k)%len(parts)]...)
		}
	}
	path := filepath.Join(t.TempDir(), "many.jsonl")
	if err := os.WriteFile(path, all, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		stdin bool
	}{
		{"whole", nil, false},
		{"each", []string{"--turns", "each"}, false},
		{"limit", []string{"--limit", "5000"}, false},
		{"stdin", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var first result
			var firstRejects []byte
			for k, workers := range []string{"1", "4"} {
				rejects := filepath.Join(t.TempDir(), "rejects.jsonl")
				args := append([]string{"--progress", "0", "--workers", workers, "--rejects", rejects}, tc.args...)
				var stdin io.Reader
				if tc.stdin {
					stdin = bytes.NewReader(all)
				} else {
					args = append(args, path)
				}
				r := run(t, stdin, nil, args...)
				if r.code != 3 {
					t.Fatalf("--workers %s: exit %d, want 3 (the samples have rejects)\n%s", workers, r.code, r.stderr)
				}
				if tc.name == "limit" && r.sum.wrote != 5000 {
					t.Fatalf("--workers %s --limit 5000 wrote %d", workers, r.sum.wrote)
				}
				if tc.name != "limit" {
					checkAccounting(t, r)
				}
				rj, err := os.ReadFile(rejects)
				if err != nil {
					t.Fatal(err)
				}
				if k == 0 {
					first, firstRejects = r, rj
					if tc.name != "limit" && r.sum.wrote < 10000 {
						t.Fatalf("only %d records written: the input is too small to span batches", r.sum.wrote)
					}
					continue
				}
				if !bytes.Equal(r.stdout, first.stdout) || !bytes.Equal(rj, firstRejects) || r.stderr != first.stderr {
					t.Errorf("--workers %s: output, rejects or summary differ from --workers 1:\n%s\n%s", workers, r.stderr, first.stderr)
				}
			}
		})
	}
}

// TestWorkersInProcess runs the parallel path in the test's own process
// (so that -race sees it), against one worker.
func TestWorkersInProcess(t *testing.T) {
	oa, err := os.ReadFile(filepath.Join(ourData, "oasst.messages.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	data := append(shareGPTData(3000), oa...)
	data = append(data, shareGPTData(2000)...)
	var outs [2]bytes.Buffer
	for i, workers := range []string{"1", "3"} {
		var stderr bytes.Buffer
		env := &cli.Env{Name: "extract", Stdin: bytes.NewReader(data), Stdout: &outs[i], Stderr: &stderr}
		if code := cli.Run(context.Background(), env, Description, &Command{}, []string{"--workers", workers, "--progress", "0"}); code != 0 {
			t.Fatalf("--workers %s: exit %d\n%s", workers, code, stderr.String())
		}
		if !strings.Contains(stderr.String(), "read 5008, wrote 5002, rejected 0, 6 messages end no prompt") {
			t.Fatalf("--workers %s: %s", workers, stderr.String())
		}
	}
	if !bytes.Equal(outs[0].Bytes(), outs[1].Bytes()) {
		t.Fatal("the outputs of 1 and 3 workers differ")
	}
}
