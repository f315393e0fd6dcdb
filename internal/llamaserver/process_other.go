//go:build !unix

package llamaserver

import (
	"errors"
	"os/exec"
)

const lifeline = ""

func supported() error {
	return errors.New("llama-server tests need unix process groups")
}

func inGroup(*exec.Cmd)    {}
func killGroup(int)        {}
func terminate(int, int)   {}
func groupAlive(int) []int { return nil }
