//go:build !linux

package jsonl

import "os"

// createUnnamed: there is no unnamed file to open here.
func createUnnamed(string) (*os.File, bool, error) { return nil, false, nil }
