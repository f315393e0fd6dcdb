package benchsuite

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/corpus"
	"tokenmill/internal/testbin"
	"tokenmill/lib/dedup"
)

// The Python peer computes dedup --near's signatures: on the corpus's
// prompts (English, Chinese, code, exact and normalized repeats) it keeps
// exactly the lines dedup --near keeps, so the speed rows compare the
// same work.
func TestPythonMinHashAgreesWithDedup(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Python on 1500 prompts (a few seconds)")
	}
	exe, why := python()
	if why != "" {
		t.Skip(why)
	}
	dir := t.TempDir()
	var buf []byte
	gen := corpus.New(3)
	for range 1500 {
		buf = append(corpus.AppendPrompt(buf, gen.Next()), '\n')
	}
	in := filepath.Join(dir, "prompts.jsonl")
	if err := os.WriteFile(in, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "minhash_numpy.py", in) // the package's directory
	var pyOut, pyErr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &pyOut, &pyErr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, pyErr.String())
	}
	if strings.Contains(pyErr.String(), "blake2b") {
		t.Skip("libxxhash is not installed: the Python peer hashes words with blake2b, so its output differs by chance")
	}
	r := testbin.InProcess(context.Background(), "dedup", dedup.Description, &dedup.Command{}, nil, "--near", in)
	if r.Code != 0 {
		t.Fatalf("dedup --near: exit %d: %s", r.Code, r.Stderr)
	}
	near := regexp.MustCompile(`near-duplicates (\d+)`).FindStringSubmatch(r.Stderr)
	if near == nil || near[1] == "0" {
		t.Fatalf("the corpus gave dedup --near no near-duplicates to agree on:\n%s", r.Stderr)
	}
	if !bytes.Equal(pyOut.Bytes(), r.Stdout) {
		t.Fatalf("the Python MinHash kept %d lines, dedup --near %d (%s):\n%s", bytes.Count(pyOut.Bytes(), []byte("\n")),
			bytes.Count(r.Stdout, []byte("\n")), near[0], pyErr.String())
	}
}

// The quality table and its targets from canned rows.
func TestNeardupRendering(t *testing.T) {
	h := testHarness(t)
	h.sz.Main = 16000
	add := func(name string, m map[string]float64) {
		h.results = append(h.results, &Result{Group: "neardup-quality", Name: name, OutRecords: -1, Metrics: m})
	}
	add("J 0.9-1", map[string]float64{"pairs": 1000, "dropped": 999, "own_base": 999, "drop_rate": 0.999, "rate_substitute": 1, "rate_insert": 0.997, "rate_reorder": 1})
	add("J below 0.6", map[string]float64{"pairs": 2000, "dropped": 3, "drop_rate": 0.0015})
	add("bases", map[string]float64{"pairs": 6000, "dropped": 0, "drop_rate": 0, "precision": 0.9, "drops": 1100})
	h.results = append(h.results, &Result{Group: "neardup-real", Name: "alpaca_en_demo.json", OutRecords: -1,
		Metrics: map[string]float64{"prompts": 999, "exact": 14, "near": 3, "kept": 982}})
	for i, size := range []string{"1×", "16×"} {
		f := []float64{1, 16}[i]
		h.results = append(h.results, &Result{Group: "neardup-growth", Name: "dedup --near", Size: size, Command: "dedup --near p" + size, Bytes: int64(24e6 * f),
			Runs: []Run{{Wall: time.Duration(f * float64(time.Second)), User: time.Duration(f * 1.1 * 0.5 * float64(time.Second)), MaxRSSKB: int64(100*f) << 10}}, OutRecords: 1})
	}
	text := renderSection(t, h, neardupSection)
	for _, want := range []string{
		"| J 0.9-1 | 1,000 | 999 | 0.999 | 1.000 | 0.997 | 1.000 | 999 |",
		"| J below 0.6 | 2,000 | 3 | 0.002 | — | — | — | — |",
		"Bases dropped (false drops of unrelated prompts): 0 of 6,000",
		"| `alpaca_en_demo.json` | 999 | 14 | 3 | 982 |",
		"on the first 1,000 prompts",
		"| CPU s | 1× | 16× | 16× ÷ 1× |",
		"| dedup --near | 0.55 | 8.80 | 16.0× |",
		"| dedup --near | 43.6 | 43.6 |",
		"| dedup --near | 100.0 | 1600.0 | 16.0× |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in:\n%s", want, text)
		}
	}
	var tb strings.Builder
	targets, err := h.targets(neardupSection)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeTargets(&tb, h.results, targets); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| recall ≥ 0.95 for pairs at J ≥ 0.9 | 0.999 | yes |",
		"| false drops ≤ 1% for pairs below J = 0.6 | 0.0015 | yes |",
		"| no base prompt dropped | 0 | yes |",
		"| signatures + LSH ≥ 50 MB per CPU second | not measured",
	} {
		if !strings.Contains(tb.String(), want) {
			t.Errorf("no %q in:\n%s", want, tb.String())
		}
	}
}
