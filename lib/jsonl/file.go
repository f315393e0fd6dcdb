package jsonl

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"tokenmill/lib/cli"
)

// File is the one way a tokenmill tool writes a named file. A regular
// file (or a name not yet taken) is written under a temporary name in the
// target's own directory and put in place by Commit: fsync of the file,
// rename over the target, fsync of the directory, so after a crash the
// target is either the old file or the whole new one. An existing FIFO or
// device (-o /dev/null, a named pipe) is written in place instead, since
// renaming over it would replace it with a plain file.
//
// The temporary file is created with O_CREATE|O_EXCL|O_NOFOLLOW under a
// random name (retried when taken), so nothing planted in the directory,
// a symbolic link least of all, can redirect the write; its permissions are
// those of any new file (0666 less the umask). Commit refuses to rename a
// temporary name that no longer holds the file it wrote, and Abort and
// every failed Commit remove the temporary file (only if it is still the
// one this process made).
//
// google/renameio and natefinch/atomic were considered: renameio draws its
// names from math/rand, creates files 0600, may put them in $TMPDIR, and
// syncs no directory; natefinch/atomic takes the whole content as one
// io.Reader (no streaming writer, no Abort), creates files 0600 and syncs no
// directory either. Both would need the missing steps written around them,
// which is most of this file.
type File struct {
	f       *os.File
	path    string
	tmp     string // "" when written in place
	ino     fileID // the temporary file's identity, to check before rename/remove
	replace bool   // Commit may replace an existing target
	closed  bool   // Finish has run
	done    bool   // committed or aborted
	unhook  func() // cancels the removal of the temporary file at exit
}

// CreateFileOptions choose how CreateFile treats an existing target.
type CreateFileOptions struct {
	// Replace lets Commit replace a file that exists at the target (the
	// caller has applied the replace rule, CheckPaths, before). Without
	// it, Commit refuses a target that appeared during the run.
	Replace bool
}

// CreateFile starts writing path. Missing parent directories are created.
func CreateFile(path string, opts CreateFileOptions) (*File, error) {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		if st.IsDir() {
			return nil, fmt.Errorf("%s is a directory", path)
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		return &File{f: f, path: path}, nil
	}
	f, tmp, err := createTempBeside(path)
	if err != nil {
		return nil, err
	}
	id, err := fileIdentity(f)
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	file := &File{f: f, path: path, tmp: tmp, ino: id, replace: opts.Replace}
	// A process that exits before the file is committed or aborted (a
	// second SIGINT or SIGTERM) still removes it.
	file.unhook = cli.AtExit(file.removeTemp)
	return file, nil
}

// tempName draws the random part of a temporary name; tests replace it to
// plant files at the names it will give.
var tempName = func() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// maxNameBytes is the longest file name most file systems take (NAME_MAX).
const maxNameBytes = 255

// tempAttempts bounds the names tried before giving up: each is 64 random
// bits, so a second attempt already means someone plants files on purpose.
const tempAttempts = 100

// createTempBeside creates a temporary file in path's directory (made if
// missing), named after path.
func createTempBeside(path string) (*os.File, string, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, "", err
	}
	return createTemp(dir, filepath.Base(path))
}

// createTemp creates a new file in dir named after base.
func createTemp(dir, base string) (*os.File, string, error) {
	var lastErr error
	for range tempAttempts {
		suffix := ".tmp-" + tempName()
		if len(base)+len(suffix) > maxNameBytes {
			base = base[:maxNameBytes-len(suffix)]
		}
		name := filepath.Join(dir, base+suffix)
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, 0o666)
		if err == nil {
			return f, name, nil
		}
		if !errors.Is(err, os.ErrExist) && !errors.Is(err, syscall.ELOOP) {
			return nil, "", err
		}
		lastErr = err
	}
	return nil, "", fmt.Errorf("no free temporary name beside %s after %d attempts: %w", filepath.Join(dir, base), tempAttempts, lastErr)
}

