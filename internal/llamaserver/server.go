// Package llamaserver starts a real llama.cpp server (llama-server) for
// tests: a binary built from llama.cpp, serving a tiny random-weight model
// that internal/gguf writes (no model can be downloaded where the tests
// run), on a free loopback port with a private directory for its HOME,
// model and log. One call gives a test a ready server:
//
//	srv := llamaserver.Start(t, llamaserver.Options{Model: gguf.Llama{BPE: vocab, Embedding: 32}})
//	err := srv.Call("/tokenize", map[string]any{"content": text}, &out)
//
// It runs `llama-server -m model.gguf --jinja --host 127.0.0.1 --port P
// -c 4096 -np 1 -t 1` plus the test's own flags. Start skips the test when
// no binary is found (TOKENMILL_LLAMA_SERVER, the cache's bin/llama-server,
// PATH), saying so. Every wait is bounded and fails the test with the
// server's log. The server is killed when the test ends, and also when
// the test process dies without cleaning up.
package llamaserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"tokenmill/internal/gguf"
	"tokenmill/internal/lifeline"
	"tokenmill/lib/jsonl"
)

// Bounds on each wait. Loading a model with a real vocabulary (150k
// tokens and their merges) takes a few seconds on a loaded 2-core machine.
const (
	startTimeout = 120 * time.Second
	callTimeout  = 60 * time.Second
)

// Options say what Start runs; zero values take the defaults in brackets.
type Options struct {
	// Model is the model written and served [gguf.Llama{}: 2 layers, 64
	// wide, the English SentencePiece vocabulary, seed 0].
	Model gguf.Llama
	// Context is -c, the context size [4096].
	Context int
	// Parallel is -np, the slots [1].
	Parallel int
	// Threads is -t, the compute threads [1].
	Threads int
	// Args are further flags, such as "--no-prefill-assistant".
	Args []string
	// Env holds further KEY=VALUE settings for the server.
	Env []string
}

// Host is the part of testing.TB that Start uses.
type Host = lifeline.Host

// Server is a running llama-server whose model is loaded.
type Server struct {
	URL       string // "http://127.0.0.1:PORT"
	Binary    string
	BuildInfo string // /props' build_info ("b1-7bfe120"), "" if it does not say
	Dir       string // the server's own directory: HOME, model.gguf, the log
	ModelPath string
	Log       string
	Ready     time.Duration // from exec to /health answering 200
	proc      *lifeline.Process
	t         Host
}

// client is bounded per call by a context; the timeout is a backstop.
var client = &http.Client{Timeout: callTimeout}

// Start writes the model, starts llama-server on it and returns once
// /health answers 200 (the model loaded). The server is stopped when t's
// test ends.
func Start(t Host, o Options) *Server {
	t.Helper()
	bin := lifeline.Binary(t, Find, ErrNotInstalled)
	if o.Context <= 0 {
		o.Context = 4096
	}
	if o.Parallel <= 0 {
		o.Parallel = 1
	}
	if o.Threads <= 0 {
		o.Threads = 1
	}
	dir := t.TempDir()
	s := &Server{Binary: bin, Dir: dir, ModelPath: filepath.Join(dir, "model.gguf"), Log: filepath.Join(dir, "server.log"), t: t}
	if err := writeModel(o.Model, s.ModelPath); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	s.proc = lifeline.Up(t, "llama-server", s.Log, func(port int) (*lifeline.Process, error) {
		s.URL = "http://127.0.0.1:" + strconv.Itoa(port)
		return s.launch(o, port)
	}, s.waitReady)
	s.Ready = time.Since(t0)
	var props struct {
		BuildInfo string `json:"build_info"`
	}
	if s.get("/props", &props) == nil {
		s.BuildInfo = props.BuildInfo
	}
	return s
}

// Stop stops the server now rather than when the test ends.
func (s *Server) Stop() {
	s.t.Helper()
	s.proc.Stop(s.t.Errorf)
}

// Call posts body as JSON to path and decodes a 200 answer into out; any
// other status is an error holding the answer.
func (s *Server) Call(path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return do(req, path, out)
}

func (s *Server) get(path string, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path, nil)
	if err != nil {
		return err
	}
	return do(req, path, out)
}

func do(req *http.Request, path string, out any) error {
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", req.Method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", req.Method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", req.Method, path, resp.Status, raw)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: %w: %.200s", req.Method, path, err, raw)
	}
	return nil
}

// writeModel writes the GGUF, streamed: a real vocabulary's model is tens
// of megabytes.
func writeModel(m gguf.Llama, path string) error {
	f, err := m.File()
	if err != nil {
		return err
	}
	return jsonl.WriteFile(path, jsonl.CreateFileOptions{Replace: true}, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		if _, err := f.WriteTo(bw); err != nil {
			return err
		}
		return bw.Flush()
	})
}

// args are llama-server's flags for o on port.
func (s *Server) args(o Options, port int) []string {
	a := []string{"-m", s.ModelPath, "--jinja", "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"-c", strconv.Itoa(o.Context), "-np", strconv.Itoa(o.Parallel), "-t", strconv.Itoa(o.Threads)}
	return append(a, o.Args...)
}

func (s *Server) launch(o Options, port int) (*lifeline.Process, error) {
	if err := os.MkdirAll(filepath.Join(s.Dir, "home"), 0o755); err != nil {
		return nil, err
	}
	return lifeline.Start("llama-server", s.Dir, s.environ(o), s.Log, append([]string{s.Binary}, s.args(o, port)...)...)
}

// environ is the test process's environment without llama.cpp's settings
// (LLAMA_ARG_* set flags), HOME, its cache and proxies, plus the
// server's own.
func (s *Server) environ(o Options) []string {
	return lifeline.Environ("LLAMA_", append([]string{"HOME=" + filepath.Join(s.Dir, "home"), "NO_COLOR=1"}, o.Env...)...)
}

// waitReady polls GET /health until it answers 200: llama-server answers
// 503 while it loads the model. A server that exits because another
// process holds its port says so in its log, though not always before it
// exits, so the port is tried too.
func (s *Server) waitReady(p *lifeline.Process, port int) error {
	return lifeline.WaitReady(p, s.URL+"/health", startTimeout, func(status int, _ []byte) bool {
		return status == http.StatusOK
	}, func() error {
		if strings.Contains(s.logTail(), "couldn't bind") || !lifeline.CanListen(port) {
			return fmt.Errorf("%w: %w", lifeline.ErrExited, lifeline.ErrPortTaken)
		}
		return lifeline.ErrExited
	})
}

// logTail is the end of the server's log, for failure messages.
func (s *Server) logTail() string { return lifeline.LogTail(s.Log) }
