package cli

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"
)

// screen is a terminal just capable enough for the live block: it wraps
// at its width, and knows CR, LF, ESC[nF, ESC[2K, ESC[K and ESC[J.
type screen struct {
	width    int
	rows     [][]rune
	row, col int
	wrapped  map[int]bool // row r goes on in row r+1 (autowrap)
}

func (s *screen) line(r int) []rune {
	for len(s.rows) <= r {
		s.rows = append(s.rows, nil)
	}
	return s.rows[r]
}

func (s *screen) put(c rune) {
	if s.col == s.width {
		if s.wrapped == nil {
			s.wrapped = map[int]bool{}
		}
		s.wrapped[s.row] = true
		s.row, s.col = s.row+1, 0 // autowrap
	}
	l := s.line(s.row)
	for len(l) <= s.col {
		l = append(l, ' ')
	}
	l[s.col] = c
	s.rows[s.row] = l
	s.col++
}

func (s *screen) write(t *testing.T, out string) {
	t.Helper()
	for i := 0; i < len(out); {
		if out[i] == '\x1b' {
			j := i + 2
			for j < len(out) && (out[j] >= '0' && out[j] <= '9') {
				j++
			}
			n, _ := strconv.Atoi(out[i+2 : j])
			switch out[j] {
			case 'F':
				s.row, s.col = max(s.row-n, 0), 0
			case 'K':
				if n == 2 {
					s.line(s.row)
					s.rows[s.row] = nil
					delete(s.wrapped, s.row)
				} else if l := s.line(s.row); len(l) > s.col {
					s.rows[s.row] = l[:s.col]
				}
			case 'J':
				s.line(s.row)
				s.rows[s.row] = s.rows[s.row][:min(len(s.rows[s.row]), s.col)]
				s.rows = s.rows[:s.row+1]
				for r := range s.wrapped {
					if r >= s.row {
						delete(s.wrapped, r)
					}
				}
			default:
				t.Fatalf("unexpected escape %q", out[i:j+1])
			}
			i = j + 1
			continue
		}
		c, size := utf8.DecodeRuneInString(out[i:])
		i += size
		if c == '\n' { // the tty's onlcr: CR LF
			s.row, s.col = s.row+1, 0
			s.line(s.row)
			continue
		}
		s.put(c)
	}
}

// reflow resizes the screen as most terminals do (tmux, VTE, iTerm2,
// kitty): each line, as long as it was written, is wrapped again at the
// new width, and the cursor stays where it was in its line.
func (s *screen) reflow(width int) {
	var lines [][]rune
	curLine, curOff := -1, 0
	for r := 0; r < len(s.rows); r++ {
		start := r
		var l []rune
		for ; ; r++ {
			if r == s.row {
				curLine, curOff = len(lines), len(l)+s.col
			}
			l = append(l, s.rows[r]...)
			if !s.wrapped[r] || r+1 >= len(s.rows) {
				break
			}
		}
		_ = start
		lines = append(lines, l)
	}
	if curLine < 0 {
		curLine, curOff = len(lines), 0
		lines = append(lines, nil)
	}
	s.width, s.rows, s.wrapped = width, nil, map[int]bool{}
	for i, l := range lines {
		first := len(s.rows)
		for len(l) > width {
			s.wrapped[len(s.rows)] = true
			s.rows = append(s.rows, l[:width])
			l = l[width:]
		}
		s.rows = append(s.rows, l)
		if i == curLine {
			s.row, s.col = first+min(curOff/width, len(s.rows)-1-first), curOff%width
		}
	}
}

// resize narrows the screen as xterm does: rows are cut, not reflowed.
func (s *screen) resize(width int) {
	s.wrapped = nil
	s.width = width
	for i, l := range s.rows {
		if len(l) > width {
			s.rows[i] = l[:width]
		}
	}
	s.col = min(s.col, width)
}

