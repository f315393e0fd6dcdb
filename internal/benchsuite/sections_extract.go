package benchsuite

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"tokenmill/lib/cli"
)

// extract's sections: against jq on one core, its workers on two, the
// same rows read from Parquet, and its cost as the input grows; and the
// other tools' cost as theirs does.

// pagesRow is the extract-parquet row of the file's pages read alone.
const pagesRow = "Parquet pages alone, 1 core"

var extractSection = &section{
	name: "extract", heading: "## extract: prompts from the corpus",
	about: "extract against jq on one core, 1 and 2 workers, JSONL and the same rows as Parquet",
	needs: []string{"corpus", "corpus-parquet"},
	measure: func(ctx context.Context, h *harness) error {
		const c, pq = "data/corpus.jsonl", "data/corpus.parquet"
		n, err := h.lineCounts(c)
		if err != nil {
			return err
		}
		in := Spec{Group: "extract", BytesOf: []string{c}, Records: n[0]}
		pqIn, jsonIn := Spec{Group: "extract-parquet", BytesOf: []string{pq}, Records: n[0]}, in
		jsonIn.Group = "extract-parquet"
		pages := with(pqIn, pagesRow, "the columns extract reads, decompressed and decoded into values, nothing built from them", h.pinned("benchsuite", "pages", "--columns", "id,conversations,langdetect,source", pq)...)
		pages.NoCount = true
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
			peer(pages),
			duckdb,
		})
	},
	render: func(w io.Writer, h *harness) {
		fmt.Fprintf(w, "The `1 core` rows are %s, as are jq's; the `--workers` rows are not\n"+
			"pinned: `--workers 2` can only be faster than `--workers 1` by as much as\n"+
			"the second core is free (the `others` figure of the load column).\n\n", h.fact("pin"))
		h.stream(w, "extract", "records/s", false)
		if r := h.find("extract", "extract --workers 2"); r != nil {
			if v, ok := r.Metric("others_cores"); ok && v > 0.5 {
				fmt.Fprintf(w, "\nThe second core was not free during the `--workers 2` runs (other processes\n"+
					"kept %.1f cores busy): that row cannot show how the workers scale.\n", v)
			}
		}
		fmt.Fprintf(w, "\nThe same %s rows as Parquet (`corpus -o data/corpus.parquet`: zstd, the\n"+
			"Infinity-Instruct 0625 schema), against the JSONL file and DuckDB writing the\n"+
			"same records on one thread. extract reads only the columns a layout can use\n"+
			"(here id, conversations, langdetect, source; not label), decodes row groups\n"+
			"ahead on a goroutine per CPU (one when pinned) with each column's pages\n"+
			"decompressed ahead, and hands the rows on in file order.\n\n", h.lines("data/corpus.jsonl"))
		h.stream(w, "extract-parquet", "rows/s", true)
		renderParquetFloor(w, h)
	},
	targets: func(*harness) []string {
		return []string{
			"extract ≥ 150 MB/s on one core := extract/extract, 1 core:mbps >= 150",
			"extract ≥ 5× jq (both on one core) := extract/extract, 1 core:mbps / extract/jq, 1 core:mbps >= 5",
			"extract --workers 2 ≥ 1.6× --workers 1 := extract/extract --workers 2:rps / extract/extract --workers 1:rps >= 1.6",
			"extract reads Parquet at least as many rows/s as JSONL (one core) := extract-parquet/Parquet, 1 core:rps / extract-parquet/JSONL, 1 core:rps >= 1",
			"a Parquet row costs no more CPU than its JSONL line (one core; the load swings rows/s) := extract-parquet/Parquet, 1 core:cpu_us_per_record / extract-parquet/JSONL, 1 core:cpu_us_per_record <= 1",
			"extract --workers 2 reads Parquet at least as many rows/s as JSONL := extract-parquet/Parquet, 2 workers:rps / extract-parquet/JSONL, 2 workers:rps >= 1",
			"extract Parquet within 1.5× of DuckDB (both on one core) := extract-parquet/DuckDB, 1 thread:rps / extract-parquet/Parquet, 1 core:rps <= 1.5",
		}
	},
}

