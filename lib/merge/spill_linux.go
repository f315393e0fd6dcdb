package merge

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// createSpill opens an unnamed file in dir (O_TMPFILE): it never has a
// name, so a merge killed at any moment leaves nothing behind. A file
// system without O_TMPFILE gets a named file, unlinked at once.
func createSpill(dir string) (*os.File, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	fd, err := unix.Open(dir, unix.O_RDWR|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
	switch {
	case err == nil:
		return os.NewFile(uintptr(fd), filepath.Join(dir, "(unnamed spill file)")), nil
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EISDIR), errors.Is(err, unix.EINVAL):
		return createNamedSpill(dir)
	}
	return nil, &os.PathError{Op: "open", Path: dir, Err: err}
}
