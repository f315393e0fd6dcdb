package serve

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
	"tokenmill/lib/clock"
	"tokenmill/lib/procgroup"
)

// serve's own files are never written through a link, nor on one another:
// a symbolic link at its lock or at a server's log, an endpoints file that
// is the status file or (by a hard link) the lock, a directory as the
// endpoints file, a file where the logs' directory goes: each is a usage
// error (exit 2) before anything is written, the link's target neither
// created nor touched.
func TestHostileStateFiles(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, dir, state string) (endpoints string)
		want  string
	}{
		{"a link at the lock", func(t *testing.T, dir, state string) string {
			mustWrite(t, filepath.Join(dir, "victim"), "kept")
			mustLink(t, filepath.Join(dir, "victim"), filepath.Join(state, lockName))
			return ""
		}, "is a symbolic link"},
		{"a dangling link at a log", func(t *testing.T, dir, state string) string {
			os.MkdirAll(filepath.Join(state, logsName), 0o755)
			mustLink(t, filepath.Join(dir, "elsewhere.log"), filepath.Join(state, logsName, "server-0.log"))
			return ""
		}, "is a symbolic link"},
		{"a link at the logs' directory", func(t *testing.T, dir, state string) string {
			os.Mkdir(filepath.Join(dir, "other"), 0o755)
			mustLink(t, filepath.Join(dir, "other"), filepath.Join(state, logsName))
			return ""
		}, "is a symbolic link"},
		{"a file where the logs go", func(t *testing.T, dir, state string) string {
			mustWrite(t, filepath.Join(state, logsName), "not a directory")
			return ""
		}, "is not a directory"},
		{"the endpoints file is the status file", func(t *testing.T, dir, state string) string {
			return filepath.Join(state, ".", stateName)
		}, "is the same file as"},
		{"the endpoints file is the lock by a hard link", func(t *testing.T, dir, state string) string {
			mustWrite(t, filepath.Join(state, lockName), "")
			if err := os.Link(filepath.Join(state, lockName), filepath.Join(dir, "ep.txt")); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(dir, "ep.txt")
		}, "is the same file as"},
		{"the endpoints file is a directory", func(t *testing.T, dir, state string) string {
			os.Mkdir(filepath.Join(dir, "eps"), 0o755)
			return filepath.Join(dir, "eps")
		}, "is a directory"},
		{"the endpoints file is a FIFO", func(t *testing.T, dir, state string) string {
			mustFIFO(t, filepath.Join(dir, "eps.txt"))
			return filepath.Join(dir, "eps.txt")
		}, `eps.txt" is a FIFO: serve writes its own files whole`},
		{"the endpoints file is a link to /dev/zero", func(t *testing.T, dir, state string) string {
			mustLink(t, "/dev/zero", filepath.Join(dir, "eps.txt"))
			return filepath.Join(dir, "eps.txt")
		}, `eps.txt" is a device`},
		{"a FIFO at a server's log", func(t *testing.T, dir, state string) string {
			os.MkdirAll(filepath.Join(state, logsName), 0o755)
			mustFIFO(t, filepath.Join(state, logsName, "server-0.log"))
			return ""
		}, `server-0.log" is a FIFO`},
		{"the status file is a FIFO", func(t *testing.T, dir, state string) string {
			mustFIFO(t, filepath.Join(state, stateName))
			return ""
		}, `state.json" is a FIFO`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			state := filepath.Join(dir, "state")
			os.Mkdir(state, 0o755)
			endpoints := tt.setup(t, dir, state)
			before := tree(t, dir)
			var stderr strings.Builder
			env := &cli.Env{Name: "serve", Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr}
			args := []string{"--state-dir", state, "--servers", "1", "--port", "30000"}
			if endpoints != "" {
				args = append(args, "--endpoints-file", endpoints)
			}
			// Bounded: a serve that is not refused runs until its context ends.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			code := cli.Run(ctx, env, Description, &Run{}, append(args, "--", "sh", "-c", "exec sleep 60", "{port}"))
			if code != cli.ExitUsage || !strings.Contains(stderr.String(), tt.want) {
				t.Fatalf("exit %d, want %d with %q; stderr:\n%s", code, cli.ExitUsage, tt.want, stderr.String())
			}
			if after := tree(t, dir); !slices.Equal(before, after) {
				t.Errorf("a refused run changed the directory: before %q, after %q", before, after)
			}
		})
	}
}

