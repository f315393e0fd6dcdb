package serve

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// pinfo is one process as /proc/PID/stat shows it.
type pinfo struct {
	ppid, pgrp int
	start      uint64
	state      byte
	comm       string
}

func (p pinfo) alive() bool { return p.state != 'Z' && p.state != 'X' }

// readPinfo reads /proc/PID/stat; false when the process is gone.
func readPinfo(pid int) (pinfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return pinfo{}, false
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return pinfo{}, false
	}
	f := bytes.Fields(b[end+1:])
	if len(f) < 20 || len(f[0]) == 0 {
		return pinfo{}, false
	}
	var p pinfo
	p.state = f[0][0]
	p.ppid, _ = strconv.Atoi(string(f[1]))
	p.pgrp, _ = strconv.Atoi(string(f[2]))
	p.start, _ = strconv.ParseUint(string(f[19]), 10, 64)
	p.comm = string(b[open+1 : end])
	return p, true
}

// scanProcs reads every process's stat.
func scanProcs() map[int]pinfo {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	all := make(map[int]pinfo, len(dirs))
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if p, ok := readPinfo(pid); ok {
			all[pid] = p
		}
	}
	return all
}

// children maps each pid of all to its children.
func children(all map[int]pinfo) map[int][]int {
	kids := make(map[int][]int, len(all))
	for pid, p := range all {
		kids[p.ppid] = append(kids[p.ppid], pid)
	}
	return kids
}

// descendants adds to set every descendant of the pids in roots.
func descendants(kids map[int][]int, roots []int, set map[int]bool) {
	for len(roots) > 0 {
		pid := roots[len(roots)-1]
		roots = roots[:len(roots)-1]
		for _, c := range kids[pid] {
			if !set[c] {
				set[c] = true
				roots = append(roots, c)
			}
		}
	}
}

// hasMarker reports whether process pid's environment holds treeEnv set
// to marker (or, with prefix, starting with it). Its environment is read
// up to a bound; one that cannot be read (another user's) has no mark.
func hasMarker(pid int, marker string, prefix bool) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	defer f.Close()
	want := []byte(treeEnv + "=" + marker)
	r := bufio.NewReader(io.LimitReader(f, 1<<20))
	for {
		kv, err := r.ReadSlice(0)
		kv = bytes.TrimSuffix(kv, []byte{0})
		if bytes.Equal(kv, want) || prefix && bytes.HasPrefix(kv, want) {
			return true
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			for errors.Is(err, bufio.ErrBufferFull) { // a variable past the buffer: not ours
				_, err = r.ReadSlice(0)
			}
		}
		if err != nil {
			return false
		}
	}
}

// members lists the family's processes that run now (see family), and
// remembers them: one that leaves the family's view later (an orphan
// whose environment was cleared) is still found by what was seen.
func (f *family) members() []member {
	all := scanProcs()
	kids := children(all)
	set := map[int]bool{}
	if f.cg != nil {
		for _, pid := range f.cg.procs() {
			set[pid] = true
		}
	}
	f.mu.Lock()
	for pid, start := range f.seen {
		if p, ok := all[pid]; ok && p.start == start {
			set[pid] = true
		} else {
			delete(f.seen, pid)
		}
	}
	f.mu.Unlock()
	var roots []int
	self := os.Getpid()
	for pid, p := range all {
		if f.pgid > 1 && (p.pgrp == f.pgid || pid == f.pgid && !f.anyParent) {
			set[pid] = true
		}
	}
	// serve's descendants outside every server's own tree: orphans it
	// adopted as subreaper. Those with this start's mark are its. (For a
	// serve gone, whose orphans are init's: any process with its mark.)
	others := map[int]bool{}
	if f.orphans {
		leaders := reaper.leaderSet()
		for _, c := range kids[self] {
			if !leaders[c] {
				set[c] = true
			}
		}
	} else if f.anyParent {
		for pid, p := range all {
			if p.alive() {
				others[pid] = true
			}
		}
	} else {
		leaders := reaper.leaderSet()
		for _, c := range kids[self] {
			if !leaders[c] {
				others[c] = true
			}
		}
		descendants(kids, keys(others), others)
	}
	for pid := range others {
		if !set[pid] && hasMarker(pid, f.marker, f.anyParent) {
			set[pid] = true
		}
	}
	for pid := range set {
		roots = append(roots, pid)
	}
	descendants(kids, roots, set)
	var out []member
	f.mu.Lock()
	defer f.mu.Unlock()
	for pid := range set {
		p, ok := all[pid]
		if !ok || !p.alive() || pid == self {
			continue
		}
		f.seen[pid] = p.start
		out = append(out, member{pid: pid, pgrp: p.pgrp, comm: p.comm})
	}
	return out
}

func keys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// signalMembers sends sig to each of ms.
func signalMembers(ms []member, sig syscall.Signal) {
	for _, m := range ms {
		if m.pid > 1 && m.pid != os.Getpid() {
			syscall.Kill(m.pid, sig)
		}
	}
}

// The reaper: as a subreaper, serve inherits its servers' orphans, and
// reaps them when they exit (the leaders it started are its os/exec's to
// wait for, never taken here).
var reaper reaperState

type reaperState struct {
	mu      sync.Mutex
	leaders map[int]bool
	stop    chan struct{}
	done    chan struct{}
}

func (r *reaperState) leaderSet() map[int]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[int]bool, len(r.leaders))
	for pid := range r.leaders {
		out[pid] = true
	}
	return out
}

// startLeader starts cmd as a server's leader, known to the reaper
// before any of its children can be reaped.
func startLeader(cmd *exec.Cmd) error {
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	if reaper.leaders == nil {
		reaper.leaders = map[int]bool{}
	}
	reaper.leaders[cmd.Process.Pid] = true
	return nil
}

// leaderDone forgets a leader once os/exec has waited for it.
func leaderDone(pid int) {
	reaper.mu.Lock()
	delete(reaper.leaders, pid)
	reaper.mu.Unlock()
}

// reapOrphans waits for every child of serve that is not a leader and
// has exited.
func (r *reaperState) reapOrphans() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pid := range childPIDs() {
		if r.leaders[pid] {
			continue
		}
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	}
}

// childPIDs lists serve's children (from every thread's list, where the
// kernel keeps one, else by a scan).
func childPIDs() []int {
	lists, _ := filepath.Glob("/proc/self/task/*/children")
	if len(lists) == 0 {
		var out []int
		self := os.Getpid()
		for pid, p := range scanProcs() {
			if p.ppid == self {
				out = append(out, pid)
			}
		}
		return out
	}
	var out []int
	for _, l := range lists {
		b, _ := os.ReadFile(l)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

// setupTrees makes serve its servers' subreaper, starts the reaper, and
// with cgroups on (--cgroup auto) finds where the servers' cgroups go.
// The function returned undoes it at the end of the run.
func setupTrees(cgroups bool) func() {
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	trees.mu.Lock()
	trees.active, trees.cgroups, trees.base, trees.why = true, false, "", "--cgroup off"
	trees.mu.Unlock()
	if cgroups {
		if base, err := makeCgroupBase(); err != nil {
			trees.mu.Lock()
			trees.why = err.Error()
			trees.mu.Unlock()
		} else {
			trees.mu.Lock()
			trees.cgroups, trees.base = true, base
			trees.mu.Unlock()
		}
	}
	r := &reaper
	r.mu.Lock()
	r.stop, r.done = make(chan struct{}), make(chan struct{})
	stop, done := r.stop, r.done
	r.mu.Unlock()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-sigs:
			case <-tick.C:
			}
			r.reapOrphans()
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(stop)
		<-done
		r.reapOrphans()
		removeCgroups()
		trees.mu.Lock()
		trees.active, trees.cgroups, trees.base = false, false, ""
		trees.mu.Unlock()
		syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 0, 0)
	}
}

