package serve

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"tokenmill/lib/procgroup"
)

// proc is one start of a server: the leader of its process group, its
// family (tree.go), and the copy of its output into its log.
type proc struct {
	pgid    int    // the leader's pid, the group's id
	start   uint64 // the leader's start time, where the system says
	fam     *family
	done    chan struct{}
	state   *os.ProcessState // once done is closed
	waitErr error
	copied  chan struct{} // closed once every process of the group has closed its output
}

// launch starts s's command in a process group of its own, in fam (its
// cgroup where it has one, marked in its environment), stdin empty and
// stdout and stderr into log. A start that fails for its cgroup is made
// again without, and the servers started after go without cgroups.
func launch(s spec, log io.Writer, fam *family) (*proc, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	build := func(cg *cgroup) *exec.Cmd {
		cmd := exec.Command(s.args[0], s.args[1:]...)
		env := slices.DeleteFunc(environ(s), func(kv string) bool { return strings.HasPrefix(kv, treeEnv+"=") })
		cmd.Env = append(env, treeEnv+"="+fam.marker)
		cmd.Stdout, cmd.Stderr = w, w
		procgroup.Lead(cmd)
		if cg != nil {
			intoCgroup(cmd, cg)
		}
		return cmd
	}
	cmd := build(fam.cg)
	err = startLeader(cmd)
	if err != nil && fam.cg != nil {
		plain := build(nil)
		if again := startLeader(plain); again == nil {
			trees.noCgroups(fmt.Errorf("a server could not be started in a cgroup of its own (%v)", err))
			fam.cg.remove()
			fam.cg = nil
			cmd, err = plain, nil
		} else {
			err = again
		}
	}
	w.Close() // the server's processes hold it now
	if err != nil {
		r.Close()
		return nil, err
	}
	p := &proc{pgid: cmd.Process.Pid, fam: fam, done: make(chan struct{}), copied: make(chan struct{})}
	p.start = procgroup.StartTime(p.pgid)
	fam.pgid = p.pgid
	go func() {
		defer close(p.copied)
		defer r.Close()
		io.Copy(log, r)
	}()
	go func() {
		p.waitErr = cmd.Wait()
		p.state = cmd.ProcessState
		leaderDone(p.pgid)
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

// stop ends the server's whole family: SIGTERM to its group and to each
// of its processes outside the group, SIGKILL to every one once grace
// has passed; it returns when none runs (or, for a process that cannot
// be killed, after a bound, saying so), with what had left its group
// (treeReport; "" when nothing had).
func (p *proc) stop(grace time.Duration) (string, error) {
	deadline := time.Now().Add(grace)
	// Asked while the leader lives, so that its descendants are found by
	// descent as well as by their mark and their cgroup.
	ms := p.fam.members()
	procgroup.Signal(p.pgid, syscall.SIGTERM)
	signalMembers(outside(ms, p.pgid), syscall.SIGTERM)
	killed := false
	select {
	case <-p.done:
	case <-time.After(time.Until(deadline)):
		p.fam.kill(ms)
		killed = true
		<-p.done // SIGKILL cannot be caught
	}
	return clearFamily(p.fam, time.Until(deadline), outside(ms, p.pgid), killed)
}

// killNow sends SIGKILL to the whole family at once (a second Ctrl-C).
func (p *proc) killNow() { p.fam.kill(p.fam.members()) }

// kill sends SIGKILL to the family: its group, ms, its cgroup.
func (f *family) kill(ms []member) {
	procgroup.Signal(f.pgid, syscall.SIGKILL)
	signalMembers(ms, syscall.SIGKILL)
	if f.cg != nil {
		f.cg.kill()
	}
}

// close removes the family's cgroup, once nothing runs in it.
func (f *family) close() {
	if f.cg != nil {
		f.cg.remove()
	}
}

// killBound is how long processes sent SIGKILL may take to be gone
// (a process in uninterruptible sleep, on a GPU driver call, lingers).
const killBound = 10 * time.Second

// clearFamily ends what is left of a family once its leader has exited
// (a server that crashed leaves its workers, which hold GPU memory the
// next start needs; a worker that called setsid is not in its group):
// SIGTERM, SIGKILL after grace, and waits until none runs. left and
// killed are what was seen outside the group and done before; it returns
// the report of all of it (treeReport).
func clearFamily(f *family, grace time.Duration, left []member, killed bool) (string, error) {
	report := func() string { return treeReport(left, killed) }
	ms := f.members()
	left = union(left, outside(ms, f.pgid))
	if len(ms) == 0 {
		return report(), nil
	}
	procgroup.Signal(f.pgid, syscall.SIGTERM)
	signalMembers(ms, syscall.SIGTERM)
	ms, ok := waitFamily(f, max(grace, 0))
	if ok {
		return report(), nil
	}
	left = union(left, outside(ms, f.pgid))
	killed = true
	f.kill(f.members())
	if ms, ok = waitFamily(f, killBound); ok {
		return report(), nil
	}
	left = union(left, outside(ms, f.pgid))
	pids := make([]int, len(ms))
	for i, m := range ms {
		pids[i] = m.pid
	}
	return report(), fmt.Errorf("processes %v of server group %d still run %v after SIGKILL", pids, f.pgid, killBound)
}

// union is a with the members of b it does not hold.
func union(a, b []member) []member {
	for _, m := range b {
		if !slices.ContainsFunc(a, func(x member) bool { return x.pid == m.pid }) {
			a = append(a, m)
		}
	}
	return a
}

// waitFamily waits up to d for no process of f to run; it returns the
// last ones seen.
func waitFamily(f *family, d time.Duration) ([]member, bool) {
	deadline := time.Now().Add(d)
	for {
		ms := f.members()
		if len(ms) == 0 {
			return nil, true
		}
		if time.Now().After(deadline) {
			return ms, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
