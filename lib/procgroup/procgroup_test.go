//go:build unix

package procgroup

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"
)

// A shell and two workers in a group of their own: Alive lists the three,
// Running and StartTime tell the leader from a later process given its
// pid, SignalMember reaches only a member, and after Signal(SIGKILL) no
// process of the group runs.
func TestGroup(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", `sleep 60 & sleep 60 & echo started; wait`)
	Lead(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Signal(cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	started := make([]byte, 8)
	if _, err := out.Read(started); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	alive := Alive(pgid)
	if runtime.GOOS == "linux" && (len(alive) != 3 || !slices.Contains(alive, pgid)) {
		t.Fatalf("Alive(%d) = %v, want the shell and two workers", pgid, alive)
	}
	if !Running(pgid, StartTime(pgid)) {
		t.Errorf("the leader does not run")
	}
	if start := StartTime(pgid); start != 0 && Running(pgid, start+1) {
		t.Errorf("a process started at another time is taken for the leader")
	}
	if err := SignalMember(os.Getpid(), pgid, syscall.SIGTERM); err == nil {
		t.Errorf("SignalMember reached a process outside the group")
	}
	for _, bad := range []int{-1, 0, 1} {
		if Signal(bad, 0) == nil || Alive(bad) != nil || Running(bad, 0) {
			t.Errorf("group or pid %d is taken for a real one", bad)
		}
	}
	if err := Signal(pgid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for len(Alive(pgid)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("processes %v of the group still run 10s after SIGKILL", Alive(pgid))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if Running(pgid, 0) {
		t.Errorf("the leader still runs after SIGKILL and Wait")
	}
}
