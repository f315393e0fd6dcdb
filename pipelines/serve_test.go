package pipelines_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/testbin"
)

// requireLong skips a test of more than a few seconds outside the long
// tier, naming the test that covers it in the default one.
func requireLong(t *testing.T, fast string) {
	t.Helper()
	testbin.Long(t, fast+" runs in the default tier")
}

// servedFleet is a serve binary running llmsim servers for a test.
type servedFleet struct {
	cmd    *exec.Cmd
	stderr syncBuffer
	state  string // the state directory
	done   chan struct{}
}

// quickServe is serve's flags for a test: checks often, restarts soon.
var quickServe = []string{"--probe-interval", "50ms", "--backoff", "50ms", "--max-backoff", "200ms", "--unhealthy-after", "300ms", "--grace", "5s", "--progress", "0"}

// startServe starts serve with n llmsim servers on free ports, each run
// with llmsimArgs, its state in dir/state; it waits until they are all
// ready. The serve's process group is killed if the test ends first.
func startServe(t *testing.T, dir string, n int, llmsimArgs ...string) *servedFleet {
	t.Helper()
	f := &servedFleet{state: filepath.Join(dir, "state"), done: make(chan struct{})}
	args := append([]string{"--servers", strconv.Itoa(n), "--port", strconv.Itoa(freePorts(t, n)), "--state-dir", f.state}, quickServe...)
	args = append(append(args, "--", filepath.Join(binDir, "llmsim"), "--listen", "127.0.0.1:{port}"), greedy(llmsimArgs)...)
	f.cmd = exec.Command(filepath.Join(binDir, "serve"), args...)
	f.cmd.Stderr = &f.stderr
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { f.cmd.Wait(); close(f.done) }()
	t.Cleanup(func() {
		select {
		case <-f.done:
			return
		default:
		}
		// A test that failed with serve running: serve stops its servers,
		// or, should it not within a bound, they are killed with it.
		f.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-f.done:
		case <-time.After(20 * time.Second):
			syscall.Kill(-f.cmd.Process.Pid, syscall.SIGKILL)
			<-f.done
			for _, pid := range serverPIDs(t, readServeState(t, f.state)) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	waitFor(t, 30*time.Second, "serve's servers to be ready", func() bool {
		if strings.Contains(f.stderr.String(), "serve: error") {
			t.Fatalf("serve failed:\n%s", f.stderr.String())
		}
		return strings.Contains(f.stderr.String(), "servers ready after")
	})
	return f
}

// serveState is what the tests read of a serve's status file.
type serveState struct {
	State   string `json:"state"`
	Servers []struct {
		URL      string `json:"url"`
		State    string `json:"state"`
		PID      int    `json:"pid"`
		Restarts int    `json:"restarts"`
	} `json:"servers"`
}

func readServeState(t *testing.T, stateDir string) serveState {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st serveState
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("%s/state.json: %v", stateDir, err)
	}
	return st
}

// serverPIDs are the processes of every server's group, from /proc.
func serverPIDs(t *testing.T, st serveState) []int {
	t.Helper()
	var pids []int
	for _, s := range st.Servers {
		if s.PID == 0 {
			continue
		}
		out, err := exec.Command("pgrep", "-g", strconv.Itoa(s.PID)).Output()
		if err != nil && len(out) == 0 {
			continue
		}
		for _, f := range strings.Fields(string(out)) {
			pid, _ := strconv.Atoi(f)
			pids = append(pids, pid)
		}
	}
	return pids
}

// assertGone fails for every pid still running (a zombie has ended).
func assertGone(t *testing.T, what string, pids []int) {
	t.Helper()
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] != "Z" {
			t.Errorf("%s: process %d still runs", what, pid)
		}
	}
}

// stop sends SIGTERM to serve and waits for it.
func (f *servedFleet) stop(t *testing.T) {
	t.Helper()
	f.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-f.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not stop within 30s of SIGTERM:\n%s", f.stderr.String())
	}
}

