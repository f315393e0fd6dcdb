//go:build !unix

package jsonl

import "os"

// tryLock cannot lock where there is no flock: the lock file alone marks
// the run.
func tryLock(*os.File) (bool, error) { return true, nil }

// unlock has no flock to give up.
func unlock(*os.File) {}
