package pipelines_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/testbin"
)

// slurmCluster is a private single-node cluster started by
// testdata/slurm/cluster.sh for one test.
type slurmCluster struct {
	dir string
	env []string // SLURM_CONF, for sbatch and scontrol
}

// startSlurm starts the cluster on free ports and stops it, daemons and
// all, when the test ends, whether it passed or not.
func startSlurm(t *testing.T) *slurmCluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not root: the Slurm test starts munged, slurmctld and slurmd as root")
	}
	requireTools(t, "the Slurm test submits a job array to a cluster of its own",
		"sbatch", "scontrol", "slurmctld", "slurmd", "munged")
	c := &slurmCluster{dir: t.TempDir()}
	clusterSh := filepath.Join(repoRoot, "testdata", "slurm", "cluster.sh")
	t.Cleanup(func() {
		if out, err := exec.Command("bash", clusterSh, "stop", c.dir).CombinedOutput(); err != nil {
			t.Errorf("cluster.sh stop: %v\n%s", err, out)
		}
		if procs := processesMentioning(c.dir); len(procs) > 0 {
			t.Errorf("Slurm daemons still running after cluster.sh stop:\n%s", strings.Join(procs, "\n"))
		}
	})
	start := exec.Command("bash", clusterSh, "start", c.dir)
	start.Env = scriptEnv(fmt.Sprintf("SLURM_TEST_PORT=%d", freePorts(t, 2)))
	out, err := start.Output()
	if err != nil {
		var stderr []byte
		if e, ok := err.(*exec.ExitError); ok {
			stderr = e.Stderr
		}
		t.Fatalf("cluster.sh start: %v\n%s%s", err, out, stderr)
	}
	conf, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "export SLURM_CONF=")
	if !ok {
		t.Fatalf("cluster.sh start printed %q, not export SLURM_CONF=...", out)
	}
	c.env = []string{"SLURM_CONF=" + conf}
	return c
}

// slurm runs a Slurm client command and returns its output.
func (c *slurmCluster) slurm(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir, cmd.Env = dir, append(env, c.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

var (
	jobStateRe = regexp.MustCompile(`\bJobState=(\S+)`)
	exitCodeRe = regexp.MustCompile(`\bExitCode=(\S+)`)
)

// jobs returns the state and exit code of each job (or array task) of id.
func (c *slurmCluster) jobs(t *testing.T, id string) [][2]string {
	t.Helper()
	var jobs [][2]string
	for _, line := range strings.Split(c.slurm(t, "", scriptEnv(), "scontrol", "-o", "show", "job", id), "\n") {
		state, code := jobStateRe.FindStringSubmatch(line), exitCodeRe.FindStringSubmatch(line)
		if state == nil || code == nil {
			t.Fatalf("scontrol show job %s: no JobState or ExitCode in %q", id, line)
		}
		jobs = append(jobs, [2]string{state[1], code[1]})
	}
	return jobs
}

// logs gathers the jobs' output files and the daemons' logs, for a failure message.
func (c *slurmCluster) logs(dir string) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(dir, "slurm-*.out"))
	for _, f := range append(files, filepath.Join(c.dir, "slurmctld.log"), filepath.Join(c.dir, "slurmd.log")) {
		data, _ := os.ReadFile(f)
		fmt.Fprintf(&b, "== %s\n%s\n", f, tail(string(data), 15))
	}
	return b.String()
}

// waitCompleted waits for job id to end, failing the test unless it
// completed.
func (c *slurmCluster) waitCompleted(t *testing.T, dir, what, id string) {
	t.Helper()
	waitFor(t, 2*time.Minute, what+" "+id+" to end", func() bool {
		switch state := c.jobs(t, id)[0][0]; state {
		case "PENDING", "CONFIGURING", "RUNNING", "COMPLETING":
			return false
		case "COMPLETED":
			return true
		default:
			t.Fatalf("%s %s ended %s\n%s", what, id, state, c.logs(dir))
			return true
		}
	})
}

