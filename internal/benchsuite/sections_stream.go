package benchsuite

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// lineCounts counts the lines of each data file, for the rows' records.
func (h *harness) lineCounts(rels ...string) (counts []int64, err error) {
	for _, r := range rels {
		n, e := countLines(h.path(r))
		counts, err = append(counts, n), cmp.Or(err, e)
	}
	return counts, err
}

// peerSpec is a measurement, or why it cannot be taken here.
type peerSpec struct {
	Spec
	why string
}

func ours(s Spec) peerSpec { s.Ours = true; return peerSpec{Spec: s} }

// peer is a peer's measurement, not available without a command it needs.
func peer(s Spec, needs ...string) peerSpec {
	for _, n := range needs {
		if !have(n) {
			return peerSpec{s, missing(n)}
		}
	}
	return peerSpec{Spec: s}
}

func shellPeer(s Spec, needs ...string) peerSpec { s.Shell = true; return peer(s, needs...) }

// with is a spec of the input in, named, with a note and its command.
func with(in Spec, name, note string, argv ...string) Spec {
	in.Name, in.Note, in.Argv = name, note, argv
	return in
}

// specsSection is a section that measures the specs given, in order.
func specsSection(name, heading string, needs []string, specs func(*harness) []peerSpec) *section {
	measure := func(ctx context.Context, h *harness) error { return h.measureAll(ctx, specs(h)) }
	return &section{name: name, heading: heading, needs: needs, measure: measure}
}

// measureAll measures specs in order, or keeps a row saying why not.
func (h *harness) measureAll(ctx context.Context, specs []peerSpec) error {
	for _, p := range specs {
		if p.why != "" {
			h.unavailable(p.Group, p.Name, p.why)
			continue
		}
		r, err := h.measureRow(ctx, p.Spec)
		if err != nil {
			return err
		}
		h.add(r)
	}
	return nil
}

// whyNot says why tokenmill's row ours is slower than peer, when it was.
func (h *harness) whyNot(w io.Writer, group, ours, peer, why string) {
	x, ok1 := speed(h.find(group, ours)) // no figure for a row not there
	y, ok2 := speed(h.find(group, peer))
	if ok1 && ok2 && x < y {
		fmt.Fprintf(w, "\n%s is slower than %s here (%.2f×): %s\n", ours, peer, x/y, why)
	}
}

var dedupSection = specsSection("dedup", "## dedup", []string{"prompts", "prompts-slurp", "prompts-exact"}, func(h *harness) []peerSpec {
	const p, ps, pe = "data/prompts.jsonl", "data/prompts-slurp.jsonl", "data/prompts-exact.jsonl"
	in := Spec{Group: "dedup", BytesOf: []string{p}}
	slurp := Spec{Group: "dedup", BytesOf: []string{ps}}
	exact := Spec{Group: "dedup-exact", BytesOf: []string{pe}}
	gawk := peer(with(in, "gawk", "whole lines, as awk", "gawk", "!seen[$0]++", p), "gawk")
	if gawk.why != "" {
		awk, _ := exec.LookPath("awk")
		awk, _ = filepath.EvalSymlinks(awk)
		gawk.why += "; awk here is " + cmp.Or(awk, "none")
	}
	return []peerSpec{
		ours(with(in, "dedup", "", "dedup", p)),
		peer(with(in, "dedup --workers 1", "one worker: reads, parses and decides on one core", "dedup", "--workers", "1", p)),
		ours(with(in, "dedup --exact", "", "dedup", "--exact", p)),
		peer(with(in, "awk", "compares whole lines, ids included, so it drops no repeated prompt", "awk", "!seen[$0]++", p)),
		gawk,
		shellPeer(with(in, "sort -u", "whole lines, as awk; written in byte order, not input order",
			"LC_ALL=C sort -u "+p), "sort"),
		shellPeer(with(in, "jq + sort", "keeps the first of each prompt, written in key order, not input order",
			`jq -r '"\(.messages|tojson)\t\(tojson)"' `+p+` | LC_ALL=C sort -s -t $'\t' -k1,1 -u | cut -f2-`), "jq", "sort", "cut"),
		ours(with(slurp, fmt.Sprintf("dedup, first %d", h.sz.Slurp), "", "dedup", ps)),
		peer(with(slurp, fmt.Sprintf("jq -s unique_by, first %d", h.sz.Slurp), "", "jq", "-c", "-s", "unique_by(.messages)[]", ps), "jq"),
		ours(with(exact, fmt.Sprintf("dedup --exact, %s", sizeLabel(h.sz.Exact)), "", "dedup", "--exact", pe)),
		shellPeer(with(exact, fmt.Sprintf("sort -u by prompt, %s", sizeLabel(h.sz.Exact)),
			"keyed on the bytes after the id (the prompt's JSON text), written in key order",
			`LC_ALL=C sort -s -u -t '"' -k6 `+pe), "sort"),
	}
})

