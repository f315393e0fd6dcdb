package stats

import (
	"encoding/xml"
	"image"
	"image/color"
	_ "image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// svgContent parses an SVG file and returns its root element, the number
// of elements by name, and all its text.
func svgContent(t *testing.T, path string) (root xml.StartElement, elements map[string]int, text string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := xml.NewDecoder(f)
	elements = map[string]int{}
	var b strings.Builder
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s is not valid XML: %v", path, err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if len(elements) == 0 {
				root = tok.Copy()
			}
			elements[tok.Name.Local]++
		case xml.CharData:
			b.Write(tok)
			b.WriteByte(' ')
		}
	}
	return root, elements, b.String()
}

func TestPlotSVG(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "lengths.svg")
	input := filepath.Join(testdata, "mixed.jsonl")
	report := runJSON(t, 3, "--wall", "1h", "--plot", path, input)

	root, elements, text := svgContent(t, path)
	if root.Name.Local != "svg" {
		t.Fatalf("root element %q, want svg", root.Name.Local)
	}
	attrs := map[string]string{}
	for _, a := range root.Attr {
		attrs[a.Name.Local] = a.Value
	}
	// 12 in wide; 7 panels (5 lengths, 2 endpoint) in 4 rows of 3.5 in.
	if attrs["width"] != "864pt" || attrs["height"] != "1008pt" {
		t.Errorf("size %s x %s, want 864pt x 1008pt", attrs["width"], attrs["height"])
	}
	for _, want := range []string{"prompt chars (n=12", "prompt tokens (n=5", "answer chars (n=6", "answer tokens (n=5",
		"reasoning chars (n=1", "tok/s per request", "tok/s over the run", "127.0.0.1:30000", "127.0.0.1:30001", "(none)"} {
		if !strings.Contains(text, want) {
			t.Errorf("the SVG has no text %q", want)
		}
	}
	// One path per bar at least, besides the axes.
	bars := len(report.Endpoints) * 2
	for _, l := range report.lengthRows() {
		bars += len(l.d.Histogram)
	}
	if elements["path"] < bars {
		t.Errorf("%d paths, want at least the %d bars", elements["path"], bars)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(entries) != 1 {
		t.Errorf("the plot's folder holds %v (%v), want just the plot", entries, err)
	}
}

func TestPlotPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lengths.png")
	runJSON(t, 3, "--plot", path, filepath.Join(testdata, "mixed.jsonl"))
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, format, err := image.Decode(f)
	if err != nil {
		t.Fatalf("%s does not decode: %v", path, err)
	}
	if format != "png" {
		t.Errorf("format %s, want png", format)
	}
	// 12 x 14 in at 96 dpi.
	if b := img.Bounds(); b.Dx() != 1152 || b.Dy() != 1344 {
		t.Errorf("size %dx%d, want 1152x1344", b.Dx(), b.Dy())
	}
	found := map[color.RGBA]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, a := img.At(x, y).RGBA()
			c := color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), uint8(a >> 8)}
			if c == lengthColor || c == endpointColor {
				found[c]++
			}
		}
	}
	if found[lengthColor] == 0 || found[endpointColor] == 0 {
		t.Errorf("pixels of the bar colours: %v; want both histogram and endpoint bars drawn", found)
	}
}

func TestPlotEmptyAndFailing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "empty.svg")
	if code, _, stderr := run(t, "", "--plot", path); code != 0 {
		t.Fatalf("exit %d on no records: %s", code, stderr)
	}
	if _, _, text := svgContent(t, path); !strings.Contains(text, "no records") {
		t.Errorf("the plot of nothing should say so; text: %s", text)
	}

	blocker := filepath.Join(dir, "file")
	os.WriteFile(blocker, nil, 0o644)
	code, stdout, stderr := run(t, `{"id":1,"prompt":"x"}`+"\n", "--plot", filepath.Join(blocker, "x.png"))
	if code != 1 || !strings.Contains(stderr, "plot:") {
		t.Errorf("exit %d, stderr %q: want 1 with a plot error", code, stderr)
	}
	if !strings.HasPrefix(stdout, "1 record") {
		t.Errorf("the report should be written before the plot fails:\n%s", stdout)
	}
}
