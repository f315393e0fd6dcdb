package benchsuite

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

const (
	tokGroup = "tokenizer"
	// hfBindingPackage is the crate's Node binding in pipelines/bench/package.json.
	hfBindingPackage = "@anush008/tokenizers"
	hfScript         = "pipelines/bench/hf-tokenizers.mjs"
	renderTurns      = 10     // the length of the conversations rendered
	renderBenchtime  = "200x" // the passes over the conversations a render run makes
)

// tokenizerModels are the real tokenizers measured, named as
// lib/tokenizer's benchmarks and ../shared/data/tokenizers name them.
var tokenizerModels = []struct{ Name, Label string }{{"qwen3", "Qwen3"}, {"deepseek_v3", "DeepSeek-V3"}}

// tokenizerModes are the ways the text is handed to a tokenizer, in the
// order hfReport.modes gives them: one row each in the table, with
// lib/tokenizer's benchmark (the per-document one serves both per-document
// rows, which are one row of lib/tokenizer's).
var tokenizerModes = []struct{ mode, label, bench string }{
	{"whole", "the renderings concatenated, one call", "BenchmarkEncode"},
	{"docs", "one call per rendering (binding: `await encode(doc)` each)", "BenchmarkEncodeCases"},
	{"batch", "one call per rendering (binding: all in one `encodeBatch`)", "BenchmarkEncodeCases"},
	{"cold", "the renderings concatenated, one call, empty word cache", "BenchmarkEncodeCold"},
}

// The rows' names, by which the table and the targets find them.
func oursEncodeRow(model, mode string) string {
	if mode == "batch" {
		mode = "docs"
	}
	return "lib/tokenizer, " + model + ", " + mode
}
func hfEncodeRow(model, mode string) string { return "HF tokenizers, " + model + ", " + mode }
func oursRenderRow(model string) string     { return "lib/tokenizer Render, " + model }
func oursLoadRow(model string) string       { return "lib/tokenizer Load, " + model }
func hfLoadRow(model string) string         { return "HF tokenizers fromFile, " + model }

var tokenizerSection = &section{
	name: "tokenizer", heading: "## Tokenizing and rendering: lib/tokenizer beside Hugging Face's Rust tokenizers",
	measure: func(ctx context.Context, h *harness) error { return h.measureTokenizer(ctx) },
}

// goldenStats are what a golden file holds: the text both tokenizers are
// given and the reference's token count of it, document by document.
type goldenStats struct{ bytes, docs, tokens int64 }

func readGoldenStats(path string) (st goldenStats, err error) {
	in := jsonl.NewReader(context.Background(), nil, []string{path}, nil, jsonl.Options{})
	for {
		line, err := in.Next()
		if err == io.EOF {
			return st, nil
		} else if err != nil {
			return st, err
		}
		var c struct {
			Rendered string
			IDs      []int
		}
		if err := json.Unmarshal(line.Data, &c); err != nil {
			return st, fmt.Errorf("%s line %d: %w", path, line.Line, err)
		}
		st.bytes, st.tokens, st.docs = st.bytes+int64(len(c.Rendered)), st.tokens+int64(len(c.IDs)), st.docs+1
	}
}

// hfReport is what hf-tokenizers.mjs prints (fields matched by name): a
// mode's figures are named as the rows name them (mbps, tok_s, tokens).
type hfReport struct {
	Node                           string
	Bytes, Documents               int64
	GoldenMismatches               float64 `json:"golden_mismatches"`
	CallFloorUS                    float64 `json:"call_floor_us"`
	Whole, Docs, Batch, Cold, Load map[string]float64
}

// modes are the report's figures of each of tokenizerModes.
func (r *hfReport) modes() []map[string]float64 {
	return []map[string]float64{r.Whole, r.Docs, r.Batch, r.Cold}
}

func parseHFReport(out []byte) (*hfReport, error) {
	line := bytes.TrimSpace(out)
	line = line[bytes.LastIndexByte(line, '\n')+1:]
	r := new(hfReport)
	if err := json.Unmarshal(line, r); err != nil {
		return nil, fmt.Errorf("hf-tokenizers.mjs printed no report: %v: %q", err, tail(out, 500))
	}
	if r.Bytes <= 0 || slices.ContainsFunc(r.modes(), func(m map[string]float64) bool { return m["seconds"] <= 0 }) || r.Load["ms"] <= 0 {
		return nil, fmt.Errorf("hf-tokenizers.mjs: a report without figures: %s", line)
	}
	return r, nil
}

