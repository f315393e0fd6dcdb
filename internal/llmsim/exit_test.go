package llmsim

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"tokenmill/lib/cli"
)

// simProcess is llmsim's command run as its binary would run, in this
// process, with a ready file to learn its URL from.
type simProcess struct {
	ready  string
	cancel context.CancelFunc
	done   chan int
	mu     sync.Mutex
	stderr strings.Builder
}

func (p *simProcess) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

func (p *simProcess) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

func runSim(t *testing.T, args ...string) *simProcess {
	t.Helper()
	p := &simProcess{ready: filepath.Join(t.TempDir(), "urls"), done: make(chan int, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	env := &cli.Env{Name: "llmsim", Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: p}
	args = append([]string{"--listen", "127.0.0.1:0", "--ready-file", p.ready}, args...)
	go func() { p.done <- cli.Run(ctx, env, Description, &Command{}, args) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Error("llmsim did not stop within 10s of its context ending")
		}
	})
	return p
}

// url waits for the ready file.
func (p *simProcess) url(t *testing.T) string {
	t.Helper()
	var base string
	waitFor(t, "the ready file", func() bool {
		b, err := os.ReadFile(p.ready)
		base = strings.TrimSpace(string(b))
		return err == nil && base != ""
	})
	return base
}

// exit waits for the command to end by itself and returns its exit code.
func (p *simProcess) exit(t *testing.T) int {
	t.Helper()
	select {
	case code := <-p.done:
		p.done <- code // for the cleanup
		return code
	case <-time.After(10 * time.Second):
		t.Fatalf("llmsim did not end by itself within 10s; stderr:\n%s", p.text())
		return 0
	}
}

// --exit-after N: N answers, then the process ends with status 1 on the
// next request, whose connection is dropped, as a server killed for its
// memory.
func TestExitAfter(t *testing.T) {
	p := runSim(t, "--instant", "--exit-after", "2")
	base := p.url(t)
	for i := range 2 {
		if status, _, err := postChat(t, base, chatBody("hi", 4, false)); err != nil || status != 200 {
			t.Fatalf("request %d: %d, %v", i+1, status, err)
		}
	}
	if _, _, err := postChat(t, base, chatBody("hi", 4, false)); err == nil {
		t.Error("the third request was answered")
	}
	if code := p.exit(t); code != cli.ExitFailure || !strings.Contains(p.text(), "exiting on generation request 3 (--exit-after 2)") {
		t.Errorf("exit %d, stderr:\n%s", code, p.text())
	}
	testClient.CloseIdleConnections()
}

// --exit-at: the process ends by itself after that long, with status 1.
func TestExitAt(t *testing.T) {
	p := runSim(t, "--instant", "--exit-at", "20ms")
	if code := p.exit(t); code != cli.ExitFailure || !strings.Contains(p.text(), "exiting 20ms after it started (--exit-at)") {
		t.Errorf("exit %d, stderr:\n%s", code, p.text())
	}
}

// --listen-delay: nothing listens (no ready file) until it has passed; a
// signal meanwhile ends the process as any interrupt does.
func TestListenDelay(t *testing.T) {
	slow := runSim(t, "--instant", "--listen-delay", "1h")
	time.Sleep(50 * time.Millisecond) // the claim is that nothing happens: give it a chance to
	if _, err := os.Stat(slow.ready); err == nil {
		t.Fatal("listening before --listen-delay passed")
	}
	slow.cancel()
	if code := slow.exit(t); code != cli.ExitOK {
		t.Errorf("cancelled while waiting to listen: exit %d, stderr:\n%s", code, slow.text())
	}
	quick := runSim(t, "--instant", "--listen-delay", "10ms")
	if status, _, err := postChat(t, quick.url(t), chatBody("hi", 4, false)); err != nil || status != 200 {
		t.Errorf("after --listen-delay: %d, %v", status, err)
	}
	testClient.CloseIdleConnections()
}

// --exit-after is a crash of its own: it refuses the crash flags it
// would fight with, and negative durations.
func TestExitFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--exit-after", "2", "--crash-after", "3"},
		{"--exit-after", "2", "--restart-after", "1s"},
		{"--exit-at", "-1s"},
		{"--exit-after", "-1"},
	} {
		var stderr strings.Builder
		env := &cli.Env{Name: "llmsim", Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr}
		if code := cli.Run(context.Background(), env, Description, &Command{}, append([]string{"--listen", "127.0.0.1:0"}, args...)); code != cli.ExitUsage {
			t.Errorf("%v: exit %d, want %d; stderr:\n%s", args, code, cli.ExitUsage, stderr.String())
		}
	}
}
