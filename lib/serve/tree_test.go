package serve

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/testbin"
	"tokenmill/lib/procgroup"
)

// pidsIn reads the pids a server script appended to path, one a line.
func pidsIn(t *testing.T, path string) []int {
	t.Helper()
	b, _ := os.ReadFile(path)
	var out []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("%s: %q", path, b)
		}
		out = append(out, pid)
	}
	return out
}

// waitGone waits, up to within, until none of pids runs.
func waitGone(t *testing.T, within time.Duration, what string, pids []int) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var alive []int
		for _, pid := range pids {
			if procgroup.Running(pid, 0) {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v still run %v on", what, alive, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A server whose workers leave its process group: one calls setsid (its
// environment kept), another calls setsid and forks again with its
// environment cleared (env -i), its parent exiting at once, so that it
// is an orphan nobody's group, descent or mark names. The first start
// crashes on its own; the second runs until serve is stopped. Every
// worker of the first start is ended before the second is started (with
// a cgroup; without one, the unmarked orphan when serve stops: it cannot
// be told to belong to the server before), every worker of the second
// when serve stops, none left, and serve says which processes it ended
// outside the group. Stopping by the group alone left one worker per
// start, holding its GPU's memory.
func TestWorkersThatLeaveTheGroup(t *testing.T) {
	for _, mode := range []string{"auto", "off"} {
		t.Run("cgroup "+mode, func(t *testing.T) {
			f := newFleetDir(t, 1)
			script := f.script(t, "server.sh", fmt.Sprintf(`# $1: port
dir=%[2]q
setsid sleep 300 &
echo "$!" >> "$dir/workers"
setsid sh -c 'env -i sleep 301 & echo "$!" >> "$0"' "$dir/bare"
if mkdir "$dir/crashed" 2>/dev/null; then
  sleep 0.3
  exit 3
fi
exec %[1]q --listen "127.0.0.1:$1" --instant
`, testbin.Path("llmsim"), f.dir))
			serve := f.startServe(t, 1, []string{"--cgroup", mode}, script, "{port}")
			line := serve.WaitFor(t, 30*time.Second, `each server's processes`)
			cgroups := strings.Contains(line, "in a cgroup of its own")
			if mode == "off" && cgroups {
				t.Fatalf("--cgroup off, but: %s", line)
			}
			t.Logf("%s", line)
			// With a cgroup both workers are ended; without, the unmarked
			// orphan only if serve saw it in the server's tree before.
			ended := `(1 process|2 processes)`
			if cgroups {
				ended = `2 processes`
			}
			serve.WaitFor(t, 30*time.Second, `server 0 \(.*\): ended `+ended+` that had left its process group \(setsid or a group of its own\), by SIGTERM: pid \d+ \(sleep\)`)
			serve.WaitFor(t, 30*time.Second, `server 0 .* is ready`)
			first := pidsIn(t, filepath.Join(f.dir, "workers"))
			bare := pidsIn(t, filepath.Join(f.dir, "bare"))
			if len(first) != 2 || len(bare) != 2 {
				t.Fatalf("the script recorded workers %v and %v, want two each", first, bare)
			}
			// Ended before the second start was made.
			waitGone(t, 0, "the first start's setsid worker", first[:1])
			if cgroups {
				waitGone(t, 0, "the first start's unmarked orphan, in its cgroup", bare[:1])
				st := f.status(t)
				if c := st.Servers[0].Cgroup; c == "" || len(cgroupProcs(c)) == 0 {
					t.Errorf("the status file names the server's cgroup %q, holding %v", c, cgroupProcs(c))
				}
			}
			st := f.waitState(t, "the second start ready", func(st *State) bool { return st.Servers[0].State == stateReady })
			if !strings.Contains(st.Servers[0].LastExit, "exited (exit status 3); ended ") || !strings.Contains(st.Servers[0].LastExit, fmt.Sprintf("pid %d (sleep)", first[0])) {
				t.Errorf("the last exit does not say what was ended: %q", st.Servers[0].LastExit)
			}
			for _, pid := range append(first[1:], bare[1:]...) {
				if !procgroup.Running(pid, 0) {
					t.Fatalf("the second start's worker %d is not running: the test needs it", pid)
				}
			}

			serve.Signal(t, syscall.SIGTERM)
			res := serve.Wait(t, 30*time.Second)
			if res.Code != 130 {
				t.Errorf("serve exited %d after SIGTERM, want 130:\n%s", res.Code, res.Stderr)
			}
			waitGone(t, 0, "the workers, once serve has exited", append(first, bare...))
			t.Logf("serve said:\n%s", res.Stderr)
			if !strings.Contains(res.Stderr, fmt.Sprintf("pid %d (sleep)", first[1])) {
				t.Errorf("serve did not say it ended the second start's worker %d:\n%s", first[1], res.Stderr)
			}
			if st := f.status(t); st.Servers[0].Cgroup != "" {
				t.Errorf("the status file still names a cgroup: %q", st.Servers[0].Cgroup)
			} else if cgroups {
				if _, err := os.Stat(filepath.Dir(filepath.Dir(st.Servers[0].Log))); err != nil {
					t.Fatal(err)
				}
			}
			if cgroups {
				base := strings.TrimSuffix(strings.SplitN(line, " under ", 2)[1], ", ended with it")
				if _, err := os.Stat(base); err == nil {
					t.Errorf("serve's cgroups (%s) are left after it stopped", base)
				}
			}
		})
	}
}

// A serve killed with -9 leaves its server running, a setsid worker
// with it, which init adopts; serve stop ends both: the group, and the
// worker by its cgroup or its mark, saying so.
func TestStopFindsWorkersOfAKilledServe(t *testing.T) {
	f := newFleetDir(t, 1)
	script := f.script(t, "server.sh", fmt.Sprintf(`setsid sleep 300 &
echo "$!" >> %[2]q
exec %[1]q --listen "127.0.0.1:$1" --instant
`, testbin.Path("llmsim"), filepath.Join(f.dir, "workers")))
	serve := f.startServe(t, 1, nil, script, "{port}")
	serve.WaitFor(t, 30*time.Second, "all 1 servers ready")
	st := f.status(t)
	workers := pidsIn(t, filepath.Join(f.dir, "workers"))
	serve.Signal(t, syscall.SIGKILL)
	serve.Wait(t, 10*time.Second)
	if len(workers) != 1 || !procgroup.Running(workers[0], 0) || !procgroup.Running(st.Servers[0].PID, 0) {
		t.Fatalf("the server (%d) and its worker %v should run on after serve's kill -9", st.Servers[0].PID, workers)
	}
	stop := testbin.Run(t, "", nil, nil, "serve", "stop", "--state-dir", f.state, "--grace", "5s")
	want := fmt.Sprintf("server 0: ended 1 process that had left its process group (setsid or a group of its own), by SIGTERM: pid %d (sleep)", workers[0])
	if stop.Code != 0 || !strings.Contains(stop.Stderr, want) {
		t.Errorf("serve stop exited %d, want 0 saying %q:\n%s", stop.Code, want, stop.Stderr)
	}
	waitGone(t, 0, "the server and its worker after serve stop", append(workers, st.Servers[0].PID))
}
