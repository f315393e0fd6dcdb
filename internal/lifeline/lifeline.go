// Package lifeline runs a real inference server (Ollama, llama.cpp's
// llama-server) for tests: in a process group of its own, under a shell
// that kills the group when the test process ends any way at all, and
// stopped so that no process of it outlives the test. It also finds the
// server's binary.
package lifeline

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"tokenmill/lib/procgroup"
)

// script runs "$@" (the server and its flags) in a shell that holds the
// read end of a pipe whose write end only the test process has. When the
// pipe closes (the test process ending any way at all: a test timeout's
// panic, an interrupt, kill -9) the shell kills its process group, which
// is the server and whatever it started. When the server exits (Stop
// sends it SIGTERM: it stops and reaps its children), the shell reaps it
// and its own watcher, so no orphan is left for init to reap, then kills
// whatever else is left in the group.
const script = `exec 3<&0 0</dev/null
"$@" 3<&- &
server=$!
echo "$server" >server.pid
{ read -r _ <&3; kill -9 0; } &
watch=$!
exec 3<&-
wait "$server"
status=$?
kill -9 "$watch"
wait "$watch"
echo "lifeline: $0 exited with status $status" >&2
kill -9 0`

// StopTimeout is how long Stop waits at each step.
const StopTimeout = 10 * time.Second

// Process is one lifeline shell and the server group it leads.
type Process struct {
	name    string
	cmd     *exec.Cmd
	lifeIn  io.WriteCloser
	done    chan struct{}
	stopped bool
}

// Start runs argv (the server binary and its arguments) under the
// lifeline in dir, with env, its output appended to the file log; name
// names it in messages.
func Start(name, dir string, env []string, log string, argv ...string) (*Process, error) {
	if err := procgroup.Supported(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own descriptor
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, name}, argv...)...)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdout, cmd.Stderr = f, f
	procgroup.Lead(cmd)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	p := &Process{name: name, cmd: cmd, lifeIn: in, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Done is closed once the lifeline shell has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Group is the process group of the shell and the server.
func (p *Process) Group() int { return p.cmd.Process.Pid }

// Kill kills the whole group at once, as a crash would.
func (p *Process) Kill() { procgroup.Signal(p.Group(), syscall.SIGKILL) }

// Stop asks the server to exit and waits for the shell; if that takes too
// long it closes the lifeline (the shell kills the group), then kills the
// group itself. It waits until no process of the group runs, and reports
// through errorf one that outlives StopTimeout.
func (p *Process) Stop(errorf func(format string, args ...any)) {
	if p.stopped {
		return
	}
	p.stopped = true
	pgid := p.Group()
	if b, err := os.ReadFile(filepath.Join(p.cmd.Dir, "server.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			procgroup.SignalMember(pid, pgid, syscall.SIGTERM)
		}
	}
	select {
	case <-p.done:
	case <-time.After(StopTimeout):
	}
	p.lifeIn.Close()
	select {
	case <-p.done:
	case <-time.After(StopTimeout):
		procgroup.Signal(pgid, syscall.SIGKILL)
		<-p.done
	}
	deadline := time.Now().Add(StopTimeout)
	for {
		alive := procgroup.Alive(pgid)
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			errorf("%s: processes %v of the server's group %d still run %v after it was stopped", p.name, alive, pgid, StopTimeout)
			return
		}
		procgroup.Signal(pgid, syscall.SIGKILL)
		time.Sleep(20 * time.Millisecond)
	}
}

// EnvCache names tokenmill's cache directory.
const EnvCache = "TOKENMILL_CACHE"

// CacheDir is tokenmill's cache directory: $TOKENMILL_CACHE, else
// $HOME/.cache/tokenmill.
func CacheDir() string {
	if d := os.Getenv(EnvCache); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "tokenmill-cache")
	}
	return filepath.Join(home, ".cache", "tokenmill")
}

// ErrNotFound is Find finding no binary.
var ErrNotFound = errors.New("not found")

// Find locates the binary name: the file $env names, else the cache's
// bin/name, else name on PATH. An env that names no executable is an
// error of its own; finding nothing wraps ErrNotFound, saying where it
// looked.
func Find(env, name string) (string, error) {
	if p := os.Getenv(env); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", env, p, err)
		}
		return p, nil
	}
	cached := filepath.Join(CacheDir(), "bin", name)
	if executable(cached) == nil {
		return cached, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w (looked in %s and PATH)", ErrNotFound, filepath.Dir(cached))
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("not an executable file")
	}
	return nil
}
