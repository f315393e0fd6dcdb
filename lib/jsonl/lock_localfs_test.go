//go:build linux

package jsonl

import "testing"

// A lock taken on a shared file system whose locks stay on each host
// (NFS mounted nolock or local_lock=flock|all, Lustre with localflock)
// would let a run on another host in: such a mount is told by its
// options in /proc/self/mountinfo; NFS with shared locks, POSIX-only
// local locks (flock is still shared) and local disks are not.
func TestLocalLockOption(t *testing.T) {
	mountinfo := []byte(`22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:44 / /mnt/v3 rw,relatime shared:28 - nfs srv:/export rw,vers=3,rsize=1048576,hard,proto=tcp,local_lock=all,addr=10.0.0.1
41 22 0:45 / /mnt/v4 rw,relatime shared:29 - nfs4 srv:/ rw,vers=4.2,rsize=1048576,hard,proto=tcp,local_lock=none,addr=10.0.0.1
42 22 0:46 / /mnt/flock rw,relatime shared:30 - nfs srv:/x rw,vers=3,local_lock=flock,addr=10.0.0.1
43 22 0:47 / /mnt/posix rw,relatime shared:31 - nfs srv:/y rw,vers=3,local_lock=posix,addr=10.0.0.1
44 22 0:48 / /lustre rw,relatime shared:32 - lustre 10.0.0.2@tcp:/fs rw,localflock
45 22 0:49 / /lustre2 rw,relatime shared:33 - lustre 10.0.0.2@tcp:/fs2 rw,flock
46 22 0:50 / /mnt/old rw,nolock shared:34 - nfs srv:/z rw,vers=3
`)
	for _, tt := range []struct {
		minor uint32
		want  string
	}{
		{44, "nfs, local_lock=all"}, {45, ""}, {46, "nfs, local_lock=flock"}, {47, ""},
		{48, "lustre, localflock"}, {49, ""}, {50, "nfs, nolock"}, {99, ""},
	} {
		if got := localLockOption(mountinfo, 0, tt.minor); got != tt.want {
			t.Errorf("0:%d: %q, want %q", tt.minor, got, tt.want)
		}
	}
	if got := localLockOption(mountinfo, 8, 1); got != "" {
		t.Errorf("ext4: %q", got)
	}
}
