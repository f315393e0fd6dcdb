package benchsuite

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/corpus"
	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// The neardup section: dedup --near's quality on planted near-duplicates
// of known Jaccard similarity, what it finds in the real datasets, and its
// speed and growth beside exact dedup and a Python MinHash with numpy.

// minhashPy is the Python peer, written into the scratch directory.
//
//go:embed minhash_numpy.py
var minhashPy []byte

// The parameters measured: dedup --near's defaults.
const (
	nearShingle   = 5
	nearThreshold = 0.8
)

var neardupSection = &section{
	name: "neardup", heading: "## dedup --near: near-duplicates",
	about: "dedup --near: precision and recall on planted near-duplicates of known Jaccard similarity, the near-duplicates of the real datasets, speed per core beside exact dedup and a Python MinHash with numpy, growth at 1x, 4x, 16x",
	needs: []string{"prompts"},
	measure: func(ctx context.Context, h *harness) error {
		if err := h.nearQuality(ctx); err != nil {
			return err
		}
		if err := h.nearReal(ctx); err != nil {
			return err
		}
		return h.nearSpeed(ctx)
	},
	render: renderNeardup,
	targets: func(h *harness) []string {
		return []string{
			"recall ≥ 0.95 for pairs at J ≥ 0.9 := neardup-quality/J 0.9-1:drop_rate >= 0.95",
			"false drops ≤ 1% for pairs below J = 0.6 := neardup-quality/J below 0.6:drop_rate <= 0.01",
			"no base prompt dropped := neardup-quality/bases:drop_rate <= 0",
			"signatures + LSH ≥ 50 MB per CPU second := neardup/" + signLSHRow + ":mb_per_cpu_s >= 50",
		}
	},
}

const (
	pythonRow  = "Python MinHash (numpy), 1 core"
	signLSHRow = "signatures + LSH alone (lib/minhash BenchmarkSignLSH)"
)

// nearSizes are the 1x, 4x and 16x inputs: the first Main/16, Main/4 and
// all of the prompts.
func (h *harness) nearSizes() []int { return []int{h.sz.Main / 16, h.sz.Main / 4, h.sz.Main} }

// nearPairs is how many pairs are planted.
func (h *harness) nearPairs() int {
	if h.quick {
		return 600
	}
	return 6000
}

// runTool runs a built tool from the scratch directory, unmeasured, and
// returns its stderr.
func (h *harness) runTool(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, h.tool(name), args...)
	cmd.Dir, cmd.Env = h.dir, h.environ
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 0 {
			return stderr.String(), fmt.Errorf("%s %s: %v\n%s", name, shellJoin(args), err, tail(stderr.Bytes(), 2000))
		}
	}
	return stderr.String(), nil
}

// clusterLine is one line of dedup --clusters.
type clusterLine struct {
	ID         string  `json:"id"`
	DupOf      string  `json:"dup_of"`
	Similarity float64 `json:"similarity"`
}

// readClusters maps each near-duplicate's id to the id it was found a
// copy of.
func readClusters(path string) (map[string]clusterLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]clusterLine{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var c clusterLine
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		out[c.ID] = c
	}
	return out, sc.Err()
}

