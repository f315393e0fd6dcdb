package ollamaserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/lifeline"
	"tokenmill/internal/testbin"
	"tokenmill/lib/procgroup"
)

var testClient = &http.Client{Timeout: answerTimeout}

// TestFind checks what this package adds to lifeline.Find (whose own test
// covers the search order): the message and ErrNotInstalled when nothing
// is found. The env var names no binary: PATH and the cache are empty.
func TestFind(t *testing.T) {
	cache := t.TempDir()
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T)
		wantErr string
	}{
		{name: "nothing", wantErr: "ollama not installed: run .ci/install-ollama (or set TOKENMILL_OLLAMA; looked in " + filepath.Join(cache, "bin") + " and PATH)"},
		{name: "failed install", setup: func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(cache, failedMarker), []byte("no cc: cgo builds ...\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "ollama not installed: run .ci/install-ollama (it last failed: no cc: cgo builds ...)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvBinary, "")
			t.Setenv(EnvCache, cache)
			t.Setenv("PATH", t.TempDir())
			if tc.setup != nil {
				tc.setup(t)
			}
			got, err := Find()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrNotInstalled) {
				t.Fatalf("Find() = %q, %v; want ErrNotInstalled saying %q", got, err, tc.wantErr)
			}
		})
	}
}

// groupOf is the process group the server runs in.
func groupOf(t *testing.T, srv *Server) int {
	t.Helper()
	if srv.proc == nil {
		t.Fatal("no server process")
	}
	return srv.proc.Group()
}

// TestStop checks that the runner Ollama starts belongs to the group, and
// that after the test nothing of the group is left, not even a zombie for
// init to reap.
func TestStop(t *testing.T) {
	testbin.Long(t, "a real Ollama server")
	var pgid int
	var url string
	t.Run("serve", func(t *testing.T) {
		srv := Start(t, Options{})
		pgid, url = groupOf(t, srv), srv.URL
		// The shell, its watcher, ollama serve and the runner.
		if runtime.GOOS == "linux" && len(procgroup.Alive(pgid)) < 4 {
			t.Errorf("group %d has %v, want the shell, its watcher, the server and a runner", pgid, procgroup.Alive(pgid))
		}
	})
	if pgid == 0 {
		t.Skip("the server did not start")
	}
	lifeline.CheckGone(t, pgid, url+"/")
	if runtime.GOOS == "linux" {
		if z := zombies(pgid); len(z) > 0 {
			t.Errorf("zombies %v of group %d left for init to reap", z, pgid)
		}
	}
}

// zombies lists the group's processes that exited and wait to be reaped.
func zombies(pgid int) []string {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []string
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if i > 0 && len(f) > 2 && f[0] == "Z" && f[2] == fmt.Sprint(pgid) {
			out = append(out, s[:i+1])
		}
	}
	return out
}

// TestPortTaken hands Start a port another listener holds: the server
// cannot bind it and exits, and Start tries again on another port.
func TestPortTaken(t *testing.T) {
	testbin.Long(t, "a real Ollama server")
	if _, err := Find(); err != nil {
		t.Skip(err)
	}
	taken := lifeline.TakenPort(t)
	srv := Start(t, Options{})
	if strings.HasSuffix(srv.URL, fmt.Sprintf(":%d", taken)) {
		t.Fatalf("the server claims the taken port %d", taken)
	}
	log, _ := os.ReadFile(srv.Log)
	if !strings.Contains(string(log), "address already in use") {
		t.Errorf("the log does not show the first attempt failing:\n%s", log)
	}
}

// TestKilledTestProcess kills -9 a test process that started a server, as
// a test timeout or an impatient user would: the lifeline takes the
// server and its runner down with it.
func TestKilledTestProcess(t *testing.T) {
	testbin.Long(t, "a real Ollama server")
	if _, err := Find(); err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperServe$", "-test.timeout=3m")
	cmd.Env = append(os.Environ(), "TOKENMILL_OLLAMA_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "serving ") {
				lines <- sc.Text()
				return
			}
		}
		close(lines)
	}()
	var pgid int
	var url string
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatal("the helper ended without starting a server")
		}
		if _, err := fmt.Sscanf(line, "serving %d %s", &pgid, &url); err != nil {
			t.Fatalf("helper said %q: %v", line, err)
		}
	case <-time.After(startTimeout + loadTimeout + answerTimeout):
		t.Fatal("the helper did not start a server in time")
	}
	if len(procgroup.Alive(pgid)) == 0 {
		t.Fatalf("group %d is not running", pgid)
	}
	cmd.Process.Kill()
	cmd.Wait()
	lifeline.CheckGone(t, pgid, url+"/")
}

// TestHelperServe is the test process TestKilledTestProcess kills: it
// starts a server, says where, and waits to be killed.
func TestHelperServe(t *testing.T) {
	if os.Getenv("TOKENMILL_OLLAMA_HELPER") != "1" {
		t.Skip("run by TestKilledTestProcess")
	}
	srv := Start(t, Options{})
	fmt.Printf("serving %d %s\n", groupOf(t, srv), srv.URL)
	time.Sleep(2 * time.Minute)
	t.Fatal("not killed within 2 minutes")
}

// TestKill kills the server in the middle of a streamed answer: the
// stream breaks off without [DONE] and the group is gone.
func TestKill(t *testing.T) {
	testbin.Long(t, "a real Ollama server")
	srv := Start(t, Options{})
	pgid := groupOf(t, srv)
	body := strings.NewReader(fmt.Sprintf(`{"model": %q, "prompt": "Once", "max_tokens": 100000, "stream": true}`, srv.Model))
	resp, err := testClient.Post(srv.URL+"/v1/completions", "application/json", body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("first line %q, %v", line, err)
	}
	srv.Kill()
	rest, err := io.ReadAll(r)
	if err == nil || strings.Contains(string(rest), "[DONE]") {
		t.Errorf("the stream went on after the kill: %v, %d more bytes", err, len(rest))
	}
	lifeline.CheckGone(t, pgid, srv.URL+"/")
}
