//go:build unix

package serve

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"

	"tokenmill/lib/jsonl"
)

// supported says whether serve can run here: it needs process groups.
func supported() error { return nil }

// inGroup makes cmd the leader of a process group of its own (its id is
// the leader's pid), so that one signal reaches the server and every
// process it starts (SGLang's schedulers, vLLM's workers, Ollama's
// runners), and a Ctrl-C on serve's terminal reaches serve alone.
func inGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends sig to every process of group pgid.
func signalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return errors.New("no process group") // never -1 or -0: every process, or our own group
	}
	return syscall.Kill(-pgid, sig)
}

// procStat reads a process's state letter, process group and start time
// (clock ticks since boot) from /proc; ok false where there is no /proc
// entry (the process is gone, or this is not Linux).
func procStat(pid int) (state byte, pgrp int, start uint64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	// pid (comm) state ppid pgrp ...: comm may hold spaces and parens.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 || len(f[0]) == 0 {
		return 0, 0, 0, false
	}
	pgrp, _ = strconv.Atoi(string(f[2]))
	start, _ = strconv.ParseUint(string(f[19]), 10, 64) // field 22 of the line
	return f[0][0], pgrp, start, true
}

// startTime is pid's start time where the system says (Linux), else 0:
// recorded beside a pid so that a later process given the same pid is
// not taken for it.
func startTime(pid int) uint64 {
	_, _, start, _ := procStat(pid)
	return start
}

// running reports whether the process pid, started at start (0: not
// known), still runs: not a zombie, not another process given its pid.
func running(pid int, start uint64) bool {
	if pid <= 1 {
		return false
	}
	if state, _, s, ok := procStat(pid); ok {
		return state != 'Z' && state != 'X' && (start == 0 || s == start)
	}
	if runtime.GOOS == "linux" {
		return false // no /proc entry: gone
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// groupAlive lists the processes of group pgid that still run (zombies
// left out: an orphan is reaped by whoever adopted it, in its own time).
// Where there is no /proc it says the group as a whole, while signal 0
// reaches it.
func groupAlive(pgid int) []int {
	if pgid <= 1 {
		return nil
	}
	if runtime.GOOS != "linux" {
		if err := syscall.Kill(-pgid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			return []int{pgid}
		}
		return nil
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var alive []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if state, g, _, ok := procStat(pid); ok && g == pgid && state != 'Z' && state != 'X' {
			alive = append(alive, pid)
		}
	}
	return alive
}

// lock takes the lock of a state directory without waiting: false when
// another process holds it. The lock goes with the process, however it
// ends (kill -9 too), so a lock held is a serve that runs. It is taken on
// the file itself, whatever name the directory is reached by, and never
// through a symbolic link (refused).
func lock(path string) (*os.File, bool, error) {
	f, err := jsonl.OpenSidecar("--state-dir's lock", path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return f, true, nil
}

// signalProcess sends sig to the process pid.
func signalProcess(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }
