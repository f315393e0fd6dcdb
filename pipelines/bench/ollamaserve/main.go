// Command ollamaserve holds a real Ollama server up for pipelines/bench.sh:
// internal/ollamaserver starts it on a free loopback port with its tiny model, as the
// interop tests do; once it answers, the URL and the model name are
// written to --ready-file, one per line, and the server runs until
// SIGINT or SIGTERM, when it is stopped with its runners.
//
//	ollamaserve --ready-file FILE [--parallel 4]
//
// Exit status: 0 once stopped, 3 when no Ollama binary is installed (the
// reason is on stderr: bench.sh marks the rows not available), 1 when the
// server did not come up.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"tokenmill/internal/ollamaserver"
)

// host is what internal/ollamaserver asks of its caller, for a program: failures end
// it, cleanups run on the way out.
type host struct {
	cleanups []func()
	failed   bool
}

func (h *host) Helper() {}

func (h *host) Skip(args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"ollamaserve:"}, args...)...)
	h.exit(3)
}

func (h *host) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"ollamaserve:"}, args...)...)
	h.failed = true
	h.exit(1)
}

func (h *host) Fatalf(format string, args ...any) { h.Fatal(fmt.Sprintf(format, args...)) }

func (h *host) Errorf(format string, args ...any) {
	h.failed = true
	fmt.Fprintf(os.Stderr, "ollamaserve: "+format+"\n", args...)
}

func (h *host) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "ollamaserve: "+format+"\n", args...)
}

func (h *host) TempDir() string {
	dir, err := os.MkdirTemp("", "ollamaserve-")
	if err != nil {
		h.Fatal(err)
	}
	h.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (h *host) Cleanup(f func()) { h.cleanups = append(h.cleanups, f) }
func (h *host) Failed() bool     { return h.failed }

// exit runs the cleanups, last first, and exits with code.
func (h *host) exit(code int) {
	for i := len(h.cleanups) - 1; i >= 0; i-- {
		h.cleanups[i]()
	}
	os.Exit(code)
}

func main() {
	ready := flag.String("ready-file", "", "file to write the server's URL and model name to, once it answers")
	parallel := flag.Int("parallel", 4, "OLLAMA_NUM_PARALLEL: requests the model runs at once")
	flag.Parse()
	if *ready == "" {
		fmt.Fprintln(os.Stderr, "usage: ollamaserve --ready-file FILE [--parallel N]")
		os.Exit(2)
	}
	h := &host{}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	srv := ollamaserver.Start(h, ollamaserver.Options{Parallel: *parallel})
	fmt.Fprintf(os.Stderr, "ollamaserve: %s %s at %s (started in %v, loaded in %v)\n", srv.Binary, srv.Version, srv.URL, srv.Timings.Start, srv.Timings.Load)
	if err := os.WriteFile(*ready, []byte(srv.URL+"\n"+srv.Model+"\n"), 0o644); err != nil {
		h.Fatal(err)
	}
	<-signals
	h.exit(0)
}
