//go:build !linux

package minhash

import (
	"errors"
	"os"
)

// unnamedFile is not available here: spill files are named and unlinked.
func unnamedFile(string) (*os.File, error) { return nil, errors.ErrUnsupported }
