package benchsuite

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
)

// pagesRow is the extract-parquet row of the file's pages read alone.
const pagesRow = "Parquet pages alone, 1 core"

var extractSection = &section{
	name: "extract", heading: "## extract: prompts from the corpus",
	needs: []string{"corpus", "corpus-parquet"},
	measure: func(ctx context.Context, h *harness) error {
		const c, pq = "data/corpus.jsonl", "data/corpus.parquet"
		n, err := countLines(h.path(c))
		if err != nil {
			return err
		}
		in, jsonIn := Spec{Group: "extract", BytesOf: []string{c}}, Spec{Group: "extract-parquet", BytesOf: []string{c}}
		pqIn := Spec{Group: "extract-parquet", BytesOf: []string{pq}, Records: n}
		pages := Spec{Group: "extract-parquet", BytesOf: []string{pq}, Records: n, NoCount: true}
		// DuckDB's peer is a module of its own (cgo and DuckDB's prebuilt
		// library), which .ci/install-peers builds.
		duckdb := peer(with(pqIn, "DuckDB, 1 thread", "`SET threads=1; COPY (SELECT id, [{role, content: first human turn}] AS messages FROM read_parquet(...)) TO stdout (FORMAT JSON)`, the same records", h.pinned("duckdbpeer", pq)...))
		if p := filepath.Join(h.peers, "bin", "duckdbpeer"); !fileExists(p) && !have("duckdbpeer") {
			duckdb.why = "DuckDB not available: " + missing("its peer (internal/benchsuite/duckdbpeer)")
		}
		return h.measureAll(ctx, []peerSpec{
			ours(with(in, "extract, 1 core", "", h.pinned("extract", c)...)),
			peer(with(in, "jq, 1 core", "", h.pinned("jq", "-c", `{id, messages:[{role:"user",content:.conversations[0].value}]}`, c)...), "jq"),
			ours(with(in, "extract --workers 1", "", "extract", "--workers", "1", c)),
			ours(with(in, "extract --workers 2", "", "extract", "--workers", "2", c)),
			ours(with(jsonIn, "JSONL, 1 core", "", h.pinned("extract", c)...)),
			ours(with(pqIn, "Parquet, 1 core", "", h.pinned("extract", pq)...)),
			ours(with(jsonIn, "JSONL, 2 workers", "", "extract", "--workers", "2", c)),
			ours(with(pqIn, "Parquet, 2 workers", "", "extract", "--workers", "2", pq)),
			peer(with(pages, pagesRow, "the columns extract reads, decompressed and decoded into values, nothing built from them",
				h.pinned("benchsuite", "pages", "--columns", "id,conversations,langdetect,source", pq)...)),
			duckdb,
		})
	},
}

// pinned is a command run on one core where taskset is installed.
func (h *harness) pinned(argv ...string) []string { return append(slices.Clone(h.pin), argv...) }

// renderParquetFloor says what a Parquet row costs against its JSONL line,
// and how much of it is the pages alone, which no reader avoids.
func renderParquetFloor(w io.Writer, h *harness) {
	cpu := func(name string) (float64, bool) { // no figure for a row not there
		return h.find("extract-parquet", name).Metric("cpu_us_per_record")
	}
	jc, ok1 := cpu("JSONL, 1 core")
	pc, ok2 := cpu("Parquet, 1 core")
	if !ok1 || !ok2 || pc <= jc {
		return
	}
	fmt.Fprintf(w, "\nOn one core a Parquet row costs %.1f µs of CPU against %.1f µs for its JSONL line.\n", pc, jc)
	if fc, ok := cpu(pagesRow); ok {
		fmt.Fprintf(w, "Its pages alone cost %.1f µs (%.0f%% of the JSONL line's whole cost): the text of its\n"+
			"columns has to be zstd-decompressed and decoded before any record can be built. That\n"+
			"leaves %.1f µs a row for all the rest if Parquet is to keep up with JSONL; extract spends\n"+
			"%.1f µs on it (assembling the row from its columns, escaping its text, converting it).\n", fc, 100*fc/jc, max(jc-fc, 0), pc-fc)
	}
}

