//go:build unix

package llamaserver

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
)

// lifeline runs "$@" (the llama-server binary and its flags) in a shell
// that holds the read end of a pipe whose write end only the test process
// has. When the pipe closes (the test process ending any way at all: a
// test timeout's panic, an interrupt, kill -9) the shell kills its process
// group, the server with it. When the server exits (Stop sends it
// SIGTERM), the shell reaps it and its own watcher, so no orphan is left
// for init to reap, then kills whatever else is left in the group.
const lifeline = `exec 3<&0 0</dev/null
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
echo "lifeline: llama-server exited with status $status" >&2
kill -9 0`

func supported() error { return nil }

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

// groupAlive lists the processes of a group that still run: on Linux from
// /proc, leaving out zombies (an orphan is reaped by whoever adopts it, on
// its own time); elsewhere the group as a whole, while signal 0 reaches it.
func groupAlive(pgid int) []int {
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
