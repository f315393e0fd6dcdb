package jsonl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"tokenmill/lib/cli"
)

// Sidecars are the files a run keeps under names of its own making beside
// what the user named (infer's turn journal and errors file, lock files):
// the user never chose them, so a symbolic link at one is never followed,
// whether it leads to a file (which would be appended to or printed) or
// nowhere (whose target would be created wherever it points). The check
// comes before anything is written (CheckSidecar, a usage error), and the
// open refuses a link planted after it (OpenSidecar, O_NOFOLLOW).

// NoFollow is the open flag that refuses a symbolic link at the last
// component of a name (O_NOFOLLOW; 0 where the system has none).
const NoFollow = noFollow

// SidecarInfo is what CheckSidecar found at a sidecar's name.
type SidecarInfo struct {
	Exists bool
	Mode   fs.FileMode
	Size   int64
}

// Special is a FIFO or device: written in place, never removed or
// replaced.
func (s SidecarInfo) Special() bool {
	return s.Exists && !s.Mode.IsRegular() && !s.Mode.IsDir()
}

// CheckSidecar refuses a symbolic link or a directory at path; what names
// the file in the message (e.g. "--errors", "-o's turn journal").
func CheckSidecar(what, path string) (SidecarInfo, error) {
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return SidecarInfo{}, nil
	case err != nil:
		return SidecarInfo{}, err
	case st.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(path)
		return SidecarInfo{}, cli.Usagef("%s %q is a symbolic link (to %q): tokenmill never writes through a link at a file of its own; remove the link, or name the file itself", what, path, target)
	case st.IsDir():
		return SidecarInfo{}, cli.Usagef("%s %q is a directory, not a file", what, path)
	}
	return SidecarInfo{Exists: true, Mode: st.Mode(), Size: st.Size()}, nil
}

// OpenSidecar opens path as os.OpenFile would, never following a symbolic
// link at its last component (refused with a message saying so). Missing
// parent directories are created when flag has os.O_CREATE.
func OpenSidecar(what, path string, flag int, perm fs.FileMode) (*os.File, error) {
	if flag&os.O_CREATE != 0 {
		if dir := filepath.Dir(path); dir != "." {
			if err := os.MkdirAll(dir, 0o777); err != nil {
				return nil, err
			}
		}
	}
	f, err := os.OpenFile(path, flag|noFollow, perm)
	if isLinkError(err) {
		return nil, fmt.Errorf("%s %s is a symbolic link: tokenmill never writes through a link at a file of its own", what, path)
	}
	return f, err
}

// ReplaceWithNew puts a new empty file at path, open for writing, in one
// rename: whatever was there (a file, which hard links elsewhere keep; a
// symbolic link, whose target is left alone) is replaced, never written
// through or truncated. The new file is created beside it like File's
// temporary files (O_EXCL|O_NOFOLLOW, a random name).
func ReplaceWithNew(path string) (*os.File, error) {
	f, tmp, err := createTempBeside(path)
	if err != nil {
		return nil, err
	}
	unhook := cli.AtExit(func() { os.Remove(tmp) })
	defer unhook()
	if err := os.Rename(tmp, path); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// CreateNew creates path, which must not exist (O_EXCL), never through a
// link.
func CreateNew(what, path string) (*os.File, error) {
	f, err := OpenSidecar(what, path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("%s %s appeared during the run: it is left as it is", what, path)
	}
	return f, err
}

// EndEmpty ends an empty stream on a FIFO or device sidecar that nothing
// was written to: a reader waiting on a FIFO sees its end of file at once.
// The open does not wait: with no reader there, nothing happens.
func EndEmpty(what, path string) {
	if nonBlock == 0 {
		return
	}
	if f, err := OpenSidecar(what, path, os.O_WRONLY|nonBlock, 0); err == nil {
		f.Close()
	}
}
