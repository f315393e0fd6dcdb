package benchsuite

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"

	"tokenmill/internal/corpus"
	"tokenmill/lib/cli"
)

// The parameters measured: dedup --near's defaults.
const (
	nearShingle   = 5
	nearThreshold = 0.8
)

var neardupSection = &section{
	name: "neardup", heading: "## dedup --near: near-duplicates",
	needs: []string{"prompts"},
	measure: func(ctx context.Context, h *harness) error {
		for _, part := range []func(context.Context) error{h.nearQuality, h.nearReal, h.nearSpeed} {
			if err := part(ctx); err != nil {
				return err
			}
		}
		return nil
	},
}

const (
	pythonRow  = "Python MinHash (numpy), 1 core"
	signLSHRow = "signatures + LSH alone (lib/minhash BenchmarkSignLSH)"
)

// nearSizes are the 1x, 4x and 16x inputs: Main/16, Main/4 and all prompts.
func (h *harness) nearSizes() []int { return []int{h.sz.Main / 16, h.sz.Main / 4, h.sz.Main} }

// dedupNear runs a script of absolute paths ending in dedup --near,
// unmeasured, and returns its summary's read, kept, removed and near-duplicates.
func (h *harness) dedupNear(ctx context.Context, script string) ([]float64, error) {
	out, err := h.goTest(ctx, []string{"bash", "-o", "pipefail", "-c", script + " --near --force -o /dev/null"}, h.environ...)
	m := regexp.MustCompile(`read (\d+), kept (\d+), removed (\d+).*near-duplicates (\d+)`).FindSubmatch(out)
	if err != nil || m == nil {
		return nil, fmt.Errorf("no dedup summary (%v) in:\n%s", err, tail(out, 2000))
	}
	f := make([]float64, 4)
	for i := range f {
		f[i], _ = strconv.ParseFloat(string(m[i+1]), 64)
	}
	return f, nil
}

// nearQuality plants pairs, runs dedup --near on them and keeps, for each
// similarity bucket, the share of variants dropped (and whether each was
// found a copy of its own base); and the bases dropped, which are all
// false drops (bases are unrelated texts).
func (h *harness) nearQuality(ctx context.Context) error {
	o := corpus.NearOptions{Shingle: nearShingle, Prefix: "user\n", Buckets: corpus.DefaultNearBuckets, Median: 80, MinWords: 20, MaxWords: 400}
	n := 6000
	if h.quick {
		n = 600
	}
	pairs := corpus.PlantNear(1, n, o)
	const data, clusters = "data/neardup-planted.jsonl", "tmp/neardup-clusters.jsonl"
	// Bases first (in a shuffled order), then the variants (shuffled): a
	// variant always comes after its base, as a later copy does.
	rng := rand.New(rand.NewPCG(2, 0))
	order := rng.Perm(len(pairs))
	var buf []byte
	for _, prefix := range []string{"b", "v"} {
		for _, i := range order {
			r := corpus.Row{ID: fmt.Sprintf("%s%d", prefix, i), Conversations: []corpus.Turn{{Value: pairs[i].Base}}}
			if prefix == "v" {
				r.Conversations[0].Value = pairs[i].Variant
			}
			buf = append(corpus.AppendPrompt(buf, &r), '\n')
		}
		rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
	}
	found := map[string]string{} // each near-duplicate's id: the id it was found a copy of
	defer os.Remove(h.path(clusters))
	err := writeFile(h.path(data), buf)
	if err == nil {
		_, err = h.dedupNear(ctx, shellJoin([]string{"dedup", "--clusters", h.path(clusters), h.path(data)}))
	}
	if err == nil {
		err = eachJSON(h.path(clusters), func(c *struct {
			ID    string `json:"id"`
			DupOf string `json:"dup_of"`
		}) error {
			found[c.ID] = c.DupOf
			return nil
		})
	}
	if err != nil {
		return err
	}
	// A row a bucket, highest first (rows[k] is bucket nb-1-k), then the
	// pairs below 0.6 and the bases, whose every drop is a false one.
	nb := len(o.Buckets) - 1
	rows := make([]map[string]float64, nb+2)
	for k := range rows {
		rows[k] = map[string]float64{"pairs": 0, "dropped": 0, "own_base": 0}
	}
	below, bases := rows[nb], rows[nb+1]
	bases["pairs"], bases["drops"] = float64(len(pairs)), float64(len(found))
	for i, p := range pairs {
		dupOf, dropped := found[fmt.Sprintf("v%d", i)]
		d, r := float64(b2i(dropped)), rows[nb-1-p.Bucket]
		r["pairs"], r["dropped"], r["own_base"] = r["pairs"]+1, r["dropped"]+d, r["own_base"]+float64(b2i(dupOf == fmt.Sprintf("b%d", i)))
		r["of_"+p.Kind], r["rate_"+p.Kind] = r["of_"+p.Kind]+1, r["rate_"+p.Kind]+d // a rate once divided below
		if p.Jaccard < 0.6 {
			below["pairs"], below["dropped"] = below["pairs"]+1, below["dropped"]+d
		}
		if _, ok := found[fmt.Sprintf("b%d", i)]; ok {
			bases["dropped"]++
		}
		if dropped && p.Jaccard >= nearThreshold {
			bases["precision"] += 1 / bases["drops"] // the drops of pairs at J >= the threshold, of all drops
		}
	}
	load := loadAverage()
	for k, m := range rows {
		for _, kind := range corpus.EditKinds {
			if n := m["of_"+kind]; n > 0 {
				m["rate_"+kind] /= n
			}
			delete(m, "of_"+kind)
		}
		if m["pairs"] > 0 {
			m["drop_rate"] = m["dropped"] / m["pairs"]
		}
		name := "J below 0.6"
		if b := nb - 1 - k; b >= 0 {
			name = fmt.Sprintf("J %v-%v", o.Buckets[b], o.Buckets[b+1])
		} else if k == nb+1 {
			name = "bases"
		}
		h.add(&Result{Group: "neardup-quality", Name: name, OutRecords: -1, Load1: load, Metrics: m})
	}
	return nil
}