// Path is the target's name.
func (f *File) Path() string { return f.path }

// TempPath is the temporary name written to ("" when written in place).
func (f *File) TempPath() string { return f.tmp }

// Write writes to the file.
func (f *File) Write(p []byte) (int, error) { return f.f.Write(p) }

// Finish ends the writing: the file is synced and closed but not yet in
// place, so several files can be completed before any is committed. On
// error the temporary file is removed.
func (f *File) Finish() error {
	if f.closed {
		return nil
	}
	f.closed = true
	if f.tmp == "" {
		return f.f.Close()
	}
	err := f.f.Sync()
	if cerr := f.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		f.done = true
		f.removeTemp()
	}
	return err
}

// Commit finishes the file and puts it in place. On any error the
// temporary file is removed and the target left as it was.
func (f *File) Commit() error {
	if err := f.rename(); err != nil {
		return err
	}
	if f.tmp == "" {
		return nil
	}
	return syncDir(filepath.Dir(f.path))
}

// rename is Commit without the directory's sync.
func (f *File) rename() error {
	if f.done {
		return errors.New("file already committed or aborted")
	}
	if err := f.Finish(); err != nil {
		return err
	}
	f.done = true
	if f.tmp == "" {
		return nil
	}
	err := f.checkTemp()
	if err == nil {
		if f.replace {
			err = os.Rename(f.tmp, f.path)
		} else {
			err = renameNoReplace(f.tmp, f.path)
		}
	}
	if err != nil {
		f.removeTemp()
	}
	f.forget()
	return err
}

// CommitAll puts several finished files in place as nearly together as
// the file system allows: every one is complete and synced before the
// first is renamed, the renames follow one another, and each directory is
// synced once after them. On an error the files not yet renamed are
// removed (those renamed before it stay).
func CommitAll(files []*File) error {
	for i, f := range files {
		if err := f.Finish(); err != nil {
			abortAll(files[i+1:])
			return err
		}
	}
	dirs := map[string]bool{}
	for i, f := range files {
		if err := f.rename(); err != nil {
			abortAll(files[i+1:])
			return err
		}
		if f.tmp != "" {
			dirs[filepath.Dir(f.path)] = true
		}
	}
	for dir := range dirs {
		if err := syncDir(dir); err != nil {
			return err
		}
	}
	return nil
}

func abortAll(files []*File) {
	for _, f := range files {
		f.Abort()
	}
}

// Abort drops the file: the temporary file is removed, the target left as
// it was. It may be called after Commit, to no effect.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	if !f.closed {
		f.closed = true
		f.f.Close()
	}
	if f.tmp != "" {
		f.removeTemp()
	}
}

// checkTemp makes sure the temporary name still holds this file: one
// swapped for a link or another file since is neither renamed nor removed.
func (f *File) checkTemp() error {
	st, err := os.Lstat(f.tmp)
	if err != nil {
		return fmt.Errorf("temporary file %s: %w", f.tmp, err)
	}
	if statIdentity(st) != f.ino {
		return fmt.Errorf("temporary file %s was replaced by something else during the run; it is left as it is and %s is not written", f.tmp, f.path)
	}
	return nil
}

func (f *File) removeTemp() {
	if f.checkTemp() == nil {
		os.Remove(f.tmp)
	}
	f.forget()
}

// forget cancels the removal at exit, once the temporary name is gone.
func (f *File) forget() {
	if f.unhook != nil {
		f.unhook()
	}
}

// syncDir makes a rename in dir durable. File systems that cannot sync a
// directory say EINVAL or ENOTSUP; they give no stronger promise anyway.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

// WriteFile writes path through a File: write produces the content; on
// its error or any failure the target is left as it was.
func WriteFile(path string, opts CreateFileOptions, write func(io.Writer) error) error {
	f, err := CreateFile(path, opts)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Abort()
		return err
	}
	return f.Commit()
}
