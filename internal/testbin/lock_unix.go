//go:build unix

package testbin

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// lockBinaries takes the lock of each binary named, in dir, waiting for
// another process that holds one. They are taken in name order, so two
// processes that need some of the same binaries cannot wait on each other.
func lockBinaries(dir string, names []string) (unlock func(), err error) {
	var held []*os.File
	unlock = func() {
		for _, f := range held {
			f.Close()
		}
	}
	for _, n := range slices.Compact(slices.Sorted(slices.Values(names))) {
		f, err := os.OpenFile(filepath.Join(dir, n+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			unlock()
			return nil, err
		}
		held = append(held, f)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			unlock()
			return nil, err
		}
	}
	return unlock, nil
}
