package jsonl

import (
	"errors"
	"fmt"
	"os"
)

// linkRename is a rename that refuses an existing target, for file systems
// without a native one: link fails when newpath exists.
func linkRename(oldpath, newpath string) error {
	if err := os.Link(oldpath, newpath); err != nil {
		return existError(err, newpath)
	}
	return os.Remove(oldpath)
}

// existError names the usual cause of a refused rename.
func existError(err error, path string) error {
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s appeared while this run was writing it: it is left as it is (pass --force to replace it)", path)
	}
	return err
}
