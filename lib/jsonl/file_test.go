package jsonl

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"tokenmill/internal/testbin"
)

// names makes tempName give name-0, name-1, ... for the test.
func names(t *testing.T) func(i int) string {
	t.Helper()
	old, n := tempName, 0
	tempName = func() string { n++; return fmt.Sprintf("name-%d", n-1) }
	t.Cleanup(func() { tempName = old })
	return func(i int) string { return fmt.Sprintf(".tmp-name-%d", i) }
}

// entries lists a directory's names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// A symbolic link (or a file) planted at every name the temporary file
// could take before the last cannot redirect the write: each is skipped,
// the victim it points to is untouched, and the plants are left alone.
func TestFilePlantedTempNames(t *testing.T) {
	suffix := names(t)
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("precious\n"), 0o644)
	target := filepath.Join(dir, "out.jsonl")
	const planted = tempAttempts - 1
	for i := range planted {
		name := target + suffix(i)
		var err error
		switch i % 3 {
		case 0:
			err = os.Symlink(victim, name)
		case 1:
			err = os.Symlink(filepath.Join(dir, "dangling"), name)
		default:
			err = os.WriteFile(name, []byte("someone else's\n"), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteFile(target, CreateFileOptions{}, func(w io.Writer) error {
		_, err := io.WriteString(w, "new\n")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Fatalf("victim changed: %q", b)
	}
	if b, _ := os.ReadFile(target); string(b) != "new\n" {
		t.Fatalf("target %q", b)
	}
	if n := len(entries(t, dir)); n != planted+1 {
		t.Fatalf("%d entries, want the %d plants and the target", n, planted)
	}
	// Every name taken: a clear error, nothing written anywhere.
	if _, err := CreateFile(filepath.Join(dir, "x"), CreateFileOptions{}); err != nil {
		t.Fatal(err) // fresh names for x are free
	}
	suffix = names(t)
	for i := range tempAttempts {
		os.Symlink(victim, filepath.Join(dir, "y"+suffix(i)))
	}
	if _, err := CreateFile(filepath.Join(dir, "y"), CreateFileOptions{}); err == nil || !strings.Contains(err.Error(), "no free temporary name") {
		t.Fatalf("all names planted: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Fatalf("victim changed: %q", b)
	}
}

// A temporary file swapped for a link to a victim while the run writes is
// neither renamed into place nor removed, and the victim is untouched.
func TestFileSwappedTemp(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("precious\n"), 0o644)
	target := filepath.Join(dir, "out.jsonl")
	f, err := CreateFile(target, CreateFileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("new\n"))
	os.Remove(f.TempPath())
	os.Symlink(victim, f.TempPath())
	if err := f.Commit(); err == nil || !strings.Contains(err.Error(), "was replaced") {
		t.Fatalf("Commit = %v, want a refusal", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Fatalf("victim changed: %q", b)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target written: %v", err)
	}
	if st, err := os.Lstat(f.TempPath()); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the planted link was removed: %v", err)
	}
}

// A failed rename (the target became a non-empty directory) leaves no
// temporary file, and neither does Abort.
func TestFileFailuresLeaveNoTemp(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "out.jsonl")
	f, err := CreateFile(target, CreateFileOptions{Replace: true})
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("complete\n"))
	os.MkdirAll(filepath.Join(target, "inside"), 0o755)
	if err := f.Commit(); err == nil {
		t.Fatal("rename over a non-empty directory succeeded")
	}
	if got := entries(t, dir); len(got) != 1 || got[0] != "out.jsonl" {
		t.Fatalf("left behind: %v", got)
	}
	os.RemoveAll(target)

	f, err = CreateFile(target, CreateFileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("half"))
	f.Abort()
	f.Abort()
	if got := entries(t, dir); len(got) != 0 {
		t.Fatalf("Abort left %v", got)
	}
	if err := f.Commit(); err == nil {
		t.Fatal("Commit after Abort succeeded")
	}

	// Without Replace, a target that appears during the run is kept.
	f, _ = CreateFile(target, CreateFileOptions{})
	f.Write([]byte("mine\n"))
	os.WriteFile(target, []byte("theirs\n"), 0o644)
	if err := f.Commit(); err == nil || !strings.Contains(err.Error(), "appeared while this run was writing it") {
		t.Fatalf("Commit = %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "theirs\n" {
		t.Fatalf("target replaced: %q", b)
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Fatalf("left behind: %v", got)
	}
}

// Files get the permissions of any new file: 0666 less the umask.
func TestFilePermissionsFollowUmask(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		umask int
		want  os.FileMode
	}{{0o022, 0o644}, {0o077, 0o600}, {0o002, 0o664}} {
		old := syscall.Umask(c.umask)
		path := filepath.Join(dir, fmt.Sprintf("umask-%o", c.umask))
		err := WriteFile(path, CreateFileOptions{}, func(io.Writer) error { return nil })
		syscall.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		if st, _ := os.Stat(path); st.Mode().Perm() != c.want {
			t.Errorf("umask %03o: mode %v, want %v", c.umask, st.Mode().Perm(), c.want)
		}
	}
}

// A full disk (a real one: a 64 KiB tmpfs) fails the write, and neither
// the target nor the temporary file is left; an existing target is kept.
func TestFileFullDisk(t *testing.T) {
	dir := testbin.SmallDisk(t, 64<<10)
	target := filepath.Join(dir, "out.jsonl")
	os.WriteFile(target, []byte("old\n"), 0o644)
	w, err := Create(target, nil, WriterOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	line := bytes.Repeat([]byte("x"), 1000)
	var werr error
	for i := 0; i < 1000 && werr == nil; i++ {
		werr = w.Write(line)
	}
	if err := w.Close(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Close = %v (write %v), want ENOSPC", err, werr)
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Fatalf("left behind: %v", got)
	}
	if b, _ := os.ReadFile(target); string(b) != "old\n" {
		t.Fatalf("target changed: %q", b)
	}
}
