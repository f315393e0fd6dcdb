package benchsuite

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

const (
	tokGroup         = "tokenizer"
	hfBindingPackage = "@anush008/tokenizers" // the crate's Node binding in pipelines/bench/package.json
	renderTurns      = 10                     // the length of the conversations rendered
	renderBenchtime  = "200x"                 // the passes over the conversations a render run makes
)

// tokenizerModels are the real tokenizers measured, named as
// lib/tokenizer's benchmarks and ../shared/data/tokenizers name them.
var tokenizerModels = []struct{ Name, Label string }{{"qwen3", "Qwen3"}, {"deepseek_v3", "DeepSeek-V3"}}

// tokenizerModes are the ways the text is handed to a tokenizer, as the binding's
// report names them: a row of the table each, and whose token count lib/tokenizer's holds.
var tokenizerModes = []struct{ mode, label, tokens string }{
	{"whole", "the renderings concatenated, one call", "concatenated text, lib/tokenizer"},
	{"docs", "one call per rendering (binding: `await encode(doc)` each)", "documents, the golden ids"},
	{"batch", "one call per rendering (binding: all in one `encodeBatch`)", "documents, the golden ids"},
	{"cold", "the renderings concatenated, one call, empty word cache", "concatenated text, lib/tokenizer"},
}

// The rows' names, by which the table and the targets find them (lib/tokenizer has one per-document row).
func oursEncodeRow(model, mode string) string {
	return "lib/tokenizer, " + model + ", " + strings.Replace(mode, "batch", "docs", 1)
}
func hfEncodeRow(model, mode string) string { return "HF tokenizers, " + model + ", " + mode }
func oursRenderRow(model string) string     { return "lib/tokenizer Render, " + model }
func oursLoadRow(model string) string       { return "lib/tokenizer Load, " + model }
func hfLoadRow(model string) string         { return "HF tokenizers fromFile, " + model }

var tokenizerSection = &section{
	name: "tokenizer", heading: "## Tokenizing and rendering: lib/tokenizer beside Hugging Face's Rust tokenizers",
	measure: func(ctx context.Context, h *harness) error { return h.measureTokenizer(ctx) },
}

// goldenStats are a golden file's text, which both tokenizers are given,
// and the reference's token count of it.
type goldenStats struct{ bytes, docs, tokens int64 }

func readGoldenStats(path string) (st goldenStats, err error) {
	in := jsonl.NewReader(context.Background(), nil, []string{path}, nil, jsonl.Options{})
	defer in.Close()
	for line, err := in.Next(); err != io.EOF; line, err = in.Next() {
		var c struct {
			Rendered string
			IDs      []int
		}
		if err := cmp.Or(err, json.Unmarshal(line.Data, &c)); err != nil { // the read's error, else the line's
			return st, fmt.Errorf("%s line %d: %w", path, line.Line, err)
		}
		st.bytes, st.tokens, st.docs = st.bytes+int64(len(c.Rendered)), st.tokens+int64(len(c.IDs)), st.docs+1
	}
	return st, nil
}

// tokenizerRuns are the outputs of a section's runs by key (encode, render,
// "load MODEL", "hf MODEL"), and the load when each run started.
type tokenizerRuns struct {
	out   map[string][][]byte
	loads []float64
}

// tokenizerCommands are the commands a run takes, as the report shows them.
type tokenizerCommands struct {
	encode, render []string
	load, hf       map[string][]string
}

// argv is the command whose output a run keeps under key.
func (c tokenizerCommands) argv(key string) []string {
	what, model, _ := strings.Cut(key, " ")
	return map[string][]string{"encode": c.encode, "render": c.render, "load": c.load[model], "hf": c.hf[model]}[what]
}

func (h *harness) tokenizerCommands(dir, modules string) tokenizerCommands {
	reps := map[bool]string{false: "3", true: "1"}[h.quick] // the passes over the text a run makes, after a warm-up
	dir, _ = filepath.Rel(h.repo, dir)                      // as seen from the repository, where they run
	goTest := func(bench, benchtime, pkg string) []string {
		return h.pinned("env", "GOMAXPROCS=1", "go", "test", "-run", "^$", "-bench", bench, "-benchtime", benchtime, "-count", "1", pkg)
	}
	c := tokenizerCommands{
		encode: goTest("^BenchmarkEncode(|Cases|Cold)$", reps+"x", "./lib/tokenizer"),
		render: goTest("^BenchmarkTokenizerRender$", renderBenchtime, "./internal/benchsuite"),
		load:   map[string][]string{}, hf: map[string][]string{},
	}
	for _, m := range tokenizerModels {
		c.load[m.Name] = goTest("^BenchmarkTokenizerLoad$/^"+m.Name+"$", "1x", "./internal/benchsuite")
		c.hf[m.Name] = h.pinned("env", "TOKENIZERS_PARALLELISM=false", "RAYON_NUM_THREADS=1", "node", "--expose-gc", "pipelines/bench/hf-tokenizers.mjs",
			"--modules", modules, "--golden", filepath.Join(dir, "golden", m.Name+".jsonl.gz"), "--reps", reps, "--cold-reps", reps,
			filepath.Join(dir, m.Name, "tokenizer.json"))
	}
	return c
}

