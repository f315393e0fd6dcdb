//go:build unix

package jsonl

import (
	"errors"
	"os"
	"syscall"
)

// tryLock takes an exclusive flock on f without waiting; false means
// another process holds it.
func tryLock(f *os.File) (bool, error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, syscall.EINTR):
			continue
		}
		return false, err
	}
}

// unlock gives up f's flock before it is closed. Closing alone is not
// enough: the lock belongs to the open file, which a child forked by
// another goroutine shares until it execs (or for good, had it been
// passed on), and the lock would outlive the run that released it.
func unlock(f *os.File) {
	for errors.Is(syscall.Flock(int(f.Fd()), syscall.LOCK_UN), syscall.EINTR) {
	}
}
