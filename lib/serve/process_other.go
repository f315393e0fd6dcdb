//go:build !unix

package serve

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

var errUnsupported = errors.New("serve needs process groups: it runs on Linux and macOS")

func supported() error { return errUnsupported }

func inGroup(*exec.Cmd) {}

func signalGroup(int, syscall.Signal) error { return errUnsupported }

func startTime(int) uint64 { return 0 }

func running(int, uint64) bool { return false }

func groupAlive(int) []int { return nil }

func lock(string) (*os.File, bool, error) { return nil, false, errUnsupported }

func signalProcess(int, syscall.Signal) error { return errUnsupported }