// measureTokenizer runs go test's benchmarks and the binding's script in
// turns, --runs times; the binding's rows say why where it is not installed.
func (h *harness) measureTokenizer(ctx context.Context) error {
	dir := filepath.Dir(h.shared("tokenizers/golden"))
	if dir == "." { // the first row says so for the section, as its text does
		h.unavailable(tokGroup, oursEncodeRow(tokenizerModels[0].Name, "whole"), "../shared/data/tokenizers is not beside the repository")
		return nil
	}
	// The binding's version, where it is installed, else why not.
	modules, version, why := h.nodePackage(hfBindingPackage)
	var err error
	stats, keys := map[string]goldenStats{}, []string{"encode", "render"}
	for _, m := range tokenizerModels {
		if stats[m.Name], err = readGoldenStats(filepath.Join(dir, "golden", m.Name+".jsonl.gz")); err != nil {
			return err
		}
		keys = append(keys, "load "+m.Name)
		if why == "" {
			keys = append(keys, "hf "+m.Name)
		}
	}
	cmds, runs := h.tokenizerCommands(dir, modules), tokenizerRuns{out: map[string][][]byte{}}
	for i := range h.runs {
		runs.loads = append(runs.loads, loadAverage())
		h.logf("tokenizer: run %d of %d (load %.2f)", i+1, h.runs, runs.loads[i])
		for _, k := range keys {
			out, err := h.goTest(ctx, cmds.argv(k), h.environ...)
			if err != nil {
				return err
			}
			runs.out[k] = append(runs.out[k], out)
		}
	}
	rows, err := tokenizerResults(runs, stats, cmds, shellJoin, version, why)
	for _, r := range rows {
		h.logf("%s/%s: %v (load %.2f)", r.Group, r.Name, r.Metrics, r.Load1)
		h.add(r)
	}
	return err
}

// tokenizerResults makes the section's rows of its runs (at least one), each
// figure the runs' median (peak RSS: the highest); why, if set, is why the binding's rows are not available.
func tokenizerResults(runs tokenizerRuns, stats map[string]goldenStats, cmds tokenizerCommands, shown func([]string) string, version, why string) ([]*Result, error) {
	var runRows [][]*Result // by run, its rows of every model in the same order
	for i := range runs.out["encode"] {
		var rows []*Result
		row := func(name, key string, st goldenStats, figs map[string]float64, node string) {
			r := &Result{Group: tokGroup, Name: name, Ours: !strings.HasPrefix(key, "hf "), Command: shown(cmds.argv(key)), Bytes: st.bytes, Records: st.docs,
				OutRecords: -1, Metrics: figs}
			if !r.Ours {
				r.Note = hfBindingPackage + " " + version + ", node " + node
			}
			if figs == nil {
				r = unavailable(tokGroup, name, why)
			}
			rows = append(rows, r)
		}
		for _, m := range tokenizerModels {
			if err := tokenizerRun(runs, i, m.Name, stats[m.Name], row); err != nil {
				return nil, err
			}
		}
		runRows = append(runRows, rows)
	}
	for j, r := range runRows[0] {
		for k := range r.Metrics {
			var v []float64
			for _, rows := range runRows {
				v = append(v, rows[j].Metrics[k])
			}
			r.Metrics[k] = median(v)
			if k == "rss_mb" {
				r.Metrics[k] = slices.Max(v)
			}
		}
		r.Load1 = mean(runs.loads)
	}
	return runRows[0], nil
}

