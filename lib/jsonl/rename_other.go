//go:build !linux && !darwin

package jsonl

func renameNoReplace(oldpath, newpath string) error { return linkRename(oldpath, newpath) }
