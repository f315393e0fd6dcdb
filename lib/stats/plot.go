package stats

import (
	"fmt"
	"image/color"
	"io"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"tokenmill/lib/jsonl"
)

// Plot sizes: two panels side by side, one row per pair.
const (
	plotWidth  = 12 * vg.Inch
	panelRowH  = 3.5 * vg.Inch
	plotCols   = 2
	barFill    = 0.7 // of a bucket's width
	plotFormat = "svg or png"
)

var (
	lengthColor   = color.RGBA{R: 0x35, G: 0x6a, B: 0xb5, A: 0xff}
	endpointColor = color.RGBA{R: 0xd0, G: 0x6b, B: 0x1f, A: 0xff}
)

// Plot draws the report's non-empty length histograms (on the same 1-2-5
// log buckets as the tables) and, when there are endpoints, their tok/s
// per request and their completion tokens (or tok/s over the run with
// --wall), into path as SVG or PNG by its extension.
func Plot(r *Report, path string, force bool) error {
	panels, err := panels(r)
	if err != nil {
		return err
	}
	rows := (len(panels) + plotCols - 1) / plotCols
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, plotCols)
	}
	for i, p := range panels {
		grid[i/plotCols][i%plotCols] = p
	}
	height := vg.Length(rows) * panelRowH

	var canvas vg.CanvasWriterTo
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".svg":
		canvas = vgsvg.New(plotWidth, height)
	case ".png":
		canvas = vgimg.PngCanvas{Canvas: vgimg.New(plotWidth, height)}
	default:
		return fmt.Errorf("%s: unknown picture format %q (want %s)", path, ext, plotFormat)
	}
	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: rows, Cols: plotCols, PadX: vg.Inch / 2, PadY: vg.Inch / 3,
		PadTop: vg.Inch / 6, PadBottom: vg.Inch / 6, PadLeft: vg.Inch / 6, PadRight: vg.Inch / 6}
	canvases := plot.Align(grid, tiles, dc)
	for j, row := range grid {
		for i, p := range row {
			if p != nil {
				p.Draw(canvases[j][i])
			}
		}
	}
	return jsonl.WriteFile(path, jsonl.CreateFileOptions{Replace: force}, func(w io.Writer) error {
		_, err := canvas.WriteTo(w)
		return err
	})
}

func panels(r *Report) ([]*plot.Plot, error) {
	var out []*plot.Plot
	for _, l := range r.lengthRows() {
		if l.d.Count == 0 {
			continue
		}
		p, err := histogramPlot(l.name, l.d)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		p := plot.New()
		p.Title.Text = "no records"
		out = append(out, p)
	}
	if len(r.Endpoints) == 0 {
		return out, nil
	}
	speed := func(e Endpoint) float64 { return e.TokPerSecPerRequest }
	p, err := endpointPlot(r, "tok/s per request (completion tokens / summed latency)", "tok/s", speed)
	if err != nil {
		return nil, err
	}
	out = append(out, p)
	second, title, unit := func(e Endpoint) float64 { return float64(e.CompletionTokens) }, "completion tokens", "tokens"
	if r.WallSeconds > 0 {
		second, unit = func(e Endpoint) float64 { return *e.TokPerSec }, "tok/s"
		title = fmt.Sprintf("tok/s over the run (completion tokens / --wall %s)", wallText(r.WallSeconds))
	}
	if p, err = endpointPlot(r, title, unit, second); err != nil {
		return nil, err
	}
	return append(out, p), nil
}

func histogramPlot(name string, d *Distribution) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s (n=%s, p50 %s, p99 %s)", name, num(d.Count), numf(d.P50), numf(d.P99))
	p.X.Label.Text = name + ", log buckets [lo, hi)"
	p.Y.Label.Text = "records"
	values := make(plotter.Values, len(d.Histogram))
	labels := make([]string, len(d.Histogram))
	for i, b := range d.Histogram {
		values[i] = float64(b.Count)
		labels[i] = short(b.Lo)
	}
	bars, err := plotter.NewBarChart(values, barFill*columnWidth(len(values)))
	if err != nil {
		return nil, err
	}
	bars.Color = lengthColor
	bars.LineStyle.Width = 0
	p.Add(bars)
	p.NominalX(labels...)
	return p, nil
}

// columnWidth is the width of one bar in a panel with n bars.
func columnWidth(n int) vg.Length {
	return (plotWidth/plotCols - 1.5*vg.Inch) / vg.Length(max(n, 1))
}

func endpointPlot(r *Report, title, unit string, value func(Endpoint) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = unit
	values := make(plotter.Values, len(r.Endpoints))
	labels := make([]string, len(r.Endpoints))
	for i, e := range r.Endpoints {
		j := len(values) - 1 - i // the first endpoint on top: the y axis counts upwards
		values[j] = value(e)
		labels[j] = strings.TrimPrefix(strings.TrimPrefix(e.Endpoint, "http://"), "https://")
	}
	bars, err := plotter.NewBarChart(values, barFill*panelRowH/vg.Length(max(len(values), 1))/2)
	if err != nil {
		return nil, err
	}
	bars.Horizontal = true
	bars.Color = endpointColor
	bars.LineStyle.Width = 0
	p.Add(bars)
	p.NominalY(labels...)
	return p, nil
}
