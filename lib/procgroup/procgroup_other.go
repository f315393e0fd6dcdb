//go:build !unix

package procgroup

import (
	"os/exec"
	"syscall"
)

// Supported says whether process groups can be run here.
func Supported() error { return ErrUnsupported }

func Lead(*exec.Cmd) {}

func Signal(int, syscall.Signal) error { return ErrUnsupported }

func SignalMember(int, int, syscall.Signal) error { return ErrUnsupported }

func StartTime(int) uint64 { return 0 }

func Running(int, uint64) bool { return false }

func Alive(int) []int { return nil }
