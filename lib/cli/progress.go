package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Progress reports a long run's state on stderr. On a terminal it redraws
// a live block of rows in place, fitted to the terminal's width and
// height, and at once when the window is resized; otherwise it writes the
// status as plain lines every interval, which is what a log file wants.
type Progress struct {
	env      *Env
	rows     func() []Row
	interval time.Duration
	mu       sync.Mutex
	drawn    []int // the length in columns of each row of the live block on screen
	stop     chan struct{}
	done     chan struct{}
}

// Field is one part of a progress row. A row too wide for the terminal
// loses its fields of the highest Rank first (0 is kept longest); the
// fields that stay keep their order.
type Field struct {
	Sep  string // put before it when a field precedes it: " | ", ", ", " "
	Text string
	Rank int
}

// Row is one row of the live block. The first row is the run's own; a
// later row (an endpoint's, say) is shown only while the first keeps
// every field up to the row's Rank: on a narrow terminal the detail rows
// go before the first row loses anything.
type Row struct {
	Fields []Field
	Rank   int
}

// TextRow is a row of one field.
func TextRow(text string) Row { return Row{Fields: []Field{{Text: text}}} }

// Render is the row fitted to width columns (0: whole), and the highest
// rank of the fields it kept. Only a first field that does not fit alone
// is cut.
func (r Row) Render(width int) (string, int) {
	top := 0
	for _, f := range r.Fields {
		top = max(top, f.Rank)
	}
	for cutoff := top; ; cutoff-- {
		var b strings.Builder
		for _, f := range r.Fields {
			if f.Rank > cutoff {
				continue
			}
			if b.Len() > 0 {
				b.WriteString(f.Sep)
			}
			b.WriteString(f.Text)
		}
		line := b.String()
		if width <= 0 || utf8.RuneCountInString(line) < width || cutoff <= 0 {
			return fit(line, width), cutoff
		}
	}
}

// StartProgress begins reporting status() every interval (plain lines) or
// about four times a second (terminal), each line a row of its own. Stop
// it before printing the final summary. An interval of zero disables the
// plain-line reports.
func StartProgress(ctx context.Context, env *Env, interval time.Duration, status func() []string) *Progress {
	return StartProgressRows(ctx, env, interval, func() []Row {
		lines := status()
		rows := make([]Row, len(lines))
		for i, l := range lines {
			rows[i] = TextRow(l)
		}
		return rows
	})
}

// StartProgressRows is StartProgress with ranked rows, for a display
// that has more to show than a narrow terminal holds.
func StartProgressRows(ctx context.Context, env *Env, interval time.Duration, rows func() []Row) *Progress {
	p := &Progress{env: env, rows: rows, interval: interval, stop: make(chan struct{}), done: make(chan struct{})}
	tick := interval
	if env.Interactive {
		tick = 250 * time.Millisecond
	}
	if tick <= 0 {
		close(p.done)
		return p
	}
	go func() {
		defer close(p.done)
		t := time.NewTicker(tick)
		defer t.Stop()
		var resized <-chan os.Signal
		if env.Interactive {
			ch, stop := notifyResize()
			defer stop()
			resized = ch
		}
		for {
			select {
			case <-t.C:
				p.draw()
			case <-resized:
				p.draw()
			case <-ctx.Done():
				return
			case <-p.stop:
				return
			}
		}
	}()
	return p
}

// draw writes the status once: plain lines, or the live block redrawn in
// place. The terminal's size is asked every time, so that a resized
// window is redrawn to its new size. Each row is fitted to the width
// (less its last column, see fit) and cleared whole (ESC[2K) before it is
// written, so a shorter row leaves nothing of the longer one it replaces;
// rows a shorter block no longer needs are erased below it (ESC[J). Rows
// past the terminal's height are left out: a block taller than the screen
// could not be reached again to redraw it.
func (p *Progress) draw() {
	rows := p.rows()
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	if !p.env.Interactive {
		for _, r := range rows {
			line, _ := r.Render(0)
			fmt.Fprintf(&b, "%s: %s\n", p.env.Name, line)
		}
		fmt.Fprint(p.env.Stderr, b.String())
		return
	}
	width, height := p.env.width(), p.env.height()
	p.upLocked(&b, width)
	kept := 0
	for i, r := range rows {
		if height > 0 && len(p.drawn) >= height-1 {
			break
		}
		line, cutoff := r.Render(width)
		if i == 0 {
			kept = cutoff
		} else if r.Rank > kept {
			continue
		}
		b.WriteString("\x1b[2K")
		b.WriteString(line)
		b.WriteByte('\n')
		p.drawn = append(p.drawn, utf8.RuneCountInString(line))
	}
	b.WriteString("\x1b[J")
	fmt.Fprint(p.env.Stderr, b.String())
}

// upLocked moves the cursor to the first column of the live block's top
// row. The rows were written at most one column short of the width they
// were drawn at; a terminal that has since become narrower shows each on
// as many rows as it now takes (terminals rewrap on a resize), so that
// many are gone up.
func (p *Progress) upLocked(b *strings.Builder, width int) {
	n := 0
	for _, cols := range p.drawn {
		n += screenRows(cols, width)
	}
	if n > 0 {
		fmt.Fprintf(b, "\x1b[%dF", n)
	}
	p.drawn = p.drawn[:0]
}

// screenRows is the rows a line of cols columns takes on a terminal width
// columns wide.
func screenRows(cols, width int) int {
	if width <= 0 || cols <= width {
		return 1
	}
	return (cols + width - 1) / width
}

// clearLocked moves the cursor to the top of the live block and erases it.
func (p *Progress) clearLocked(b *strings.Builder) {
	if len(p.drawn) > 0 {
		p.upLocked(b, p.env.width())
		b.WriteString("\x1b[J")
	}
}

// Stop ends the reports and erases the live block, so the summary that
// follows stands alone.
func (p *Progress) Stop() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.env.Interactive && len(p.drawn) > 0 {
		var b strings.Builder
		p.clearLocked(&b)
		fmt.Fprint(p.env.Stderr, b.String())
	}
}

// Logf prints a line above the live block without tearing it.
func (p *Progress) Logf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	p.clearLocked(&b)
	b.WriteString(p.env.Line(format, args...))
	fmt.Fprint(p.env.Stderr, b.String())
}
