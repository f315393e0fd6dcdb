//go:build !linux

package serve

import (
	"errors"
	"os/exec"

	"tokenmill/lib/procgroup"
)

// Where there is no /proc and no cgroup (macOS; elsewhere serve does not
// run, and these only let the package build), a server's family is its
// process group alone: a worker that leaves it is not seen, and no cgroup
// or subreaper keeps it in view.

func (f *family) members() []member {
	var out []member
	for _, pid := range procgroup.Alive(f.pgid) {
		out = append(out, member{pid: pid, pgrp: f.pgid, comm: "?"})
	}
	return out
}

func startLeader(cmd *exec.Cmd) error { return cmd.Start() }

func leaderDone(int) {}

func setupTrees(bool) func() {
	trees.mu.Lock()
	trees.active, trees.cgroups, trees.why = true, false, noTreesWhy
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