// nearReal counts what exact dedup and dedup --near remove from each real dataset.
func (h *harness) nearReal(ctx context.Context) error {
	dir := filepath.Dir(h.shared("real/alpaca_en_demo.json"))
	if dir == "." {
		h.unavailable("neardup-real", "real datasets", "../shared/data/real is not beside the repository")
		return nil
	}
	entries, err := os.ReadDir(dir)
	load := loadAverage()
	for _, e := range entries {
		if name := e.Name(); !e.IsDir() && name != "README.md" && err == nil {
			var f []float64
			if f, err = h.dedupNear(ctx, shellJoin([]string{"extract", "--progress", "0", filepath.Join(dir, name)})+" | dedup"); err == nil {
				h.add(&Result{Group: "neardup-real", Name: name, OutRecords: -1, Load1: load, Command: "extract " + name + " | dedup --near",
					Metrics: map[string]float64{"prompts": f[0], "kept": f[1], "exact": f[2] - f[3], "near": f[3]}})
			}
		}
	}
	return err
}

// python is a python3 that imports numpy, or "" and why there is none.
func python() (string, string) {
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if abs, err := exec.LookPath(p); err == nil && exec.Command(p, "-c", "import numpy").Run() == nil {
			return abs, ""
		}
	}
	if !have("python3") {
		return "", missing("python3")
	}
	return "", "numpy is not installed for python3 (.ci/install-peers installs it)"
}

