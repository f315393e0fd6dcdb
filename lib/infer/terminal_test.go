package infer

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
)

// tmuxPane is the infer binary running in a tmux pane: a real terminal,
// resized as a user's window is, whose screen the test reads.
type tmuxPane struct {
	t    *testing.T
	sock string
}

func (p *tmuxPane) tmux(args ...string) string {
	p.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", p.sock, "-f", "/dev/null"}, args...)...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %q: %v\n%s", args, err, out)
	}
	return string(out)
}

// screen is what the pane shows now, a line per row.
func (p *tmuxPane) screen() []string {
	return strings.Split(strings.TrimRight(p.tmux("capture-pane", "-p", "-t", "run"), "\n"), "\n")
}

// waitScreen waits (bounded) until ok holds for the screen.
func (p *tmuxPane) waitScreen(what string, ok func([]string) bool) []string {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s := p.screen()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the screen never showed %s:\n%s", what, strings.Join(s, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *tmuxPane) resize(width int) {
	p.t.Helper()
	p.tmux("resize-window", "-t", "run", "-x", fmt.Sprint(width), "-y", "40")
}

// The live display on a real terminal (tmux), 200 columns wide, then
// resized to 80 and to 60 in the middle of the run: at every width the
// run's row keeps the answers done out of the total, the output rate and
// the ETA, no row is wider than the window, and the endpoints' rows are
// there at 200 and gone at 60. Ctrl-C says at once what it does; after the
// summary (and after resizing again) no row of the live block is left on
// the screen.
func TestLiveDisplayOnATerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("a run of several seconds on a terminal")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (apt-get install tmux): the live display is tested on a real terminal")
	}
	s := newSetup(t, llmsim.Config{TimeScale: 4, MaxRunning: 4}, 2, promptSet{n: 2000})
	p := &tmuxPane{t: t, sock: filepath.Join(t.TempDir(), "tmux.sock")}
	args := s.args("--max-tokens", "64", "--progress", "10s")
	cmd := fmt.Sprintf("%s %s; echo exited $?; sleep 600", testbin.Path("infer"), shellQuote(args))
	p.tmux("new-session", "-d", "-s", "run", "-x", "200", "-y", "40", "env TERM=xterm-256color "+cmd)
	t.Cleanup(func() { exec.Command("tmux", "-S", p.sock, "kill-server").Run() })

	live := func(width int, endpoints bool) func([]string) bool {
		return func(rows []string) bool {
			var main string
			eps := 0
			for _, r := range rows {
				if len([]rune(r)) >= width {
					return false
				}
				if strings.HasPrefix(r, "answers ") {
					main = r
				}
				if strings.HasPrefix(r, "  http://") && strings.Contains(r, "tok/s") {
					eps++
				}
			}
			return strings.Contains(main, "/2,000 (") && strings.Contains(main, " tok/s | ETA ") &&
				!strings.Contains(main, "ETA -") && (eps == 2) == endpoints
		}
	}
	p.waitScreen("the live display with an ETA at 200 columns and both endpoints' rows", live(200, true))
	p.resize(80)
	p.waitScreen("the live display fitted to 80 columns", live(80, false))
	p.resize(60)
	rows := p.waitScreen("the live display fitted to 60 columns", live(60, false))
	for _, r := range rows {
		if strings.HasPrefix(r, "answers ") && (strings.Contains(r, "in flight") || strings.Contains(r, "mean answer")) {
			t.Errorf("at 60 columns the detail should have gone first: %q", r)
		}
	}
	p.resize(200)
	p.waitScreen("the live display back at 200 columns", live(200, true))

	p.tmux("send-keys", "-t", "run", "C-c")
	done := p.waitScreen("the run's end", func(rows []string) bool {
		return strings.Contains(strings.Join(rows, "\n"), "exited 130")
	})
	text := strings.Join(done, "\n")
	if !strings.Contains(text, "stopping: ") || !strings.Contains(text, "Ctrl-C again to stop now; --resume continues") {
		t.Errorf("Ctrl-C did not say what happens:\n%s", text)
	}
	stale := func(rows []string) string {
		for _, r := range rows {
			if strings.HasPrefix(r, "answers ") || strings.HasPrefix(r, "  http://") {
				return r
			}
		}
		return ""
	}
	if r := stale(done); r != "" {
		t.Errorf("a row of the live block is left on the screen after the summary: %q\n%s", r, text)
	}
	for _, w := range []int{80, 200} {
		p.resize(w)
		time.Sleep(100 * time.Millisecond) // the resize is tmux's own: nothing is drawn after the summary
		if r := stale(p.screen()); r != "" {
			t.Errorf("after resizing to %d, a stale row: %q\n%s", w, r, strings.Join(p.screen(), "\n"))
		}
	}
}

// shellQuote quotes args for sh.
func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