// tokenizerRuns are the outputs of a section's runs, a run each, by
// command: go test's (encode, render, and "load MODEL") and the node
// script's ("hf MODEL"); with the load when each run started.
type tokenizerRuns struct {
	out   map[string][][]byte
	loads []float64
}

// tokenizerCommands are the commands a run takes, run from the repository
// with the paths as seen from there, as the report shows them.
type tokenizerCommands struct {
	encode, render []string
	load, hf       map[string][]string
}

func (h *harness) tokenizerCommands(dir, modules string) tokenizerCommands {
	reps := "3"
	if h.quick {
		reps = "1"
	}
	rel := func(p string) string { // near the repository, relative to it
		if r, err := filepath.Rel(h.repo, p); err == nil && !strings.HasPrefix(r, "../..") {
			return r
		}
		return p
	}
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
		c.hf[m.Name] = h.pinned("env", "TOKENIZERS_PARALLELISM=false", "RAYON_NUM_THREADS=1", "node", "--expose-gc", hfScript, "--modules", rel(modules),
			"--golden", rel(filepath.Join(dir, "golden", m.Name+".jsonl.gz")), "--reps", reps, "--cold-reps", reps, rel(filepath.Join(dir, m.Name, "tokenizer.json")))
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
	modules, why := h.nodeModules()
	var binding struct{ Version string }
	data, err := os.ReadFile(filepath.Join(modules, "node_modules", hfBindingPackage, "package.json"))
	if why == "" && (err != nil || json.Unmarshal(data, &binding) != nil) {
		why = hfBindingPackage + " is not in " + modules + " (.ci/install-peers installs it)"
	}
	stats := map[string]goldenStats{}
	for _, m := range tokenizerModels {
		st, err := readGoldenStats(filepath.Join(dir, "golden", m.Name+".jsonl.gz"))
		if err != nil {
			return err
		}
		stats[m.Name] = st
	}
	// A run's commands, taken in turns, by the key their outputs are kept
	// under; all run as the harness runs a measured command, node and the
	// binding as the peers installed them.
	cmds := h.tokenizerCommands(dir, modules)
	type turn struct {
		key  string
		argv []string
	}
	turns := []turn{{"encode", cmds.encode}, {"render", cmds.render}}
	for _, m := range tokenizerModels {
		turns = append(turns, turn{"load " + m.Name, cmds.load[m.Name]})
		if why == "" {
			turns = append(turns, turn{"hf " + m.Name, cmds.hf[m.Name]})
		}
	}
	runs := tokenizerRuns{out: map[string][][]byte{}}
	for i := range h.runs {
		runs.loads = append(runs.loads, loadAverage())
		h.logf("tokenizer: run %d of %d (load %.2f)", i+1, h.runs, runs.loads[i])
		for _, t := range turns {
			out, err := h.goTest(ctx, t.argv, h.environ...)
			if err != nil {
				return err
			}
			runs.out[t.key] = append(runs.out[t.key], out)
		}
	}
	rows, err := tokenizerResults(runs, stats, cmds, shellJoin, binding.Version, why)
	for _, r := range rows {
		h.logf("%s/%s: %v (load %.2f)", r.Group, r.Name, r.Metrics, r.Load1)
		h.add(r)
	}
	return err
}

