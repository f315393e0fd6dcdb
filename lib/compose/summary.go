package compose

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// maxRows bounds the groups listed per level: a key with thousands of
// values (an id by mistake) is summed up, not listed.
const maxRows = 40

// tally is what the run did with the records, from the leaves.
type tally struct {
	selected, lines, notTaken, notInMix int64
}

func (r *run) tally() tally {
	var t tally
	for _, l := range r.leaves {
		if l.node.excluded {
			t.notInMix += l.avail
			continue
		}
		sel := l.k
		if l.base > 0 {
			sel = l.avail
		}
		t.selected += sel
		t.lines += l.base*l.avail + l.k
		t.notTaken += l.avail - sel
	}
	return t
}

// row is one line of the groups' table.
type row struct {
	cells []string
}

// summary writes the groups' table, the warnings and the summary line to
// stderr.
func (r *run) summary(rejects *jsonl.Rejects) {
	rows := []row{{[]string{"group", "share", "available", "target", "taken", "shortfall"}}}
	var warnings []string
	r.rows(r.root, 0, "", &rows, &warnings)
	widths := make([]int, len(rows[0].cells))
	for _, rw := range rows {
		for i, c := range rw.cells {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	for _, rw := range rows {
		var b strings.Builder
		for i, c := range rw.cells {
			pad := strings.Repeat(" ", widths[i]-len([]rune(c)))
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString("  " + pad + c)
			}
		}
		r.env.Logf("%s", strings.TrimRight(b.String(), " "))
	}
	for _, w := range warnings {
		r.env.Logf("%s", w)
	}
	t := r.tally()
	read := r.read.Load()
	head := fmt.Sprintf("read %d, selected %d, not selected %d, %s", read, t.selected, t.notTaken+t.notInMix, rejects.Summary())
	if r.cfg.dryRun {
		r.env.Logf("%s; wrote nothing (--dry-run; total %d, seed %d)", head, r.total, r.seed)
		return
	}
	tail := fmt.Sprintf("total %d, seed %d", r.total, r.seed)
	if rep := t.lines - t.selected; rep > 0 {
		tail = fmt.Sprintf("%d repeats; %s", rep, tail)
	}
	if t.lines < r.total {
		tail += fmt.Sprintf("; %d short of the total", r.total-t.lines)
	}
	r.env.Logf("%s; wrote %d records (%s)", head, r.written.Load(), tail)
}

// rows adds a level's groups to the table, nested levels under their
// group, and the warnings its plan gives.
func (r *run) rows(lv *levelRun, depth int, path string, rows *[]row, warnings *[]string) {
	var in, out []*node
	for _, n := range lv.nodes {
		if n.excluded {
			out = append(out, n)
		} else {
			in = append(in, n)
		}
	}
	// The groups the mix names keep its order; the others follow, most
	// records first.
	sortOthers := func(ns []*node) {
		slices.SortStableFunc(ns, func(a, b *node) int {
			if (a.spec != nil) != (b.spec != nil) {
				if a.spec != nil {
					return -1
				}
				return 1
			}
			if a.spec != nil {
				return 0
			}
			return cmp.Or(cmp.Compare(b.avail, a.avail), strings.Compare(a.name, b.name))
		})
	}
	sortOthers(in)
	sortOthers(out)
	indent := strings.Repeat("  ", depth)
	shown := in
	if len(shown) > maxRows {
		shown = shown[:maxRows]
	}
	for _, n := range shown {
		name := n.name
		if depth == 0 && lv.spec.key.kind == keyAll {
			name = "all"
		}
		*rows = append(*rows, row{[]string{indent + name, shareText(n.weight), cli.Thousands(n.avail), cli.Thousands(n.target),
			cli.Thousands(n.taken), cli.Thousands(max(0, n.target-n.taken))}})
		full := path + n.name
		switch {
		case n.taken < n.target:
			*warnings = append(*warnings, fmt.Sprintf("%s: %s records for a target of %s: %s short, filled from the other groups in proportion to their shares",
				full, cli.Thousands(n.supply), cli.Thousands(n.target), cli.Thousands(n.target-n.taken)))
		case n.child == nil && r.repeat && n.taken > n.supply:
			*warnings = append(*warnings, fmt.Sprintf("%s: %s records repeated to %s (--repeat)", full, cli.Thousands(n.supply), cli.Thousands(n.taken)))
		}
		if n.spec != nil && n.avail == 0 {
			*warnings = append(*warnings, fmt.Sprintf("%s: named in the mix, but no record is in it (%s %q)", full, lv.spec.key.name, n.name))
		}
		if n.child != nil {
			r.rows(n.child, depth+1, full+"/", rows, warnings)
		}
	}
	if rest := in[len(shown):]; len(rest) > 0 {
		var avail, target, taken int64
		for _, n := range rest {
			avail, target, taken = avail+n.avail, target+n.target, taken+n.taken
		}
		*rows = append(*rows, row{[]string{indent + fmt.Sprintf("(%d more groups)", len(rest)), "", cli.Thousands(avail), cli.Thousands(target), cli.Thousands(taken), cli.Thousands(max(0, target-taken))}})
	}
	if lv.slackTarget > 0 {
		*warnings = append(*warnings, fmt.Sprintf("%scaps hold every group: %s records of the target are left unplaced", levelName(path), cli.Thousands(lv.slackTarget)))
	}
	if lv.rescaled > 0 {
		*warnings = append(*warnings, fmt.Sprintf("%sthe named shares sum to %s and no other group has records: they are scaled up to sum to 1", levelName(path), trimFloat(lv.rescaled)))
	}
	if len(out) > 0 {
		var avail int64
		var eg []string
		for _, n := range out {
			avail += n.avail
			if len(eg) < 5 {
				eg = append(eg, fmt.Sprintf("%s %s", n.name, cli.Thousands(n.avail)))
			}
		}
		more := ""
		if len(out) > len(eg) {
			more = ", ..."
		}
		*warnings = append(*warnings, fmt.Sprintf("%snot in the mix: %s records in %d groups (%s%s)", levelName(path), cli.Thousands(avail), len(out), strings.Join(eg, ", "), more))
	}
}

// levelName prefixes a level's warnings with the group it splits.
func levelName(path string) string {
	if path == "" {
		return ""
	}
	return strings.TrimSuffix(path, "/") + ": "
}

// shareText writes a share as a percentage.
func shareText(w float64) string {
	if w > 0 && w < 0.001 {
		return "<0.1%"
	}
	return fmt.Sprintf("%.1f%%", 100*w)
}