var shardSection = specsSection("shard", "## shard: 8 parts", []string{"prompts"}, func(h *harness) []peerSpec {
	const p = "data/prompts.jsonl"
	in := Spec{Group: "shard", BytesOf: []string{p}, Mkdir: []string{"tmp/shards"}, Count: []string{"tmp/shards/*"}}
	return []peerSpec{
		ours(with(in, "shard", "", "shard", "-n", "8", "-o", "tmp/shards/part-{i}.jsonl", p)),
		ours(with(in, "shard --by round-robin", "", "shard", "-n", "8", "--by", "round-robin", "-o", "tmp/shards/part-{i}.jsonl", p)),
		peer(with(in, "split -n l/8", "8 runs of consecutive lines: a record's shard changes with the file", "split", "-n", "l/8", p, "tmp/shards/part-"), "split"),
		peer(with(in, "awk round-robin", "", "awk", `{ print > ("tmp/shards/part-" NR % 8) }`, p), "awk"),
		peer(with(in, "awk by id", "the 4th field between quotes (the id) mod 8: a text id counts as 0, and a quote in an earlier field moves it", "awk", "-F\"", `{ print > ("tmp/shards/part-" $4 % 8) }`, p), "awk"),
		peer(with(in, "shard --workers 1", "one worker", "shard", "--workers", "1", "-n", "8", "-o", "tmp/shards/part-{i}.jsonl", p)),
	}
})

// composeMix: three of the corpus's sources (30%, 15% and 10% of it) at
// shares 0.5, 0.3 and 0.2 of 45% of the records, which each has enough for.
var composeMix = []struct {
	source string
	share  float64
}{{"Subjective", 0.5}, {"flan", 0.3}, {"code_exercises", 0.2}}

// composeCounts are the records each source gives.
func composeCounts(h *harness) []int {
	out := make([]int, len(composeMix))
	for i, m := range composeMix {
		out[i] = int(m.share * float64(h.sz.Main*45/100))
	}
	return out
}

// compose's mix beside the script a user writes instead: a jq pass per
// source to pick its records, shuf -n (shuf | head) to draw its count.
var composeSection = specsSection("compose", "## compose: a mix of three sources", []string{"prompts-sources"}, func(h *harness) []peerSpec {
	const p, out = "data/prompts-sources.jsonl", "tmp/mix.jsonl"
	var shares, loop []string
	sum := 0
	for i, c := range composeCounts(h) {
		shares = append(shares, fmt.Sprintf("%s=%g", composeMix[i].source, composeMix[i].share))
		loop = append(loop, fmt.Sprintf("%s:%d", composeMix[i].source, c))
		sum += c
	}
	in := Spec{Group: "compose", BytesOf: []string{p}, Count: []string{out}, Clean: []string{out}}
	args := []string{"--by", "meta.source", "--share", strings.Join(shares, ","), "--total", fmt.Sprint(sum), "--progress", "0", "-o", out, p}
	return []peerSpec{
		ours(with(in, "compose", "", append([]string{"compose"}, args...)...)),
		peer(with(in, "compose --workers 1", "one worker", append([]string{"compose", "--workers", "1"}, args...)...)),
		shellPeer(with(in, "jq + shuf -n", "a jq pass per source, shuf -n drawing its count (shuf | head, without head's early exit failing the pipe); the draw is fixed by --random-source, not by the ids, so it changes with the file",
			`for s in `+strings.Join(loop, " ")+`; do jq -c --arg s "${s%:*}" 'select(.meta.source == $s)' `+p+
				` | shuf -n "${s##*:}" --random-source=<(yes); done > `+out), "jq", "shuf"),
	}
})

var mergeSection = specsSection("merge", "## merge: one record per prompt from a run and its rerun", []string{"gens", "gens-slurp"},
	func(h *harness) []peerSpec {
		g, r, gs, rs := "data/gens.jsonl", "data/rerun.jsonl", "data/gens-slurp.jsonl", "data/rerun-slurp.jsonl"
		in := Spec{Group: "merge", BytesOf: []string{g, r}}
		slurp := Spec{Group: "merge", BytesOf: []string{gs, rs}}
		return []peerSpec{
			ours(with(in, "merge", "", "merge", g, r)),
			ours(with(in, "merge --sort", "", "merge", "--sort", g, r)),
			peer(with(in, "merge --workers 1", "one worker", "merge", "--workers", "1", g, r)),
			ours(with(slurp, fmt.Sprintf("merge, first %d", h.sz.Slurp), "", "merge", gs, rs)),
			peer(with(slurp, fmt.Sprintf("jq -s group_by, first %d", h.sz.Slurp),
				"the last record of each id wins: right here, since the rerun comes last and holds only better answers",
				"jq", "-c", "-s", "group_by(.id) | map(last)[]", gs, rs), "jq"),
			shellPeer(with(in, "sort + awk join", "the last record of each id (by the 4th field between quotes), in id order; no ranking: an error read last would win",
				`LC_ALL=C sort -s -t '"' -k4,4 `+g+" "+r+` | awk -F'"' 'NR > 1 && $4 != id { print line } { id = $4; line = $0 } END { if (NR) print line }'`), "sort", "awk"),
		}
	})