// The whole job on a fleet serve keeps up while its servers die again and
// again: llmsim exits on every 21st request of each life, serve restarts
// it, infer (following serve's endpoints file) rides through, and merge
// ends with exactly one answer per deduplicated prompt. Each life answers
// at most 20, so the restarts are at least prompts/20 - servers. The long
// tier runs a real public dataset; the default one 150 rows of the demo.
func TestGenerateOnServe(t *testing.T) {
	data, extractArgs := filepath.Join(repoRoot, demoData), "--limit 150"
	if testbin.IsLong() {
		real, err := filepath.Abs(testbin.RealData(t, "alpaca_en_demo.json"))
		if err != nil {
			t.Fatal(err)
		}
		data, extractArgs = real, ""
	}
	dir := t.TempDir()
	const servers, perLife = 3, 20
	fleet := startServe(t, dir, servers, "--instant", "--exit-after", strconv.Itoa(perLife))
	env := scriptEnv("ENDPOINTS_FILE="+filepath.Join(fleet.state, "endpoints.txt"), "EXTRACT_ARGS="+extractArgs, "FILTER=0",
		"INFER_ARGS=--max-tokens "+maxTokens+" --retries 100 --backoff 10ms --max-backoff 100ms --probe-interval 50ms")
	p := script(t, 5*time.Minute, dir, env, "generate.sh", data)
	p.must(t, 0)
	kept, gen := filepath.Join(dir, "gen.prompts.jsonl"), filepath.Join(dir, "gen.jsonl")
	ids := keys(readRecords(t, kept))
	assertEachOnce(t, "the answers", keys(readRecords(t, gen)), ids)
	merged := filepath.Join(dir, "merged.jsonl")
	if out, err := exec.Command(filepath.Join(binDir, "merge"), "--prompts", kept, "-o", merged, gen).CombinedOutput(); err != nil {
		t.Fatalf("merge: %v\n%s", err, out)
	}
	assertEachOnce(t, "the merged answers", keys(readRecords(t, merged)), ids)

	st := readServeState(t, fleet.state)
	restarts := 0
	for _, s := range st.Servers {
		restarts += s.Restarts
	}
	if least := len(ids)/perLife - servers; restarts < least {
		t.Errorf("%d restarts for %d prompts at %d a life: want at least %d", restarts, len(ids), perLife, least)
	}
	t.Logf("%d prompts answered through %d restarts", len(ids), restarts)
	pids := serverPIDs(t, st)
	fleet.stop(t)
	assertGone(t, "after serve stopped", pids)
}

