package benchsuite

import (
	"context"
	"fmt"
	"io"
	"os"
)

// whyNot says in one line why tokenmill's row ours is slower than peer,
// when this run measured it so (nothing when it was not, or either row is
// missing).
func (h *harness) whyNot(w io.Writer, group, ours, peer, why string) {
	var a, b *Result
	for _, r := range h.group(group) {
		switch r.Name {
		case ours:
			a = r
		case peer:
			b = r
		}
	}
	if a == nil || b == nil {
		return
	}
	x, ok1 := speed(a)
	y, ok2 := speed(b)
	if !ok1 || !ok2 || x >= y {
		return
	}
	fmt.Fprintf(w, "\n%s is slower than %s here (%.2f×): %s\n", ours, peer, x/y, why)
}

// bytesPerKey states a dedup row's peak RSS per record read (every record
// of the exact file is a distinct prompt but for a few).
func (h *harness) bytesPerKey(w io.Writer, group, name string) {
	for _, r := range h.group(group) {
		if r.Name != name || r.Records == 0 {
			continue
		}
		if rss, ok := r.Metric("rss_mb"); ok {
			fmt.Fprintf(w, "\n%s: peak RSS %.0f MB over %s records, %.0f bytes per key (process included).\n",
				name, rss, sizeLabel(int(r.Records)), rss*1e6/float64(r.Records))
		}
	}
}

// scaleFactors are the scale table's sizes, as multiples of ScaleBase.
var scaleFactors = []int{1, 4, 16}

var scaleSection = &section{
	name: "scale", heading: "## Scale: 1×, 4× and 16× the input",
	about: "time and peak RSS of dedup, shard, merge, stats and filter at three sizes",
	needs: []string{"prompts-big", "filter-gens"},
	measure: func(ctx context.Context, h *harness) error {
		for _, f := range scaleFactors {
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
		h.table(w, "scale", tableOptions{kind: "growth"})
		c := cellsOf(h.group("scale"))
		sizes, tools, at := c.sizes, c.tools, c.at
		if len(sizes) == 0 {
			return
		}
		fmt.Fprintln(w)
		last := sizes[len(sizes)-1]
		pivot(w, "wall s", tools, sizes, at, func(r *Result) string { return metricCell(r, "wall_s", 2) },
			fmt.Sprintf("%s ÷ %s", last, sizes[0]), func(t string) string {
				a, b := at(t, sizes[0]), at(t, last)
				if a == nil || b == nil {
					return "—"
				}
				x, _ := a.Metric("wall_s")
				y, _ := b.Metric("wall_s")
				if x <= 0 {
					return "—"
				}
				return fmt.Sprintf("%.1f×", y/x)
			})
	},
	targets: func(h *harness) []string {
		big, small := scaleLabel(h, 16), scaleLabel(h, 1)
		return []string{
			fmt.Sprintf("dedup memory flat: peak RSS at %s ≤ 2× at %s := scale/dedup@%s:rss_mb / scale/dedup@%s:rss_mb <= 2", big, small, big, small),
			fmt.Sprintf("stats memory flat: peak RSS at %s ≤ 2× at %s := scale/stats@%s:rss_mb / scale/stats@%s:rss_mb <= 2", big, small, big, small),
			fmt.Sprintf("shard memory flat: peak RSS at %s ≤ 2× at %s := scale/shard@%s:rss_mb / scale/shard@%s:rss_mb <= 2", big, small, big, small),
		}
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
	n := h.sz.ScaleBase * f
	label := scaleLabel(h, f)
	tag := sizeLabel(n)
	p, g, r, fl := "data/scale-prompts-"+tag+".jsonl", "data/scale-gens-"+tag+".jsonl", "data/scale-rerun-"+tag+".jsonl", "data/scale-filter-"+tag+".jsonl"
	defer func() {
		for _, x := range []string{p, g, r, fl} {
			os.Remove(h.path(x))
		}
	}()
	if err := copyLines(h.path("data/prompts-big.jsonl"), h.path(p), n, 0); err != nil {
		return err
	}
	all, err := h.lines("data/filter-gens.jsonl")
	if err != nil {
		return err
	}
	if err := copyLines(h.path("data/filter-gens.jsonl"), h.path(fl), int(all)*f/scaleFactors[len(scaleFactors)-1], 0); err != nil {
		return err
	}
	if err := h.pipeline(ctx, "", nil, 0, []string{"benchsuite", "generations", "--rerun", r, "-o", g, p}); err != nil {
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
