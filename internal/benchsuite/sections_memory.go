package benchsuite

import (
	"context"
	"fmt"
	"io"
)

// memEndpoints are the instant endpoints infer answers from.
const memEndpoints = 8

var memorySection = &section{
	name: "infer-memory", heading: "## infer's memory against the prompts it reads",
	measure: func(ctx context.Context, h *harness) error {
		// The benchmark first: it takes seconds, the largest size minutes.
		err := h.subBench(ctx, "infer-memory-ledger", "BenchmarkLedger", "3x", "./lib/ledger/", []string{"tables", "map"}, func(mode string) (string, bool) {
			return mode, mode == "tables"
		})
		// infer answers each size's prompts on a fresh fleet of instant endpoints.
		for _, n := range h.sz.InferMemory {
			p, out := "data/memory-"+sizeLabel(n)+".jsonl", "tmp/memory-gen.jsonl"
			if err == nil {
				err = h.sh(ctx, fmt.Sprintf("corpus -n %d | extract --progress 0 > %s", n, p))
			}
			if err == nil {
				err = h.measureAll(ctx, []peerSpec{ours(Spec{Group: "infer-memory", Name: "infer", Size: sizeLabel(n), Runs: 1, BytesOf: []string{p},
					Clean: []string{out, "tmp/memory-gen.errors.jsonl"}, Count: []string{out}, Alias: []string{"@URLS@=$URLS"},
					Fresh: h.freshSim(memEndpoints, h.path("logs/memory-llmsim.log"), "--instant"),
					Argv:  []string{"infer", "-e", "@URLS@", "--max-tokens", "16", "--progress", "0", "-o", out, p}})})
			}
			h.remove(p)
		}
		return err
	},
}

func init() { parts["infer-memory"] = renderMemory }

func renderMemory(w io.Writer, h *harness) {
	rows := h.rows(w, "infer-memory")
	if len(rows) == 0 {
		return
	}
	t := newTable("size", "prompts read", "answers written", "peak RSS MB", "MB over the first size", "bytes a prompt over the first size", "wall s", "load")
	first := rows[0]
	r0, _ := first.Metric("rss_mb")
	for _, r := range rows {
		rss, _ := r.Metric("rss_mb")
		over, per := "—", "—"
		if r != first && r.Records > first.Records {
			over, per = fmt.Sprintf("%.1f", rss-r0), fmt.Sprintf("%.1f", (rss-r0)*1024*1024/float64(r.Records-first.Records))
		}
		t.add(r.Size, th(float64(r.Records)), outCell(r), rssCell(r), over, per, metricCell(r, "wall_s", 1), othersCell(r))
	}
	t.write(w)
	if last := rows[len(rows)-1]; last.Records > first.Records {
		rss, _ := last.Metric("rss_mb")
		fmt.Fprintf(w, "\nFrom %s to %s prompts infer's peak RSS grows by %.0f bytes a prompt.\n", first.Size, last.Size,
			(rss-r0)*1024*1024/float64(last.Records-first.Records))
	}
	fmt.Fprintf(w, "\n- infer: `%s`\n", first.Command)
	ledger := h.group("infer-memory-ledger")
	if len(ledger) == 0 {
		return
	}
	fmt.Fprint(w, "\nThe ledger alone (`BenchmarkLedger`, lib/ledger): a million ids marked seen and done, the memory\n"+
		"they take an id (the live heap after a collection, and the arrays mapped outside it), beside a Go\n"+
		"map of the ids' 128-bit hashes (what the ledger was):\n\n")
	columns(ledger, "ledger=name", "bytes an id (heap and mapped)=B/id:2", "of it on the heap=heap-B/id:2", "ns an id=ns/id:0", "load=load").write(w)
	fmt.Fprintf(w, "\n- `%s`\n", ledger[0].Command)
}
