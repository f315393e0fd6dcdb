// Package ollamaserver starts a real Ollama server for tests: the binary that
// .ci/install-ollama builds, serving a tiny random-weight llama model that
// internal/gguf writes (no model can be downloaded where the tests run), on a
// free loopback port with a private directory for its HOME, models and
// log. One call gives a test a warm server:
//
//	srv := ollamaserver.Start(t, ollamaserver.Options{Parallel: 4})
//	resp, err := http.Post(srv.URL+"/v1/chat/completions", ...) // "model": srv.Model
//
// Start skips the test when no binary is installed, saying so and why the
// last install failed. Every wait is bounded and fails the test with the
// server's log. The server and its runner processes are killed when the
// test ends, and also when the test process dies without cleaning up.
package ollamaserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
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

// Template is the chat template models are created with (Ollama's Go
// template syntax): one "role: content" line per message, then
// "assistant:".
const Template = "{{ range .Messages }}{{ .Role }}: {{ .Content }}\n{{ end }}assistant:"

// ToolsTemplate is Template with the request's tools first, as JSON. Ollama
// refuses tools (400 "does not support tools") for a model whose template
// does not use .Tools; a model created with this one takes them.
const ToolsTemplate = "{{ if .Tools }}tools: {{ json .Tools }}\n{{ end }}" + Template

// Bounds on each wait. Loading is the slow one on a loaded 2-core machine.
const (
	startTimeout  = 30 * time.Second
	createTimeout = 30 * time.Second
	loadTimeout   = 90 * time.Second
	answerTimeout = 60 * time.Second
)

// Options say what Start runs; zero values take the defaults in brackets.
type Options struct {
	// Parallel is OLLAMA_NUM_PARALLEL, the requests the model runs at
	// once [1].
	Parallel int
	// NumCtx is the model's num_ctx parameter, the context each request
	// gets; 0 leaves Ollama's default (2048 in v0.6.5).
	NumCtx int
	// Threads is the model's num_thread parameter, the runner's compute
	// threads [1]. One suits the tiny model: threads meet at a barrier
	// after every operation, and on a loaded machine each meeting waits
	// for whichever thread is descheduled.
	Threads int
	// Model is the model served [gguf.Llama{}: 2 layers, 64 wide, seed 0].
	Model gguf.Llama
	// Name is the name the model is created under ["tiny"]; /v1/models
	// lists it as "tiny:latest".
	Name string
	// Template is the model's chat template [Template].
	Template string
	// Env holds further KEY=VALUE settings for the server (OLLAMA_DEBUG=1).
	Env []string
}

// Host is the part of testing.TB that Start uses.
type Host = lifeline.Host

// Server is a running, warm Ollama server.
type Server struct {
	URL     string // "http://127.0.0.1:PORT"
	Model   string // the model name to send
	Binary  string
	Version string // the Ollama release, "v0.6.5"; "" if the binary does not say
	Dir     string // the server's own directory: HOME, models, model.gguf, the log
	Log     string // the server's log file
	Timings Timings
	proc    *lifeline.Process
	t       Host
	opts    Options
}

// Timings are how long Start's steps took.
type Timings struct {
	Start       time.Duration // from exec to GET / answering
	Create      time.Duration // uploading the GGUF and /api/create
	Load        time.Duration // the runner starting and loading the model
	FirstAnswer time.Duration // the first one-token generation
}

// client is bounded per call by a context; the timeout is a backstop.
var client = &http.Client{Timeout: loadTimeout}

// Start starts ollama serve with a freshly written model, creates the
// model, loads it and has it answer once, then returns. The server is
// stopped when t's test ends.
func Start(t Host, o Options) *Server {
	t.Helper()
	bin := lifeline.Binary(t, Find, ErrNotInstalled)
	if o.Parallel <= 0 {
		o.Parallel = 1
	}
	if o.Name == "" {
		o.Name = "tiny"
	}
	if o.Threads <= 0 {
		o.Threads = 1
	}
	if o.Template == "" {
		o.Template = Template
	}
	dir := t.TempDir()
	s := &Server{Model: o.Name, Binary: bin, Dir: dir, Log: filepath.Join(dir, "server.log"), t: t, opts: o}
	modelPath := filepath.Join(dir, "model.gguf")
	digest, err := writeModel(o.Model, modelPath)
	if err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	s.proc = lifeline.Up(t, "ollama serve", s.Log, func(port int) (*lifeline.Process, error) {
		s.URL = "http://127.0.0.1:" + strconv.Itoa(port)
		return s.launch(o, port)
	}, s.waitReady)
	s.Timings.Start = time.Since(t0)
	s.Version = builtVersion(bin)
	if s.Version == "" {
		s.Version = s.reportedVersion()
	}

	step := func(what string, d *time.Duration, limit time.Duration, f func(context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		t0 := time.Now()
		if err := f(ctx); err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("no answer within %v: %w", limit, err)
			}
			t.Fatalf("ollama: %s: %v\n%s", what, err, s.logTail())
		}
		*d = time.Since(t0)
	}
	step("creating the model", &s.Timings.Create, createTimeout, func(ctx context.Context) error {
		return s.create(ctx, o, modelPath, digest)
	})
	step("loading the model", &s.Timings.Load, loadTimeout, func(ctx context.Context) error {
		_, err := s.call(ctx, "/api/generate", map[string]any{"model": s.Model}, "load")
		return err
	})
	step("the first answer", &s.Timings.FirstAnswer, answerTimeout, func(ctx context.Context) error {
		_, err := s.call(ctx, "/api/generate", map[string]any{"model": s.Model, "prompt": "Hello", "stream": false,
			"options": map[string]any{"num_predict": 1}}, "length")
		return err
	})
	return s
}

