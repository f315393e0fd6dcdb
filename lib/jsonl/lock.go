package jsonl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"tokenmill/lib/cli"
)

// Lock is an exclusive lock on a file that a run writes (dedup --state,
// merge -o, infer's -o and errors file), held for the whole run so that two
// runs on the same file cannot interleave. It goes by the file, not by the
// name typed: flock(2) on FILE.lock beside the file the name resolves to
// (symbolic links followed, so every link to one file finds one lock file,
// which holds the holder's pid), and flock on the file itself while it
// exists (so a hard link, which no name resolution can see, meets the same
// lock). A run that creates the file takes its lock too (Hold).
//
// The lock file is removed on Release, before it is unlocked: a run that
// opened it meanwhile finds, once it holds the lock, that the name no
// longer leads to the file it locked, and starts again, so removing it
// never lets two runs in. One left by a killed run is taken over (the
// kernel drops a dead process's flock) and removed at the end as well.
type Lock struct {
	mu     sync.Mutex
	f      *os.File   // the lock file
	path   string     // its name
	files  []*os.File // the locked file itself, under flock
	ids    []fileID
	unhook func() // cancels the release at exit
}

// LockedError is a file another process holds locked.
type LockedError struct {
	Flag, Path, LockPath string
	PID                  int // 0 when the lock file does not say
	// Alias: the file is locked under another name (a hard link), found by
	// the lock on the file itself.
	Alias bool
}

func (e *LockedError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "process " + strconv.Itoa(e.PID)
	}
	if e.Alias {
		return fmt.Sprintf("%s %q is in use by %s under another name (a hard link to it is locked): wait for it to finish, or use another file", e.Flag, e.Path, holder)
	}
	return fmt.Sprintf("%s %q is in use by %s (lock %s): wait for it to finish, or use another file", e.Flag, e.Path, holder, e.LockPath)
}

// maxLockFile is the largest lock file taken over: a pid and a newline.
const maxLockFile = 32

// LockPath is the lock file of path: beside the file the name resolves to.
func LockPath(path string) string { return Resolve(path) + ".lock" }

// Resolve is the name of the file path names: an existing file's path
// with every symbolic link resolved; for a name not yet taken (or a
// dangling link, which a writer replaces rather than follows), the name
// in its parent directory with that directory's links resolved. The
// result is absolute when the working directory is known.
func Resolve(path string) string {
	if _, err := os.Stat(path); err == nil {
		if real, err := filepath.EvalSymlinks(path); err == nil {
			return absolute(real)
		}
	}
	return resolveDir(path)
}

// resolveDir is path with its parent directory's links resolved, the last
// component kept as it is.
func resolveDir(path string) string {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	return absolute(filepath.Join(dir, base))
}

func absolute(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return filepath.Clean(p)
}

// LockFile takes the lock of the file path names, named by flag in
// messages, at once or not at all: held by another process, it returns a
// *LockedError naming that process.
func LockFile(flag, path string) (*Lock, error) {
	return lockAt(flag, path, Resolve(path))
}

// LockReplaced is LockFile for a name whose symbolic link, if it is one,
// the run replaces instead of following: the lock is the name's own.
func LockReplaced(flag, path string) (*Lock, error) {
	return lockAt(flag, path, resolveDir(path))
}

func lockAt(flag, path, resolved string) (*Lock, error) {
	name := resolved + ".lock"
	if err := os.MkdirAll(filepath.Dir(name), 0o777); err != nil {
		return nil, err
	}
	l, err := lockName(flag, path, name)
	if err != nil {
		return nil, err
	}
	if f, err := openToLock(resolved); err == nil {
		if err := l.hold(flag, path, f); err != nil {
			l.Release()
			return nil, err
		}
	}
	return l, nil
}