// One serve per host with serve-hosts.sh (GNU parallel over ssh; the
// fake ssh's hosts are directories of this machine, so each takes its own
// ports from WORK/serve/HOST.args), the endpoints files gathered by infer
// from WORK/endpoints, the shards answered with sharded.sh on those hosts,
// every prompt exactly once; then stop leaves no server running.
func TestServeHosts(t *testing.T) {
	requireLong(t, "TestSlurmServeScript, one serve per node through serve-node.sh too,")
	requireTools(t, "serve-hosts.sh and sharded.sh run with GNU parallel", "parallel")
	dir := t.TempDir()
	work, fakeHosts := filepath.Join(dir, "work"), filepath.Join(dir, "hosts")
	fakeSSH := filepath.Join(repoRoot, "testdata", "pipelines", "fake-ssh.sh")
	hosts := []string{"h1", "h2"}
	if err := os.MkdirAll(filepath.Join(work, "serve"), 0o755); err != nil {
		t.Fatal(err)
	}
	base := freePorts(t, 4)
	for i, h := range hosts {
		if err := os.WriteFile(filepath.Join(work, "serve", h+".args"), []byte(fmt.Sprintf("--port %d\n", base+2*i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := scriptEnv("HOSTS=h1,h2", "WORK="+work, "FAKE_HOSTS="+fakeHosts, "PARALLEL_ARGS=--ssh "+fakeSSH,
		"SERVE_HOST=127.0.0.1", "SERVE_ARGS=--servers 2 "+strings.Join(quickServe, " "), "WAIT=60")
	start := script(t, 2*time.Minute, dir, env, "serve-hosts.sh", "start", filepath.Join(binDir, "llmsim"), "--listen", "127.0.0.1:{port}", "--instant")
	start.must(t, 0)
	var pids []int
	for _, h := range hosts {
		listed, err := os.ReadFile(filepath.Join(work, "endpoints", h+".txt"))
		if err != nil || strings.Count(string(listed), "http://127.0.0.1:") != 2 {
			t.Fatalf("%s's endpoints file (%v):\n%s", h, err, listed)
		}
		pids = append(pids, serverPIDs(t, readServeState(t, filepath.Join(work, "serve", h)))...)
	}

	shardEnv := scriptEnv("ENDPOINTS_FILE="+filepath.Join(work, "endpoints"), "WORK="+work, "FAKE_HOSTS="+fakeHosts, "SHARDS=3",
		"HOSTS=h1,h2", "PARALLEL_ARGS=--ssh "+fakeSSH, "INFER_ARGS=--max-tokens "+maxTokens)
	p := script(t, 2*time.Minute, dir, shardEnv, "sharded.sh", prompts)
	p.must(t, 0)
	assertMergedFromAll(t, filepath.Join(work, "gen.jsonl"), 4)

	status := script(t, time.Minute, dir, env, "serve-hosts.sh", "status")
	status.must(t, 0)
	if n := strings.Count(status.stdout.String(), " ready "); n != 4 {
		t.Errorf("status shows %d servers ready, want 4:\n%s", n, status.stdout.String())
	}
	stop := script(t, time.Minute, dir, env, "serve-hosts.sh", "stop")
	stop.must(t, 0)
	waitFor(t, 30*time.Second, "both serves to stop", func() bool {
		for _, h := range hosts {
			if readServeState(t, filepath.Join(work, "serve", h)).State != "stopped" {
				return false
			}
		}
		return true
	})
	assertGone(t, "after serve-hosts.sh stop", pids)
}

// nodeArgs gives each of nodes its own ports (the nodes of a test are all
// this machine): WORK/serve/NODE.args, as a node with other GPUs would
// have its own --gpus.
func nodeArgs(t *testing.T, work string, nodes []string, perNode int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(work, "serve"), 0o755); err != nil {
		t.Fatal(err)
	}
	base := freePorts(t, perNode*len(nodes))
	for i, n := range nodes {
		if err := os.WriteFile(filepath.Join(work, "serve", n+".args"), []byte(fmt.Sprintf("--port %d\n", base+perNode*i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// assertMergedFromAll checks that the merged file answers every prompt
// once, and that servers of every node (n in all) answered.
func assertMergedFromAll(t *testing.T, gen string, n int) {
	t.Helper()
	recs := readRecords(t, gen)
	assertEachOnce(t, "the merged answers", keys(recs), keys(readRecords(t, prompts)))
	used := map[string]bool{}
	for _, r := range recs {
		used[r.Output.Endpoint] = true
	}
	if len(used) != n {
		t.Errorf("the answers came from %d servers, want all %d of every node: %v", len(used), n, used)
	}
}

// waitNodesReady waits for every node's serve to say its servers are ready.
func waitNodesReady(t *testing.T, work string, nodes []string, script *proc) {
	t.Helper()
	waitFor(t, time.Minute, "every node's servers to be ready", func() bool {
		if script.exited() {
			t.Fatalf("%s exited %d before its servers were ready:\n%s", script.name, script.code, script.stderr.String())
		}
		for _, n := range nodes {
			log, _ := os.ReadFile(filepath.Join(work, "serve", n+".log"))
			if !strings.Contains(string(log), "servers ready after") {
				return false
			}
		}
		return true
	})
}

// assertNodesStopped waits for every node's serve to have stopped and
// checks that none of pids runs.
func assertNodesStopped(t *testing.T, work string, nodes []string, pids []int) {
	t.Helper()
	waitFor(t, 30*time.Second, "every node's serve to stop", func() bool {
		for _, n := range nodes {
			if readServeState(t, filepath.Join(work, "serve", n)).State != "stopped" {
				return false
			}
		}
		return true
	})
	assertGone(t, "after the serve job ended", pids)
}

// slurm-serve.sbatch run by bash with a stand-in for srun (two "nodes" on
// this machine, no cluster needed), then slurm-array.sbatch's tasks and
// merge with ENDPOINTS_FILE=WORK/endpoints: every prompt answered once,
// by servers of both nodes. SIGTERM to the job's processes, as scancel
// sends it (srun passing it on as well), stops every serve and server.
func TestSlurmServeScript(t *testing.T) {
	dir := t.TempDir()
	work, fakeBin := filepath.Join(dir, "work"), filepath.Join(dir, "fakebin")
	if err := os.MkdirAll(fakeBin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(repoRoot, "testdata", "pipelines", "fake-srun.sh"), filepath.Join(fakeBin, "srun")); err != nil {
		t.Fatal(err)
	}
	nodes := []string{"node0", "node1"}
	nodeArgs(t, work, nodes, 2)
	env := scriptEnv("WORK="+work, "FAKE_NODES=2", "SERVE_HOST=127.0.0.1", "PIPELINES="+filepath.Join(repoRoot, "pipelines"),
		"SERVE_ARGS=--servers 2 "+strings.Join(quickServe, " "), "PATH="+fakeBin+":"+os.Getenv("PATH"))
	job := startScript(t, dir, env, "slurm-serve.sbatch", filepath.Join(binDir, "llmsim"), "--listen", "127.0.0.1:{port}", "--instant")
	waitNodesReady(t, work, nodes, job)
	var pids []int
	for _, n := range nodes {
		pids = append(pids, serverPIDs(t, readServeState(t, filepath.Join(work, "serve", n)))...)
	}

	const shards = 3
	arrayEnv := scriptEnv("ENDPOINTS_FILE="+filepath.Join(work, "endpoints"), "WORK="+work, "INFER_ARGS=--max-tokens "+maxTokens)
	for k := range shards {
		task := append(arrayEnv, fmt.Sprintf("SLURM_JOB_ID=%d", 100+k), fmt.Sprintf("SLURM_ARRAY_TASK_ID=%d", k), fmt.Sprintf("SLURM_ARRAY_TASK_COUNT=%d", shards))
		script(t, time.Minute, dir, task, "slurm-array.sbatch", prompts).must(t, 0)
	}
	script(t, time.Minute, dir, append(arrayEnv, "SLURM_JOB_ID=200"), "slurm-array.sbatch", prompts).must(t, 0)
	assertMergedFromAll(t, filepath.Join(work, "gen.jsonl"), 4)

	syscall.Kill(-job.cmd.Process.Pid, syscall.SIGTERM)
	job.wait(t, time.Minute)
	assertNodesStopped(t, work, nodes, pids)
	for _, n := range nodes {
		if log, _ := os.ReadFile(filepath.Join(work, "serve", n+".log")); strings.Contains(string(log), "interrupted twice") {
			t.Errorf("%s's serve took scancel's SIGTERM, passed on by srun too, for a second signal:\n%s", n, log)
		}
	}
}

// The serve job submitted for real on a cluster of one node: its serve
// comes up, an array job whose tasks wait for its endpoints answers every
// prompt once, and scancel stops every server.
func TestSlurmServe(t *testing.T) {
	requireLong(t, "TestSlurmServeScript")
	cluster := startSlurm(t)
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	nodeArgs(t, work, []string{host}, 2)
	env := scriptEnv("WORK="+work, "SERVE_HOST=127.0.0.1", "SERVE_ARGS=--servers 2 "+strings.Join(quickServe, " "),
		"PIPELINES="+filepath.Join(repoRoot, "pipelines"))
	sbatch := filepath.Join(repoRoot, "pipelines", "slurm-serve.sbatch")
	serveJob := cluster.slurm(t, dir, env, "sbatch", "--parsable", sbatch, filepath.Join(binDir, "llmsim"), "--listen", "127.0.0.1:{port}", "--instant")
	serveJob, _, _ = strings.Cut(serveJob, ";")
	t.Cleanup(func() { exec.Command("scancel", serveJob).Run() })

	arrayEnv := scriptEnv("ENDPOINTS_FILE="+filepath.Join(work, "endpoints"), "WORK="+work, "INFER_ARGS=--max-tokens "+maxTokens, "WAIT_SERVERS=60")
	array := filepath.Join(repoRoot, "pipelines", "slurm-array.sbatch")
	tasks := cluster.slurm(t, dir, arrayEnv, "sbatch", "--parsable", "--array=0-1", array, prompts)
	tasks, _, _ = strings.Cut(tasks, ";")
	merge := cluster.slurm(t, dir, arrayEnv, "sbatch", "--parsable", "--dependency=afterany:"+tasks, array, prompts)
	merge, _, _ = strings.Cut(merge, ";")
	cluster.waitCompleted(t, dir, "the merge job", merge)
	assertEachOnce(t, "the merged answers", keys(readRecords(t, filepath.Join(work, "gen.jsonl"))), keys(readRecords(t, prompts)))
	pids := serverPIDs(t, readServeState(t, filepath.Join(work, "serve", host)))
	cluster.slurm(t, dir, env, "scancel", serveJob)
	assertNodesStopped(t, work, []string{host}, pids)
	waitFor(t, time.Minute, "the serve job to end", func() bool {
		state := cluster.jobs(t, serveJob)[0][0]
		return state != "RUNNING" && state != "COMPLETING"
	})
}