func (s *screen) text() []string {
	var out []string
	for _, l := range s.rows {
		out = append(out, strings.TrimRight(string(l), " "))
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

func TestProgressFitsTheTerminal(t *testing.T) {
	var width atomic.Int64
	width.Store(80)
	var stderr bytes.Buffer
	env := &Env{Name: "tool", Stderr: &stderr, Interactive: true, Width: func() int { return int(width.Load()) }}
	long := strings.Repeat("x", 50) + " ± " + strings.Repeat("y", 100)
	status := []string{"answers 10/100 | " + long, "  http://127.0.0.1:30000  ready " + long, "  http://127.0.0.1:30001  ready"}
	p := &Progress{env: env, rows: textRows(func() []string { return status })}
	scr := &screen{width: 80}
	draw := func() {
		t.Helper()
		stderr.Reset()
		p.draw()
		scr.write(t, stderr.String())
	}
	want := func(lines ...string) {
		t.Helper()
		if got := scr.text(); fmt.Sprint(got) != fmt.Sprint(lines) {
			t.Fatalf("screen:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(lines, "\n"))
		}
	}
	cut := func(s string, n int) string { return string([]rune(s)[:min(n, utf8.RuneCountInString(s))]) }

	scr.write(t, "tool: a line logged before\n")
	draw()
	want("tool: a line logged before", cut(status[0], 79), cut(status[1], 79), status[2])
	for _, l := range strings.Split(strings.TrimSuffix(stderr.String(), "\n\x1b[J"), "\n") {
		// Every row is erased whole before it is written.
		if !strings.Contains(l, "\x1b[2K") {
			t.Errorf("row %q is not cleared with ESC[2K", l)
		}
	}
	// Redrawn in place, again and again: nothing scrolls.
	draw()
	draw()
	want("tool: a line logged before", cut(status[0], 79), cut(status[1], 79), status[2])

	// The window narrows and the block shrinks to two rows: the next
	// redraw fits the new width and leaves nothing of the old block, on
	// a terminal that rewraps its lines (each row of the block now takes
	// two) as on one that cuts them (xterm), where the redraw erases a
	// line above the block too, never leaving a stale row.
	xterm := *scr
	xterm.rows = append([][]rune(nil), scr.rows...)
	xterm.resize(40)
	width.Store(40)
	scr.reflow(40)
	if len(scr.text()) != 1+2+2+1 {
		t.Fatalf("the emulator did not rewrap the block:\n%s", strings.Join(scr.text(), "\n"))
	}
	status = []string{"answers 20/100 | ok 20", "  http://127.0.0.1:30000  ready " + long}
	stderr.Reset()
	p.draw()
	block := stderr.String()
	scr.write(t, block)
	want("tool: a line logged before", status[0], cut(status[1], 39))
	xterm.write(t, block)
	if got := xterm.text(); fmt.Sprint(got) != fmt.Sprint([]string{status[0], cut(status[1], 39)}) {
		t.Fatalf("xterm's screen:\n%s", strings.Join(got, "\n"))
	}

	// A line logged in between goes above the block.
	stderr.Reset()
	p.Logf("endpoint %d is back", 2)
	scr.write(t, stderr.String())
	draw()
	want("tool: a line logged before", "tool: endpoint 2 is back", status[0], cut(status[1], 39))

	// Stop erases the block.
	stderr.Reset()
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	close(p.done)
	p.Stop()
	scr.write(t, stderr.String())
	want("tool: a line logged before", "tool: endpoint 2 is back")

	// Width unknown: rows are written whole.
	width.Store(0)
	draw()
	if !strings.Contains(stderr.String(), status[1]) {
		t.Errorf("with no width known, a row was cut: %q", stderr.String())
	}
}

func TestFit(t *testing.T) {
	for _, tt := range []struct {
		line  string
		width int
		want  string
	}{
		{"abcdef", 0, "abcdef"}, {"abcdef", 7, "abcdef"}, {"abcdef", 6, "abcde"}, {"abcdef", 3, "ab"},
		{"1,003±28 tok", 7, "1,003±"}, {"±±±", 3, "±±"}, {"abc", 1, ""},
	} {
		if got := fit(tt.line, tt.width); got != tt.want {
			t.Errorf("fit(%q, %d) = %q, want %q", tt.line, tt.width, got, tt.want)
		}
	}
}

// Not on a terminal, progress is plain lines, never cut.
func TestProgressPlainLines(t *testing.T) {
	var stderr bytes.Buffer
	long := strings.Repeat("z", 300)
	env := &Env{Name: "tool", Stderr: &stderr, Width: func() int { return 40 }}
	p := &Progress{env: env, rows: textRows(func() []string { return []string{long} })}
	p.draw()
	if got := stderr.String(); got != "tool: "+long+"\n" {
		t.Errorf("plain line %q", got)
	}
}

func textRows(status func() []string) func() []Row {
	return func() []Row {
		var rows []Row
		for _, l := range status() {
			rows = append(rows, TextRow(l))
		}
		return rows
	}
}

// A row too wide loses its fields of the highest rank first, keeping the
// order of the rest; the rows after the first are left out once the first
// has to drop a field of their rank or lower.
func TestRowsRanked(t *testing.T) {
	main := Row{Fields: []Field{
		{Text: "answers 956/1,189 (80.4%)"},
		{Sep: " | ", Text: "ok 950 failed 6 retrying 0", Rank: 3},
		{Sep: " | ", Text: "in flight 350/350", Rank: 5},
		{Sep: " | ", Text: "13,000 tok/s", Rank: 1},
		{Sep: " | ", Text: "ETA 1m02s", Rank: 1},
		{Sep: " ", Text: "(58s-1m10s)", Rank: 4},
		{Sep: ", ", Text: "mean answer 1,003±28 tok", Rank: 4},
		{Sep: " | ", Text: "2m05s", Rank: 2},
	}}
	endpoint := Row{Rank: 3, Fields: []Field{{Text: "  http://127.0.0.1:30000  ready  48/50  1,180 tok/s"}, {Sep: "  ", Text: "ok 120  failed 0", Rank: 1}}}
	for _, tt := range []struct {
		width int
		want  []string
	}{
		{60, []string{"answers 956/1,189 (80.4%) | 13,000 tok/s | ETA 1m02s | 2m05s"[:52]}},
		{80, []string{"answers 956/1,189 (80.4%) | 13,000 tok/s | ETA 1m02s | 2m05s"}},
		{120, []string{"answers 956/1,189 (80.4%) | ok 950 failed 6 retrying 0 | 13,000 tok/s | ETA 1m02s | 2m05s",
			"  http://127.0.0.1:30000  ready  48/50  1,180 tok/s  ok 120  failed 0"}},
		{200, []string{"answers 956/1,189 (80.4%) | ok 950 failed 6 retrying 0 | in flight 350/350 | 13,000 tok/s | ETA 1m02s (58s-1m10s), mean answer 1,003±28 tok | 2m05s",
			"  http://127.0.0.1:30000  ready  48/50  1,180 tok/s  ok 120  failed 0"}},
	} {
		var stderr bytes.Buffer
		env := &Env{Name: "infer", Stderr: &stderr, Interactive: true, Width: func() int { return tt.width }}
		p := &Progress{env: env, rows: func() []Row { return []Row{main, endpoint} }}
		p.draw()
		scr := &screen{width: tt.width}
		scr.write(t, stderr.String())
		if got := scr.text(); fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("at %d columns:\n%s\nwant:\n%s", tt.width, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
		}
	}
	if got, _ := main.Render(0); !strings.Contains(got, "| in flight 350/350 |") || !strings.HasSuffix(got, "mean answer 1,003±28 tok | 2m05s") {
		t.Errorf("a plain line lost a field: %q", got)
	}
}
