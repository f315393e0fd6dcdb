package jsonl

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// createUnnamed opens an unnamed file in dir (O_TMPFILE). ok is false
// when the file system cannot make one: the caller makes a named file.
func createUnnamed(dir string) (f *os.File, ok bool, err error) {
	if dir == "" {
		dir = os.TempDir()
	}
	fd, err := unix.Open(dir, unix.O_RDWR|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
	switch {
	case err == nil:
		return os.NewFile(uintptr(fd), filepath.Join(dir, "(unnamed spill file)")), true, nil
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EISDIR), errors.Is(err, unix.EINVAL):
		return nil, false, nil
	}
	return nil, true, &os.PathError{Op: "open", Path: dir, Err: err}
}