// tokenizerRun makes run i's rows of model m with row: go test's figures,
// and the binding's where it ran (without, none) with the node it ran on.
func tokenizerRun(runs tokenizerRuns, i int, m string, st goldenStats,
	row func(name, key string, st goldenStats, figs map[string]float64, node string)) (err error) {
	bench := benchFigures(slices.Concat(runs.out["encode"][i], runs.out["render"][i], runs.out["load "+m][i]))
	fig := func(name, unit string) float64 {
		v := bench["Benchmark"+name+"/"+m][unit]
		if len(v) == 0 {
			err = cmp.Or(err, fmt.Errorf("run %d: no %s of Benchmark%s/%s in the output", i+1, unit, name, m))
		}
		return median(v)
	}
	// MB/s as go test reports it; tokens/s of the tokens an op made (the concatenated
	// text's, as BenchmarkEncode counts them; the documents', the golden ids'), over ns/op.
	encode := func(mode, name string, tokens float64) {
		figs := map[string]float64{"mbps": fig(name, "MB/s"), "tok_s": tokens * 1e9 / fig(name, "ns/op"), "tokens": tokens}
		row(oursEncodeRow(m, mode), "encode", st, figs, "")
	}
	encode("whole", "Encode", fig("Encode", "tokens/op"))
	encode("docs", "EncodeCases", float64(st.tokens))
	encode("cold", "EncodeCold", fig("Encode", "tokens/op"))
	row(oursRenderRow(m), "render", goldenStats{}, map[string]float64{"convs": fig("TokenizerRender", "convs"), "us_per_conv": fig("TokenizerRender", "µs/conv"),
		"allocs_per_conv": fig("TokenizerRender", "allocs/op") / fig("TokenizerRender", "convs")}, "")
	row(oursLoadRow(m), "load "+m, goldenStats{}, map[string]float64{"load_ms": fig("TokenizerLoad", "ms/load"), "rss_mb": fig("TokenizerLoad", "peak-RSS-MB"),
		"rss_before_mb": fig("TokenizerLoad", "RSS-before-MB")}, "")
	// The script's report, its last line, names each mode's figures as the rows do.
	var rep struct {
		Node                           string
		Bytes, Documents               int64
		GoldenMismatches               float64 `json:"golden_mismatches"`
		CallFloorUS                    float64 `json:"call_floor_us"`
		Whole, Docs, Batch, Cold, Load map[string]float64
	}
	if i < len(runs.out["hf "+m]) && err == nil {
		out := strings.TrimSpace(string(runs.out["hf "+m][i]))
		switch err := json.Unmarshal([]byte(out[strings.LastIndexByte(out, '\n')+1:]), &rep); {
		case err != nil:
			return fmt.Errorf("hf-tokenizers.mjs printed no report: %v: %q", err, tail([]byte(out), 500))
		case rep.Whole == nil || rep.Docs == nil || rep.Batch == nil || rep.Cold == nil || rep.Load == nil:
			return fmt.Errorf("hf-tokenizers.mjs: a report without figures: %s", out)
		case rep.Bytes != st.bytes || rep.Documents != st.docs:
			return fmt.Errorf("%s: the binding was given %d bytes in %d documents, lib/tokenizer %d in %d: not the same text",
				m, rep.Bytes, rep.Documents, st.bytes, st.docs)
		}
		rep.Docs["call_floor_us"], rep.Docs["golden_mismatches"] = rep.CallFloorUS, rep.GoldenMismatches
		rep.Load = map[string]float64{"load_ms": rep.Load["ms"], "rss_mb": rep.Load["rss_peak_mb"], "rss_before_mb": rep.Load["rss_before_mb"]}
	}
	for j, f := range []map[string]float64{rep.Whole, rep.Docs, rep.Batch, rep.Cold} { // as tokenizerModes
		row(hfEncodeRow(m, tokenizerModes[j].mode), "hf "+m, st, f, rep.Node)
	}
	row(hfLoadRow(m), "hf "+m, goldenStats{}, rep.Load, rep.Node)
	return err
}

