package cli

import (
	"os"

	"golang.org/x/term"
)

// stderrWidth is the width of the terminal stderr is on, 0 when it is not
// a terminal or does not say.
func stderrWidth() int {
	w, _, err := term.GetSize(int(os.Stderr.Fd()))
	if err != nil || w < 0 {
		return 0
	}
	return w
}

// stderrHeight is the height of the terminal stderr is on, 0 when it is
// not a terminal or does not say.
func stderrHeight() int {
	_, h, err := term.GetSize(int(os.Stderr.Fd()))
	if err != nil || h < 0 {
		return 0
	}
	return h
}

// height is the terminal's height now, 0 when unknown.
func (e *Env) height() int {
	if e.Height == nil {
		return 0
	}
	return e.Height()
}

// width is the terminal's width now, 0 when unknown.
func (e *Env) width() int {
	if e.Width == nil {
		return 0
	}
	return e.Width()
}

// fit cuts line to what a terminal width columns wide shows on one row,
// leaving the last column free: some terminals wrap a line that fills it,
// and a wrapped line would throw off the count of rows a redraw moves up.
// width 0 (unknown) leaves the line whole.
func fit(line string, width int) string {
	if width <= 0 {
		return line
	}
	limit, n := width-1, 0
	for i := range line {
		if n == limit {
			return line[:i]
		}
		n++
	}
	return line
}
