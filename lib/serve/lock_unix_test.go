//go:build unix

package serve

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A serve that stops lets its state directory go at once, even while a
// child process shares the lock's open file (as one forked by another
// goroutine does until it execs): the next serve, or serve status, finds
// the directory free. Closing the file alone left the lock with the child.
func TestLockReleasedWhileChildHoldsIt(t *testing.T) {
	dir := t.TempDir()
	l, ok, err := lock(filepath.Join(dir, lockName))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	child := exec.Command("sleep", "60")
	child.ExtraFiles = []*os.File{l.File}
	if err := child.Start(); err != nil {
		t.Skipf("no sleep to hold the file: %v", err)
	}
	t.Cleanup(func() {
		child.Process.Kill()
		child.Wait()
	})
	if runs, err := serveRuns(dir); err != nil || !runs {
		t.Fatalf("while held: serveRuns %v, %v; want true", runs, err)
	}
	l.Close()
	if runs, err := serveRuns(dir); err != nil || runs {
		t.Fatalf("after the serve let go, with a child sharing the file: serveRuns %v, %v; want false", runs, err)
	}
}
