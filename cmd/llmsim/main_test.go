package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/lib/llmsim"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "llmsim-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "llmsim")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building llmsim: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// waitForFile polls for the ready file, failing after a bound.
func waitForFile(t *testing.T, path string, exited <-chan error) []byte {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil {
			return b
		}
		select {
		case err := <-exited:
			t.Fatalf("llmsim exited before it was ready: %v", err)
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
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--time-scale", "1000", "--ready-file", ready)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })

	urls := strings.Fields(string(waitForFile(t, ready, exited)))
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

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Fatalf("after SIGTERM: %v, want exit 130\n%s", err, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("llmsim did not exit after SIGTERM")
	}
	log := stderr.String()
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

func TestHelpShowsExamples(t *testing.T) {
	out, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{"llmsim --listen 127.0.0.1:30000-30007 --time-scale 20", "--fault", "--max-queued", "--ready-file"} {
		if !bytes.Contains(out, []byte(want)) {
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
		{"--no-such-flag"},
	}
	for _, args := range cases {
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("llmsim %q: %v, want exit 2", args, err)
		}
	}
}

// A port already taken is a runtime failure (exit 1), reported on stderr.
func TestListenFailure(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "urls")
	first := exec.Command(bin, "--listen", "127.0.0.1:0", "--ready-file", ready)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- first.Wait() }()
	defer first.Process.Kill()
	addr := strings.TrimPrefix(strings.TrimSpace(string(waitForFile(t, ready, exited))), "http://")
	out, err := exec.Command(bin, "--listen", addr).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "address already in use") {
		t.Errorf("second llmsim on %s: %v\n%s", addr, err, out)
	}
}
