//go:build unix && !linux

package serve

import "syscall"

const noTreesWhy = "not on Linux: a server's processes are its process group"

func signalMembers(ms []member, sig syscall.Signal) {
	for _, m := range ms {
		if m.pid > 1 {
			syscall.Kill(m.pid, sig)
		}
	}
}