// lockName takes the flock of the lock file name.
func lockName(flag, path, name string) (*Lock, error) {
	for range 10 {
		created := true
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|noFollow, 0o666)
		if errors.Is(err, os.ErrExist) {
			created = false
			f, err = os.OpenFile(name, os.O_RDWR|noFollow|syscall.O_NONBLOCK, 0)
			if errors.Is(err, os.ErrNotExist) {
				continue // released and removed meanwhile
			}
		}
		if isLinkError(err) {
			return nil, fmt.Errorf("%s is a symbolic link, not a lock file: a lock file is never followed; remove the link", name)
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
		if local := localOnlyLocks(f); local != "" {
			f.Close()
			if created {
				os.Remove(name)
			}
			return nil, fmt.Errorf("%s cannot be locked for %s: its file system (%s) keeps locks on this host alone, so a run on another host would not see this one and both could write %s; use a local disk, or a mount whose locks are shared", name, flag, local, path)
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
		l := &Lock{f: f, path: name}
		// A process that exits at once (a second SIGINT or SIGTERM) still
		// removes its lock file.
		l.unhook = cli.AtExit(l.Release)
		return l, nil
	}
	return nil, fmt.Errorf("lock %s: it keeps being replaced", name)
}

// openToLock opens the regular file at path for its flock, never blocking
// (a FIFO is not locked) and never writing; an error: nothing to lock.
func openToLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|noFollow, 0)
	if errors.Is(err, fs.ErrPermission) {
		f, err = os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK|noFollow, 0)
	}
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fs.ErrInvalid
	}
	return f, nil
}

// Hold adds the file f (one the run created or opened under the locked
// name) to the lock: flock on it for as long as the lock is held, so that
// another run reaching it under another name is refused. The lock keeps
// its own descriptor; f stays the caller's. A file the lock already holds
// is not locked twice.
func (l *Lock) Hold(flag, path string, f *os.File) error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	id, err := fileIdentity(f)
	if err != nil {
		return err
	}
	for _, have := range l.ids {
		if have == id && id != (fileID{}) {
			return nil
		}
	}
	g, err := openToLock(path)
	if err != nil {
		return nil // not a regular file, or not reopenable: the name lock alone
	}
	if gid, err := fileIdentity(g); err != nil || gid != id {
		g.Close()
		return nil
	}
	return l.hold(flag, path, g)
}

// hold flocks f (which the lock then owns).
func (l *Lock) hold(flag, path string, f *os.File) error {
	id, _ := fileIdentity(f)
	for _, have := range l.ids {
		if have == id && id != (fileID{}) {
			f.Close()
			return nil
		}
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil // a file system without flock: the name lock alone
	}
	if !held {
		f.Close()
		return &LockedError{Flag: flag, Path: path, LockPath: l.path, Alias: true}
	}
	l.files = append(l.files, f)
	l.ids = append(l.ids, id)
	return nil
}

func isLinkError(err error) bool {
	return errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EMLINK)
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

// Release gives the lock up and removes the lock file. It may be called
// more than once.
func (l *Lock) Release() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return
	}
	if l.unhook != nil {
		l.unhook()
	}
	for _, f := range l.files {
		unlock(f)
		f.Close()
	}
	l.files, l.ids = nil, nil
	// Removed while still locked, and only if the name is still this lock
	// file: see the check in lockName.
	if id, err := fileIdentity(l.f); err == nil && sameAsName(id, l.path) {
		os.Remove(l.path)
	}
	unlock(l.f)
	l.f.Close()
	l.f = nil
}

// LockSidecar is the lock file of path (named by flag) as an output for
// CheckPaths, so that no input or other output is a lock file under any
// name; none for stdout.
func LockSidecar(flag, path string) []Output {
	if path == "" || path == "-" {
		return nil
	}
	return []Output{{Flag: flag + "'s lock file", Path: LockPath(path), Kept: true}}
}

// LockOutput is LockFile for a file named on the command line; stdout
// ("" or "-") and an existing FIFO or device need no lock (nil is returned,
// and Release and Hold of nil do nothing).
func LockOutput(flag, path string) (*Lock, error) {
	if path == "" || path == "-" {
		return nil, nil
	}
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, nil
	}
	return LockFile(flag, path)
}

// Flock is an exclusive flock held on an open file: Close gives the lock
// up before closing the file (see unlock).
type Flock struct{ *os.File }

// TryFlock takes f's flock without waiting. When another process holds it
// (false) or the lock fails, f is closed.
func TryFlock(f *os.File) (*Flock, bool, error) {
	held, err := tryLock(f)
	if err != nil || !held {
		f.Close()
		return nil, false, err
	}
	return &Flock{f}, true, nil
}

// Close releases the lock, then closes the file.
func (l *Flock) Close() error {
	unlock(l.File)
	return l.File.Close()
}