// extractScaleSection is extract's cost at 1, 4 and 16 times an input:
// the time should grow with it, the memory not.
var extractScaleSection = &section{
	name: "extract-scale", heading: "## extract as the input grows",
	needs: []string{"corpus"},
	measure: func(ctx context.Context, h *harness) (err error) {
		for _, k := range []int{1, 4, 16} {
			n, label := k*h.scaleUnit(), fmt.Sprintf("%dx", k)
			c, pq := "data/scale-"+label+".jsonl", "data/scale-"+label+".parquet"
			if err == nil {
				err = h.sh(ctx, fmt.Sprintf("head -n %d data/corpus.jsonl > %s && corpus --force -n %d -o %s", n, c, n, pq))
			}
			if err == nil {
				err = h.measureAll(ctx, []peerSpec{
					ours(with(Spec{Group: "extract-scale", BytesOf: []string{c}}, "JSONL, "+label, "", "extract", "--workers", "1", c)),
					ours(with(Spec{Group: "extract-scale", BytesOf: []string{pq}, Records: int64(n)}, "Parquet, "+label, "", "extract", "--workers", "1", pq)),
				})
			}
			h.remove(c, pq)
		}
		return err
	},
}

// scaleUnit is the 1x size: a sixteenth of the corpus.
func (h *harness) scaleUnit() int { return max(h.sz.Main/16, 1) }

var scaleSection = &section{
	name: "scale", heading: "## Scale: 1×, 4× and 16× the input",
	needs: []string{"prompts-big", "filter-gens"},
	measure: func(ctx context.Context, h *harness) error {
		all, err := countLines(h.path("data/filter-gens.jsonl"))
		for _, f := range []int{1, 4, 16} {
			fl := "data/scale-filter-" + sizeLabel(h.sz.ScaleBase*f) + ".jsonl" // the first f/16 of the filter file
			if err == nil {
				err = h.head("data/filter-gens.jsonl", fl, int(all)*f/16)
			}
			if err == nil {
				err = h.stagesAt(ctx, "scale", scaleLabel(h, f), "data/scale-", h.sz.ScaleBase*f, func(_ string, stages []peerSpec) []peerSpec {
					return append(stages, peer(with(Spec{BytesOf: []string{fl}}, "filter", "", "filter", "--progress", "0", fl)))
				})
			}
			h.remove(fl)
		}
		return err
	},
}

// scaleLabel is the label of the scale table's size f× (e.g. "4× (250k)").
func scaleLabel(h *harness, f int) string {
	return fmt.Sprintf("%d× (%s)", f, sizeLabel(h.sz.ScaleBase*f))
}

// stagesAt measures, once each as group's rows at size, dedup, dedup
// --exact and shard on the first n big prompts, merge and stats on their
// generations and rerun (files named with prefix); rows adds a section's
// own rows around them, given the prompts' file.
func (h *harness) stagesAt(ctx context.Context, group, size, prefix string, n int, rows func(p string, stages []peerSpec) []peerSpec) error {
	tag := sizeLabel(n)
	p, g, r := prefix+"prompts-"+tag+".jsonl", prefix+"gens-"+tag+".jsonl", prefix+"rerun-"+tag+".jsonl"
	defer h.remove(p, g, r)
	err := h.head("data/prompts-big.jsonl", p, n)
	if err == nil {
		err = h.sh(ctx, shellJoin([]string{"benchsuite", "generations", "--rerun", r, "-o", g, p}))
	}
	if err != nil {
		return err
	}
	prompts, sharded := Spec{BytesOf: []string{p}}, Spec{BytesOf: []string{p}, Mkdir: []string{"tmp/shards"}, Count: []string{"tmp/shards/*"}}
	specs := rows(p, []peerSpec{peer(with(prompts, "dedup", "", "dedup", p)), peer(with(prompts, "dedup --exact", "", "dedup", "--exact", p)),
		peer(with(sharded, "shard", "", "shard", "-n", "8", "-o", "tmp/shards/part-{i}.jsonl", p)),
		peer(with(Spec{BytesOf: []string{g, r}}, "merge", "", "merge", g, r)),
		peer(with(Spec{BytesOf: []string{g}, NoCount: true}, "stats", "", "stats", g))})
	for i := range specs {
		specs[i].Group, specs[i].Size, specs[i].Runs = group, size, 1
	}
	return h.measureAll(ctx, specs)
}

func init() {
	parts["parquet-floor"] = renderParquetFloor
	parts["scale"] = func(w io.Writer, h *harness) {
		if rows := h.rows(w, "scale"); len(rows) > 0 {
			growthTable(w, rows)
			fmt.Fprintln(w)
			pivot(rows, "wall s", "wall_s", true, func(r *Result) string { return metricCell(r, "wall_s", 2) }).write(w)
		}
	}
	parts["growth"] = func(w io.Writer, h *harness) {
		if rows := h.rows(w, "growth"); len(rows) > 0 {
			growthTable(w, rows)
		}
	}
}
