package stats

import (
	"cmp"
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
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
// --wall), to w as SVG or PNG by path's extension. With a (--against),
// each of its dimensions follows, the records' side beside the
// reference's.
func Plot(w io.Writer, r *Report, a *Against, path string) error {
	panels, err := panels(r)
	if err != nil {
		return err
	}
	if a != nil {
		more, err := againstPanels(a)
		if err != nil {
			return err
		}
		panels = append(panels, more...)
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
	_, err = canvas.WriteTo(w)
	return err
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

// againstGroups is how many groups a share panel shows: those whose
// shares differ most.
const againstGroups = 8

// againstPanels draws each --against dimension as two sets of bars, the
// records' shares and the reference's: per group for a share dimension,
// per length bucket for a length one.
func againstPanels(a *Against) ([]*plot.Plot, error) {
	var out []*plot.Plot
	for _, d := range a.Dimensions {
		var labels []string
		var mine, theirs plotter.Values
		switch {
		case d.Measure == "ks" && len(d.InputsHist)+len(d.AgainstLHist) > 0:
			labels, mine, theirs = bucketShares(d.InputsHist, d.AgainstLHist)
		case len(d.Groups) > 0:
			groups := slices.Clone(d.Groups)
			slices.SortStableFunc(groups, func(x, y GroupShare) int { return cmp.Compare(math.Abs(y.Diff), math.Abs(x.Diff)) })
			for _, g := range groups[:min(len(groups), againstGroups)] {
				labels = append(labels, g.Name)
				mine, theirs = append(mine, g.Share), append(theirs, g.AgainstShare)
			}
		default:
			continue
		}
		p := plot.New()
		p.Title.Text = d.Name
		if d.Distance != nil {
			p.Title.Text += fmt.Sprintf(" (%s %.3f)", map[string]string{"tv": "total variation", "ks": "Kolmogorov-Smirnov"}[d.Measure], *d.Distance)
		}
		p.Y.Label.Text = "share"
		w := barFill * columnWidth(len(labels)) / 2
		for i, side := range []struct {
			v     plotter.Values
			color color.Color
			name  string
		}{{mine, lengthColor, "these records"}, {theirs, endpointColor, "--against " + filepath.Base(a.File)}} {
			bars, err := plotter.NewBarChart(side.v, w)
			if err != nil {
				return nil, err
			}
			bars.Color, bars.LineStyle.Width, bars.Offset = side.color, 0, vg.Length(2*i-1)*w/2
			p.Add(bars)
			p.Legend.Add(side.name, bars)
		}
		p.Legend.Top = true
		p.NominalX(labels...)
		out = append(out, p)
	}
	return out, nil
}

// bucketShares lays two histograms on the buckets of either, each count
// as a share of its side.
func bucketShares(a, b []Bucket) (labels []string, x, y plotter.Values) {
	count := func(h []Bucket) (map[int64]float64, float64) {
		m, total := map[int64]float64{}, 0.0
		for _, bk := range h {
			m[bk.Lo] += float64(bk.Count)
			total += float64(bk.Count)
		}
		return m, max(total, 1)
	}
	ma, ta := count(a)
	mb, tb := count(b)
	var los []int64
	for lo := range ma {
		los = append(los, lo)
	}
	for lo := range mb {
		if _, ok := ma[lo]; !ok {
			los = append(los, lo)
		}
	}
	slices.Sort(los)
	for _, lo := range los {
		labels = append(labels, short(lo))
		x, y = append(x, ma[lo]/ta), append(y, mb[lo]/tb)
	}
	return labels, x, y
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
