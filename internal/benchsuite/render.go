package benchsuite

import (
	"cmp"
	_ "embed"
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"text/template"

	"tokenmill/internal/ollamaserver"
	"tokenmill/lib/cli"
)

// One renderer writes the report: report.tmpl holds each section's text and
// targets, which call stream (a stream table) or part (a section's own).

//go:embed report.tmpl
var reportTmpl string

// view is what the templates read of the run.
type view struct {
	Sz           Sizes
	Runs         int
	Quick        bool
	Partial      bool   // some sections measured, not all
	Dir          string // the scratch directory's name
	Info         runInfo
	GrowthLabels []string
	C            map[string]any // the constants the text quotes
}

// parts are the tables a section's template writes with part NAME.
var parts = map[string]func(io.Writer, *harness){}

func (h *harness) view() view {
	v := view{Sz: h.sz, Runs: h.runs, Quick: h.quick, Partial: len(h.info.Sections) < len(sections), Dir: filepath.Base(h.dir), Info: h.info, C: map[string]any{
		"concurrency": concurrency, "inflightScale": inflightScale, "fleetTimeScale": fleetTimeScale, "regenPrefillUS": regenPrefillUS,
		"regenKV": regenKV, "regenScale": regenScale, "regenMaxTokens": regenMaxTokens, "renderTurns": renderTurns, "renderBenchtime": renderBenchtime,
		"ollamaParallel": ollamaParallel, "nearThreshold": nearThreshold, "signLSHRow": signLSHRow}}
	for _, n := range h.sz.Growth {
		v.GrowthLabels = append(v.GrowthLabels, sizeLabel(n))
	}
	return v
}

// templates parses report.tmpl with the functions it calls bound to h.
func (h *harness) templates() *template.Template {
	str := func(f func(io.Writer)) string {
		var b strings.Builder
		f(&b)
		return b.String()
	}
	funcs := template.FuncMap{
		"fact": h.fact, "lines": h.lines, "mb": h.mb, "find": h.find, "runs": runsText, "join": strings.Join, "shared": h.shared,
		"date":    func() string { return h.info.Started.UTC().Format("2006-01-02 15:04 UTC") },
		"elapsed": func() string { return elapsed(h.info.Took) },
		"label":   func(n any) string { return sizeLabel(int(toInt(n))) },
		"th":      func(n any) string { return cli.Thousands(toInt(n)) },
		"mul":     func(a, b any) int64 { return toInt(a) * toInt(b) },
		"div":     func(a, b any) int64 { return toInt(a) / toInt(b) },
		"int":     func(v float64) int { return int(v) },
		"list":    func(s ...string) []string { return s },
		"last": func(s any) any {
			v := reflect.ValueOf(s)
			return v.Index(v.Len() - 1).Interface()
		},
		"num": func(r *Result, name string) float64 { // -1 where there is no figure
			if v, ok := r.Metric(name); ok {
				return v
			}
			return -1
		},
		"perKey": func(rss float64, n int64) float64 { return rss * 1e6 / float64(n) },
		"stream": func(group, rate string, cpu bool) string {
			return str(func(w io.Writer) {
				if rows := h.rows(w, group); len(rows) > 0 {
					streamTable(w, rows, rate, cpu)
				}
			})
		},
		"whyNot": func(g, ours, peer, why string) string {
			return str(func(w io.Writer) { h.whyNot(w, g, ours, peer, why) })
		},
		"part":       func(name string) string { return str(func(w io.Writer) { parts[name](w, h) }) },
		"bestFixed":  func(g, metric string) *Result { return bestFixed(h.group(g), metric) },
		"scaleUnit":  h.scaleUnit,
		"scaleLabel": func(f int) string { return scaleLabel(h, f) },
		"nearSizes":  h.nearSizes, "composeCounts": func() []int { return composeCounts(h) },
		"fleetCrashAfter": func() int { return fleetCrashAfter(h.sz.FleetPrompts) },
		"regenFacts":      h.regenView, "tokenizerView": h.tokenizerView, "tokenizerModels": func() any { return tokenizerModels },
		"ours": oursEncodeRow, "hf": hfEncodeRow,
		"inflightCases": func() []inflightCase { return inflightCases(h.sz) },
		"kindsSlots":    func() []int { return kindsSlots }, "kindsOrder": func() []string { return kindsOrder },
		"ollamaVersion": func() string { return cmp.Or(h.info.Facts["ollama"], ollamaserver.Version) },
		"benchRow":      h.benchRow, "benchRunRow": benchRunRow,
		"allTargets": func() (string, error) { // every section's measured
			var all []string
			for _, s := range sections {
				if !slices.Contains(h.info.Sections, s.name) {
					continue
				}
				t, err := h.targets(s)
				if err != nil {
					return "", err
				}
				all = append(all, t...)
			}
			var b strings.Builder
			err := writeTargets(&b, h.results, all)
			return b.String(), err
		},
	}
	return template.Must(template.New("report").Funcs(funcs).Parse(reportTmpl))
}

// toInt is a number the templates pass, of whichever type, as an int64.
func toInt(v any) int64 { return reflect.ValueOf(v).Convert(reflect.TypeFor[int64]()).Int() }

// text writes the template name, if there is one, with v.
func (h *harness) text(w io.Writer, name string, v view) error {
	t := h.templates()
	if t.Lookup(name) == nil {
		return nil
	}
	return t.ExecuteTemplate(w, name, v)
}

// targets are a section's targets: the lines of its "targets" template.
func (h *harness) targets(s *section) ([]string, error) {
	var b strings.Builder
	if err := h.text(&b, s.name+" targets", h.view()); err != nil {
		return nil, err
	}
	var out []string
	for line := range strings.Lines(b.String()) {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out, nil
}

func init() {
	parts["machine"] = func(w io.Writer, h *harness) {
		t := newTable("", "")
		for _, k := range machineFacts {
			t.add(k, h.fact(k))
		}
		t.add("load before", "`"+h.info.LoadBefore+"`").add("load after", "`"+h.info.LoadAfter+"`").write(w)
	}
}
