package pipelines_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// demoEnv runs demo.sh on its own ports and directory.
func demoEnv(base int, dir string, vars ...string) []string {
	return scriptEnv(append([]string{"DEMO_PORT_BASE=" + strconv.Itoa(base), "DEMO_DIR=" + dir}, vars...)...)
}

// demoPrompts is what extract | dedup make of the whole demo sample, by
// the tools alone.
func demoPrompts(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	extracted, deduped := filepath.Join(dir, "extracted.jsonl"), filepath.Join(dir, "deduped.jsonl")
	for _, args := range [][]string{
		{"extract", "-o", extracted, filepath.Join(repoRoot, demoData)},
		{"dedup", "-o", deduped, extracted},
	} {
		if out, err := exec.Command(filepath.Join(binDir, args[0]), args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", args[0], err, out)
		}
	}
	return keys(readRecords(t, deduped))
}

// assertStopped fails if a process of the demo in dir still runs or one of
// its ports is still taken.
func assertStopped(t *testing.T, dir string, base int) {
	t.Helper()
	if procs := processesMentioning(dir); len(procs) > 0 {
		t.Errorf("still running after demo.sh ended:\n%s", strings.Join(procs, "\n"))
	}
	if p := portsFree(base, 8); p != -1 {
		t.Errorf("port %d still taken after demo.sh ended", p)
	}
}

// killLeftovers kills, once the test is over, every process that still
// names dir: a demo killed past its bound leaves its fleet and pipeline,
// in process groups of their own, running on and loading the machine
// under the tests after it.
func killLeftovers(t *testing.T, dir string) {
	t.Cleanup(func() {
		for _, p := range processesMentioning(dir) {
			pid, _, _ := strings.Cut(p, ":")
			if n, err := strconv.Atoi(pid); err == nil {
				syscall.Kill(n, syscall.SIGKILL)
			}
		}
	})
}