// tokenizerView is what the section's text says of its rows (made together);
// Stop, when set, is all it says.
func (h *harness) tokenizerView() (v struct {
	Stop, Crate, Docs, Passes            string
	Sizes, Checks, Notes, Floors, Slower []string
}) {
	first := h.find(tokGroup, oursEncodeRow(tokenizerModels[0].Name, "whole"))
	if first == nil || !first.available() {
		v.Stop = "_No results for " + tokGroup + ": see the log of the run._\n"
		if first != nil {
			v.Stop = "Not measured: " + strings.TrimPrefix(first.Note, "not available: ") + ".\n"
		}
		return v
	}
	f := strings.Fields(first.Command) // the passes a run makes, as its go test command asks for them
	v.Passes, v.Docs = strings.TrimSuffix(f[slices.Index(f, "-benchtime")+1], "x"), "the "+cli.Thousands(first.Records)
	v.Crate = "Hugging Face's `tokenizers` crate (Rust) through its Node binding `" + hfBindingPackage + "`"
	if r := h.find(tokGroup, hfEncodeRow(tokenizerModels[0].Name, "whole")); r.available() {
		v.Crate += " (" + strings.TrimPrefix(r.Note, hfBindingPackage+" ") + ")"
	}
	// What makes the comparison fair, or not; the binding's rows have figures where it ran.
	for _, m := range tokenizerModels {
		ours := func(mode string) *Result { return h.find(tokGroup, oursEncodeRow(m.Name, mode)) }
		hf := func(mode string) *Result { return h.find(tokGroup, hfEncodeRow(m.Name, mode)) }
		v.Sizes = append(v.Sizes, fmt.Sprintf("%.1f MB and %s tokens for %s", float64(ours("whole").Bytes)/1e6, metricCell(ours("whole"), "tokens", 0), m.Label))
		if x, y := hf("whole").Metrics["mbps"], hf("batch").Metrics["mbps"]; x < y {
			v.Slower = append(v.Slower, fmt.Sprintf("%s %.2f MB/s against %.2f", m.Label, x, y))
		}
		if d := hf("docs"); d.available() {
			f, docs := d.Metrics["call_floor_us"], cli.Thousands(d.Records)
			v.Floors = append(v.Floors, fmt.Sprintf("%.0f µs for %s: %.2f s of its %.2f s pass over the %s renderings",
				f, m.Label, f*1e-6*float64(d.Records), float64(d.Bytes)/1e6/d.Metrics["mbps"], docs))
			check := "all " + docs + " of " + m.Label
			if bad := int64(d.Metrics["golden_mismatches"]); bad > 0 {
				check = fmt.Sprintf("**%s of %s's %s differ**", cli.Thousands(bad), m.Label, docs)
			}
			v.Checks = append(v.Checks, check)
		}
		// The binding's token counts, each beside lib/tokenizer's of the same text.
		for _, md := range tokenizerModes {
			if got, want := hf(md.mode).Metrics["tokens"], ours(md.mode).Metrics["tokens"]; hf(md.mode).available() && got != want {
				v.Notes = append(v.Notes, fmt.Sprintf("**%s, %s: the binding gave %s tokens of the %s %s**",
					m.Label, md.mode, cli.Thousands(int64(got)), md.tokens, cli.Thousands(int64(want))))
			}
		}
	}
	return v
}

func init() {
	figure := func(r *Result, metric string, decimals int) string { // or why the row has none
		if r != nil && !r.available() {
			return "_not available_"
		}
		return metricCell(r, metric, decimals)
	}
	parts["tokenizer-encode"] = func(w io.Writer, h *harness) {
		t := newTable("tokenizer", "how the text is given", "lib/tokenizer MB/s", "tokens/s", "HF tokenizers MB/s", "tokens/s", "lib/tokenizer ÷ HF", "load")
		for _, m := range tokenizerModels {
			for _, md := range tokenizerModes {
				ours, theirs := h.find(tokGroup, oursEncodeRow(m.Name, md.mode)), h.find(tokGroup, hfEncodeRow(m.Name, md.mode))
				ratio := figureOf(theirs, "mbps", func(y float64) string { return trimFloat(ours.Metrics["mbps"]/y) + "×" })
				t.add(m.Label, md.label, figure(ours, "mbps", 1), figure(ours, "tok_s", 0), figure(theirs, "mbps", 2), figure(theirs, "tok_s", 0), ratio, loadCell(ours.Load1))
			}
		}
		t.write(w)
	}
	parts["tokenizer-render"] = func(w io.Writer, h *harness) {
		t := newTable("template", "conversations", "µs per conversation", "allocations per conversation", "load")
		for _, m := range tokenizerModels {
			r := h.find(tokGroup, oursRenderRow(m.Name))
			t.add("**"+m.Label+"**", figure(r, "convs", 0), figure(r, "us_per_conv", 1), figure(r, "allocs_per_conv", 0), loadCell(r.Load1))
		}
		t.write(w)
	}
	parts["tokenizer-load"] = func(w io.Writer, h *harness) {
		t := newTable("folder", "implementation", "load ms", "peak RSS MB", "before MB", "added MB", "lib/tokenizer is", "load")
		for _, m := range tokenizerModels {
			ours, theirs := h.find(tokGroup, oursLoadRow(m.Name)), h.find(tokGroup, hfLoadRow(m.Name))
			ratio := faster(theirs, ours, func(r *Result) (float64, bool) { return r.Metric("load_ms") })
			for i, r := range []*Result{ours, theirs} {
				added := figureOf(r, "rss_mb", func(p float64) string { return fmt.Sprintf("%.1f", p-r.Metrics["rss_before_mb"]) })
				label := []string{"**lib/tokenizer** `tokenizer.Load`", "HF tokenizers `Tokenizer.fromFile`"}[i]
				t.add(m.Label, label, figure(r, "load_ms", 0), figure(r, "rss_mb", 1), figure(r, "rss_before_mb", 1), added, []string{"—", ratio}[i], loadCell(r.Load1))
			}
		}
		t.write(w)
	}
}
