package infer

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The progress display: one line every --progress-interval in a log, or a
// live block on a terminal with a line per endpoint, and the summary at
// the end.

type progress struct {
	r           *runner
	start       time.Time
	interactive bool
	est         Estimator
	inputLines  atomic.Int64 // lines in the input files, once counted (-1: unknown)
}

func newProgress(r *runner, interactive bool, est Estimator) *progress {
	p := &progress{r: r, start: time.Now(), interactive: interactive, est: est}
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

func (p *progress) lines() []string {
	now := time.Now()
	c := &p.r.c
	ok, failed, skipped := c.ok.Load(), c.failed.Load(), c.skipped.Load()
	done := ok + failed + skipped

	var b strings.Builder
	b.WriteString("answers ")
	b.WriteString(thousands(done))
	eta := "ETA -"
	if total, known := p.total(); known && total > 0 {
		fmt.Fprintf(&b, "/%s (%.1f%%)", thousands(total), 100*float64(done)/float64(total))
		if f, ok := p.est.Forecast(now, total-done); ok {
			eta = formatForecast(f)
		}
	}
	views := p.r.pool.view()
	inflight, slots := 0, 0
	for _, v := range views {
		inflight += v.inflight
		if v.state == stateReady {
			slots += v.slots
		}
	}
	retrying := c.backingOff.Load() + int64(p.r.ready.len())
	fmt.Fprintf(&b, " | ok %s failed %s retrying %s", thousands(ok), thousands(failed), thousands(retrying))
	fmt.Fprintf(&b, " | in flight %d/%d | %s tok/s | %s | %s", inflight, slots,
		thousands(int64(c.tokenRate.rate(now, time.Minute))), eta, shortDuration(now.Sub(p.start)))
	out := []string{b.String()}
	if !p.interactive {
		return out
	}
	width := 0
	for _, v := range views {
		width = max(width, len(v.name))
	}
	for i, v := range views {
		st := &p.r.pool.eps[i].stats
		out = append(out, fmt.Sprintf("  %-*s  %-8s %4d/%-4d %8s tok/s  ok %s  failed %s",
			width, v.name, v.state, v.inflight, v.slots, thousands(int64(st.rate.rate(now, time.Minute))),
			thousands(st.ok.Load()), thousands(st.failures.Load())))
	}
	return out
}

// summaryLines are printed on stderr when the run ends.
func summaryLines(name string, s Summary, outName string) []string {
	var lines []string
	read := fmt.Sprintf("read %s records: %s prompts, %s rejected, %s duplicates",
		thousands(s.Read), thousands(s.Prompts), thousands(s.Rejected), thousands(s.Duplicates))
	lines = append(lines, read)
	ans := fmt.Sprintf("answers %s", thousands(s.Answers))
	if s.Samples > 1 {
		ans += fmt.Sprintf(" (%d samples each)", s.Samples)
	}
	ans += fmt.Sprintf(": ok %s, failed %s, skipped %s (already in %s)", thousands(s.OK), thousands(s.Failed), thousands(s.Skipped), outName)
	if s.NotDone > 0 {
		ans += fmt.Sprintf(", not done %s (run again with --resume)", thousands(s.NotDone))
	}
	ans += fmt.Sprintf("; %s retries", thousands(s.Retries))
	lines = append(lines, ans)
	rate := 0.0
	if s.Wall > 0 {
		rate = float64(s.CompletionTokens) / s.Wall.Seconds()
	}
	lines = append(lines, fmt.Sprintf("tokens: %s prompt, %s completion in %s (%s tok/s); finish stop %s, length %s, other %s",
		thousands(s.PromptTokens), thousands(s.CompletionTokens), shortDuration(s.Wall), thousands(int64(rate)),
		thousands(s.FinishStop), thousands(s.FinishLength), thousands(s.FinishOther)))
	var total int64
	for _, e := range s.Endpoints {
		total += e.OK
	}
	for _, e := range s.Endpoints {
		share := 0.0
		if total > 0 {
			share = 100 * float64(e.OK) / float64(total)
		}
		line := fmt.Sprintf("  %s: %5.1f%% of answers (%s ok, %s failed attempts, %s tokens, %d slots)",
			e.Name, share, thousands(e.OK), thousands(e.Failures), thousands(e.CompletionTokens), e.Slots)
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

// countInputLines counts the lines of plain JSONL input files, cheaply,
// for the progress total; -1 when any input is stdin, compressed, Parquet
// or a JSON array (whose records are not lines).
func countInputLines(names []string) int64 {
	if len(names) == 0 {
		return -1
	}
	var total int64
	buf := make([]byte, 1<<20)
	for _, name := range names {
		if name == "-" {
			return -1
		}
		n, ok := countLines(name, buf)
		if !ok {
			return -1
		}
		total += n
	}
	return total
}

func countLines(name string, buf []byte) (int64, bool) {
	f, err := os.Open(name)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var n int64
	first, last := true, byte('\n')
	for {
		k, err := f.Read(buf)
		if k > 0 {
			if first {
				first = false
				head := bytes.TrimLeft(buf[:k], " \t\r\n\xef\xbb\xbf")
				if len(head) > 0 && head[0] != '{' {
					return 0, false // compressed, Parquet, an array, or not JSONL
				}
			}
			n += int64(bytes.Count(buf[:k], []byte{'\n'}))
			last = buf[k-1]
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, false
		}
	}
	if last != '\n' {
		n++
	}
	return n, true
}

// thousands writes n with thousands separators: 654,676.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// shortDuration writes d as 19h02m, 4m05s or 12.3s.
func shortDuration(d time.Duration) string {
	switch {
	case d >= time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	case d >= time.Minute:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}
