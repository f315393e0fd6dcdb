package jsonl

import (
	"errors"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames oldpath to newpath unless newpath exists, in one
// step (renamex_np RENAME_EXCL); on a file system without it, by a hard
// link and an unlink.
func renameNoReplace(oldpath, newpath string) error {
	err := unix.RenamexNp(oldpath, newpath, unix.RENAME_EXCL)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTSUP) {
		return linkRename(oldpath, newpath)
	}
	return existError(err, newpath)
}