// nearQuality plants pairs, runs dedup --near on them and keeps, for each
// similarity bucket, the share of variants dropped (and whether each was
// found a copy of its own base); and the bases dropped, which are all
// false drops (bases are unrelated texts).
func (h *harness) nearQuality(ctx context.Context) error {
	o := corpus.NearOptions{Shingle: nearShingle, Prefix: "user\n", Buckets: corpus.DefaultNearBuckets, Median: 80, MinWords: 20, MaxWords: 400}
	pairs := corpus.PlantNear(1, h.nearPairs(), o)
	const data, clusters = "data/neardup-planted.jsonl", "tmp/neardup-clusters.jsonl"
	// Bases first (in a shuffled order), then the variants (shuffled): a
	// variant always comes after its base, as a later copy does.
	rng := rand.New(rand.NewPCG(2, 0))
	order := rng.Perm(len(pairs))
	var buf []byte
	err := jsonl.WriteFile(h.path(data), jsonl.CreateFileOptions{Replace: true}, func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		for pass, prefix := range []string{"b", "v"} {
			for _, i := range order {
				text := pairs[i].Base
				if pass == 1 {
					text = pairs[i].Variant
				}
				buf = fmt.Appendf(buf[:0], `{"id":"%s%d","messages":[{"role":"user","content":`, prefix, i)
				q, _ := json.Marshal(text)
				buf = append(append(buf, q...), "}]}\n"...)
				bw.Write(buf)
			}
			rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		}
		return bw.Flush()
	})
	if err != nil {
		return err
	}
	defer os.Remove(h.path(clusters))
	if _, err := h.runTool(ctx, "dedup", "--near", "--force", "--clusters", clusters, "-o", "/dev/null", data); err != nil {
		return err
	}
	found, err := readClusters(h.path(clusters))
	if err != nil {
		return err
	}
	load := loadAverage()
	type tally struct{ pairs, dropped, ownBase int }
	byBucket := make([]tally, len(o.Buckets)-1)
	byKind := map[string]*[2]int{} // per bucket kind: dropped, pairs
	var below tally
	dropsAbove := 0 // drops of pairs at J >= the threshold, for precision
	for i, p := range pairs {
		c, dropped := found[fmt.Sprintf("v%d", i)]
		t := &byBucket[p.Bucket]
		t.pairs++
		k := byKind[fmt.Sprintf("%d/%s", p.Bucket, p.Kind)]
		if k == nil {
			k = &[2]int{}
			byKind[fmt.Sprintf("%d/%s", p.Bucket, p.Kind)] = k
		}
		k[1]++
		if p.Jaccard < 0.6 {
			below.pairs++
		}
		if !dropped {
			continue
		}
		t.dropped++
		k[0]++
		if c.DupOf == fmt.Sprintf("b%d", i) {
			t.ownBase++
		}
		if p.Jaccard < 0.6 {
			below.dropped++
		}
		if p.Jaccard >= nearThreshold {
			dropsAbove++
		}
	}
	basesDropped := 0
	for i := range pairs {
		if _, ok := found[fmt.Sprintf("b%d", i)]; ok {
			basesDropped++
		}
	}
	row := func(name string, t tally, extra map[string]float64) error {
		r := &Result{Group: "neardup-quality", Name: name, OutRecords: -1, Load1: load, Metrics: map[string]float64{
			"pairs": float64(t.pairs), "dropped": float64(t.dropped), "own_base": float64(t.ownBase)}}
		if t.pairs > 0 {
			r.Metrics["drop_rate"] = float64(t.dropped) / float64(t.pairs)
		}
		for k, v := range extra {
			r.Metrics[k] = v
		}
		h.add(r)
		return nil
	}
	for b := len(byBucket) - 1; b >= 0; b-- {
		extra := map[string]float64{"lo": o.Buckets[b], "hi": o.Buckets[b+1]}
		for _, kind := range corpus.EditKinds {
			if k := byKind[fmt.Sprintf("%d/%s", b, kind)]; k != nil && k[1] > 0 {
				extra["rate_"+kind] = float64(k[0]) / float64(k[1])
			}
		}
		if err := row(bucketName(o.Buckets[b], o.Buckets[b+1]), byBucket[b], extra); err != nil {
			return err
		}
	}
	if err := row("J below 0.6", below, nil); err != nil {
		return err
	}
	total := len(found)
	precision := 0.0
	if total > 0 {
		precision = float64(dropsAbove) / float64(total)
	}
	return row("bases", tally{pairs: len(pairs), dropped: basesDropped}, map[string]float64{"precision": precision, "drops": float64(total)})
}

// bucketName names a similarity bucket, e.g. "J 0.8-0.9".
func bucketName(lo, hi float64) string {
	return fmt.Sprintf("J %s-%s", strconv.FormatFloat(lo, 'f', -1, 64), strconv.FormatFloat(hi, 'f', -1, 64))
}

var (
	summaryRead = regexp.MustCompile(`read (\d+), kept (\d+), removed (\d+)`)
	summaryNear = regexp.MustCompile(`near-duplicates (\d+)`)
)

// nearReal extracts each real dataset and counts what exact dedup and
// dedup --near remove from its prompts.
func (h *harness) nearReal(ctx context.Context) error {
	dir := filepath.Dir(h.shared("real/alpaca_en_demo.json"))
	if dir == "." {
		return h.unavailable("neardup-real", "real datasets", "../shared/data/real is not beside the repository")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	load := loadAverage()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || name == "README.md" {
			continue
		}
		prompts := "tmp/neardup-real.jsonl"
		if err := h.pipeline(ctx, prompts, nil, 0, []string{"extract", "--progress", "0", filepath.Join(dir, name)}); err != nil {
			return err
		}
		stderr, err := h.runTool(ctx, "dedup", "--near", "-o", "/dev/null", prompts)
		os.Remove(h.path(prompts))
		if err != nil {
			return err
		}
		m, n := summaryRead.FindStringSubmatch(stderr), summaryNear.FindStringSubmatch(stderr)
		if m == nil || n == nil {
			return fmt.Errorf("dedup --near on %s: no summary in:\n%s", name, stderr)
		}
		f := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
		near := f(n[1])
		r := &Result{Group: "neardup-real", Name: name, OutRecords: -1, Load1: load, Command: "extract " + name + " | dedup --near",
			Metrics: map[string]float64{"prompts": f(m[1]), "kept": f(m[2]), "exact": f(m[3]) - near, "near": near}}
		h.add(r)
	}
	return nil
}

