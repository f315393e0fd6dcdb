//go:build unix

package serve

import (
	"os"
	"syscall"

	"tokenmill/lib/jsonl"
)

// lock takes the lock of a state directory without waiting: false when
// another process holds it. The lock goes with the process, however it
// ends (kill -9 too), so a lock held is a serve that runs. It is taken on
// the file itself, whatever name the directory is reached by, and never
// through a symbolic link (refused).
func lock(path string) (*jsonl.Flock, bool, error) {
	f, err := jsonl.OpenSidecar("--state-dir's lock", path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, err
	}
	return jsonl.TryFlock(f)
}

// signalProcess sends sig to the process pid.
func signalProcess(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }
