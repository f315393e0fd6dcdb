//go:build !unix

package lifeline

import (
	"errors"
	"os/exec"
)

// Supported says whether servers can be run here.
func Supported() error {
	return errors.New("running a real server in tests needs unix process groups")
}

func inGroup(*exec.Cmd)    {}
func killGroup(int)        {}
func terminate(int, int)   {}
func GroupAlive(int) []int { return nil }