// cgroup is a cgroup (v2) of one start of a server.
type cgroup struct {
	dir string
	mu  sync.Mutex
	fd  int // the directory, open for clone3's CLONE_INTO_CGROUP; -1 once closed
}

// makeCgroupBase makes the directory of this serve's servers' cgroups:
// beside serve in the cgroup v2 tree, named for its pid. It fails where
// there is no cgroup v2 or serve may not make one there (it is not
// delegated to the user, or mounted read-only).
func makeCgroupBase() (string, error) {
	mnt, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	rel := ""
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		if r, ok := strings.CutPrefix(line, "0::"); ok {
			rel, found = r, true
		}
	}
	if !found {
		return "", errors.New("serve is in no cgroup v2")
	}
	base := filepath.Join(mnt, filepath.Clean("/"+rel), "tokenmill-serve-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(base, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("cannot make a cgroup beside serve's: %v", err)
	}
	// A cgroup made but unusable (no room for processes here) is found out
	// by the first start, which then goes without.
	return base, nil
}

// cgroup2Mount is where the cgroup v2 hierarchy is mounted.
func cgroup2Mount() (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		if f := strings.Fields(post); len(f) > 0 && f[0] == "cgroup2" {
			if g := strings.Fields(pre); len(g) >= 5 {
				return g[4], nil
			}
		}
	}
	return "", errors.New("no cgroup v2 is mounted")
}

// newCgroup makes the cgroup name under the servers' directory.
func newCgroup(name string) (*cgroup, error) {
	trees.mu.Lock()
	base := trees.base
	trees.mu.Unlock()
	if base == "" {
		return nil, errors.New("no cgroup directory")
	}
	dir := filepath.Join(base, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cannot make a cgroup for a server: %v", err)
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("cannot open a server's cgroup: %v", err)
	}
	return &cgroup{dir: dir, fd: fd}, nil
}

// intoCgroup makes cmd start in cg (clone3's CLONE_INTO_CGROUP).
func intoCgroup(cmd *exec.Cmd, cg *cgroup) {
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = cg.fd
}

// procs lists the processes in the cgroup.
func (cg *cgroup) procs() []int { return cgroupProcs(cg.dir) }

func cgroupProcs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// kill sends SIGKILL to every process of the cgroup: cgroup.kill where
// the kernel has it (5.14), which no process escapes by forking
// meanwhile, else each process.
func (cg *cgroup) kill() {
	if err := os.WriteFile(filepath.Join(cg.dir, "cgroup.kill"), []byte("1"), 0); err == nil {
		return
	}
	for _, pid := range cg.procs() {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// remove closes the cgroup and removes it once empty.
func (cg *cgroup) remove() { cg.removeTries(50) }

// tryRemove is remove without waiting: one try.
func (cg *cgroup) tryRemove() { cg.removeTries(1) }

func (cg *cgroup) removeTries(tries int) {
	cg.mu.Lock()
	defer cg.mu.Unlock()
	if cg.fd >= 0 {
		syscall.Close(cg.fd)
		cg.fd = -1
	}
	removeCgroupDir(cg.dir, tries)
}

// removeCgroups removes the directory of this serve's servers' cgroups,
// once they are all gone; tryRemoveCgroups tries once.
func removeCgroups()    { removeBase(50) }
func tryRemoveCgroups() { removeBase(1) }

func removeBase(tries int) {
	trees.mu.Lock()
	base := trees.base
	trees.mu.Unlock()
	if base != "" {
		removeCgroupDir(base, tries)
	}
}

// removeCgroupDir removes an empty cgroup, trying again for a moment
// (the kernel lets go of a cgroup's processes once they are reaped, a
// little after they exit).
func removeCgroupDir(dir string, tries int) {
	for i := range tries {
		if err := syscall.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
			return
		}
		if i+1 < tries {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// reapNow reaps serve's exited orphans at once.
func reapNow() { reaper.reapOrphans() }