// Stop stops the server now rather than when the test ends: it asks it to
// exit and waits until no process of its group runs.
func (s *Server) Stop() {
	s.t.Helper()
	s.proc.Stop(s.t.Errorf)
}

// Kill kills the server and its runners with SIGKILL at once, as a crash
// would, and waits until they are gone.
func (s *Server) Kill() {
	s.t.Helper()
	s.proc.Kill()
	s.proc.Stop(s.t.Errorf)
}

// Restart starts the server again after Kill or Stop, as its operator
// would: on the same port, with the same models directory, HOME and log,
// and returns once GET / answers. The model is not created again; it is
// loaded by the first request that names it, as after any restart.
func (s *Server) Restart() {
	s.t.Helper()
	select {
	case <-s.proc.Done():
	default:
		s.t.Fatal("ollama: Restart of a server that runs")
	}
	_, portText, _ := net.SplitHostPort(strings.TrimPrefix(s.URL, "http://"))
	port, err := strconv.Atoi(portText)
	if err != nil {
		s.t.Fatal(err)
	}
	p, err := s.launch(s.opts, port)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { p.Stop(s.t.Errorf) })
	if err := s.waitReady(p, port); err != nil {
		s.t.Fatalf("ollama serve, restarted: %v\n%s", err, s.logTail())
	}
	s.proc = p
}

// writeModel writes the GGUF and returns its sha256 digest in hex.
func writeModel(m gguf.Llama, path string) (string, error) {
	f, err := m.File()
	if err != nil {
		return "", err
	}
	b, err := f.MarshalBinary()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), jsonl.WriteFile(path, jsonl.CreateFileOptions{Replace: true}, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

func (s *Server) launch(o Options, port int) (*lifeline.Process, error) {
	for _, d := range []string{"home", "models"} {
		if err := os.MkdirAll(filepath.Join(s.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	return lifeline.Start("ollama serve", s.Dir, s.environ(o, port), s.Log, s.Binary, "serve")
}

// environ is the test process's environment without Ollama's settings,
// HOME and proxies, plus the server's own.
func (s *Server) environ(o Options, port int) []string {
	return lifeline.Environ("OLLAMA_", append([]string{
		"HOME=" + filepath.Join(s.Dir, "home"), // ollama keeps its key pair in ~/.ollama
		"OLLAMA_HOST=127.0.0.1:" + strconv.Itoa(port),
		"OLLAMA_MODELS=" + filepath.Join(s.Dir, "models"),
		"OLLAMA_NUM_PARALLEL=" + strconv.Itoa(o.Parallel),
		"OLLAMA_MAX_LOADED_MODELS=1",
		"OLLAMA_KEEP_ALIVE=24h",
		"OLLAMA_LOAD_TIMEOUT=" + loadTimeout.String(),
	}, o.Env...)...)
}

// waitReady polls GET / until it answers "Ollama is running".
func (s *Server) waitReady(p *lifeline.Process, _ int) error {
	return lifeline.WaitReady(p, s.URL+"/", startTimeout, func(status int, body []byte) bool {
		return status == http.StatusOK && string(body) == "Ollama is running"
	}, func() error {
		if strings.Contains(s.logTail(), "address already in use") {
			return fmt.Errorf("%w: %w", lifeline.ErrExited, lifeline.ErrPortTaken)
		}
		return lifeline.ErrExited
	})
}

// create uploads the GGUF as a blob and creates the model from it.
func (s *Server) create(ctx context.Context, o Options, modelPath, digest string) error {
	f, err := os.Open(modelPath)
	if err != nil {
		return err
	}
	defer f.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/api/blobs/sha256:"+digest, f)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /api/blobs: %s: %s", resp.Status, b)
	}
	// The blob in our own models directory proves the server answering on
	// the port is the one started here.
	if _, err := os.Stat(filepath.Join(s.Dir, "models", "blobs", "sha256-"+digest)); err != nil {
		return fmt.Errorf("the uploaded model is not in this server's models directory (another server on %s?): %w", s.URL, err)
	}
	body := map[string]any{"model": o.Name, "files": map[string]string{"model.gguf": "sha256:" + digest},
		"template": o.Template, "stream": false}
	params := map[string]any{"num_thread": o.Threads}
	if o.NumCtx > 0 {
		params["num_ctx"] = o.NumCtx
	}
	body["parameters"] = params
	_, err = s.call(ctx, "/api/create", body, "")
	return err
}

// call posts a JSON body to one of Ollama's native endpoints and checks
// the answer: status 200, no "error", "success" for /api/create, and the
// done_reason wanted of /api/generate.
func (s *Server) call(ctx context.Context, path string, body any, doneReason string) (map[string]any, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("POST %s: reading the answer: %w", path, err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil || resp.StatusCode != http.StatusOK || out["error"] != nil {
		return nil, fmt.Errorf("POST %s: %s: %s", path, resp.Status, raw)
	}
	if path == "/api/create" && out["status"] != "success" {
		return nil, fmt.Errorf("POST %s: %s", path, raw)
	}
	if doneReason != "" && out["done_reason"] != doneReason {
		return nil, fmt.Errorf("POST %s: done_reason %v, want %q: %s", path, out["done_reason"], doneReason, raw)
	}
	return out, nil
}

// reportedVersion is what /api/version says, as "vX.Y.Z".
func (s *Server) reportedVersion() string {
	resp, err := client.Get(s.URL + "/api/version")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var v struct{ Version string }
	if json.NewDecoder(resp.Body).Decode(&v) != nil || v.Version == "" || v.Version == "0.0.0" {
		return ""
	}
	return "v" + strings.TrimPrefix(v.Version, "v")
}

// logTail is the end of the server's log, for failure messages.
func (s *Server) logTail() string { return lifeline.LogTail(s.Log) }
