package benchsuite

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// compose's section: a mix of three sources at shares 0.5, 0.3 and 0.2,
// beside the script a user writes instead: a jq pass per source to pick
// its records, shuf to draw them and take its count (shuf -n: shuf | head).

// promptsSourcesStep is the corpus's prompts with each record's source
// kept (extract --keep source puts it in meta.source).
var promptsSourcesStep = toolStep("prompts-sources", "data/prompts-sources.jsonl", []string{"corpus"}, func(*harness) []string {
	return []string{"extract", "--force", "--progress", "0", "--keep", "source", "-o", "data/prompts-sources.jsonl", "data/corpus.jsonl"}
})

func init() { dataSteps = append(dataSteps, promptsSourcesStep) }

// composeMix is the mix measured: three of the corpus's sources (30%, 15%
// and 10% of it) at shares 0.5, 0.3 and 0.2 of 45% of the records, which
// each has enough records for.
var composeMix = []struct {
	source string
	share  float64
}{{"Subjective", 0.5}, {"flan", 0.3}, {"code_exercises", 0.2}}

// composeCounts are the records each source gives of total.
func composeCounts(total int) []int {
	out := make([]int, len(composeMix))
	for i, m := range composeMix {
		out[i] = int(m.share * float64(total))
	}
	return out
}

var composeSection = &section{
	name: "compose", heading: "## compose: a mix of three sources", about: "compose against jq + shuf -n per source",
	needs: []string{"prompts-sources"},
	measure: func(ctx context.Context, h *harness) error {
		const p, out = "data/prompts-sources.jsonl", "tmp/mix.jsonl"
		n, err := h.lines(p)
		if err != nil {
			return err
		}
		total := h.sz.Main * 45 / 100
		counts := composeCounts(total)
		var shares []string
		var loop []string
		sum := 0
		for i, m := range composeMix {
			shares = append(shares, fmt.Sprintf("%s=%g", m.source, m.share))
			loop = append(loop, fmt.Sprintf("%s:%d", m.source, counts[i]))
			sum += counts[i]
		}
		in := Spec{Group: "compose", BytesOf: []string{p}, Records: n, Count: []string{out}, Clean: []string{out}}
		args := []string{"--by", "meta.source", "--share", strings.Join(shares, ","), "--total", fmt.Sprint(sum), "--progress", "0", "-o", out, p}
		return h.measureAll(ctx, []peerSpec{
			ours(with(in, "compose", "", append([]string{"compose"}, args...)...)),
			peer(with(in, "compose --workers 1", "one worker", append([]string{"compose", "--workers", "1"}, args...)...)),
			shellPeer(with(in, "jq + shuf -n", "a jq pass per source, shuf -n drawing its count (shuf | head, without head's early exit failing the pipe); the draw is fixed by --random-source, not by the ids, so it changes with the file",
				`for s in `+strings.Join(loop, " ")+`; do jq -c --arg s "${s%:*}" 'select(.meta.source == $s)' `+p+
					` | shuf -n "${s##*:}" --random-source=<(yes); done > `+out), "jq", "shuf"),
		})
	},
	render: func(w io.Writer, h *harness) {
		total := h.sz.Main * 45 / 100
		counts := composeCounts(total)
		fmt.Fprintf(w, "`compose --by meta.source` takes %s records of `data/prompts-sources.jsonl` (the corpus's\n"+
			"prompts, `extract --keep source`): %d, %d and %d of three sources at shares 0.5, 0.3 and 0.2, each\n"+
			"group's records lowest keyed hash of the id first, in two passes (count, then select), written\n"+
			"byte for byte. The script users write instead reads the file once per source.\n\n",
			h.shownLines("data/prompts-sources.jsonl"), counts[0], counts[1], counts[2])
		h.table(w, "compose", tableOptions{})
		h.whyNot(w, "compose", "compose", "jq + shuf -n", "the script's jq passes parse every record once per source; compose reads the file twice and parses it once.")
	},
	targets: func(*harness) []string {
		return []string{"compose ≥ 200 MB/s := compose/compose:mbps >= 200",
			"compose ≥ 5× jq + shuf -n := compose/compose:mbps / compose/jq + shuf -n:mbps >= 5"}
	},
}
