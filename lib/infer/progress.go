package infer

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/fleet"
	"tokenmill/lib/forecast"
)

// The progress display: one line every --progress in a log, or a
// live block on a terminal with a line per endpoint, and the summary at
// the end.

type progress struct {
	r           *runner
	start       time.Time
	interactive bool
	est         forecast.Estimator[*job]
	inputLines  atomic.Int64 // lines in the input files, once counted (-1: unknown)
}

func newProgress(r *runner, interactive bool, est forecast.Estimator[*job]) *progress {
	p := &progress{r: r, start: r.clk.Now(), interactive: interactive, est: est}
	p.inputLines.Store(-1)
	return p
}

// total is the number of answers the run will end with, when known: exact
// once the input is read, estimated from the input's line count before.
func (p *progress) total() (int64, bool) {
	c := &p.r.c
	if p.r.readerDone.Load() {
		return c.answers.Load(), true
	}
	if n := p.inputLines.Load(); n >= 0 {
		return max(n*int64(p.r.cfg.Samples), c.answers.Load()), true
	}
	return 0, false
}

// The ranks of the run's fields: on a narrow terminal the answers done,
// the output rate and the ETA stay longest, the elapsed time next, then
// the counts, the ETA's range and the mean answer, and the in-flight
// detail goes first. An endpoint's row is shown only while the counts
// are.
const (
	rankRate = 1 + iota
	rankElapsed
	rankCounts
	rankDetail
	rankInFlight
)

// rows are the live display: the run's row and, on a terminal, one per
// endpoint.
func (p *progress) rows() []cli.Row {
	now := p.r.clk.Now()
	c := &p.r.c
	ok, failed, skipped := c.ok.Load(), c.failed.Load(), c.skipped.Load()
	done := ok + failed + skipped

	answers := "answers " + cli.Thousands(done)
	eta := []cli.Field{{Sep: " | ", Text: "ETA -", Rank: rankRate}}
	if total, known := p.total(); known && total > 0 {
		answers += fmt.Sprintf("/%s (%.1f%%)", cli.Thousands(total), 100*float64(done)/float64(total))
		if f, ok := p.est.Forecast(now, total-done); ok {
			eta = forecastFields(f)
		}
	}
	views := p.r.pool.View()
	inflight, slots := 0, 0
	for _, v := range views {
		inflight += v.Inflight
		// An endpoint out of service takes no more work, but what it still
		// has in flight holds slots: never more in flight than slots.
		if v.State == fleet.StateReady {
			slots += v.Slots
		} else {
			slots += v.Inflight
		}
	}
	retrying := c.backingOff.Load() + int64(p.r.ready.len())
	fields := []cli.Field{
		{Text: answers},
		{Sep: " | ", Text: fmt.Sprintf("ok %s failed %s retrying %s", cli.Thousands(ok), cli.Thousands(failed), cli.Thousands(retrying)), Rank: rankCounts},
		{Sep: " | ", Text: fmt.Sprintf("in flight %d/%d", inflight, slots), Rank: rankInFlight},
		{Sep: " | ", Text: cli.Thousands(int64(c.tokenRate.Rate(now, time.Minute))) + " tok/s", Rank: rankRate},
	}
	fields = append(fields, eta...)
	fields = append(fields, cli.Field{Sep: " | ", Text: cli.ShortDuration(now.Sub(p.start)), Rank: rankElapsed})
	out := []cli.Row{{Fields: fields}}
	if !p.interactive {
		return out
	}
	width := 0
	for _, v := range views {
		width = max(width, len(v.Name))
	}
	eps := p.r.pool.Endpoints()
	for i, v := range views {
		st := eps[i].Stats()
		row := cli.Row{Rank: rankCounts, Fields: []cli.Field{
			{Text: fmt.Sprintf("  %-*s  %-8s %4d/%-4d %8s tok/s", width, v.Name, v.State, v.Inflight, endpointSlots(v),
				cli.Thousands(int64(st.Rate.Rate(now, time.Minute))))},
			{Sep: "  ", Text: fmt.Sprintf("ok %s  failed %s", cli.Thousands(st.OK.Load()), cli.Thousands(st.Failures.Load())), Rank: 1},
		}}
		if q := v.Inflight - v.Running; q > 0 {
			row.Fields = append(row.Fields, cli.Field{Sep: "  ", Text: fmt.Sprintf("(%d queued on the server)", q), Rank: 2})
		}
		out = append(out, row)
	}
	return out
}

