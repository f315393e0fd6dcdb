//go:build unix

package procgroup

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
)

// Supported says whether process groups can be run here.
func Supported() error { return nil }

// Lead makes cmd the leader of a process group of its own, whose id is
// its pid.
func Lead(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// Signal sends sig to every process of group pgid.
func Signal(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return errors.New("no process group") // never -1 or -0: every process, or our own group
	}
	return syscall.Kill(-pgid, sig)
}

// SignalMember sends sig to pid if it is still a process of group pgid
// (a pid read from a file may have been given to another process since).
func SignalMember(pid, pgid int, sig syscall.Signal) error {
	if g, err := syscall.Getpgid(pid); err != nil || g != pgid {
		return errors.New("not a process of the group")
	}
	return syscall.Kill(pid, sig)
}

// stat reads a process's state letter, process group and start time
// (clock ticks since boot) from /proc; ok false where there is no /proc
// entry (the process is gone, or this is not Linux).
func stat(pid int) (state byte, pgrp int, start uint64, ok bool) {
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

// StartTime is pid's start time where the system says (Linux), else 0:
// recorded beside a pid so that a later process given the same pid is
// not taken for it.
func StartTime(pid int) uint64 {
	_, _, start, _ := stat(pid)
	return start
}

// Running reports whether the process pid, started at start (0: not
// known), still runs: not a zombie, not another process given its pid.
func Running(pid int, start uint64) bool {
	if pid <= 1 {
		return false
	}
	if state, _, s, ok := stat(pid); ok {
		return state != 'Z' && state != 'X' && (start == 0 || s == start)
	}
	if runtime.GOOS == "linux" {
		return false // no /proc entry: gone
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Alive lists the processes of group pgid that still run (zombies left
// out: an orphan is reaped by whoever adopted it, in its own time).
// Where there is no /proc it says the group as a whole, while signal 0
// reaches it.
func Alive(pgid int) []int {
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
		if state, g, _, ok := stat(pid); ok && g == pgid && state != 'Z' && state != 'X' {
			alive = append(alive, pid)
		}
	}
	return alive
}
