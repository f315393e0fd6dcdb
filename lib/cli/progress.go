package cli

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Progress reports a long run's state on stderr. On a terminal it redraws
// a live block of lines in place; otherwise it writes the status as plain
// lines every interval, which is what a log file wants.
type Progress struct {
	env      *Env
	status   func() []string
	interval time.Duration
	mu       sync.Mutex
	drawn    int // rows of the live block on screen
	stop     chan struct{}
	done     chan struct{}
}

// StartProgress begins reporting status() every interval (plain lines) or
// about four times a second (terminal). Stop it before printing the final
// summary. An interval of zero disables the plain-line reports.
func StartProgress(ctx context.Context, env *Env, interval time.Duration, status func() []string) *Progress {
	p := &Progress{env: env, status: status, interval: interval, stop: make(chan struct{}), done: make(chan struct{})}
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
		for {
			select {
			case <-t.C:
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
// place. Each row of the block is cut to the terminal's width, asked
// again every time so that a resized window is redrawn to its new size,
// and cleared whole (ESC[2K) before it is written, so a shorter row
// leaves nothing of the longer one it replaces; rows a shorter block no
// longer needs are erased below it (ESC[J).
func (p *Progress) draw() {
	lines := p.status()
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	if !p.env.Interactive {
		for _, l := range lines {
			fmt.Fprintf(&b, "%s: %s\n", p.env.Name, l)
		}
		fmt.Fprint(p.env.Stderr, b.String())
		return
	}
	width := p.env.width()
	p.upLocked(&b)
	for _, l := range lines {
		b.WriteString("\x1b[2K")
		b.WriteString(fit(l, width))
		b.WriteByte('\n')
	}
	b.WriteString("\x1b[J")
	p.drawn = len(lines)
	fmt.Fprint(p.env.Stderr, b.String())
}

// upLocked moves the cursor to the first column of the live block's top
// row.
func (p *Progress) upLocked(b *strings.Builder) {
	if p.drawn > 0 {
		fmt.Fprintf(b, "\x1b[%dF", p.drawn)
		p.drawn = 0
	}
}

// clearLocked moves the cursor to the top of the live block and erases it.
func (p *Progress) clearLocked(b *strings.Builder) {
	if p.drawn > 0 {
		p.upLocked(b)
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
	if p.env.Interactive && p.drawn > 0 {
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
