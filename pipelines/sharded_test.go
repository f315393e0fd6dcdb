package pipelines_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// requireTools skips the test, saying why, when a program it drives is not
// installed.
func requireTools(t *testing.T, why string, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: %s (Debian: apt-get install %s; .ci/run installs it)", tool, why, debianPackage(tool))
		}
	}
}

func debianPackage(tool string) string {
	switch tool {
	case "sbatch", "squeue", "scontrol", "slurmctld", "slurmd":
		return "slurm-wlm"
	case "munged":
		return "munge"
	}
	return tool
}

// Shard files, per-shard answers and the merge: whether the jobs run in
// local slots or on hosts reached over ssh (fake-ssh.sh stands in for ssh,
// each host a directory with its own home, environment and files), the
// merged answers are those of the single-machine run.
func TestSharded(t *testing.T) {
	requireTools(t, "sharded.sh runs its jobs with GNU parallel", "parallel")
	endpoints := startFleet(t, 4, "--time-scale", "500")
	ref := reference(t, endpoints)
	ids := keys(readRecords(t, prompts))
	fakeSSH := filepath.Join(repoRoot, "testdata", "pipelines", "fake-ssh.sh")

	for _, tc := range []struct {
		name   string
		shards int
		vars   []string
		hosts  []string // fake hosts the jobs must have run on
	}{
		{name: "local job slots", shards: 4, vars: []string{"INFER_ARGS=--max-tokens " + maxTokens}},
		{name: "hosts over ssh, shared WORK", shards: 3, hosts: []string{"h1", "h2"},
			// The hosts from a file instead of HOSTS; TOKENMILL_* reaches
			// them only through parallel --env.
			vars: []string{"HOSTS=", "PARALLEL_ARGS=--ssh " + fakeSSH + " --sshloginfile hosts.txt", "TOKENMILL_INFER_MAX_TOKENS=" + maxTokens}},
		{name: "hosts over ssh, TRANSFER=1", shards: 5, hosts: []string{"h1", "h2", "h3"},
			vars: []string{"HOSTS=h1,h2,h3", "TRANSFER=1", "PARALLEL_ARGS=--ssh " + fakeSSH, "TOKENMILL_INFER_MAX_TOKENS=" + maxTokens}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Contains(tc.name, "TRANSFER") {
				requireTools(t, "TRANSFER=1 copies shards and answers with parallel's rsync", "rsync")
			}
			dir := t.TempDir()
			work, fakeHosts := filepath.Join(dir, "work"), filepath.Join(dir, "hosts")
			if err := os.WriteFile(filepath.Join(dir, "hosts.txt"), []byte(strings.Join(tc.hosts, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			env := scriptEnv(append([]string{"ENDPOINTS=" + endpoints, "WORK=" + work, "FAKE_HOSTS=" + fakeHosts,
				fmt.Sprintf("SHARDS=%d", tc.shards)}, tc.vars...)...)
			p := script(t, 2*time.Minute, dir, env, "sharded.sh", prompts)
			p.must(t, 0)
			out := filepath.Join(work, "gen.jsonl")
			assertSameAnswers(t, out, ref)

			var shardIDs, genIDs []string
			for k := range tc.shards {
				shardIDs = append(shardIDs, keys(readRecords(t, filepath.Join(work, fmt.Sprintf("shard-%d.jsonl", k))))...)
				genIDs = append(genIDs, keys(readRecords(t, filepath.Join(work, fmt.Sprintf("shard-%d.gen.jsonl", k))))...)
			}
			assertEachOnce(t, "the shards", shardIDs, ids)
			assertEachOnce(t, "the shards' answers", genIDs, ids)
			if tc.hosts != nil {
				assertRanOn(t, fakeHosts, tc.hosts)
			}

			// A second run finds every shard done: nothing is asked again.
			before, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(tc.name, "TRANSFER") {
				return // each job starts afresh on its host
			}
			p = script(t, 2*time.Minute, dir, env, "sharded.sh", prompts)
			p.must(t, 0)
			assertUnchanged(t, out, before)
			var again []string
			for k := range tc.shards {
				again = append(again, keys(readRecords(t, filepath.Join(work, fmt.Sprintf("shard-%d.gen.jsonl", k))))...)
			}
			assertEachOnce(t, "the shards' answers after a second run", again, ids)
		})
	}
}

// The local shards run at the same time: every shard's infer starts (it
// waits for a fleet that is not up yet) before the fleet comes up, so
// before any shard can end; run one after another, the second could not
// start. Shown by the jobs' own log lines, tagged by parallel.
func TestShardedConcurrent(t *testing.T) {
	requireTools(t, "sharded.sh runs its jobs with GNU parallel", "parallel")
	const shards = 4
	port := freePorts(t, 2)
	listen := fmt.Sprintf("127.0.0.1:%d-%d", port, port+1)
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	env := scriptEnv("ENDPOINTS="+listen, "WORK="+work, fmt.Sprintf("SHARDS=%d", shards),
		"INFER_ARGS=--max-tokens "+maxTokens+" --wait-ready 2m --probe-interval 50ms --progress 0")
	p := startScript(t, dir, env, "sharded.sh", prompts)
	// events are the shards' start and end lines, in the order logged.
	type event struct {
		shard int
		end   bool
	}
	events := func() []event {
		var evs []event
		for _, line := range strings.Split(p.stderr.String(), "\n") {
			for k := range shards {
				tag := fmt.Sprintf("shard-%d.jsonl\t", k)
				switch {
				case !strings.Contains(line, tag):
				case strings.Contains(line, "infer: waiting for one of"):
					evs = append(evs, event{k, false})
				case strings.Contains(line, "infer: answers "):
					evs = append(evs, event{k, true})
				}
			}
		}
		return evs
	}
	waitFor(t, time.Minute, fmt.Sprintf("all %d shards' infer to start while the fleet is down (a shard that waits holds its job slot: one after another, only one starts)", shards), func() bool {
		started := map[int]bool{}
		for _, e := range events() {
			started[e.shard] = true
		}
		if p.exited() {
			t.Fatalf("sharded.sh ended before the fleet was up:\n%s", tail(p.stderr.String(), 40))
		}
		return len(started) == shards
	})
	startFleetAt(t, listen, "--time-scale", "500")
	p.wait(t, 2*time.Minute)
	p.must(t, 0)
	lastStart, firstEnd, ends := -1, -1, 0
	for i, e := range events() {
		switch {
		case !e.end:
			lastStart = i
		case firstEnd < 0:
			firstEnd = i
			fallthrough
		default:
			ends++
		}
	}
	if ends != shards || firstEnd < lastStart {
		t.Fatalf("%d shards ended, the first at event %d, before the last start at %d: %v", ends, firstEnd, lastStart, events())
	}
	var genIDs []string
	for k := range shards {
		genIDs = append(genIDs, keys(readRecords(t, filepath.Join(work, fmt.Sprintf("shard-%d.gen.jsonl", k))))...)
	}
	assertEachOnce(t, "the shards' answers", genIDs, keys(readRecords(t, prompts)))
}

// When prompts fail, sharded.sh still merges, lists them for
// rerun-missing.sh and exits 3.
func TestShardedFailures(t *testing.T) {
	requireTools(t, "sharded.sh runs its jobs with GNU parallel", "parallel")
	down := startFleet(t, 2, "--time-scale", "500", "--fail-rate", "1")
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	env := scriptEnv("ENDPOINTS="+down, "WORK="+work, "SHARDS=3",
		"INFER_ARGS=--max-tokens "+maxTokens+" --retries 0 --eject-after 1000000")
	p := script(t, 2*time.Minute, dir, env, "sharded.sh", prompts)
	p.must(t, 3)
	ids := keys(readRecords(t, prompts))
	if n := len(readRecords(t, filepath.Join(work, "gen.jsonl"))); n != 0 {
		t.Errorf("%d answers from a fleet that fails everything", n)
	}
	assertEachOnce(t, "the to-do list", keys(readRecords(t, filepath.Join(work, "gen.todo.jsonl"))), ids)
	assertEachOnce(t, "the merged errors", keys(readRecords(t, filepath.Join(work, "gen.errors.jsonl"))), ids)
	if !strings.Contains(p.stderr.String(), "3 of 3 shard jobs failed") {
		t.Errorf("stderr does not say the shard jobs failed:\n%s", tail(p.stderr.String(), 20))
	}
}

// assertRanOn checks that infer ran on every fake host through ssh and that
// parallel left nothing behind in their homes.
func assertRanOn(t *testing.T, fakeHosts string, hosts []string) {
	t.Helper()
	log, err := os.ReadFile(filepath.Join(fakeHosts, "ssh.log"))
	if err != nil {
		t.Fatalf("no job went through ssh: %v", err)
	}
	ran := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		host, cmd, _ := strings.Cut(line, " ")
		if strings.Contains(cmd, "perl") { // parallel's job wrapper
			ran[host]++
		}
	}
	for _, h := range hosts {
		if ran[h] == 0 {
			t.Errorf("no job ran on %s:\n%s", h, log)
		}
		var left []string
		filepath.WalkDir(filepath.Join(fakeHosts, h), func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				left = append(left, path)
			}
			return nil
		})
		if len(left) > 0 {
			t.Errorf("files left on %s: %q", h, left)
		}
	}
}