// nearSpeed measures dedup --near beside exact dedup and the Python MinHash
// on one core, on every core, and both dedups' growth at 1x, 4x and 16x.
func (h *harness) nearSpeed(ctx context.Context) error {
	sizes := h.nearSizes()
	files := []string{fmt.Sprintf("tmp/neardup-prompts-%d.jsonl", sizes[0]), fmt.Sprintf("tmp/neardup-prompts-%d.jsonl", sizes[1]), "data/prompts.jsonl"}
	defer h.remove(files[0], files[1])
	for i := range 2 {
		if err := h.head("data/prompts.jsonl", files[i], sizes[i]); err != nil {
			return err
		}
	}
	in := Spec{Group: "neardup", BytesOf: []string{files[0]}}
	exe, why := python()
	specs := []peerSpec{
		ours(with(in, "dedup --near, 1 core", "", h.pinned("dedup", "--near", "--workers", "1", files[0])...)),
		ours(with(in, "dedup (exact), 1 core", "", h.pinned("dedup", "--workers", "1", files[0])...)),
		ours(with(in, fmt.Sprintf("dedup --near, %d workers", runtime.NumCPU()), "", "dedup", "--near", files[0])),
		{with(in, pythonRow, "the same words, shingles, permutations and band keys; word hashes from libxxhash",
			h.pinned(exe, h.repoFile("internal/benchsuite/minhash_numpy.py"), files[0])...), why},
	}
	for i, f := range files {
		at := Spec{Group: "neardup-growth", Size: fmt.Sprintf("%d× (%s)", []int{1, 4, 16}[i], cli.Thousands(int64(sizes[i]))), Runs: 1, BytesOf: []string{f}}
		specs = append(specs, ours(with(at, "dedup --near", "", "dedup", "--near", f)), ours(with(at, "dedup (exact)", "", "dedup", f)))
	}
	if err := h.measureAll(ctx, specs); err != nil {
		return err
	}
	// The signatures and the LSH index alone, without reading, parsing and
	// writing records: the part a MinHash implementation is judged by.
	return h.goBench(ctx, 1, "BenchmarkSignLSH", []string{""}, func(_ string, m map[string]float64) *Result {
		return &Result{Group: "neardup", Name: signLSHRow, Ours: true, Metrics: map[string]float64{"mb_per_cpu_s": m["MB/cpu-s"], "runs": m["runs"]},
			Note: "MB of prompt text (first human turns of the corpus), not of JSONL"}
	}, "-count", strconv.Itoa(h.runs), "./lib/minhash/")
}

func init() {
	parts["neardup-quality"] = func(w io.Writer, h *harness) {
		rows := slices.DeleteFunc(h.group("neardup-quality"), func(r *Result) bool { return r.Name == "bases" })
		cols := []string{"pairs=name", "planted=pairs:0", "variants dropped=dropped:0", "drop rate=drop_rate:3"}
		for _, k := range corpus.EditKinds {
			cols = append(cols, k+"=rate_"+k+":3")
		}
		t := columns(rows, append(cols, "found a copy of its own base=own_base:0")...)
		for i, r := range rows {
			if r.Name == "J below 0.6" {
				t.rows[i][len(cols)] = "—" // the lower buckets' pairs again: their own bases are counted there
			}
		}
		t.write(w)
		if r := h.find("neardup-quality", "bases"); r != nil {
			fmt.Fprintf(w, "\nBases dropped (false drops of unrelated prompts): %s of %s. Precision (drops of\n"+
				"pairs at J ≥ %g, of all %s drops): %s.\n", metricCell(r, "dropped", 0), metricCell(r, "pairs", 0),
				nearThreshold, metricCell(r, "drops", 0), metricCell(r, "precision", 3))
		}
	}
	parts["neardup-real"] = func(w io.Writer, h *harness) {
		rows := h.group("neardup-real")
		t := columns(rows, "file=name", "prompts=prompts:0", "exact repeats=exact:0", "near-duplicates=near:0", "kept=kept:0")
		for i, r := range rows {
			if r.available() {
				t.rows[i][0] = "`" + r.Name + "`"
			}
		}
		t.write(w)
	}
	parts["neardup-speed"] = func(w io.Writer, h *harness) {
		rows := h.group("neardup")
		columns(rows, "tool=name", "input=input", "MB per CPU second=mb_per_cpu_s:1", "MB/s=mbps:1", "tokenmill is=ratio", "wall s (median)=wall_s:2",
			"spread=spread", "CPU s=cpu_s:2", "peak RSS MB=rss_mb:1", "records out=out", "load=load").write(w)
		fmt.Fprintln(w)
		commandList(w, rows)
	}
	parts["neardup-growth"] = func(w io.Writer, h *harness) {
		if growth := h.rows(w, "neardup-growth"); len(growth) > 0 {
			for _, m := range []struct{ corner, metric string }{{"CPU s", "cpu_s"}, {"MB per CPU second", "mb_per_cpu_s"}, {"peak RSS MB", "rss_mb"}} {
				dec := 1 + b2i(m.metric == "cpu_s") // CPU seconds to 2 decimals, the others to 1
				pivot(growth, m.corner, m.metric, m.metric != "mb_per_cpu_s", func(r *Result) string { return metricCell(r, m.metric, dec) }).write(w)
				fmt.Fprintln(w)
			}
			sizeCommands(w, growth)
		}
	}
}