// slurm-array.sbatch submitted for real: one array task per shard, then the
// merge as a job that depends on the array, on a cluster of one node. The
// merged answers are those of the single-machine run.
func TestSlurmArray(t *testing.T) {
	testbin.Long(t, "a Slurm cluster of its own")
	t.Parallel() // mostly waiting on the scheduler
	cluster := startSlurm(t)
	endpoints := startFleet(t, 4, "--time-scale", "500")
	ref := reference(t, endpoints)
	ids := keys(readRecords(t, prompts))
	dir := t.TempDir()
	work := filepath.Join(dir, "run")
	const shards = 4
	env := scriptEnv("ENDPOINTS="+endpoints, "WORK="+work, "INFER_ARGS=--max-tokens "+maxTokens)
	sbatch := filepath.Join(repoRoot, "pipelines", "slurm-array.sbatch")

	array := cluster.slurm(t, dir, env, "sbatch", "--parsable", fmt.Sprintf("--array=0-%d", shards-1), sbatch, prompts)
	array, _, _ = strings.Cut(array, ";")
	merge := cluster.slurm(t, dir, env, "sbatch", "--parsable", "--dependency=afterany:"+array, sbatch, prompts)
	merge, _, _ = strings.Cut(merge, ";")
	if _, err := strconv.Atoi(array + merge); err != nil {
		t.Fatalf("sbatch --parsable gave job ids %q and %q", array, merge)
	}

	cluster.waitCompleted(t, dir, "the merge job", merge)
	tasks := cluster.jobs(t, array)
	if len(tasks) != shards {
		t.Fatalf("array job %s has %d tasks, want %d", array, len(tasks), shards)
	}
	for i, task := range tasks {
		if task != [2]string{"COMPLETED", "0:0"} {
			t.Errorf("array task %d: %s, exit %s", i, task[0], task[1])
		}
	}
	if t.Failed() {
		t.Fatal(cluster.logs(dir))
	}

	assertSameAnswers(t, filepath.Join(work, "gen.jsonl"), ref)
	var genIDs []string
	for k := range shards {
		genIDs = append(genIDs, keys(readRecords(t, filepath.Join(work, fmt.Sprintf("shard-%d.gen.jsonl", k))))...)
	}
	assertEachOnce(t, "the array tasks' answers", genIDs, ids)
}

// The batch script's two modes, run by bash with the variables Slurm sets
// (no cluster needed): each array task answers its shard; the merge job
// lists what lacks an answer and exits 3; a task past the array's size
// refuses to run.
func TestSlurmScriptModes(t *testing.T) {
	down := startFleet(t, 2, "--time-scale", "500", "--fail-rate", "0.5")
	dir := t.TempDir()
	work := filepath.Join(dir, "run")
	const shards = 3
	env := scriptEnv("ENDPOINTS="+down, "WORK="+work, "INFER_ARGS=--max-tokens "+maxTokens+" --retries 0 --eject-after 1000000")
	ids := keys(readRecords(t, prompts))

	var answered, failed []string
	for k := range shards {
		task := append(env, fmt.Sprintf("SLURM_JOB_ID=%d", 100+k), fmt.Sprintf("SLURM_ARRAY_TASK_ID=%d", k),
			fmt.Sprintf("SLURM_ARRAY_TASK_COUNT=%d", shards))
		p := script(t, time.Minute, dir, task, "slurm-array.sbatch", prompts)
		if p.code != 0 && p.code != 3 {
			t.Fatalf("task %d exited %d\n%s", k, p.code, p.stderr.String())
		}
		answered = append(answered, keys(readRecords(t, filepath.Join(work, fmt.Sprintf("shard-%d.gen.jsonl", k))))...)
		failed = append(failed, keys(readRecords(t, filepath.Join(work, fmt.Sprintf("shard-%d.errors.jsonl", k))))...)
	}
	assertEachOnce(t, "the tasks' answers and errors", append(slices.Clone(answered), failed...), ids)
	if len(failed) == 0 || len(answered) == 0 {
		t.Fatalf("%d answered, %d failed: the test needs some of each", len(answered), len(failed))
	}

	p := script(t, time.Minute, dir, append(env, "SLURM_JOB_ID=200"), "slurm-array.sbatch", prompts)
	p.must(t, 3)
	assertEachOnce(t, "the merged answers", keys(readRecords(t, filepath.Join(work, "gen.jsonl"))), answered)
	assertEachOnce(t, "the to-do list", keys(readRecords(t, filepath.Join(work, "gen.todo.jsonl"))), failed)

	past := append(env, "SLURM_JOB_ID=300", "SLURM_ARRAY_TASK_ID=3", "SHARDS=3")
	p = script(t, time.Minute, dir, past, "slurm-array.sbatch", prompts)
	p.must(t, 2)
}