// tokenizerResults makes the section's rows of its runs: each run's
// figures, then for each the median of the runs (peak RSS: the highest).
// why, when set, is why the binding's rows are not available.
func tokenizerResults(runs tokenizerRuns, stats map[string]goldenStats, cmds tokenizerCommands, shown func([]string) string, version, why string) ([]*Result, error) {
	values := map[string]map[string][]float64{} // by row and figure, a value a run
	node := map[string]string{}                 // by model, the binding's node
	keep := func(name string, figs map[string]float64) {
		if values[name] == nil {
			values[name] = map[string][]float64{}
		}
		for k, v := range figs {
			values[name][k] = append(values[name][k], v)
		}
	}
	n := len(runs.out["encode"])
	for i := range n {
		for _, m := range tokenizerModels {
			figs, st := benchFigures(slices.Concat(runs.out["encode"][i], runs.out["render"][i], runs.out["load "+m.Name][i])), stats[m.Name]
			var missing error
			fig := func(bench, unit string) float64 {
				v := figs[bench+"/"+m.Name][unit]
				if len(v) == 0 {
					missing = cmp.Or(missing, fmt.Errorf("run %d: no %s of %s/%s in the output", i+1, unit, bench, m.Name))
				}
				return median(v)
			}
			for _, md := range tokenizerModes {
				// MB/s as go test reports it; tokens/s of the tokens an op
				// made (the concatenated text's, as BenchmarkEncode counts
				// them; the documents', the golden ids'), over ns/op.
				tokens := fig("BenchmarkEncode", "tokens/op")
				if md.bench == "BenchmarkEncodeCases" {
					tokens = float64(st.tokens)
				}
				if md.mode != "batch" {
					keep(oursEncodeRow(m.Name, md.mode), map[string]float64{"mbps": fig(md.bench, "MB/s"),
						"tok_s": tokens * 1e9 / fig(md.bench, "ns/op"), "tokens": tokens})
				}
			}
			convs := fig("BenchmarkTokenizerRender", "convs")
			keep(oursRenderRow(m.Name), map[string]float64{"us_per_conv": fig("BenchmarkTokenizerRender", "µs/conv"), "convs": convs,
				"allocs_per_conv": fig("BenchmarkTokenizerRender", "allocs/op") / convs})
			keep(oursLoadRow(m.Name), map[string]float64{"load_ms": fig("BenchmarkTokenizerLoad", "ms/load"), "rss_mb": fig("BenchmarkTokenizerLoad", "peak-RSS-MB"),
				"rss_before_mb": fig("BenchmarkTokenizerLoad", "RSS-before-MB")})
			if missing != nil {
				return nil, missing
			}
			if i >= len(runs.out["hf "+m.Name]) {
				continue
			}
			rep, err := parseHFReport(runs.out["hf "+m.Name][i])
			if err != nil {
				return nil, err
			}
			node[m.Name] = rep.Node
			if rep.Bytes != st.bytes || rep.Documents != st.docs {
				return nil, fmt.Errorf("%s: the binding was given %d bytes in %d documents, lib/tokenizer %d in %d: not the same text", m.Name, rep.Bytes, rep.Documents, st.bytes, st.docs)
			}
			for j, md := range rep.modes() {
				keep(hfEncodeRow(m.Name, tokenizerModes[j].mode), map[string]float64{"mbps": md["mbps"], "tok_s": md["tok_s"], "tokens": md["tokens"]})
			}
			keep(hfEncodeRow(m.Name, "docs"), map[string]float64{"call_floor_us": rep.CallFloorUS, "golden_mismatches": rep.GoldenMismatches})
			keep(hfLoadRow(m.Name), map[string]float64{"load_ms": rep.Load["ms"], "rss_mb": rep.Load["rss_peak_mb"], "rss_before_mb": rep.Load["rss_before_mb"]})
		}
	}
	var out []*Result
	// add makes a row of its figures; the binding's, without any, says why.
	add := func(name string, ours bool, argv []string, st goldenStats) *Result {
		r := unavailable(tokGroup, name, cmp.Or(why, "no run of "+hfScript))
		if ours || why == "" && values[name] != nil {
			r = &Result{Group: tokGroup, Name: name, Ours: ours, Command: shown(argv), Bytes: st.bytes, Records: st.docs, OutRecords: -1,
				Metrics: map[string]float64{"runs": float64(n)}}
		}
		for k, v := range values[name] {
			r.Metrics[k] = median(v)
			if k == "rss_mb" {
				r.Metrics[k] = slices.Max(v)
			}
		}
		r.Load1 = mean(runs.loads)
		out = append(out, r)
		return r
	}
	for _, m := range tokenizerModels {
		st := stats[m.Name]
		for _, mode := range []string{"whole", "docs", "cold"} {
			add(oursEncodeRow(m.Name, mode), true, cmds.encode, st)
		}
		for _, md := range tokenizerModes {
			if r := add(hfEncodeRow(m.Name, md.mode), false, cmds.hf[m.Name], st); r.available() && version != "" {
				r.Note = hfBindingPackage + " " + version + ", node " + node[m.Name]
			}
		}
		add(oursRenderRow(m.Name), true, cmds.render, goldenStats{})
		add(oursLoadRow(m.Name), true, cmds.load[m.Name], goldenStats{})
		add(hfLoadRow(m.Name), false, cmds.hf[m.Name], goldenStats{})
	}
	return out, nil
}

