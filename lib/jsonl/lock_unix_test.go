//go:build unix

package jsonl

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Release lets the lock go even while a child process shares the lock's
// open files, as one forked by another goroutine does until it execs: a
// run in the same process (a test's) or another one takes it at once.
// Closing alone left the flock with the child.
func TestReleaseWhileChildHoldsFiles(t *testing.T) {
	target := filepath.Join(t.TempDir(), "gen.jsonl")
	if err := os.WriteFile(target, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := LockFile("-o", target)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.files) != 1 {
		t.Fatalf("the lock holds %d files, want the existing -o", len(l.files))
	}
	// The child gets the lock file's and the locked file's open files, and
	// outlives the Release.
	child := exec.Command("sleep", "60")
	child.ExtraFiles = []*os.File{l.f, l.files[0]}
	if err := child.Start(); err != nil {
		t.Skipf("no sleep to hold the files: %v", err)
	}
	t.Cleanup(func() {
		child.Process.Kill()
		child.Wait()
	})
	l.Release()
	again, err := LockFile("-o", target)
	if err != nil {
		t.Fatalf("after Release, with a child sharing the released lock's files: %v", err)
	}
	again.Release()
}
