package benchsuite

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"tokenmill/lib/cli"
)

// extract's sections: against jq on one core, its workers on two, the
// same rows read from Parquet, and its cost as the input grows.

var extractSection = &section{
	name: "extract", heading: "## extract: prompts from the corpus",
	about: "extract against jq on one core, 1 and 2 workers, JSONL and the same rows as Parquet",
	needs: []string{"corpus", "corpus-parquet"},
	measure: func(ctx context.Context, h *harness) error {
		const c, pq = "data/corpus.jsonl", "data/corpus.parquet"
		n, err := h.lines(c)
		if err != nil {
			return err
		}
		in := Spec{Group: "extract", BytesOf: []string{c}, Records: n}
		pin := func(argv ...string) []string { return append(append([]string{}, h.pin...), argv...) }
		rows := []peerSpec{
			ours(with(in, "extract, 1 core", "", pin("extract", c)...)),
			peer(with(in, "jq, 1 core", "", pin("jq", "-c", `{id, messages:[{role:"user",content:.conversations[0].value}]}`, c)...), "jq"),
			ours(with(in, "extract --workers 1", "", "extract", "--workers", "1", c)),
			ours(with(in, "extract --workers 2", "", "extract", "--workers", "2", c)),
		}
		pqIn := Spec{Group: "extract-parquet", BytesOf: []string{pq}, Records: n}
		jsonIn := in
		jsonIn.Group = "extract-parquet"
		rows = append(rows,
			ours(with(jsonIn, "JSONL, 1 core", "", pin("extract", c)...)),
			ours(with(pqIn, "Parquet, 1 core", "", pin("extract", pq)...)),
			ours(with(jsonIn, "JSONL, 2 workers", "", "extract", "--workers", "2", c)),
			ours(with(pqIn, "Parquet, 2 workers", "", "extract", "--workers", "2", pq)),
			peer(with(withNoCount(pqIn), pagesRow, "the columns extract reads, decompressed and decoded into values, nothing built from them", pin("benchsuite", "pages", "--columns", "id,conversations,langdetect,source", pq)...)),
			h.duckdbRow(ctx, with(pqIn, "DuckDB, 1 thread", "`SET threads=1; COPY (SELECT id, [{role, content: first human turn}] AS messages FROM read_parquet(...)) TO stdout (FORMAT JSON)`, the same records", pin("duckdbpeer", pq)...)),
		)
		return h.measureAll(ctx, rows)
	},
	render: func(w io.Writer, h *harness) {
		fmt.Fprintf(w, "The `1 core` rows are %s, as are jq's; the `--workers` rows are not\n"+
			"pinned: `--workers 2` can only be faster than `--workers 1` by as much as\n"+
			"the second core is free (the `others` figure of the load column).\n\n", h.pinNote)
		h.table(w, "extract", tableOptions{})
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
			"decompressed ahead, and hands the rows on in file order.\n\n", h.shownLines("data/corpus.jsonl"))
		h.table(w, "extract-parquet", tableOptions{rate: "rows/s", cpuPerRecord: true})
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

// duckdbRow is DuckDB's row: internal/benchsuite/duckdbpeer, a module of
// its own (cgo and DuckDB's prebuilt library, fetched by the Go module
// proxy), built into the tools' directory when the section runs; the row
// says why when it cannot be built.
func (h *harness) duckdbRow(ctx context.Context, s Spec) peerSpec {
	if why := h.buildDuckDBPeer(ctx); why != "" {
		return peerSpec{Spec: s, why: "DuckDB not available: " + why}
	}
	return peer(s)
}

func (h *harness) buildDuckDBPeer(ctx context.Context) string {
	if h.prebuilt {
		if _, err := os.Stat(h.tool("duckdbpeer")); err != nil {
			return "the prebuilt tools have no duckdbpeer (go build it in internal/benchsuite/duckdbpeer)"
		}
		return ""
	}
	if !have("gcc") && !have("cc") {
		return "building its peer needs cgo and no C compiler is installed"
	}
	h.logf("building the DuckDB peer (internal/benchsuite/duckdbpeer; the first build takes minutes)")
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", h.tool("duckdbpeer"), ".")
	cmd.Dir = filepath.Join(h.repo, "internal", "benchsuite", "duckdbpeer")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return fmt.Sprintf("building its peer failed (%v): %s", err, lines[len(lines)-1])
	}
	return ""
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
		fmt.Fprintf(w, "extract on the first %s, %s and %s records of the corpus (1x, 4x, 16x),\n"+
			"JSONL and the same records as Parquet, one worker. The time should grow with\n"+
			"the input (CPU µs per record flat) and the peak RSS not at all: a Parquet file is\n"+
			"read through a few decoders' pages and chunks of rows, whatever its size.\n\n",
			cli.Thousands(int64(h.scaleUnit())), cli.Thousands(int64(4*h.scaleUnit())), cli.Thousands(int64(16*h.scaleUnit())))
		h.table(w, "extract-scale", tableOptions{cpuPerRecord: true})
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

// pagesRow is the extract-parquet row of the file's pages read alone.
const pagesRow = "Parquet pages alone, 1 core"

func withNoCount(s Spec) Spec { s.NoCount = true; return s }

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

// scaleUnit is the 1x size: a sixteenth of the corpus.
func (h *harness) scaleUnit() int { return max(h.sz.Main/16, 1) }

// extractAt measures extract at k times the unit, JSONL and Parquet.
func (h *harness) extractAt(ctx context.Context, k int) error {
	n := k * h.scaleUnit()
	label := fmt.Sprintf("%dx", k)
	c, pq := fmt.Sprintf("data/scale-%s.jsonl", label), fmt.Sprintf("data/scale-%s.parquet", label)
	defer os.Remove(h.path(c))
	defer os.Remove(h.path(pq))
	if err := copyLines(h.path("data/corpus.jsonl"), h.path(c), n, 0); err != nil {
		return err
	}
	if err := h.pipeline(ctx, "", nil, 0, []string{"corpus", "--force", "-n", fmt.Sprint(n), "-o", pq}); err != nil {
		return err
	}
	at := func(s Spec) peerSpec { s.Group = "extract-scale"; return ours(s) }
	return h.measureAll(ctx, []peerSpec{
		at(with(Spec{BytesOf: []string{c}, Records: int64(n)}, "JSONL, "+label, "", "extract", "--workers", "1", c)),
		at(with(Spec{BytesOf: []string{pq}, Records: int64(n)}, "Parquet, "+label, "", "extract", "--workers", "1", pq)),
	})
}

// find is the result of group named name, or nil.
func (h *harness) find(group, name string) *Result {
	for _, r := range h.group(group) {
		if r.Name == name && len(r.Runs) > 0 {
			return r
		}
	}
	return nil
}