var statsSection = specsSection("stats", "## stats", []string{"gens", "gens-slurp"}, func(h *harness) []peerSpec {
	const g, gs = "data/gens.jsonl", "data/gens-slurp.jsonl"
	in := Spec{Group: "stats", BytesOf: []string{g}, NoCount: true}
	slurp := Spec{Group: "stats", BytesOf: []string{gs}, NoCount: true}
	const jqPct = `{n: length, p50: .[length*0.5|floor], p90: .[length*0.9|floor], p99: .[length*0.99|floor], max: .[-1]}`
	const awkPct = `{ v[NR] = $1 } END { print "n", NR, "p50", v[int(NR*0.5)+1], "p90", v[int(NR*0.9)+1], "p99", v[int(NR*0.99)+1], "max", v[NR] }`
	return []peerSpec{
		ours(with(in, "stats", "", "stats", g)),
		ours(with(in, "stats --json", "", "stats", "--json", g)),
		peer(with(in, "stats --workers 1", "one worker", "stats", "--workers", "1", g)),
		ours(with(slurp, fmt.Sprintf("stats, first %d", h.sz.Slurp), "", "stats", gs)),
		shellPeer(with(in, "jq + sort + awk", "answer length percentiles alone; stats reports much more",
			"jq '.output.usage.completion_tokens // empty' "+g+" | LC_ALL=C sort -n | awk '"+awkPct+"'"), "jq", "sort", "awk"),
		peer(with(slurp, fmt.Sprintf("jq -s, first %d", h.sz.Slurp), "answer length percentiles alone",
			"jq", "-s", "[.[].output.usage.completion_tokens // empty] | sort | "+jqPct, gs), "jq"),
	}
})

var filterSection = specsSection("filter", "## filter: quality checks", []string{"filter-gens", "filter-gens-lang"}, func(h *harness) []peerSpec {
	const f, l = "data/filter-gens.jsonl", "data/filter-gens-lang.jsonl"
	in := Spec{Group: "filter", BytesOf: []string{f}}
	lang := Spec{Group: "filter-lang", BytesOf: []string{l}}
	version, _ := exec.Command("python3", "-c", "import sys; print(sys.version.split()[0])").Output()
	return []peerSpec{
		ours(with(in, "filter", "", "filter", "--progress", "0", f)),
		peer(with(in, "filter --workers 1", "one core", "filter", "--progress", "0", "--workers", "1", f)),
		peer(with(in, "python3 filter_gopher.py", "the same checks in Python "+cmp.Or(strings.TrimSpace(string(version)), "3")+", one process",
			"python3", h.repoFile("pipelines/bench/filter_gopher.py"), f), "python3"),
		ours(with(lang, "filter --checks default,lang", "language identification with whatlanggo", "filter", "--progress", "0", "--checks", "default,lang", l)),
		peer(with(lang, "filter (default checks)", "", "filter", "--progress", "0", l)),
	}
})

var growthSection = &section{
	name: "growth", heading: "## Cost as the input grows",
	needs: []string{"corpus-big", "prompts-big"},
	measure: func(ctx context.Context, h *harness) error {
		const out = "tmp/growth-gen.jsonl"
		var err error
		for _, n := range h.sz.Growth {
			label := sizeLabel(n)
			c := "data/corpus-" + label + ".jsonl"
			if err == nil {
				err = h.head("data/corpus-big.jsonl", c, n)
			}
			if err == nil {
				err = h.stagesAt(ctx, "growth", label, "data/", n, func(p string, stages []peerSpec) []peerSpec {
					return append(append([]peerSpec{peer(with(Spec{BytesOf: []string{c}}, "extract", "", "extract", c))}, stages...),
						peer(with(Spec{Records: int64(n), Clean: []string{out, "tmp/growth-gen.errors.jsonl"}, Count: []string{out},
							Alias: []string{"@URL@=$URL"}, Fresh: h.freshSim(1, h.path("logs/llmsim.log"), "--instant")}, // a fresh llmsim each run at @URL@
							"infer", "", "infer", "-e", "@URL@", "--concurrency", strconv.Itoa(concurrency), "--max-tokens", "16", "--progress-interval", "0", "-o", out, p)),
						peer(with(Spec{BytesOf: []string{p}}, "awk '!seen[$0]++'", "", "awk", "!seen[$0]++", p)))
				})
			}
			h.remove(c)
		}
		return err
	},
}

// remove removes files of the scratch directory, made for a measurement.
func (h *harness) remove(rels ...string) {
	for _, r := range rels {
		os.Remove(h.path(r))
	}
}