// figure is a cell of a figure, or why the row has none.
func figure(r *Result, metric string, decimals int) string {
	if r != nil && !r.available() {
		return "_not available_"
	}
	return metricCell(r, metric, decimals)
}

// times is a over b as "12×", or a dash.
func times(a, b *Result, metric string) string {
	x, ok1 := a.Metric(metric)
	y, ok2 := b.Metric(metric)
	if !ok1 || !ok2 || y <= 0 {
		return "—"
	}
	return trimFloat(x/y) + "×"
}

var benchtimeX = regexp.MustCompile(`-benchtime \d+`)

// tokenizerView is what the section's text says of its rows; Stop, when
// set, is all it says.
func (h *harness) tokenizerView() (v struct{ Stop, Crate, Docs, Sizes, Passes, Checks, Floors, Slower, Convs string }) {
	find := func(name string) *Result { return h.find(tokGroup, name) }
	// The rows are made together: without the first, there are none.
	switch first := find(oursEncodeRow(tokenizerModels[0].Name, "whole")); {
	case first == nil:
		v.Stop = "_No results for " + tokGroup + ": see the log of the run._\n"
		return v
	case !first.available():
		v.Stop = "Not measured: " + strings.TrimPrefix(first.Note, "not available: ") + ".\n"
		return v
	default:
		// The passes a run makes, as its go test command asks for them.
		v.Passes = strings.TrimPrefix(benchtimeX.FindString(first.Command), "-benchtime ")
		v.Docs = "the " + cli.Thousands(first.Records)
	}
	v.Crate = "Hugging Face's `tokenizers` crate (Rust) through its Node binding `" + hfBindingPackage + "`"
	if r := find(hfEncodeRow(tokenizerModels[0].Name, "whole")); r != nil && r.available() {
		if _, after, ok := strings.Cut(r.Note, hfBindingPackage+" "); ok {
			v.Crate += " (" + after + ")"
		}
	}
	// What makes the comparison fair, or not, with this run's figures.
	var sizes, floors, checks, notes, slower []string
	for _, m := range tokenizerModels {
		if r := find(oursEncodeRow(m.Name, "whole")); r != nil && r.Bytes > 0 {
			sizes = append(sizes, fmt.Sprintf("%.1f MB and %s tokens for %s", float64(r.Bytes)/1e6, figure(r, "tokens", 0), m.Label))
		}
		x, ok1 := find(hfEncodeRow(m.Name, "whole")).Metric("mbps")
		y, ok2 := find(hfEncodeRow(m.Name, "batch")).Metric("mbps")
		if ok1 && ok2 && x < y {
			slower = append(slower, fmt.Sprintf("%s %.2f MB/s against %.2f", m.Label, x, y))
		}
		// The binding's rows have figures only where it ran.
		d := find(hfEncodeRow(m.Name, "docs"))
		if f, ok := d.Metric("call_floor_us"); ok {
			mbps, _ := d.Metric("mbps")
			floors = append(floors, fmt.Sprintf("%.0f µs for %s: %.2f s of its %.2f s pass over the %s renderings",
				f, m.Label, f*1e-6*float64(d.Records), float64(d.Bytes)/1e6/mbps, cli.Thousands(d.Records)))
		}
		if bad, ok := d.Metric("golden_mismatches"); ok && bad == 0 {
			checks = append(checks, fmt.Sprintf("all %s of %s", cli.Thousands(d.Records), m.Label))
		} else if ok {
			checks = append(checks, fmt.Sprintf("**%s of %s's %s differ**", cli.Thousands(int64(bad)), m.Label, cli.Thousands(d.Records)))
		}
		// The binding's token counts, each beside lib/tokenizer's of the same text.
		for _, c := range []struct{ mode, of string }{
			{"whole", "concatenated text, lib/tokenizer"}, {"docs", "documents, the golden ids"}, {"cold", "concatenated text, lib/tokenizer"},
		} {
			got, ok1 := find(hfEncodeRow(m.Name, c.mode)).Metric("tokens")
			want, ok2 := find(oursEncodeRow(m.Name, c.mode)).Metric("tokens")
			if ok1 && ok2 && got != want {
				notes = append(notes, fmt.Sprintf("**%s, %s: the binding gave %s tokens of the %s %s**",
					m.Label, c.mode, cli.Thousands(int64(got)), c.of, cli.Thousands(int64(want))))
			}
		}
	}
	if len(checks) > 0 {
		v.Checks = "The binding is the reference: before timing, each rendering's ids from it were checked against\n" +
			"the golden ids (" + strings.Join(checks, ", ") + " equal)"
		if len(notes) == 0 {
			v.Checks += ", and its token counts are lib/tokenizer's in every\nrow.\n"
		} else {
			v.Checks += "; " + strings.Join(notes, "; ") + ".\n"
		}
	}
	if len(floors) > 0 {
		v.Floors = " (an empty string's call, measured\n  here: " + strings.Join(floors, ";\n  ") + ")"
	}
	v.Sizes, v.Slower = strings.Join(sizes, ", "), strings.Join(slower, ", ")
	if c, ok := find(oursRenderRow("qwen3")).Metric("convs"); ok {
		v.Convs = cli.Thousands(int64(c)) + " "
	}
	return v
}

