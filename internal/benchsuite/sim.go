package benchsuite

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// simProc is an llmsim the harness started in the background.
type simProc struct {
	urls []string
	url  string // the first endpoint's
	cmd  *exec.Cmd
	done chan struct{}
	log  string
	dir  string
}

// startSim starts llmsim with endpoints endpoints on free loopback ports
// and the flags given, its output appended to log, and returns once it
// listens.
func (h *harness) startSim(ctx context.Context, endpoints int, log string, flags ...string) (*simProc, error) {
	dir, err := os.MkdirTemp(h.path("tmp"), "llmsim-")
	if err != nil {
		return nil, err
	}
	listen := strings.TrimSuffix(strings.Repeat("127.0.0.1:0,", endpoints), ",")
	ready := filepath.Join(dir, "urls")
	out, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer out.Close() // the child has its own descriptor
	cmd := exec.Command(h.tool("llmsim"), append([]string{"--listen", listen, "--ready-file", ready}, flags...)...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = h.dir, h.environ, out, out
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &simProc{cmd: cmd, done: make(chan struct{}), log: log, dir: dir}
	go func() { cmd.Wait(); close(s.done) }()
	if s.urls, err = waitReady(ctx, ready, s.done, endpoints); err != nil {
		s.stop()
		data, _ := os.ReadFile(log)
		return nil, fmt.Errorf("llmsim %s: %v\n%s", strings.Join(flags, " "), err, tail(data, 2000))
	}
	s.url = s.urls[0]
	return s, nil
}

// startInstant is one zero-latency endpoint, for client overhead.
func (h *harness) startInstant(ctx context.Context) (*simProc, error) {
	return h.startSim(ctx, 1, h.path("logs/llmsim.log"), "--instant")
}

// stop ends llmsim with SIGTERM (it then writes its summary and request
// log), or kills it after 10 s.
func (s *simProc) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	os.RemoveAll(s.dir)
}
