//go:build !unix

package jsonl

import "os"

const noFollow = 0

const nonBlock = 0

// fileID is empty where the system gives no inode numbers: the check that
// a temporary name still holds its file is then skipped.
type fileID struct{}

func statIdentity(os.FileInfo) fileID { return fileID{} }

func fileIdentity(*os.File) (fileID, error) { return fileID{}, nil }
