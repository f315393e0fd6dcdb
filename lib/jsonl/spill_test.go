package jsonl

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
)

// TestCreateSpill: a spill file takes writes and reads back, and its
// directory never holds a name for it (on Linux, an O_TMPFILE file from
// birth); a directory that is not there is an error naming it.
func TestCreateSpill(t *testing.T) {
	dir := t.TempDir()
	f, err := CreateSpill(dir, "x-*")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("the spill directory holds %v", left)
	}
	if runtime.GOOS == "linux" {
		link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
		if err != nil || !strings.HasPrefix(link, dir+"/#") {
			t.Fatalf("spill file is %q (%v), not an unnamed file in %s", link, err, dir)
		}
	}
	if _, err := f.WriteAt([]byte("spilled"), 3); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 7)
	if _, err := f.ReadAt(got, 3); err != nil || string(got) != "spilled" {
		t.Fatalf("read back %q, %v", got, err)
	}
	if _, err := CreateSpill(dir+"/missing", "x-*"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("a missing directory: %v", err)
	}
}
