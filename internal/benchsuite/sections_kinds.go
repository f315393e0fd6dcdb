package benchsuite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"
)

// kindCell is one cell TestInFlightTable writes: a mode's median wall time
// on a kind of server at a number of slots (lib/fleet's InFlightCell).
type kindCell struct {
	Slots, Fixed, Answers, Runs int
	MaxTokens                   int `json:"max_tokens"`
	Kind, Mode                  string
	WallS                       float64 `json:"wall_s"`
}

// The tables' columns, the kinds of server, and their slot counts.
var kindsOrder, kindsSlots = []string{"sglang", "vllm", "llamacpp", "ollama"}, []int{4, 32, 128}

func kindsGroup(slots int) string { return "kinds-" + strconv.Itoa(slots) }

var kindsArgv = []string{"go", "test", "./lib/fleet", "-run", "^TestInFlightTable$", "-count=1", "-timeout", "60m"}

var kindsSection = &section{
	name: "kinds", heading: "## infer's in-flight count per kind of server, on simulated time",
	measure: func(ctx context.Context, h *harness) error {
		out, load := h.path("tmp/inflight-cells.jsonl"), loadAverage()
		_, err := h.goTest(ctx, append(slices.Clone(kindsArgv), "-args", "-inflight-json="+out), "TOKENMILL_TEST_LONG=1")
		rows, err2 := readKindCells(out)
		if err != nil || err2 != nil {
			return errors.Join(err, err2)
		}
		for _, r := range rows {
			r.Command, r.Load1 = "TOKENMILL_TEST_LONG=1 "+shellJoin(kindsArgv), load
			h.add(r)
		}
		return nil
	},
}

// readKindCells makes TestInFlightTable's cells a row a slot count and
// mode (a fixed count named by its flag), each kind's wall time a figure.
func readKindCells(path string) (rows []*Result, err error) {
	err = eachJSON(path, func(c *kindCell) error {
		if !slices.Contains(kindsSlots, c.Slots) || !slices.Contains(kindsOrder, c.Kind) || c.WallS <= 0 {
			return fmt.Errorf("a cell of no table: %+v", *c)
		}
		name := c.Mode
		if c.Fixed > 0 {
			name = "--concurrency " + strconv.Itoa(c.Fixed)
		}
		i := slices.IndexFunc(rows, func(r *Result) bool { return r.Group == kindsGroup(c.Slots) && r.Name == name })
		if i < 0 {
			rows, i = append(rows, &Result{Group: kindsGroup(c.Slots), Name: name, Ours: c.Fixed == 0, OutRecords: -1,
				Metrics: map[string]float64{"answers": float64(c.Answers), "max_tokens": float64(c.MaxTokens), "runs": float64(c.Runs)}}), len(rows)
		}
		rows[i].Metrics[c.Kind] = c.WallS
		return nil
	})
	if err == nil && len(rows) == 0 {
		err = fmt.Errorf("%s: no cells", path)
	}
	return rows, err
}

// bestFixed is the fixed level's row (not tokenmill's) with the least of metric, or nil.
func bestFixed(rows []*Result, metric string) (best *Result) {
	for _, r := range rows {
		if w, ok := r.Metric(metric); ok && !r.Ours {
			if b, _ := best.Metric(metric); best == nil || w < b {
				best = r
			}
		}
	}
	return best
}

func init() {
	parts["kinds"] = func(w io.Writer, h *harness) {
		for _, slots := range kindsSlots {
			rows := h.group(kindsGroup(slots))
			if len(rows) == 0 {
				continue
			}
			fmt.Fprintf(w, "\n### %d slots (%s answers, up to %s tokens)\n\n", slots, th(rows[0].Metrics["answers"]), th(rows[0].Metrics["max_tokens"]))
			t := newTable(append([]string{"in flight"}, kindsOrder...)...)
			for _, r := range rows {
				cells := []string{nameCell(r)}
				for _, kind := range kindsOrder {
					wall, ok := r.Metrics[kind]
					best, _ := bestFixed(rows, kind).Metric(kind)
					cell := fmt.Sprintf("%v (%.3f×)", (time.Duration(wall * float64(time.Second))).Round(time.Second), wall/best)
					switch {
					case !ok || best <= 0:
						cell = "—"
					case !r.Ours && wall == best:
						cell = "**" + cell + "**"
					}
					cells = append(cells, cell)
				}
				t.add(cells...)
			}
			t.write(w)
		}
	}
}
