package serve

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"

	"tokenmill/lib/procgroup"
)

// buffer is a log that a test reads while a process writes it.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func shell(t *testing.T, script string, log *buffer) *proc {
	t.Helper()
	p, err := launch(spec{args: []string{"sh", "-c", script}}, log, newFamily(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.killNow() })
	return p
}

// waitLine waits, with a bound, for the process to have written want.
func waitLine(t *testing.T, log *buffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(log.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the output within 10s:\n%s", want, log.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// assertGone fails unless none of pids runs.
func assertGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if procgroup.Running(pid, 0) {
			t.Errorf("process %d still runs", pid)
		}
	}
}

// A server that ignores SIGTERM, as do the workers it started: after
// the grace period its whole group gets SIGKILL, and no process of it
// is left.
func TestStopKillsAfterGrace(t *testing.T) {
	log := &buffer{}
	p := shell(t, `trap "" TERM; sleep 60 & sleep 60 & echo started; wait`, log)
	waitLine(t, log, "started")
	pids := procgroup.Alive(p.pgid)
	if len(pids) != 3 {
		t.Fatalf("the group holds %v, want the shell and two workers", pids)
	}
	if _, err := p.stop(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := p.exitText(); got != "killed by SIGKILL" {
		t.Errorf("the leader ended %q, want killed by SIGKILL", got)
	}
	assertGone(t, pids)
}

// A server that stops on SIGTERM stops within its grace, workers too.
func TestStopGraceful(t *testing.T) {
	log := &buffer{}
	p := shell(t, `sleep 60 & echo started; wait`, log)
	waitLine(t, log, "started")
	pids := procgroup.Alive(p.pgid)
	start := time.Now()
	if _, err := p.stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited >= time.Minute {
		t.Errorf("stop waited out the grace (%v) for a server that stops on SIGTERM", waited)
	}
	if got := p.exitText(); got != "killed by SIGTERM" {
		t.Errorf("the leader ended %q", got)
	}
	assertGone(t, pids)
}

// A server that crashes leaves its workers (they hold the GPU memory the
// next start needs): they are ended before it is started again; its
// output, both streams, is in its log.
func TestCrashLeavesWorkers(t *testing.T) {
	log := &buffer{}
	p := shell(t, `sleep 60 & echo "worker $!"; echo oom >&2; exit 3`, log)
	<-p.done
	if got := p.exitText(); got != "exit status 3" {
		t.Errorf("exit %q", got)
	}
	waitLine(t, log, "oom")
	worker, _ := strconv.Atoi(strings.Fields(strings.TrimPrefix(log.String(), "worker "))[0])
	if !procgroup.Running(worker, 0) {
		t.Fatalf("the worker %d is not running:\n%s", worker, log.String())
	}
	if _, err := clearFamily(p.fam, 200*time.Millisecond, nil, false); err != nil {
		t.Fatal(err)
	}
	assertGone(t, []int{worker})
}

// A server's log is rotated at --log-max-size, every byte kept while
// --log-keep allows.
func TestLogRotation(t *testing.T) {
	dir := t.TempDir()
	log := &lumberjack.Logger{Filename: filepath.Join(dir, "server-0.log"), MaxSize: 1, MaxBackups: 5}
	defer log.Close()
	const size = 2<<20 + 12345
	p, err := launch(spec{args: []string{"sh", "-c", "head -c " + strconv.Itoa(size) + " /dev/zero | tr '\\0' x"}}, log, newFamily(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	<-p.done
	select {
	case <-p.copied:
	case <-time.After(10 * time.Second):
		t.Fatal("the output was not all copied within 10s")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "server-0*.log"))
	total := int64(0)
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 1<<20 {
			t.Errorf("%s holds %d bytes, past --log-max-size 1 MB", f, st.Size())
		}
		total += st.Size()
	}
	if len(files) != 3 || total != size {
		t.Errorf("%d files holding %d bytes, want 3 holding %d: %v", len(files), total, size, files)
	}
}

// claim refuses, before it writes anything, a state directory another
// serve holds, one whose previous serve left servers running, and a port
// something listens on; a pid recorded once and given since to another
// process is not taken for a server.
func TestClaimRefuses(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().(*net.TCPAddr).Port
	specs := []spec{{index: 0, port: busy, host: "127.0.0.1"}}
	if _, err := claim(dir, specs); err == nil || !strings.Contains(err.Error(), "port "+strconv.Itoa(busy)+" is in use") {
		t.Errorf("a port in use: %v", err)
	}
	free := []spec{{index: 0, port: freePort(t), host: "127.0.0.1"}}

	holder, ok, err := lock(filepath.Join(dir, lockName))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	writeState(dir, &State{PID: 4242}, nil)
	if _, err := claim(dir, free); err == nil || !strings.Contains(err.Error(), "another serve (pid 4242) runs with --state-dir") {
		t.Errorf("a state directory held: %v", err)
	}
	holder.Close()

	log := &buffer{}
	left := shell(t, `echo started; exec sleep 60`, log)
	waitLine(t, log, "started")
	st := &State{PID: 4242, Servers: []Server{{Index: 0, Port: 30000, PID: left.pgid, PIDStart: left.start}}}
	writeState(dir, st, nil)
	if _, err := claim(dir, free); err == nil || !strings.Contains(err.Error(), "server 0 (pid "+strconv.Itoa(left.pgid)+", port 30000) of a previous serve (pid 4242") {
		t.Errorf("a server left running: %v", err)
	}
	if left.start != 0 { // the system tells start times: a pid given to another process is told apart
		st.Servers[0].PIDStart = left.start + 1
		writeState(dir, st, nil)
		f, err := claim(dir, free)
		if err != nil {
			t.Errorf("a recorded pid that names another process now: %v", err)
		} else {
			f.Close()
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
