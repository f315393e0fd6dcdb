package minhash

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// unnamedFile makes a file in dir that has no name (O_TMPFILE): it never
// appears in the directory, so not even a kill between its making and an
// unlink can leave it behind. It fails where the file system cannot.
func unnamedFile(dir string) (*os.File, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir, "(spill file)")), nil
}
