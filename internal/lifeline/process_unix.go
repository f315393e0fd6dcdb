//go:build unix

package lifeline

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
)

// Supported says whether servers can be run here.
func Supported() error { return nil }

// inGroup makes cmd the leader of a new process group, whose id is its pid.
func inGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

func killGroup(pgid int) {
	syscall.Kill(-pgid, syscall.SIGKILL)
}

// terminate sends SIGTERM to pid if it is still a member of group pgid
// (a pid read from a file may have been reused since).
func terminate(pid, pgid int) {
	if g, err := syscall.Getpgid(pid); err == nil && g == pgid {
		syscall.Kill(pid, syscall.SIGTERM)
	}
}

// GroupAlive lists the processes of a group that still run: on Linux from
// /proc, leaving out zombies (an orphan is reaped by whoever adopts it, on
// its own time); elsewhere the group as a whole, while signal 0 reaches it.
func GroupAlive(pgid int) []int {
	if runtime.GOOS != "linux" {
		if syscall.Kill(-pgid, 0) == nil {
			return []int{pgid}
		}
		return nil
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var alive []int
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 || f[0][0] == 'Z' || f[0][0] == 'X' {
			continue
		}
		if g, _ := strconv.Atoi(string(f[2])); g == pgid {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
			alive = append(alive, pid)
		}
	}
	return alive
}