// The --api-key is never in the status file, whatever a server's
// readiness answer or its command line repeated of it; what the status
// table prints of a server's answers and names is escaped for the
// terminal, on one line.
func TestStateRedactsAndStatusEscapes(t *testing.T) {
	dir := t.TempDir()
	secrets := &cli.Secrets{}
	secrets.Add("sk-serve-S3cr3t")
	st := &State{PID: 1, State: serveRunning, Command: []string{"vllm", "serve", "--api-key", "sk-serve-S3cr3t"},
		Servers: []Server{{Index: 0, URL: "http://127.0.0.1:30000", State: stateUnhealthy,
			Check:    "/health 401 (Bearer sk-serve-S3cr3t refused)\x1b]0;PWNED\x07\r\nfake line\tcolumn",
			LastExit: "exit 1: \x1b[31mred\x1b[0m", LastExitAt: time.Unix(0, 0)}}}
	if err := writeState(dir, st, secrets); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, stateName))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "S3cr3t") || !strings.Contains(string(b), "***") {
		t.Fatalf("the status file holds the key, or no ***:\n%s", b)
	}
	read, err := readState(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	w := bufio.NewWriter(&out)
	writeStatus(w, read, true, time.Unix(0, 0))
	w.Flush()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if strings.ContainsAny(out.String(), "\x1b\x07\r") || len(lines) != 3 || strings.Contains(out.String(), "S3cr3t") {
		t.Fatalf("the status table sends control characters, forges a line or shows the key (%d lines):\n%q", len(lines), out.String())
	}
	if !strings.Contains(lines[2], `\x1b]0;PWNED\x07\r\nfake line column`) {
		t.Errorf("the check is not shown escaped: %q", lines[2])
	}
}

// tree is every name under dir with what it holds or links to.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		entry := path
		switch {
		case d.Type()&os.ModeSymlink != 0:
			target, _ := os.Readlink(path)
			entry += " -> " + target
		case d.Type().IsRegular():
			b, _ := os.ReadFile(path)
			entry += ": " + string(b)
		}
		out = append(out, entry)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustWrite(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustLink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func mustFIFO(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A FIFO as the endpoints file (nobody reading it), through the binary:
// given at the start, serve refuses it (exit 2) before it starts a server
// or writes a file (it blocked opening it, never said a server was
// ready, ignored SIGTERM twice, and its server outlived a kill -9). Put
// in place of the endpoints file and of the status file while serve
// runs, each write is refused and said, and one SIGTERM stops serve
// (exit 130) and its server, within a bound.
func TestFIFOAsEndpointsFile(t *testing.T) {
	f := newFleetDir(t, 1)
	fifo := filepath.Join(f.dir, "endpoints.txt")
	mustFIFO(t, fifo)
	command := []string{testbin.Path("llmsim"), "--listen", "127.0.0.1:{port}", "--instant"}
	res := f.startServe(t, 1, []string{"--endpoints-file", fifo}, command...).Wait(t, 20*time.Second)
	if res.Code != cli.ExitUsage || !strings.Contains(res.Stderr, `"`+fifo+`" is a FIFO`) {
		t.Errorf("exit %d, want %d saying the endpoints file is a FIFO:\n%s", res.Code, cli.ExitUsage, res.Stderr)
	}
	if err := portFree("127.0.0.1", f.port); err != nil {
		t.Errorf("a server was started: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.state, stateName)); err == nil {
		t.Error("the refused serve wrote a status file")
	}

	serve := f.startServe(t, 1, nil, command...)
	serve.WaitFor(t, 30*time.Second, "all 1 servers ready")
	pids := serverPIDs(f.status(t))
	for _, name := range []string{f.endpoints(), filepath.Join(f.state, stateName)} {
		if err := os.Remove(name); err != nil {
			t.Fatal(err)
		}
		mustFIFO(t, name)
	}
	serve.Signal(t, syscall.SIGTERM)
	res = serve.Wait(t, 30*time.Second)
	if res.Code != 130 {
		t.Errorf("serve exited %d after one SIGTERM, want 130:\n%s", res.Code, res.Stderr)
	}
	for _, want := range []string{"cannot write the status file: ", "cannot write the endpoints file: ", "is a FIFO"} {
		if !strings.Contains(res.Stderr, want) {
			t.Errorf("serve did not say %q:\n%s", want, res.Stderr)
		}
	}
	for _, pid := range pids {
		if procgroup.Running(pid, 0) {
			t.Errorf("server process %d still runs after serve exited", pid)
		}
	}
}

// readyChecker says every server is ready.
type readyChecker struct{}

func (readyChecker) Check(int) (bool, string) { return true, "/health 200" }

// A write of serve's files that never returns (a file system that hangs)
// holds up neither the servers' supervision nor a stop: the stop ends
// the server and serve's run returns, saying the files may be stale,
// once --grace and the bound on the last save have passed.
func TestStopNeverWaitsOnAWrite(t *testing.T) {
	dir := t.TempDir()
	specs := []spec{{index: 0, port: 1, url: "http://127.0.0.1:1", args: []string{"sh", "-c", "sleep 60 & wait"}}}
	sup := newSupervisor(specs, State{Servers: []Server{{Index: 0, URL: specs[0].url, State: stateStarting}}})
	sup.pol = policy{startTimeout: time.Minute, unhealthyAfter: time.Minute, backoff: time.Second, maxBackoff: time.Second, maxFailures: 1}
	sup.clk, sup.probeEvery, sup.grace, sup.saveBound = clock.Or(nil), 10*time.Millisecond, 2*time.Second, 300*time.Millisecond
	sup.check, sup.dir, sup.endpoints = readyChecker{}, dir, filepath.Join(dir, endpointsName)
	said := &buffer{}
	sup.logf = func(format string, args ...any) { fmt.Fprintf(said, format+"\n", args...) }
	release := make(chan struct{})
	defer close(release)
	writing := make(chan struct{}, 1)
	sup.write = func(string, []byte) error {
		select {
		case writing <- struct{}{}:
		default:
		}
		<-release // never, while the test runs
		return nil
	}
	sup.openLogs(1, 1)
	defer sup.closeLogs()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sup.run(ctx) }()
	select {
	case <-writing:
	case <-time.After(10 * time.Second):
		t.Fatal("no write within 10s")
	}
	waitLine(t, said, "is ready")
	st, _ := sup.snapshot()
	pids := procgroup.Alive(st.Servers[0].PID)
	if len(pids) != 2 {
		t.Fatalf("the server's group holds %v, want the shell and its sleep", pids)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the stop waited on the write: run has not returned 20s after its context ended:\n%s", said.String())
	}
	assertGone(t, pids)
	if !strings.Contains(said.String(), "are not written after 300ms") {
		t.Errorf("serve did not say its files may be stale:\n%s", said.String())
	}
}

// Two serves given one --endpoints-file (each with its own state
// directory and ports): both ran and replaced each other's list. The
// second is refused at once (exit 1), naming the first by its pid and
// saying what to do; the first goes on, the file listing its server
// alone; once it has stopped, its lock is gone and a serve takes the
// file.
func TestSharedEndpointsFileRefused(t *testing.T) {
	f := newFleetDir(t, 2)
	shared := filepath.Join(f.dir, "endpoints", "node.txt")
	command := []string{testbin.Path("llmsim"), "--listen", "127.0.0.1:{port}", "--instant"}
	first := f.startServe(t, 1, []string{"--endpoints-file", shared}, command...)
	first.WaitFor(t, 30*time.Second, "all 1 servers ready")
	st := f.status(t)

	other := f
	other.state, other.port = filepath.Join(f.dir, "other"), f.port+1
	res := other.startServe(t, 1, []string{"--endpoints-file", shared}, command...).Wait(t, 30*time.Second)
	want := fmt.Sprintf("--endpoints-file %q is in use by process %d (lock %s.lock)", shared, st.PID, shared)
	if res.Code != 1 || !strings.Contains(res.Stderr, want) || !strings.Contains(res.Stderr, "give each serve an --endpoints-file of its own") {
		t.Errorf("a second serve on the endpoints file: exit %d, want 1 saying %q:\n%s", res.Code, want, res.Stderr)
	}
	if err := portFree("127.0.0.1", other.port); err != nil {
		t.Errorf("the refused serve started a server: %v", err)
	}
	listed, _ := os.ReadFile(shared)
	if strings.Count(string(listed), "http://") != 1 || !strings.Contains(string(listed), st.Servers[0].URL+"\n") {
		t.Errorf("the endpoints file is not the first serve's alone:\n%s", listed)
	}

	first.Signal(t, syscall.SIGTERM)
	first.Wait(t, 30*time.Second)
	if _, err := os.Stat(shared + ".lock"); err == nil {
		t.Error("the lock of the endpoints file is left after its serve stopped")
	}
	again := other.startServe(t, 1, []string{"--endpoints-file", shared}, command...)
	again.WaitFor(t, 30*time.Second, "all 1 servers ready")
	again.Signal(t, syscall.SIGTERM)
	again.Wait(t, 30*time.Second)
}
