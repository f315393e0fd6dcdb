package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m, "llmsim") }

// waitForFile polls for the ready file, failing after a bound.
func waitForFile(t *testing.T, path string, p *testbin.Proc) []byte {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil {
			return b
		}
		select {
		case <-p.Done():
			r := p.Wait(t, 0)
			t.Fatalf("llmsim exited before it was ready: exit %d\n%s", r.Code, r.Stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the ready file")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestServeThenSIGTERM(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "urls")
	p := testbin.Start(t, "llmsim", "--listen", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--time-scale", "1000", "--ready-file", ready)
	urls := strings.Fields(string(waitForFile(t, ready, p)))
	if len(urls) != 2 {
		t.Fatalf("ready file lists %d URLs: %q", len(urls), urls)
	}
	for _, u := range urls {
		body := `{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":30}`
		resp, err := http.Post(u+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var a struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		err = json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		want := llmsim.PromptDigest(llmsim.Prompt{Messages: []llmsim.Message{{Role: "user", Content: "hello"}}})
		if err != nil || resp.StatusCode != 200 || len(a.Choices) != 1 || !strings.HasPrefix(a.Choices[0].Message.Content, want) {
			t.Fatalf("%s: %d %v %+v", u, resp.StatusCode, err, a)
		}
	}

	p.Signal(t, syscall.SIGTERM)
	r := p.Wait(t, 15*time.Second)
	if r.Code != 130 {
		t.Fatalf("after SIGTERM: exit %d, want 130\n%s", r.Code, r.Stderr)
	}
	log := r.Stderr
	for _, u := range urls {
		if !strings.Contains(log, "llmsim: listening on "+u+"\n") {
			t.Errorf("stderr lacks the listening line for %s:\n%s", u, log)
		}
	}
	if !strings.Contains(log, "served 2 requests on 2 endpoints: 2 completed") {
		t.Errorf("stderr lacks the summary:\n%s", log)
	}
	for _, u := range urls {
		if _, err := http.Get(u + "/health"); err == nil {
			t.Errorf("%s still answers after exit", u)
		}
	}
}

// --flavor and --fault N=flavor:NAME make a mixed fleet through the real
// binary: a vLLM endpoint (its error shape) beside an Ollama one (no
// /health, "Ollama is running").
func TestFlavorFlags(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "urls")
	p := testbin.Start(t, "llmsim", "--listen", "127.0.0.1:0,127.0.0.1:0", "--instant", "--flavor", "vllm",
		"--fault", "1=flavor:ollama,slow:2", "--slots-schedule", "0s:8,10m:2", "--ready-file", ready)
	urls := strings.Fields(string(waitForFile(t, ready, p)))
	body := `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`
	resp, err := http.Post(urls[0]+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Error struct{ Type, Message string } `json:"error"`
	}
	err = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 404 || e.Error.Type != "NotFoundError" {
		t.Errorf("vllm endpoint, wrong model: %d %+v %v", resp.StatusCode, e, err)
	}
	for path, want := range map[string]int{"/": 200, "/health": 404} {
		resp, err := http.Get(urls[1] + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("ollama endpoint %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	p.Signal(t, syscall.SIGTERM)
	if r := p.Wait(t, 15*time.Second); r.Code != 130 {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
}

// --request-log appends a line per generation request to the file (a line
// already there is kept) and is flushed when SIGTERM stops the server.
func TestRequestLogFlag(t *testing.T) {
	dir := t.TempDir()
	ready, logPath := filepath.Join(dir, "urls"), filepath.Join(dir, "requests.jsonl")
	if err := os.WriteFile(logPath, []byte("{\"earlier\":true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := testbin.Start(t, "llmsim", "--listen", "127.0.0.1:0", "--instant", "--request-log", logPath, "--ready-file", ready)
	url := strings.TrimSpace(string(waitForFile(t, ready, p)))
	for i := 0; i < 3; i++ {
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	p.Signal(t, syscall.SIGTERM)
	if r := p.Wait(t, 15*time.Second); r.Code != 130 {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 4 || lines[0] != `{"earlier":true}` {
		t.Fatalf("log after 3 requests:\n%s", b)
	}
	for _, l := range lines[1:] {
		var e struct {
			Status int             `json:"status"`
			Body   json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil || e.Status != 200 || !strings.Contains(string(e.Body), `"content":"hi"`) {
			t.Errorf("line %s: %v", l, err)
		}
	}
	if r := testbin.Run(t, "", nil, nil, "llmsim", "--listen", "127.0.0.1:0", "--request-log", filepath.Join(dir, "no", "such", "dir", "log")); r.Code != 1 {
		t.Errorf("an unwritable --request-log: exit %d, want 1", r.Code)
	}
}

func TestHelpShowsExamples(t *testing.T) {
	r := testbin.Run(t, "", nil, nil, "llmsim", "--help")
	if r.Code != 0 {
		t.Fatalf("--help: exit %d\n%s", r.Code, r.Stderr)
	}
	for _, want := range []string{"llmsim --listen 127.0.0.1:30000-30007 --time-scale 20", "--fault", "--max-queued", "--ready-file", "--flavor", "TOKENMILL_LLMSIM_FLAVOR"} {
		if !bytes.Contains(r.Stdout, []byte(want)) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	cases := [][]string{
		{"--listen", "nowhere"},
		{"--listen", "127.0.0.1:0", "--fault", "5=slow:2"},
		{"--listen", "127.0.0.1:0", "--fault", "0=bogus:1"},
		{"--listen", "127.0.0.1:0", "--fail-rate", "1.5"},
		{"--listen", "127.0.0.1:0", "--max-running", "0"},
		{"--listen", "127.0.0.1:0", "--time-scale", "-1"},
		{"--listen", "127.0.0.1:0", "--flavor", "tgi"},
		{"--listen", "127.0.0.1:0", "--tool-call-rate", "1.5"},
		{"--listen", "127.0.0.1:0", "--loop-rate", "0.6", "--empty-rate", "0.5"},
		{"--listen", "127.0.0.1:0", "--slots-schedule", "0s:48,1m:0"},
		{"--listen", "127.0.0.1:0", "--fault", "0=slots:5m:8/1m:4"},
		{"--listen", "127.0.0.1:0", "--fault", "0=flavor:tgi"},
		{"--no-such-flag"},
	}
	for _, args := range cases {
		if r := testbin.Run(t, "", nil, nil, "llmsim", args...); r.Code != 2 {
			t.Errorf("llmsim %q: exit %d, want 2", args, r.Code)
		}
	}
}

// A port already taken is a runtime failure (exit 1), reported on stderr.
func TestListenFailure(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "urls")
	first := testbin.Start(t, "llmsim", "--listen", "127.0.0.1:0", "--ready-file", ready)
	addr := strings.TrimPrefix(strings.TrimSpace(string(waitForFile(t, ready, first))), "http://")
	if r := testbin.Run(t, "", nil, nil, "llmsim", "--listen", addr); r.Code != 1 || !strings.Contains(r.Stderr, "address already in use") {
		t.Errorf("second llmsim on %s: exit %d\n%s", addr, r.Code, r.Stderr)
	}
}
