package jsonl

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// Magic numbers (statfs f_type) of the shared file systems whose locks
// may be kept by each host alone, as their mount options say.
const (
	nfsSuperMagic    = 0x6969
	lustreSuperMagic = 0x0BD00BD0
)

// localOnlyLocks says why a flock on f would hold on this host alone,
// unseen by a run on another host that sees the same file: an NFS mount
// whose locks are local (local_lock=flock or all; nolock means all), a
// Lustre mount with localflock. "" where nothing says so (a local disk, a
// shared file system with shared locks, or one that cannot be told:
// FUSE, see GUIDE.md).
func localOnlyLocks(f *os.File) string {
	var fs syscall.Statfs_t
	if err := syscall.Fstatfs(int(f.Fd()), &fs); err != nil {
		return ""
	}
	if fs.Type != nfsSuperMagic && fs.Type != lustreSuperMagic {
		return ""
	}
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	dev := uint64(sys.Dev)
	major := uint32((dev>>8)&0xfff | (dev>>32)&^0xfff)
	minor := uint32(dev&0xff | (dev>>12)&^0xff)
	return localLockOption(info, major, minor)
}

// localLockOption is, for the mount of device major:minor in a
// /proc/self/mountinfo text, its file system and the option that keeps
// its flocks on this host ("nfs, local_lock=all"), or "".
func localLockOption(mountinfo []byte, major, minor uint32) string {
	want := fmt.Sprintf("%d:%d", major, minor)
	for _, line := range bytes.Split(mountinfo, []byte("\n")) {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER-OPTIONS
		pre, post, ok := bytes.Cut(line, []byte(" - "))
		if !ok {
			continue
		}
		f, g := strings.Fields(string(pre)), strings.Fields(string(post))
		if len(f) < 6 || len(g) < 3 || f[2] != want {
			continue
		}
		fstype := g[0]
		for _, opt := range strings.Split(f[5]+","+g[2], ",") {
			switch {
			case strings.HasPrefix(fstype, "nfs") && (opt == "local_lock=all" || opt == "local_lock=flock" || opt == "nolock"):
				return fstype + ", " + opt
			case fstype == "lustre" && opt == "localflock":
				return fstype + ", " + opt
			}
		}
	}
	return ""
}