// python is a python3 that imports numpy, or "" and why there is none.
func python() (string, string) {
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import numpy").Run() == nil {
			if abs, err := exec.LookPath(p); err == nil {
				return abs, ""
			}
		}
	}
	if !have("python3") {
		return "", missing("python3")
	}
	return "", "numpy is not installed for python3 (Debian: apt-get install python3-numpy)"
}

// nearSpeed measures dedup --near beside exact dedup and the Python
// MinHash on one core at 1x, dedup --near on every core, and both dedups'
// growth at 1x, 4x and 16x.
func (h *harness) nearSpeed(ctx context.Context) error {
	sizes := h.nearSizes()
	files := make([]string, len(sizes))
	for i, n := range sizes {
		files[i] = fmt.Sprintf("tmp/neardup-prompts-%d.jsonl", n)
		if n == h.sz.Main {
			files[i] = "data/prompts.jsonl"
			continue
		}
		if err := copyLines(h.path("data/prompts.jsonl"), h.path(files[i]), n, 0); err != nil {
			return err
		}
		defer os.Remove(h.path(files[i]))
	}
	counts, err := h.lineCounts(files...)
	if err != nil {
		return err
	}
	script := "tmp/minhash_numpy.py"
	if err := os.WriteFile(h.path(script), minhashPy, 0o644); err != nil {
		return err
	}
	defer os.Remove(h.path(script))
	p1 := files[0]
	in := Spec{Group: "neardup", BytesOf: []string{p1}, Records: counts[0]}
	pinned := func(name string, argv ...string) Spec {
		return with(in, name, "", append(append([]string{}, h.pin...), argv...)...)
	}
	py := peer(pinned(pythonRow, "python3", script, p1))
	if exe, why := python(); why != "" {
		py.why = why
	} else {
		py.Argv = append(append([]string{}, h.pin...), exe, script, p1)
		py.Note = "the same words, shingles, permutations and band keys; word hashes from libxxhash"
	}
	specs := []peerSpec{
		ours(pinned("dedup --near, 1 core", "dedup", "--near", "--workers", "1", p1)),
		ours(pinned("dedup (exact), 1 core", "dedup", "--workers", "1", p1)),
		ours(with(in, fmt.Sprintf("dedup --near, %d workers", h.workers()), "", "dedup", "--near", p1)),
		py,
	}
	if err := h.measureAll(ctx, specs); err != nil {
		return err
	}
	// The signatures and the LSH index alone, without reading, parsing and
	// writing records: the part a MinHash implementation is judged by.
	if err := h.goBench(ctx, &Result{Group: "neardup", Name: signLSHRow, Ours: true, Note: "MB of prompt text (first human turns of the corpus), not of JSONL"},
		"BenchmarkSignLSH", "MB/cpu-s", "mb_per_cpu_s", "-count", strconv.Itoa(h.runs), "./lib/minhash/"); err != nil {
		return err
	}
	for i, f := range files {
		label := fmt.Sprintf("%d× (%s)", []int{1, 4, 16}[i], cli.Thousands(counts[i]))
		at := func(s Spec) peerSpec { s.Group, s.Size, s.Runs = "neardup-growth", label, 1; return ours(s) }
		one := Spec{BytesOf: []string{f}, Records: counts[i]}
		if err := h.measureAll(ctx, []peerSpec{
			at(with(one, "dedup --near", "", "dedup", "--near", f)),
			at(with(one, "dedup (exact)", "", "dedup", f)),
		}); err != nil {
			return err
		}
	}
	return nil
}

// workers is the machine's core count, dedup's default --workers.
func (h *harness) workers() int { return max(1, runtime.NumCPU()) }

