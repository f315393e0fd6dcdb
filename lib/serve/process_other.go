//go:build !unix

package serve

import (
	"os"
	"syscall"

	"tokenmill/lib/procgroup"
)

func lock(string) (*os.File, bool, error) { return nil, false, procgroup.ErrUnsupported }

func signalProcess(int, syscall.Signal) error { return procgroup.ErrUnsupported }
