package jsonl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Lock is an exclusive lock on a file that a run reads and writes back
// (dedup --state, merge -o), held for the whole run so that two runs on the
// same file cannot interleave: flock(2) on FILE.lock beside it, which holds
// the holder's pid. The lock file is removed on Release if this run made
// it; one left by a killed run is taken over (the kernel drops a dead
// process's flock) and left in place.
type Lock struct {
	f       *os.File
	path    string
	created bool
}

// LockedError is a file another process holds locked.
type LockedError struct {
	Flag, Path, LockPath string
	PID                  int // 0 when the lock file does not say
}

func (e *LockedError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("%s %q is in use by %s (lock %s): wait for it to finish, or use another file", e.Flag, e.Path, holder, e.LockPath)
}

// maxLockFile is the largest lock file taken over: a pid and a newline.
const maxLockFile = 32

// LockFile takes the lock of path, named by flag in messages, at once or
// not at all: held by another process, it returns a *LockedError naming
// that process.
func LockFile(flag, path string) (*Lock, error) {
	name := path + ".lock"
	if err := os.MkdirAll(filepath.Dir(name), 0o777); err != nil {
		return nil, err
	}
	for range 10 {
		created := true
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|noFollow, 0o666)
		if errors.Is(err, os.ErrExist) {
			created = false
			f, err = os.OpenFile(name, os.O_RDWR|noFollow, 0)
			if errors.Is(err, os.ErrNotExist) {
				continue // released and removed meanwhile
			}
		}
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", name, err)
		}
		if !created {
			if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() || st.Size() > maxLockFile {
				f.Close()
				return nil, fmt.Errorf("%s exists and is not a lock file: remove it or use another name", name)
			}
		}
		held, err := tryLock(f)
		if err != nil {
			f.Close()
			if created {
				os.Remove(name)
			}
			return nil, fmt.Errorf("lock %s: %w", name, err)
		}
		if !held {
			pid := readPID(f)
			f.Close()
			return nil, &LockedError{Flag: flag, Path: path, LockPath: name, PID: pid}
		}
		// A holder that released and removed the file after we opened it
		// leaves us locking a name that no longer points here: try again.
		if mine, err := fileIdentity(f); err != nil || !sameAsName(mine, name) {
			f.Close()
			continue
		}
		if err := writePID(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", name, err)
		}
		return &Lock{f: f, path: name, created: created}, nil
	}
	return nil, fmt.Errorf("lock %s: it keeps being replaced", name)
}

func sameAsName(id fileID, name string) bool {
	st, err := os.Lstat(name)
	return err == nil && statIdentity(st) == id
}

func readPID(f *os.File) int {
	buf := make([]byte, maxLockFile)
	n, _ := f.ReadAt(buf, 0)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	return pid
}

func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

// Release gives the lock up, removing the lock file if this run made it.
// It may be called more than once.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	if l.created {
		os.Remove(l.path) // before unlocking: see the check in LockFile
	}
	l.f.Close()
	l.f = nil
}

// LockOutput is LockFile for a file named on the command line; stdout
// ("" or "-") and an existing FIFO or device need no lock (nil is returned,
// and Release of nil does nothing).
func LockOutput(flag, path string) (*Lock, error) {
	if path == "" || path == "-" {
		return nil, nil
	}
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, nil
	}
	return LockFile(flag, path)
}