func init() {
	find := func(h *harness, name string) *Result { return h.find(tokGroup, name) }
	parts["tokenizer-encode"] = func(w io.Writer, h *harness) {
		t := newTable("tokenizer", "how the text is given", "lib/tokenizer MB/s", "tokens/s", "HF tokenizers MB/s", "tokens/s", "lib/tokenizer ÷ HF", "load")
		for _, m := range tokenizerModels {
			for _, md := range tokenizerModes {
				ours, theirs := find(h, oursEncodeRow(m.Name, md.mode)), find(h, hfEncodeRow(m.Name, md.mode))
				t.add(m.Label, md.label, figure(ours, "mbps", 1), figure(ours, "tok_s", 0), figure(theirs, "mbps", 2), figure(theirs, "tok_s", 0), times(ours, theirs, "mbps"), loadCell(ours.Load1))
			}
		}
		t.write(w)
		fmt.Fprintln(w)
		if r := find(h, hfEncodeRow(tokenizerModels[0].Name, "whole")); r != nil && !r.available() {
			fmt.Fprintf(w, "HF tokenizers %s.\n\n", r.Note)
		}
	}
	parts["tokenizer-render"] = func(w io.Writer, h *harness) {
		t := newTable("template", "conversations", "µs per conversation", "allocations per conversation", "load")
		for _, m := range tokenizerModels {
			r := find(h, oursRenderRow(m.Name))
			t.add("**"+m.Label+"**", figure(r, "convs", 0), figure(r, "us_per_conv", 1), figure(r, "allocs_per_conv", 0), loadCell(r.Load1))
		}
		t.write(w)
	}
	parts["tokenizer-load"] = func(w io.Writer, h *harness) {
		t := newTable("folder", "implementation", "load ms", "peak RSS MB", "before MB", "added MB", "lib/tokenizer is", "load")
		for _, m := range tokenizerModels {
			ours, theirs := find(h, oursLoadRow(m.Name)), find(h, hfLoadRow(m.Name))
			ratio := faster(theirs, ours, func(r *Result) (float64, bool) { return r.Metric("load_ms") })
			for i, r := range []*Result{ours, theirs} {
				added := "—"
				p, ok1 := r.Metric("rss_mb")
				b, ok2 := r.Metric("rss_before_mb")
				if ok1 && ok2 {
					added = strconv.FormatFloat(p-b, 'f', 1, 64)
				}
				label := []string{"**lib/tokenizer** `tokenizer.Load`", "HF tokenizers `Tokenizer.fromFile`"}[i]
				t.add(m.Label, label, figure(r, "load_ms", 0), figure(r, "rss_mb", 1), figure(r, "rss_before_mb", 1), added, []string{"—", ratio}[i], loadCell(r.Load1))
			}
		}
		t.write(w)
		fmt.Fprintln(w)
		command := func(what, name string) {
			if r := find(h, name); r != nil && r.Command != "" {
				fmt.Fprintf(w, "- %s: `%s`\n", what, r.Command)
			}
		}
		command("lib/tokenizer, encoding", oursEncodeRow(tokenizerModels[0].Name, "whole"))
		command("lib/tokenizer, rendering", oursRenderRow(tokenizerModels[0].Name))
		for _, m := range tokenizerModels {
			command("lib/tokenizer, loading "+m.Label, oursLoadRow(m.Name))
		}
		for _, m := range tokenizerModels {
			command("HF tokenizers, "+m.Label, hfEncodeRow(m.Name, "whole"))
		}
	}
}
