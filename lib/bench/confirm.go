package bench

import (
	"fmt"
	"math"
	"slices"

	"tokenmill/lib/cli"
)

// The ladder measures its levels one after the other on the same servers,
// and what a server ran before can change how fast it runs later: Ollama
// keeps every slot's last conversation in its one KV cache, and once all its
// slots have held one, each later request costs it two to three times what
// it cost the fresh server, one at a time as well as four. A level measured
// early in the ladder was then measured on a server faster than the one the
// run will find, which comes after the bench. So once the ladder is done the
// knee is measured again, on the servers as the ladder left them; if the
// two measurements disagree by more than driftMargin, every other level
// that answered is measured again too, and the knee and the forecast are
// taken from the second pass, all of it measured in the state the run
// starts in.

// driftMargin is how far a level measured again may be from its first
// measurement before the servers are taken to have changed: twice the
// margin of a window's halves, since two windows some minutes apart on a
// shared machine differ by more than the halves of one.
const driftMargin = 2 * kneeGain

// confirm measures the knee of levels again with measure (false: the
// bench was interrupted, and levels are kept as they are), and every other
// level that answered when that disagrees with the first, and then the
// new knee again until it agrees with its previous figure and stays the
// knee (at most settleTries times); it returns the levels, each with its
// latest measurement (FirstTokPerSec its first), what changed (drift, ""
// when nothing did) and, when the knee never settled, that the bench
// could not measure the servers settled (unsettled).
func confirm(levels []Level, measure func(n int) (Level, bool)) (out []Level, drift, unsettled string) {
	k, _ := knee(levels)
	if k < 0 || k == len(levels)-1 {
		return levels, "", "" // no level was measured after the knee
	}
	out = slices.Clone(levels)
	again := func(i int) bool {
		lv, ok := measure(levels[i].Concurrency)
		if !ok {
			return false
		}
		lv.FirstTokPerSec, lv.Remeasured = levels[i].TokPerSec, true
		out[i] = lv
		return true
	}
	if !again(k) {
		return levels, "", ""
	}
	first, second := levels[k].TokPerSec, out[k].TokPerSec
	if out[k].answered() && math.Abs(second-first) <= driftMargin*max(first, second) {
		return out, "", ""
	}
	for i := range out {
		if i != k && levels[i].answered() && !again(i) {
			return levels, "", ""
		}
	}
	drift = fmt.Sprintf("the servers changed during the ladder: %d per endpoint gave %s tok/s before the levels above it and %s after them (a server's speed can depend on what it ran before: Ollama's, once all its slots have held an answer); every level was measured again as the ladder left the servers, the state the run starts in, and the knee and the forecast are the second measurements'",
		levels[k].Concurrency, cli.Thousands(int64(first+0.5)), cli.Thousands(int64(second+0.5)))
	// Whether they settled: the second pass's knee once more, and again
	// while it disagrees with its previous figure or the knee moves to a
	// level last measured before it, up to settleTries times.
	var prev Level
	for try := 0; try < settleTries; try++ {
		k2, _ := knee(out)
		if k2 < 0 {
			return out, drift, ""
		}
		prev = out[k2]
		lv, ok := measure(prev.Concurrency)
		if !ok {
			return out, drift, ""
		}
		lv.FirstTokPerSec, lv.Remeasured, lv.PrevTokPerSec = levels[k2].TokPerSec, true, prev.TokPerSec
		out[k2] = lv
		settled := lv.answered() && math.Abs(lv.TokPerSec-prev.TokPerSec) <= driftMargin*max(lv.TokPerSec, prev.TokPerSec)
		if k3, _ := knee(out); settled && k3 == k2 {
			return out, drift, ""
		}
		prev = lv
	}
	return out, drift, fmt.Sprintf("could not measure the servers settled: measured %d more times after the second pass, the knee kept changing (last %d per endpoint: %s tok/s, after %s; %s in the ladder), so the servers were still changing, or the machine was; the forecast takes the latest figures and its range spans the knee's last two: measure again with a longer --duration, or just before the run",
		settleTries, prev.Concurrency, cli.Thousands(int64(prev.TokPerSec+0.5)), cli.Thousands(int64(prev.PrevTokPerSec+0.5)), cli.Thousands(int64(prev.FirstTokPerSec+0.5)))
}

// settleTries bounds the measurements of the knee after the second pass.
const settleTries = 3
