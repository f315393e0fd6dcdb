package serve

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/testbin"
	"tokenmill/lib/procgroup"
)

func TestMain(m *testing.M) { testbin.Main(m, "serve", "llmsim", "infer") }

// freePorts finds n consecutive free ports.
func freePorts(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		// Below the kernel's ephemeral range (32768 up on Linux), where the
		// ports other tests' listeners and clients take at random would
		// land between the check and serve's start.
		base := 20000 + rand.IntN(12000-n)
		ok := true
		for p := base; p < base+n && ok; p++ {
			ok = portFree("127.0.0.1", p) == nil
		}
		if ok {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}

// fleetDir is one test's serve: its state directory and its first port.
type fleetDir struct {
	dir, state string
	port       int
}

func newFleetDir(t *testing.T, n int) fleetDir {
	dir := t.TempDir()
	return fleetDir{dir: dir, state: filepath.Join(dir, "state"), port: freePorts(t, n)}
}

func (f fleetDir) endpoints() string { return filepath.Join(f.state, endpointsName) }

// startServe starts the serve binary on f with quick settings and the
// server command after them.
func (f fleetDir) startServe(t *testing.T, servers int, flags []string, command ...string) *testbin.Proc {
	t.Helper()
	args := []string{"--servers", strconv.Itoa(servers), "--port", strconv.Itoa(f.port), "--state-dir", f.state,
		"--probe-interval", "50ms", "--backoff", "50ms", "--unhealthy-after", "300ms", "--grace", "5s", "--progress", "0"}
	args = append(append(args, flags...), "--")
	// Registered before the serve's own cleanup (which kills it), so run
	// after it: a test that fails with serve running leaves no server.
	t.Cleanup(func() { killServers(f.state) })
	return testbin.Start(t, "serve", append(args, command...)...)
}

// killServers kills every process of every server the status file of
// state names.
func killServers(state string) {
	if st, err := readState(state); err == nil {
		for _, s := range st.Servers {
			if stillRuns(st, s) {
				fam := leftFamily(st, s)
				fam.kill(fam.members())
			}
		}
	}
}

// script writes an executable shell script into f's directory.
func (f fleetDir) script(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(f.dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// status reads f's status file.
func (f fleetDir) status(t *testing.T) *State {
	t.Helper()
	st, err := readState(f.state)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitState waits, with a bound, until the status file satisfies cond.
func (f fleetDir) waitState(t *testing.T, what string, cond func(*State) bool) *State {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := readState(f.state)
		if err == nil && cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(st, "", "  ")
			t.Fatalf("the status file does not show %s within 30s (%v):\n%s", what, err, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serverPIDs lists every process of every server's group that runs now.
func serverPIDs(st *State) []int {
	var pids []int
	for _, s := range st.Servers {
		pids = append(pids, procgroup.Alive(s.PID)...)
	}
	return pids
}

// prompts writes n prompt records and returns the file and their ids.
func prompts(t *testing.T, dir string, n int) (string, []string) {
	t.Helper()
	var b strings.Builder
	var ids []string
	for i := range n {
		id := fmt.Sprintf("q%03d", i)
		ids = append(ids, id)
		fmt.Fprintf(&b, `{"id":%q,"messages":[{"role":"user","content":"question %d"}]}`+"\n", id, i)
	}
	path := filepath.Join(dir, "prompts.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, ids
}

// ids reads the id and answering endpoint of every record of a JSONL
// file (a missing file holds none).
func ids(t *testing.T, path string) (ids, endpoints []string) {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r struct {
			ID     string `json:"id"`
			Output struct {
				Endpoint string `json:"endpoint"`
			} `json:"output"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v: %s", path, err, sc.Bytes())
		}
		ids, endpoints = append(ids, r.ID), append(endpoints, r.Output.Endpoint)
	}
	return ids, endpoints
}

// assertEachOnce fails unless got holds every id of want exactly once.
func assertEachOnce(t *testing.T, what string, got, want []string) {
	t.Helper()
	g, w := slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
	if !slices.Equal(g, w) {
		t.Errorf("%s: %d records, want each of %d ids once (first of each: %v / %v)", what, len(got), len(want), g[:min(5, len(g))], w[:min(5, len(w))])
	}
}

// assertNoneRuns fails for every pid that still runs, and every server
// whose group still has a process.
func assertNoneRuns(t *testing.T, pids []int, st *State) {
	t.Helper()
	for _, pid := range pids {
		if procgroup.Running(pid, 0) {
			t.Errorf("process %d still runs after serve stopped", pid)
		}
	}
	for _, s := range st.Servers {
		if s.PID != 0 {
			t.Errorf("server %d: the status file still names pid %d after serve stopped", s.Index, s.PID)
		}
	}
}

// crashOnce is a server script that dies once, in its first life, on its
// sixth generation request: as a process that exits (exit), or as one
// whose endpoint goes away while the process stays (hang: only its
// failing readiness check tells). Later lives run for good.
func crashOnce(t *testing.T, f fleetDir) string {
	return f.script(t, "server.sh", fmt.Sprintf(`# $1: index, $2: port, $3: exit or hang
llmsim=%q
if mkdir "%s/crashed-$1" 2>/dev/null; then
  case $3 in
  exit) exec "$llmsim" --listen "127.0.0.1:$2" --instant --exit-after 5 ;;
  hang) exec "$llmsim" --listen "127.0.0.1:$2" --instant --crash-after 5 ;;
  esac
fi
exec "$llmsim" --listen "127.0.0.1:$2" --instant
`, testbin.Path("llmsim"), f.dir))
}

// Servers killed during an infer run: two processes exit on their sixth
// request, the third stops answering while its process lives. serve
// restarts each (the exits at once, the silent one once its readiness
// check has failed for --unhealthy-after), infer rides through on the
// restarted servers, which alone can answer what is left after the first
// five answers each, and every prompt is answered exactly once. The
// status shows one restart per server, each with its last exit, and the
// fleet back to full; SIGTERM then stops them all, no process left.
func TestCrashAndRestartDuringRun(t *testing.T) {
	f := newFleetDir(t, 3)
	script := crashOnce(t, f)
	serve := f.startServe(t, 3, nil, "sh", "-c", script+" {index} {port} $([ {index} = 2 ] && echo hang || echo exit)")
	serve.WaitFor(t, 30*time.Second, "all 3 servers ready")
	in, want := prompts(t, f.dir, 300)
	gen := filepath.Join(f.dir, "gen.jsonl")
	r := testbin.Run(t, f.dir, nil, nil, "infer", "--endpoints-file", f.endpoints(), "--probe-interval", "50ms",
		"--backoff", "20ms", "--max-backoff", "200ms", "--max-tokens", "8", "-o", gen, in)
	if r.Code != 0 {
		t.Fatalf("infer exited %d:\n%s", r.Code, r.Stderr)
	}
	got, _ := ids(t, gen)
	assertEachOnce(t, "the answers", got, want)
	if failed, _ := ids(t, filepath.Join(f.dir, "gen.errors.jsonl")); len(failed) != 0 {
		t.Errorf("%d prompts failed:\n%s", len(failed), r.Stderr)
	}
	st := f.waitState(t, "every server ready again after one restart", func(st *State) bool {
		for _, s := range st.Servers {
			if s.State != stateReady || s.Restarts != 1 {
				return false
			}
		}
		return true
	})
	for i, want := range []string{"exited (exit status 1)", "exited (exit status 1)", "stopped: its readiness check failed for"} {
		if s := st.Servers[i]; !strings.HasPrefix(s.LastExit, want) || s.FailedStarts != 0 {
			t.Errorf("server %d: last exit %q, %d failed starts; want %q..., 0", i, s.LastExit, s.FailedStarts, want)
		}
	}
	status := testbin.Run(t, "", nil, nil, "serve", "status", "--state-dir", f.state)
	if status.Code != 0 || strings.Count(string(status.Stdout), " ready ") != 3 || !strings.Contains(string(status.Stdout), "exited (exit status 1) at") {
		t.Errorf("serve status exited %d:\n%s%s", status.Code, status.Stdout, status.Stderr)
	}
	log, _ := os.ReadFile(st.Servers[0].Log)
	if n := strings.Count(string(log), "=== serve: start "); n != 2 || !strings.Contains(string(log), "exiting on generation request 6 (--exit-after 5)") {
		t.Errorf("server 0's log holds %d starts, and not its exit?\n%s", n, log)
	}

	pids := serverPIDs(st)
	serve.Signal(t, syscall.SIGTERM)
	res := serve.Wait(t, 30*time.Second)
	if res.Code != 130 {
		t.Errorf("serve exited %d after SIGTERM, want 130:\n%s", res.Code, res.Stderr)
	}
	final := f.status(t)
	assertNoneRuns(t, pids, final)
	if listed, _ := os.ReadFile(f.endpoints()); strings.Contains(string(listed), "http://") {
		t.Errorf("the endpoints file still lists servers after serve stopped:\n%s", listed)
	}
	for _, want := range []string{"restarting it in", "stopped answering its readiness check", "stopped: 3 servers, 3 restarts in all"} {
		if !strings.Contains(res.Stderr, want) {
			t.Errorf("serve did not say %q:\n%s", want, res.Stderr)
		}
	}
}

// stubborn is a server command whose shell and worker ignore SIGTERM
// (llmsim itself stops on it): only SIGKILL ends its group.
func stubborn() []string {
	return []string{"sh", "-c", `trap "" TERM; "$0" --listen 127.0.0.1:{port} --instant & sleep 300 & wait`, testbin.Path("llmsim")}
}

// SIGINT stops every server: SIGTERM to each process group, SIGKILL to
// those still there after --grace. Every process of every group is gone
// by pid, the status file names none, the endpoints file lists none. The
// signal told twice at once (a scheduler and its launcher both pass it
// on) is one stop; a second SIGINT later kills them at once, without
// waiting out --grace.
func TestShutdownLeavesNoProcess(t *testing.T) {
	for _, tt := range []struct {
		name  string
		grace string
		twice bool
	}{{"grace then SIGKILL", "300ms", false}, {"second signal", "1h", true}} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleetDir(t, 2)
			serve := f.startServe(t, 2, []string{"--grace", tt.grace}, stubborn()...)
			serve.WaitFor(t, 30*time.Second, "all 2 servers ready")
			pids := serverPIDs(f.status(t))
			if len(pids) != 6 {
				t.Fatalf("the servers' groups hold %v, want a shell, llmsim and a worker each", pids)
			}
			serve.Signal(t, syscall.SIGINT)
			serve.WaitFor(t, 10*time.Second, "interrupted: stopping 2 servers")
			if tt.twice {
				time.Sleep(sameSignal + 100*time.Millisecond) // a signal given again, not the same one twice
			}
			serve.Signal(t, syscall.SIGINT)
			res := serve.Wait(t, 30*time.Second)
			if res.Code != 130 || strings.Contains(res.Stderr, "interrupted twice") != tt.twice {
				t.Errorf("serve exited %d, want 130, exiting at once: %v:\n%s", res.Code, tt.twice, res.Stderr)
			}
			for _, pid := range pids {
				if procgroup.Running(pid, 0) {
					t.Errorf("process %d still runs after serve exited:\n%s", pid, res.Stderr)
				}
			}
			if tt.twice {
				return // killed at once: the status file is as it was, naming groups that are gone
			}
			final := f.status(t)
			assertNoneRuns(t, pids, final)
			if final.State != serveStopped {
				t.Errorf("serve's state %q", final.State)
			}
			for _, s := range final.Servers {
				if s.State != stateStopped || s.LastExit != "stopped by serve (killed by SIGKILL)" {
					t.Errorf("server %d: %s, last exit %q", s.Index, s.State, s.LastExit)
				}
			}
			if listed, _ := os.ReadFile(f.endpoints()); strings.Contains(string(listed), "http://") {
				t.Errorf("the endpoints file still lists servers:\n%s", listed)
			}
		})
	}
}

// A serve killed with -9 cannot stop its servers: they go on, and the
// next serve finds them. With the same state directory it refuses to
// start, naming them; with another it refuses their ports; serve status
// shows them left running; serve stop stops them, no process left; then
// a serve starts there again.
func TestKilledServeLeavesServersFound(t *testing.T) {
	f := newFleetDir(t, 2)
	command := []string{testbin.Path("llmsim"), "--listen", "127.0.0.1:{port}", "--instant"}
	first := f.startServe(t, 2, nil, command...)
	first.WaitFor(t, 30*time.Second, "all 2 servers ready")
	st := f.status(t)
	pids := serverPIDs(st)
	first.Signal(t, syscall.SIGKILL)
	first.Wait(t, 10*time.Second)
	for _, pid := range pids {
		if !procgroup.Running(pid, 0) {
			t.Fatalf("server process %d died with serve: the test needs them left running", pid)
		}
	}

	again := f.startServe(t, 2, nil, command...).Wait(t, 30*time.Second)
	want := fmt.Sprintf("server 0 (pid %d, port %d), server 1 (pid %d, port %d) of a previous serve (pid %d, which did not stop them: killed?) still run: serve stop --state-dir %s stops them",
		st.Servers[0].PID, f.port, st.Servers[1].PID, f.port+1, st.PID, f.state)
	if again.Code != 1 || !strings.Contains(again.Stderr, want) {
		t.Errorf("a second serve on the same state: exit %d, want 1 saying %q:\n%s", again.Code, want, again.Stderr)
	}
	other := f
	other.state = filepath.Join(f.dir, "other")
	elsewhere := other.startServe(t, 2, nil, command...).Wait(t, 30*time.Second)
	if elsewhere.Code != 1 || !strings.Contains(elsewhere.Stderr, fmt.Sprintf("server 0: port %d is in use", f.port)) {
		t.Errorf("a second serve on the same ports: exit %d:\n%s", elsewhere.Code, elsewhere.Stderr)
	}
	if _, err := os.Stat(filepath.Join(other.state, stateName)); err == nil {
		t.Error("the refused serve wrote a status file")
	}

	status := testbin.Run(t, "", nil, nil, "serve", "status", "--state-dir", f.state)
	if status.Code != 1 || strings.Count(string(status.Stdout), "left running") != 2 || !strings.Contains(status.Stderr, "gone without stopping: killed?") {
		t.Errorf("serve status exited %d:\n%s%s", status.Code, status.Stdout, status.Stderr)
	}
	stop := testbin.Run(t, "", nil, nil, "serve", "stop", "--state-dir", f.state, "--grace", "5s")
	if stop.Code != 0 || !strings.Contains(stop.Stderr, "stopped 2 servers") {
		t.Errorf("serve stop exited %d:\n%s", stop.Code, stop.Stderr)
	}
	assertNoneRuns(t, pids, f.status(t))

	third := f.startServe(t, 2, nil, command...)
	third.WaitFor(t, 30*time.Second, "all 2 servers ready")
	pids = serverPIDs(f.status(t))
	stop = testbin.Run(t, "", nil, nil, "serve", "stop", "--state-dir", f.state)
	if stop.Code != 0 || !strings.Contains(stop.Stderr, "sent SIGTERM to serve") {
		t.Errorf("serve stop of a serve that runs exited %d:\n%s", stop.Code, stop.Stderr)
	}
	if res := third.Wait(t, 30*time.Second); res.Code != 130 {
		t.Errorf("the serve stopped by serve stop exited %d:\n%s", res.Code, res.Stderr)
	}
	assertNoneRuns(t, pids, f.status(t))
}

// A server that cannot start (on its GPU, passed through as
// CUDA_VISIBLE_DEVICES) is given up after --max-failures starts in a row,
// and named; one that never gets ready within --start-timeout
// too; the one that works goes on, alone in the endpoints file. When
// every server is given up, serve exits 1.
func TestGiveUp(t *testing.T) {
	f := newFleetDir(t, 3)
	script := f.script(t, "server.sh", fmt.Sprintf(`case $1 in
0) echo "gpus $CUDA_VISIBLE_DEVICES: no such model" >&2; exit 7 ;;
1) exec sleep 300 ;;
*) exec %q --listen "127.0.0.1:$2" --instant ;;
esac
`, testbin.Path("llmsim")))
	serve := f.startServe(t, 3, []string{"--max-failures", "2", "--start-timeout", "300ms", "--gpus", "4-6"}, script, "{index}", "{port}")
	serve.WaitFor(t, 30*time.Second, `server 0 \(.*\) failed to start 2 times in a row \(last: exited \(exit status 7\)\); giving up on it`)
	st := f.waitState(t, "servers 0 and 1 given up, 2 ready", func(st *State) bool {
		return st.Servers[0].State == stateGivenUp && st.Servers[1].State == stateGivenUp && st.Servers[2].State == stateReady
	})
	if st.Servers[1].FailedStarts != 2 || !strings.HasPrefix(st.Servers[1].LastExit, "stopped: not ready within 300ms (--start-timeout)") {
		t.Errorf("server 1: %+v", st.Servers[1])
	}
	listed, _ := os.ReadFile(f.endpoints())
	if urls := strings.Count(string(listed), "http://"); urls != 1 || !strings.Contains(string(listed), st.Servers[2].URL+"\n") {
		t.Errorf("the endpoints file:\n%s", listed)
	}
	log, _ := os.ReadFile(st.Servers[0].Log)
	if strings.Count(string(log), "gpus 4: no such model") != 2 || !strings.Contains(string(log), "CUDA_VISIBLE_DEVICES=4 ") {
		t.Errorf("server 0's log does not keep both starts' output, on GPU 4:\n%s", log)
	}
	if st.Servers[2].GPUs != "6" {
		t.Errorf("server 2 has GPUs %q, want 6", st.Servers[2].GPUs)
	}
	serve.Signal(t, syscall.SIGTERM)
	serve.Wait(t, 30*time.Second)

	none := newFleetDir(t, 1)
	res := none.startServe(t, 1, []string{"--max-failures", "1"}, "sh", "-c", "exit 3").Wait(t, 30*time.Second)
	if res.Code != 1 || !strings.Contains(res.Stderr, "every server was given up") {
		t.Errorf("every server given up: exit %d:\n%s", res.Code, res.Stderr)
	}
}

// infer follows the endpoints file: it starts with the one server ready,
// which holds every request it gets without answering; the second server
// is let start only once infer runs, and infer takes it from the
// rewritten file. Only it can answer, so every answer comes from it.
func TestInferFollowsTheEndpointsFile(t *testing.T) {
	f := newFleetDir(t, 2)
	gate := filepath.Join(f.dir, "gate")
	script := f.script(t, "server.sh", fmt.Sprintf(`if [ "$1" = 0 ]; then exec %[1]q --listen "127.0.0.1:$2" --instant --hang-rate 1; fi
while [ ! -e %[2]q ]; do sleep 0.02; done
exec %[1]q --listen "127.0.0.1:$2" --instant
`, testbin.Path("llmsim"), gate))
	serve := f.startServe(t, 2, nil, script, "{index}", "{port}")
	serve.WaitFor(t, 30*time.Second, `server 0 .* is ready`)
	in, want := prompts(t, f.dir, 40)
	gen := filepath.Join(f.dir, "gen.jsonl")
	infer := testbin.Start(t, "infer", "--endpoints-file", f.endpoints(), "--probe-interval", "50ms", "--request-timeout", "500ms",
		"--backoff", "20ms", "--max-backoff", "100ms", "--max-tokens", "8", "-o", gen, in)
	infer.Stdin.Close()
	first := f.status(t).Servers[0].URL
	infer.WaitFor(t, 30*time.Second, first+`: /health 200: ready`)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	second := f.status(t).Servers[1].URL
	infer.WaitFor(t, 30*time.Second, "lists a new endpoint, "+second)
	res := infer.Wait(t, time.Minute)
	if res.Code != 0 {
		t.Fatalf("infer exited %d:\n%s", res.Code, res.Stderr)
	}
	got, from := ids(t, gen)
	assertEachOnce(t, "the answers", got, want)
	for i, ep := range from {
		if ep != second {
			t.Errorf("%s answered by %s, not by the server that joined (%s)", got[i], ep, second)
			break
		}
	}
	serve.Signal(t, syscall.SIGTERM)
	serve.Wait(t, 30*time.Second)
}