func TestDemo(t *testing.T) {
	base, dir := freePorts(t, 8), t.TempDir()
	killLeftovers(t, dir)
	// A stale output of an earlier run must not survive into this one.
	stale := filepath.Join(dir, "gen.rerun.jsonl")
	if err := os.WriteFile(stale, []byte(`{"id":"stale"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := script(t, 3*time.Minute, repoRoot, demoEnv(base, dir, "DEMO_TIME_SCALE=1000"), "demo.sh")
	p.must(t, 0)
	assertStopped(t, dir, base)
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("%s of an earlier run is still there", stale)
	}
	// demo.sh builds with -buildvcs=auto: --version names the commit
	// whatever GOFLAGS says, in a checkout git can read.
	if exec.Command("git", "-C", repoRoot, "rev-parse", "HEAD").Run() == nil {
		if out, err := exec.Command(filepath.Join(binDir, "infer"), "--version").CombinedOutput(); err != nil || strings.Contains(string(out), "commit unknown") {
			t.Errorf("infer --version after demo.sh: %s (%v)", out, err)
		}
	}

	want := demoPrompts(t)
	assertEachOnce(t, "demo prompts", keys(readRecords(t, filepath.Join(dir, "gen.prompts.jsonl"))), want)
	assertEachOnce(t, "demo answers", keys(readRecords(t, filepath.Join(dir, "gen.jsonl"))), want)
	answers(t, filepath.Join(dir, "gen.jsonl"))
	if errs := readRecords(t, filepath.Join(dir, "gen.errors.jsonl")); len(errs) > 0 {
		t.Errorf("%d error records on a fleet without faults: %+v", len(errs), errs[0].Error)
	}
	// The stats go to stdout: a headline for the answers, a row per endpoint.
	out := p.stdout.String()
	if headline := fmt.Sprintf("%d records from 1 input", len(want)); !strings.Contains(strings.ReplaceAll(out, ",", ""), headline) {
		t.Errorf("stdout lacks the stats headline %q:\n%s", headline, tail(out, 20))
	}
	assertFinishTable(t, out, filepath.Join(dir, "gen.jsonl"))
	for port := base; port < base+8; port++ {
		if url := fmt.Sprintf("http://127.0.0.1:%d", port); !strings.Contains(out, url) {
			t.Errorf("the stats name no endpoint %s:\n%s", url, tail(out, 20))
		}
	}
}

func TestDemoPortTaken(t *testing.T) {
	base, dir := freePorts(t, 8), t.TempDir()
	taken := base + 5
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", taken))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := script(t, 2*time.Minute, repoRoot, demoEnv(base, dir), "demo.sh")
	p.must(t, 1)
	for _, want := range []string{fmt.Sprintf("port %d on 127.0.0.1 is already in use", taken), "DEMO_PORT_BASE="} {
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, p.stderr.String())
		}
	}
	// The base it suggests is another, whose ports are free.
	m := regexp.MustCompile(`DEMO_PORT_BASE=(\d+) bash`).FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no base suggested:\n%s", p.stderr.String())
	}
	if suggested, _ := strconv.Atoi(m[1]); suggested == base || portsFree(suggested, 8) != -1 {
		t.Errorf("suggested base %d: the taken one, or not free", suggested)
	}
	if _, err := os.Stat(filepath.Join(dir, "llmsim.log")); err == nil {
		t.Errorf("the fleet was started although port %d is taken", taken)
	}
	if procs := processesMentioning(dir); len(procs) > 0 {
		t.Errorf("still running:\n%s", strings.Join(procs, "\n"))
	}
}

// An interrupted demo stops its pipeline and its fleet, keeping the
// answers that arrived, each once.
func TestDemoInterrupted(t *testing.T) {
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
		code int
	}{
		{"SIGINT", syscall.SIGINT, 130},
		{"SIGTERM", syscall.SIGTERM, 143},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, dir := freePorts(t, 8), t.TempDir()
			t.Parallel()
			killLeftovers(t, dir)
			// Real time: the run is far from done when the signal comes.
			// A short grace: answers in flight then are not waited for long.
			p := startScript(t, repoRoot, demoEnv(base, dir, "DEMO_TIME_SCALE=1", "INFER_ARGS=--grace 1s"), "demo.sh")
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("demo.sh's stderr:\n%s", tail(p.stderr.String(), 40))
				}
			})
			running := func() {
				if p.exited() {
					t.Fatalf("demo.sh exited %d before it was interrupted:\n%s", p.code, p.stderr.String())
				}
			}
			// The build comes first: it relinks every tool whenever the
			// sources changed since TestMain built them, so it is bounded
			// as TestDemo bounds the whole demo, apart from the run's.
			waitFor(t, 3*time.Minute, "demo.sh to build the tools and start the fleet", func() bool {
				running()
				return strings.Contains(p.stderr.String(), "demo.sh: running pipelines/generate.sh")
			})
			gen := filepath.Join(dir, "gen.jsonl")
			waitFor(t, time.Minute, "the demo's first answer in "+gen, func() bool {
				running()
				st, err := os.Stat(gen)
				return err == nil && st.Size() > 0
			})
			// The signal goes to the script alone, as a terminal's Ctrl-C
			// does: the jobs it started are in process groups of their own.
			if err := p.cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t, 30*time.Second); code != tc.code {
				t.Fatalf("demo.sh exited %d after %v, want %d\n%s", code, tc.sig, tc.code, p.stderr.String())
			}
			assertStopped(t, dir, base)
			for _, want := range []string{"stopping the pipeline", "stopping the fleet"} {
				if !strings.Contains(p.stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, p.stderr.String())
				}
			}
			got := keys(readRecords(t, gen))
			prompts := keys(readRecords(t, filepath.Join(dir, "gen.prompts.jsonl")))
			if len(got) == 0 || len(got) >= len(prompts) {
				t.Fatalf("%d answers kept of %d prompts: want some, not all", len(got), len(prompts))
			}
			assertEachOnce(t, "answers kept", got, intersect(prompts, got))
		})
	}
}

// intersect returns the members of all that are in some, in all's order.
func intersect(all, some []string) []string {
	in := map[string]bool{}
	for _, s := range some {
		in[s] = true
	}
	var out []string
	for _, s := range all {
		if in[s] {
			out = append(out, s)
		}
	}
	return out
}
