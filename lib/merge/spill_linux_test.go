package merge

import (
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
)

// TestSpillFileHasNoName: on Linux a spill file is opened with O_TMPFILE,
// so at no moment does the spill directory hold a name a kill could leave
// behind (TestChaosKilledMidWrite kills merges mid-spill); the file still
// takes writes and reads back.
func TestSpillFileHasNoName(t *testing.T) {
	dir := t.TempDir()
	m := &merger{tempParent: dir}
	s, err := m.newSpillFile()
	if err != nil {
		t.Fatal(err)
	}
	defer s.remove()
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("the spill directory holds %v", left)
	}
	// The kernel names an O_TMPFILE file "#inode (deleted)" from birth.
	link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", s.f.Fd()))
	if err != nil || !strings.HasPrefix(link, dir+"/#") {
		t.Fatalf("spill file is %q (%v), not an unnamed O_TMPFILE file in %s", link, err, dir)
	}
	e := entry{id: "x", sample: 1, rank: rankStop, data: []byte(`{"id":"x"}`)}
	if err := s.write(&e); err != nil {
		t.Fatal(err)
	}
	if err := s.finishWriting(); err != nil {
		t.Fatal(err)
	}
	r, err := s.open()
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.next()
	if err != nil || got.id != "x" || got.sample != 1 || string(got.data) != `{"id":"x"}` {
		t.Fatalf("read back %+v, %v", got, err)
	}
	if _, err := r.next(); err != io.EOF {
		t.Fatalf("after the one entry: %v", err)
	}
}

// TestSpillDirectoryMissing: a spill directory that is not there is an
// error naming it, not a fallback.
func TestSpillDirectoryMissing(t *testing.T) {
	m := &merger{tempParent: t.TempDir() + "/missing"}
	if _, err := m.newSpillFile(); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("got %v", err)
	}
}
