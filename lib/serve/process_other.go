//go:build !unix

package serve

import (
	"syscall"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/procgroup"
)

func lock(string) (*jsonl.Flock, bool, error) { return nil, false, procgroup.ErrUnsupported }

func signalProcess(int, syscall.Signal) error { return procgroup.ErrUnsupported }
