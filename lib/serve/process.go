package serve

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// proc is one start of a server: the leader of its process group, and
// the copy of its output into its log.
type proc struct {
	pgid    int    // the leader's pid, the group's id
	start   uint64 // the leader's start time, where the system says
	done    chan struct{}
	state   *os.ProcessState // once done is closed
	waitErr error
	copied  chan struct{} // closed once every process of the group has closed its output
}

// launch starts s's command in a process group of its own, stdin empty
// and stdout and stderr into log.
func launch(s spec, log io.Writer) (*proc, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.Env = environ(s)
	cmd.Stdout, cmd.Stderr = w, w
	inGroup(cmd)
	err = cmd.Start()
	w.Close() // the server's processes hold it now
	if err != nil {
		r.Close()
		return nil, err
	}
	p := &proc{pgid: cmd.Process.Pid, done: make(chan struct{}), copied: make(chan struct{})}
	p.start = startTime(p.pgid)
	go func() {
		defer close(p.copied)
		defer r.Close()
		io.Copy(log, r)
	}()
	go func() {
		p.waitErr = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	return p, nil
}

// exitText says how the leader ended: "exit status 1", "killed by SIGKILL".
func (p *proc) exitText() string {
	st := p.state
	switch {
	case st == nil && p.waitErr != nil:
		return p.waitErr.Error()
	case st == nil:
		return "still running"
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by " + signalName(ws.Signal())
	}
	return st.String()
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	}
	return fmt.Sprintf("signal %d (%v)", int(s), s)
}

// stop ends the server: SIGTERM to its whole group, SIGKILL once grace
// has passed, and returns when no process of the group runs (or, for a
// process that cannot be killed, after a bound, saying so).
func (p *proc) stop(grace time.Duration) error {
	deadline := time.Now().Add(grace)
	signalGroup(p.pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(time.Until(deadline)):
		signalGroup(p.pgid, syscall.SIGKILL)
		<-p.done // SIGKILL cannot be caught
	}
	return clearGroup(p.pgid, time.Until(deadline))
}

// killNow sends SIGKILL to the whole group at once (a second Ctrl-C).
func (p *proc) killNow() { signalGroup(p.pgid, syscall.SIGKILL) }

// killBound is how long processes sent SIGKILL may take to be gone
// (a process in uninterruptible sleep, on a GPU driver call, lingers).
const killBound = 10 * time.Second

// clearGroup ends what is left of group pgid once its leader has exited
// (a server that crashed leaves its workers, which hold GPU memory the
// next start needs): SIGTERM, SIGKILL after grace, and waits until none
// runs.
func clearGroup(pgid int, grace time.Duration) error {
	if len(groupAlive(pgid)) == 0 {
		return nil
	}
	signalGroup(pgid, syscall.SIGTERM)
	if waitGroup(pgid, max(grace, 0)) {
		return nil
	}
	signalGroup(pgid, syscall.SIGKILL)
	if waitGroup(pgid, killBound) {
		return nil
	}
	return fmt.Errorf("processes %v of group %d still run %v after SIGKILL", groupAlive(pgid), pgid, killBound)
}

// waitGroup waits up to d for no process of group pgid to run.
func waitGroup(pgid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for len(groupAlive(pgid)) > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
