//go:build !unix

package serve

import (
	"errors"
	"os/exec"
	"syscall"
)

// serve does not run here (supported says so): these only let the
// package build.

func (f *family) members() []member {
	var out []member
	for _, pid := range groupAlive(f.pgid) {
		out = append(out, member{pid: pid, pgrp: f.pgid, comm: "?"})
	}
	return out
}

func signalMembers([]member, syscall.Signal) {}

func startLeader(cmd *exec.Cmd) error { return cmd.Start() }

func leaderDone(int) {}

func setupTrees(bool) func() {
	trees.mu.Lock()
	trees.active, trees.cgroups, trees.why = true, false, "not supported here"
	trees.mu.Unlock()
	return func() {
		trees.mu.Lock()
		trees.active = false
		trees.mu.Unlock()
	}
}

type cgroup struct {
	dir string
	fd  int
}

func newCgroup(string) (*cgroup, error) { return nil, errors.New("no cgroups") }

func intoCgroup(*exec.Cmd, *cgroup) {}

func (*cgroup) procs() []int { return nil }

func cgroupProcs(string) []int { return nil }

func (*cgroup) kill() {}

func (*cgroup) remove() {}

func removeCgroups() {}

func tryRemoveCgroups() {}

func reapNow() {}

func (*cgroup) tryRemove() {}