// endpointSlots is the in-flight cap shown for v: 0 until it was ready
// once, its own while out of service (it takes no more work, but those it
// has hold their slots).
func endpointSlots(v fleet.View) int {
	if v.State == fleet.StateStarting {
		return v.Inflight
	}
	return v.Slots
}

// summaryLines are printed on stderr when the run ends.
func summaryLines(name string, s Summary, outName string) []string {
	var lines []string
	read := fmt.Sprintf("read %s records: %s prompts, %s rejected, %s duplicates",
		cli.Thousands(s.Read), cli.Thousands(s.Prompts), cli.Thousands(s.Rejected), cli.Thousands(s.Duplicates))
	lines = append(lines, read)
	ans := fmt.Sprintf("answers %s", cli.Thousands(s.Answers))
	if s.Samples > 1 {
		ans += fmt.Sprintf(" (%d samples each)", s.Samples)
	}
	ans += fmt.Sprintf(": ok %s, failed %s, skipped %s (already in %s)", cli.Thousands(s.OK), cli.Thousands(s.Failed), cli.Thousands(s.Skipped), outName)
	if s.NotDone > 0 || s.NotDoneAtLeast {
		atLeast := ""
		if s.NotDoneAtLeast {
			atLeast = "at least "
		}
		ans += fmt.Sprintf(", not done %s%s (run again with --resume)", atLeast, cli.Thousands(s.NotDone))
	}
	ans += fmt.Sprintf("; %s retries", cli.Thousands(s.Retries))
	lines = append(lines, ans)
	rate := 0.0
	if s.Wall > 0 {
		rate = float64(s.CompletionTokens) / s.Wall.Seconds()
	}
	lines = append(lines, fmt.Sprintf("tokens: %s prompt, %s completion in %s (%s tok/s); finish stop %s, length %s, other %s",
		cli.Thousands(s.PromptTokens), cli.Thousands(s.CompletionTokens), cli.ShortDuration(s.Wall), cli.Thousands(int64(rate)),
		cli.Thousands(s.FinishStop), cli.Thousands(s.FinishLength), cli.Thousands(s.FinishOther)))
	var total int64
	for _, e := range s.Endpoints {
		total += e.OK
	}
	for _, e := range s.Endpoints {
		if e.NeverReady {
			lines = append(lines, fmt.Sprintf("  %s: never ready, no answers (last probe: %s)", e.Name, e.NotReady))
			continue
		}
		share := 0.0
		if total > 0 {
			share = 100 * float64(e.OK) / float64(total)
		}
		line := fmt.Sprintf("  %s: %5.1f%% of answers (%s ok, %s failed attempts, %s tokens, %d slots)",
			e.Name, share, cli.Thousands(e.OK), cli.Thousands(e.Failures), cli.Thousands(e.CompletionTokens), e.Slots)
		switch {
		case e.Ejections == 1:
			line += ", taken out of service once"
		case e.Ejections > 1:
			line += fmt.Sprintf(", taken out of service %d times", e.Ejections)
		}
		lines = append(lines, line)
	}
	for i := range lines {
		lines[i] = name + ": " + lines[i]
	}
	return lines
}

// forecastFields are the display's fields for a forecast:
// "ETA 19h02m (18h40m-19h25m), mean answer 1,003±28 tok".
func forecastFields(f forecast.ETA) []cli.Field {
	fields := []cli.Field{{Sep: " | ", Text: "ETA " + cli.ShortDuration(f.Left), Rank: rankRate}}
	if f.High > f.Low {
		fields = append(fields, cli.Field{Sep: " ", Text: "(" + cli.ShortDuration(f.Low) + "-" + cli.ShortDuration(f.High) + ")", Rank: rankDetail})
	}
	return append(fields, cli.Field{Sep: ", ", Rank: rankDetail,
		Text: fmt.Sprintf("mean answer %s±%s tok", cli.Thousands(int64(math.Round(f.MeanTokens))), cli.Thousands(int64(math.Round(f.MeanSE))))})
}
