// Command rusage runs one command and writes its wall time, CPU time and
// peak RSS to a file: "exit wall_ns user_ns sys_ns maxrss_kb floor_kb".
//
//	rusage /tmp/stats jq -c . in.jsonl > out.jsonl
//
// benchsuite (internal/benchsuite) runs every measured command through it.
// It is a separate, tiny program that imports nothing of tokenmill because
// Linux starts a child's peak RSS at the peak of the process that spawned
// it, so the spawner's own footprint is the floor of what can be measured: about 2 MB here, against 12 MB for a
// binary that links the tokenmill libraries. floor_kb reports it.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: rusage STATS-FILE COMMAND [ARG...]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[2], os.Args[3:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	dieWithParent(cmd.SysProcAttr)
	// A Ctrl-C reaches the command through the process group; this process
	// outlives it to report. (Caught, not ignored: an ignored signal would
	// stay ignored in the command.)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGTERM)
	floor := peakRSS()
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		fmt.Fprintf(os.Stderr, "rusage: %v\n", err)
		os.Exit(127)
	}
	code := cmd.ProcessState.ExitCode()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	line := fmt.Sprintf("%d %d %d %d %d %d\n", code, wall.Nanoseconds(), ru.Utime.Nano(), ru.Stime.Nano(), ru.Maxrss, floor)
	if err := os.WriteFile(os.Args[1], []byte(line), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "rusage: %v\n", err)
		os.Exit(127)
	}
	os.Exit(code)
}

// peakRSS is this process's VmHWM in KiB (0 when unknown).
func peakRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			v, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return v
		}
	}
	return 0
}
