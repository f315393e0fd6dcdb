package testbin

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// CapKB is the address space a capped binary runs in (ulimit -v): a Go
// binary reserves about 700 MB of it to start; one that reads without
// bound is stopped there.
const CapKB = 2 << 20 // 2 GiB

// Capped is the built binary name with args, under a shell that caps its
// address space at CapKB and, with fileBlocks > 0, every file it writes
// (ulimit -f), measured by the rusage command into stats: a command of
// its own, since Linux starts a child's peak RSS at its spawner's and the
// test process's would count. The test's Main must build "rusage".
func Capped(stats string, fileBlocks int, name string, args ...string) *exec.Cmd {
	limits := "ulimit -v " + strconv.Itoa(CapKB)
	if fileBlocks > 0 {
		limits += " && ulimit -f " + strconv.Itoa(fileBlocks)
	}
	return Command("rusage", append([]string{stats, "sh", "-c", limits + ` && exec "$0" "$@"`, Path(name)}, args...)...)
}

// PeakRSS is the exit code and the peak resident bytes the rusage
// command wrote to stats; why says what ran, for the failure message.
func PeakRSS(t testing.TB, stats, why string) (code int, rss int64) {
	t.Helper()
	b, err := os.ReadFile(stats)
	f := strings.Fields(string(b))
	if err != nil || len(f) < 5 {
		t.Fatalf("no figures from rusage (%v %q):\n%s", err, b, why)
	}
	code, _ = strconv.Atoi(f[0])
	kb, _ := strconv.ParseInt(f[4], 10, 64)
	return code, kb << 10
}
