//go:build unix

package jsonl

import (
	"os"
	"syscall"
)

// noFollow keeps an open from following a symbolic link at the last
// component of its name.
const noFollow = syscall.O_NOFOLLOW

// nonBlock opens a FIFO for writing without waiting for its reader.
const nonBlock = syscall.O_NONBLOCK

// fileID is a file's identity: its device and inode.
type fileID struct{ dev, ino uint64 }

func statIdentity(st os.FileInfo) fileID {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return fileID{uint64(s.Dev), uint64(s.Ino)}
	}
	return fileID{}
}

func fileIdentity(f *os.File) (fileID, error) {
	st, err := f.Stat()
	if err != nil {
		return fileID{}, err
	}
	return statIdentity(st), nil
}