// pinned is a command run on one core where taskset is installed.
func (h *harness) pinned(argv ...string) []string { return append(slices.Clone(h.pin), argv...) }

// renderParquetFloor says what a Parquet row costs against its JSONL line,
// and how much of it is the pages alone, which no reader of the file
// avoids.
func renderParquetFloor(w io.Writer, h *harness) {
	cpu := func(name string) (float64, bool) {
		if r := h.find("extract-parquet", name); r != nil {
			return r.Metric("cpu_us_per_record")
		}
		return 0, false
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
	about: "extract at 1x, 4x and 16x the first sixteenth of the corpus, JSONL and Parquet",
	needs: []string{"corpus"},
	measure: func(ctx context.Context, h *harness) error {
		for _, k := range []int{1, 4, 16} {
			if err := h.extractAt(ctx, k); err != nil {
				return err
			}
		}
		return nil
	},
	render: func(w io.Writer, h *harness) {
		u := int64(h.scaleUnit())
		fmt.Fprintf(w, "extract on the first %s, %s and %s records of the corpus (1x, 4x, 16x),\n"+
			"JSONL and the same records as Parquet, one worker. The time should grow with\n"+
			"the input (CPU µs per record flat) and the peak RSS not at all: a Parquet file is\n"+
			"read through a few decoders' pages and chunks of rows, whatever its size.\n\n",
			cli.Thousands(u), cli.Thousands(4*u), cli.Thousands(16*u))
		h.stream(w, "extract-scale", "records/s", true)
	},
	targets: func(h *harness) []string {
		return []string{
			"extract time linear: CPU µs per record at 16x ≤ 1.25× at 1x := extract-scale/JSONL, 16x:cpu_us_per_record / extract-scale/JSONL, 1x:cpu_us_per_record <= 1.25",
			"extract memory flat: peak RSS at 16x ≤ 1.5× at 1x := extract-scale/JSONL, 16x:rss_mb / extract-scale/JSONL, 1x:rss_mb <= 1.5",
			"extract Parquet time linear: CPU µs per row at 16x ≤ 1.25× at 1x := extract-scale/Parquet, 16x:cpu_us_per_record / extract-scale/Parquet, 1x:cpu_us_per_record <= 1.25",
			"extract Parquet memory flat: peak RSS at 16x ≤ 1.5× at 1x := extract-scale/Parquet, 16x:rss_mb / extract-scale/Parquet, 1x:rss_mb <= 1.5",
		}
	},
}

// extractAt measures extract at k times the unit, JSONL and Parquet.
func (h *harness) extractAt(ctx context.Context, k int) error {
	n, label := k*h.scaleUnit(), fmt.Sprintf("%dx", k)
	c, pq := "data/scale-"+label+".jsonl", "data/scale-"+label+".parquet"
	defer os.Remove(h.path(c))
	defer os.Remove(h.path(pq))
	err := h.head("data/corpus.jsonl", c, n)
	if err == nil {
		err = h.sh(ctx, fmt.Sprintf("corpus --force -n %d -o %s", n, pq))
	}
	if err != nil {
		return err
	}
	return h.measureAll(ctx, []peerSpec{
		ours(with(Spec{Group: "extract-scale", BytesOf: []string{c}, Records: int64(n)}, "JSONL, "+label, "", "extract", "--workers", "1", c)),
		ours(with(Spec{Group: "extract-scale", BytesOf: []string{pq}, Records: int64(n)}, "Parquet, "+label, "", "extract", "--workers", "1", pq)),
	})
}

// scaleUnit is the 1x size: a sixteenth of the corpus.
func (h *harness) scaleUnit() int { return max(h.sz.Main/16, 1) }

var scaleSection = &section{
	name: "scale", heading: "## Scale: 1×, 4× and 16× the input",
	about: "time and peak RSS of dedup, shard, merge, stats and filter at three sizes",
	needs: []string{"prompts-big", "filter-gens"},
	measure: func(ctx context.Context, h *harness) error {
		for _, f := range []int{1, 4, 16} {
			if err := h.scaleAt(ctx, f); err != nil {
				return err
			}
		}
		return nil
	},
	render: func(w io.Writer, h *harness) {
		fmt.Fprintf(w, "Each stage at %s, %s and %s records (prompts for dedup and shard, their generation\n"+
			"records for merge and stats, the first records of the filter file for filter), one run per\n"+
			"size. Time should grow with the input, and memory stay flat where it is bounded: dedup's filter\n"+
			"is sized by --expected, shard and filter hold no records, merge stays within --memory; dedup\n"+
			"--exact holds every key, and stats 4 bytes per value of each distribution it reports\n"+
			"(exact percentiles) and 8 per (id, sample).\n\n", scaleLabel(h, 1), scaleLabel(h, 4), scaleLabel(h, 16))
		if rows := h.rows(w, "scale"); len(rows) > 0 {
			growthTable(w, rows)
			fmt.Fprintln(w)
			pivot(rows, "wall s", "wall_s", true, func(r *Result) string { return metricCell(r, "wall_s", 2) }).write(w)
		}
	},
	targets: func(h *harness) []string {
		var t []string
		big, small := scaleLabel(h, 16), scaleLabel(h, 1)
		for _, tool := range []string{"dedup", "stats", "shard"} {
			t = append(t, fmt.Sprintf("%s memory flat: peak RSS at %s ≤ 2× at %s := scale/%s@%s:rss_mb / scale/%s@%s:rss_mb <= 2", tool, big, small, tool, big, tool, small))
		}
		return t
	},
	runs: func(*harness) string { return "one run per size" },
}

// scaleLabel is the label of the scale table's size f× (e.g. "4× (250k)").
func scaleLabel(h *harness, f int) string {
	return fmt.Sprintf("%d× (%s)", f, sizeLabel(h.sz.ScaleBase*f))
}

// scaleAt measures the stages at f times the base size: the first records
// of the big prompts, generation records made for them, and the first
// f/16 of the filter file's records.
func (h *harness) scaleAt(ctx context.Context, f int) error {
	n, label := h.sz.ScaleBase*f, scaleLabel(h, f)
	tag := sizeLabel(n)
	p, g, r, fl := "data/scale-prompts-"+tag+".jsonl", "data/scale-gens-"+tag+".jsonl", "data/scale-rerun-"+tag+".jsonl", "data/scale-filter-"+tag+".jsonl"
	defer func() {
		for _, x := range []string{p, g, r, fl} {
			os.Remove(h.path(x))
		}
	}()
	all, err := h.lineCounts("data/filter-gens.jsonl")
	if err == nil {
		err = h.head("data/prompts-big.jsonl", p, n)
	}
	if err == nil {
		err = h.head("data/filter-gens.jsonl", fl, int(all[0])*f/16)
	}
	if err == nil {
		err = h.generations(ctx, p, g, r)
	}
	if err != nil {
		return err
	}
	counts, err := h.lineCounts(p, g, r, fl)
	if err != nil {
		return err
	}
	at := func(s Spec) peerSpec { s.Group, s.Size, s.Runs = "scale", label, 1; return peer(s) }
	prompts := Spec{BytesOf: []string{p}, Records: counts[0]}
	sharded := prompts
	sharded.Mkdir, sharded.Count = []string{"tmp/shards"}, []string{"tmp/shards/*"}
	return h.measureAll(ctx, []peerSpec{
		at(with(prompts, "dedup", "", "dedup", p)),
		at(with(prompts, "dedup --exact", "", "dedup", "--exact", p)),
		at(with(sharded, "shard", "", "shard", "-n", "8", "-o", "tmp/shards/part-{i}.jsonl", p)),
		at(with(Spec{BytesOf: []string{g, r}, Records: counts[1] + counts[2]}, "merge", "", "merge", g, r)),
		at(with(Spec{BytesOf: []string{g}, Records: counts[1], NoCount: true}, "stats", "", "stats", g)),
		at(with(Spec{BytesOf: []string{fl}, Records: counts[3]}, "filter", "", "filter", "--progress", "0", fl)),
	})
}
