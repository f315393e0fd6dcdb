package benchsuite

import (
	"fmt"
	"os"

	"tokenmill/internal/ollamaserver"
)

// ollamaHost is what internal/ollamaserver asks of its caller, for the
// harness rather than a test: a skip or a failure ends Start by a panic
// that startOllama recovers, and the cleanups (the server's stop among
// them) run when the harness is done with the server.
type ollamaHost struct {
	cleanups []func()
	failed   bool
	logf     func(string, ...any)
}

// hostAbort is the panic that carries a skip or a failure out of Start.
type hostAbort struct{ why string }

func (h *ollamaHost) Helper()                           {}
func (h *ollamaHost) Skip(args ...any)                  { panic(hostAbort{fmt.Sprint(args...)}) }
func (h *ollamaHost) Fatalf(format string, args ...any) { h.Fatal(fmt.Sprintf(format, args...)) }
func (h *ollamaHost) Cleanup(f func())                  { h.cleanups = append(h.cleanups, f) }
func (h *ollamaHost) Failed() bool                      { return h.failed }

func (h *ollamaHost) Fatal(args ...any) {
	h.failed = true
	panic(hostAbort{fmt.Sprint(args...)})
}

func (h *ollamaHost) Errorf(format string, args ...any) {
	h.failed = true
	h.logf("ollama: "+format, args...)
}

func (h *ollamaHost) Logf(format string, args ...any) { h.logf("ollama: "+format, args...) }

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
