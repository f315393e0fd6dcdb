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

	"tokenmill/internal/ollamaserver"
)

// simProc is an llmsim the harness started in the background.
type simProc struct {
	urls []string
	url  string // the first endpoint's
	cmd  *exec.Cmd
	done chan struct{}
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
	out, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close() // the child has its own descriptor
	ready := filepath.Join(dir, "urls")
	s := &simProc{dir: dir, done: make(chan struct{}), cmd: exec.Command(h.tool("llmsim"),
		append([]string{"--listen", strings.TrimSuffix(strings.Repeat("127.0.0.1:0,", endpoints), ","), "--ready-file", ready}, flags...)...)}
	s.cmd.Dir, s.cmd.Env, s.cmd.Stdout, s.cmd.Stderr = h.dir, h.environ, out, out
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	deadline := time.After(30 * time.Second)
	for len(s.urls) != endpoints {
		select {
		case <-s.done:
			err = fmt.Errorf("exited before it was ready")
		case <-deadline:
			err = fmt.Errorf("not ready after 30 s")
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(20 * time.Millisecond):
			data, _ := os.ReadFile(ready)
			s.urls = strings.Fields(string(data))
		}
		if err != nil {
			s.stop()
			data, _ := os.ReadFile(log)
			return nil, fmt.Errorf("llmsim %s: %v\n%s", strings.Join(flags, " "), err, tail(data, 2000))
		}
	}
	s.url = s.urls[0]
	return s, nil
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

// ollamaHost is what internal/ollamaserver asks of its caller, for the
// harness rather than a test: a skip or a failure ends Start by a panic
// (hostAbort) that startOllama recovers, and the cleanups (the server's
// stop among them) run when the harness is done with the server.
type ollamaHost struct {
	cleanups []func()
	failed   bool
	logf     func(string, ...any)
}

type hostAbort struct{ why string }

func (h *ollamaHost) Helper()                           {}
func (h *ollamaHost) Skip(args ...any)                  { panic(hostAbort{fmt.Sprint(args...)}) }
func (h *ollamaHost) Fatal(args ...any)                 { h.failed = true; panic(hostAbort{fmt.Sprint(args...)}) }
func (h *ollamaHost) Fatalf(format string, args ...any) { h.Fatal(fmt.Sprintf(format, args...)) }
func (h *ollamaHost) Errorf(format string, args ...any) { h.failed = true; h.Logf(format, args...) }
func (h *ollamaHost) Logf(format string, args ...any)   { h.logf("ollama: "+format, args...) }
func (h *ollamaHost) Cleanup(f func())                  { h.cleanups = append(h.cleanups, f) }
func (h *ollamaHost) Failed() bool                      { return h.failed }

func (h *ollamaHost) TempDir() string {
	dir, err := os.MkdirTemp("", "benchsuite-ollama-")
	if err != nil {
		h.Fatal(err)
	}
	h.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// stop runs the cleanups, last first; one that fails does not keep the
// others from running.
func (h *ollamaHost) stop() {
	for i := len(h.cleanups) - 1; i >= 0; i-- {
		func() {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(hostAbort); !ok {
						panic(r)
					}
				}
			}()
			h.cleanups[i]()
		}()
	}
	h.cleanups = nil
}

// ollamaServer is a real Ollama server on this machine's CPU serving its
// tiny random-weight model (internal/ollamaserver).
type ollamaServer struct {
	url, model, version string
	stop                func()
}

// startOllama starts the server with parallel slots, or says why there is
// none (no binary installed, or it did not come up).
func startOllama(parallel int, logf func(string, ...any)) (srv *ollamaServer, why string) {
	h := &ollamaHost{logf: logf}
	defer func() {
		if r := recover(); r != nil {
			a, ok := r.(hostAbort)
			h.stop()
			if !ok {
				panic(r)
			}
			srv, why = nil, a.why
		}
	}()
	s := ollamaserver.Start(h, ollamaserver.Options{Parallel: parallel})
	logf("ollama: %s %s at %s (started in %v, loaded in %v)", s.Binary, s.Version, s.URL, s.Timings.Start, s.Timings.Load)
	return &ollamaServer{url: s.URL, model: s.Model, version: s.Version, stop: h.stop}, ""
}