func renderNeardup(w io.Writer, h *harness) {
	fmt.Fprintf(w, "`dedup --near` at its defaults (14 bands × 8 rows, 5-word shingles, threshold %g).\n\n", nearThreshold)
	fmt.Fprint(w, "**Quality.** Pairs planted by `internal/corpus` (`PlantNear`): a base prompt of\n"+
		"20-400 English words and a variant made by word substitutions, insertions or\n"+
		"moved runs of words until the pair's exact Jaccard similarity (over the same\n"+
		"5-word shingles of the text --near compares: the role line, then the content)\n"+
		"falls in its bucket. The bases come first, then the variants, each shuffled;\n"+
		"a variant dropped is one found, a base dropped is a false drop.\n\n")
	rows := h.group("neardup-quality")
	t := newTable("pairs", "planted", "variants dropped", "drop rate", "substitute", "insert", "reorder", "found a copy of its own base")
	for _, r := range rows {
		if r.Name == "bases" {
			continue
		}
		cells := []string{r.Name, metricCell(r, "pairs", 0), metricCell(r, "dropped", 0), metricCell(r, "drop_rate", 3)}
		for _, k := range corpus.EditKinds {
			cells = append(cells, metricCell(r, "rate_"+k, 3))
		}
		own := "—"
		if r.Name != "J below 0.6" {
			own = metricCell(r, "own_base", 0)
		}
		t.add(append(cells, own)...)
	}
	t.write(w)
	if r := h.find("neardup-quality", "bases"); r != nil {
		fmt.Fprintf(w, "\nBases dropped (false drops of unrelated prompts): %s of %s. Precision (drops of\n"+
			"pairs at J ≥ %g, of all %s drops): %s.\n\n", metricCell(r, "dropped", 0), metricCell(r, "pairs", 0),
			nearThreshold, metricCell(r, "drops", 0), metricCell(r, "precision", 3))
	}
	fmt.Fprint(w, "**The real datasets** (`../shared/data/real`, each through `extract`, then\n"+
		"`dedup --near`): exact repeats are removed first, near-duplicates among the rest.\n\n")
	t = newTable("file", "prompts", "exact repeats", "near-duplicates", "kept")
	for _, r := range h.group("neardup-real") {
		if !r.available() {
			t.add(nameCell(r), "—", "—", "—", "—")
			continue
		}
		t.add("`"+r.Name+"`", metricCell(r, "prompts", 0), metricCell(r, "exact", 0), metricCell(r, "near", 0), metricCell(r, "kept", 0))
	}
	t.write(w)
	fmt.Fprintf(w, "\n**Speed** on the first %s prompts of the Infinity-Instruct-shaped corpus\n"+
		"(`data/prompts.jsonl`). The `1 core` rows are %s; MB per CPU second is the input\n"+
		"over the user and system time, what one core does whatever the machine's load.\n"+
		"The Python MinHash (`internal/benchsuite/minhash_numpy.py`) computes the same\n"+
		"signatures and finds the same near-duplicates: its records out match.\n\n", cli.Thousands(int64(h.nearSizes()[0])), h.fact("pin"))
	t = newTable("tool", "input", "MB per CPU second", "MB/s", "tokenmill is", "wall s (median)", "spread", "CPU s", "peak RSS MB", "records out", "load")
	speedRows := h.group("neardup")
	for _, r := range speedRows {
		t.add(nameCell(r), inputCell(r), metricCell(r, "mb_per_cpu_s", 1), metricCell(r, "mbps", 1), ratioCell(speedRows, r),
			metricCell(r, "wall_s", 2), spreadCell(r), metricCell(r, "cpu_s", 2), metricCell(r, "rss_mb", 1), outCell(r), loadCell(r.Load1))
	}
	t.write(w)
	fmt.Fprintln(w)
	commandList(w, speedRows)
	fmt.Fprint(w, "\n**Growth**: both dedups on every core at 1×, 4× and 16× the input above\n"+
		"(one run per size): CPU time, MB per CPU second and peak memory.\n\n")
	growth := h.group("neardup-growth")
	if len(growth) == 0 {
		fmt.Fprint(w, "_No results for the growth rows: see the log of the run._\n")
		return
	}
	for _, m := range []struct {
		corner, metric string
		decimals       int
		growth         bool
	}{{"CPU s", "cpu_s", 2, true}, {"MB per CPU second", "mb_per_cpu_s", 1, false}, {"peak RSS MB", "rss_mb", 1, true}} {
		pivot(growth, m.corner, m.metric, m.growth, func(r *Result) string { return metricCell(r, m.metric, m.decimals) }).write(w)
		fmt.Fprintln(w)
	}
	tools, sizes, at := bySize(growth)
	for _, tool := range tools {
		if r := at(tool, sizes[0]); r != nil {
			fmt.Fprintf(w, "- %s, %s: `%s`\n", tool, sizes[0], r.Command)
		}
	}
}
