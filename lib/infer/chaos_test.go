package infer

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/chaos"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// chaosSeed drives the kill moments and the fleet's faults.
const chaosSeed = 20250611

// chaosScale is how much work a chaos run does.
type chaosScale struct {
	name               string
	prompts, kills     int
	endpoints          int
	runLimit           time.Duration // bound on one infer run
	timeScale          string        // llmsim --time-scale
	crashA, crashB     int           // crash-after of endpoints 0 and 1
	restartA, restartB string
	// downTimeout takes out the endpoint answering only 429: within one
	// run between kills at every size.
	downTimeout string
}

func chaosScaleFor(t *testing.T) chaosScale {
	if chaos.Long() {
		return chaosScale{name: "long", prompts: 20000, kills: 10, endpoints: 4, runLimit: 5 * time.Minute,
			timeScale: "100", crashA: 900, crashB: 1700, restartA: "20s", restartB: "40s", downTimeout: "1s"}
	}
	if testing.Short() {
		t.Skip("chaos: skipped with -short")
	}
	if testbin.IsLong() {
		return chaosScale{name: "long-tier", prompts: 3000, kills: 4, endpoints: 4, runLimit: 90 * time.Second,
			timeScale: "100", crashA: 250, crashB: 400, restartA: "20s", restartB: "40s", downTimeout: "1s"}
	}
	// Every fault still comes: the crashes within the first few hundred
	// requests, each rate's share of the rest.
	return chaosScale{name: "short", prompts: 1000, kills: 3, endpoints: 4, runLimit: 90 * time.Second,
		timeScale: "100", crashA: 80, crashB: 140, restartA: "20s", restartB: "40s", downTimeout: "250ms"}
}

// simProc is the llmsim binary serving the fleet.
type simProc = sim

func startChaosFleet(t *testing.T, sc chaosScale) *simProc {
	t.Helper()
	return startSim(t, sc.endpoints, "--seed", strconv.Itoa(chaosSeed),
		"--time-scale", sc.timeScale, "--max-running", "16",
		"--fail-rate", "0.02", "--hang-rate", "0.01", "--drop-rate", "0.01", "--abort-rate", "0.01", "--limit-rate", "0.02",
		"--fault", fmt.Sprintf("0=crash-after:%d,restart-after:%s,startup-delay:5s", sc.crashA, sc.restartA),
		"--fault", fmt.Sprintf("1=crash-after:%d,restart-after:%s", sc.crashB, sc.restartB),
		// The last endpoint answers nothing but 429, as a quota run out.
		"--fault", fmt.Sprintf("%d=limit-rate:1,fail-rate:0,hang-rate:0,drop-rate:0,abort-rate:0", sc.endpoints-1))
}

// stop ends llmsim with SIGTERM and returns its counters, from the
// summary line it writes on the way out.
func (s *simProc) stop(t *testing.T) map[string]int64 {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("llmsim did not exit within 20s of SIGTERM:\n%s", s.stderr.String())
	}
	out := map[string]int64{}
	line := regexp.MustCompile(`served (\d+) requests.*`).FindString(s.stderr.String())
	if line == "" {
		t.Fatalf("no summary from llmsim:\n%s", s.stderr.String())
	}
	out["requests"], _ = strconv.ParseInt(regexp.MustCompile(`served (\d+)`).FindStringSubmatch(line)[1], 10, 64)
	for _, m := range regexp.MustCompile(`(\d+) ([a-z]+)`).FindAllStringSubmatch(line, -1) {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		out[m[2]] = n
	}
	return out
}

// lineCounter counts the complete lines of a file that only grows, except
// that a resume may cut a partial last line off: it reads only what was
// added since the last look.
type lineCounter struct {
	path  string
	off   int64 // just past the last newline counted
	lines int
}

func (c *lineCounter) count() int {
	f, err := os.Open(c.path)
	if err != nil {
		return c.lines
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() < c.off {
		c.off, c.lines = 0, 0 // cut back below what was counted: count again
	}
	buf := make([]byte, 1<<16)
	for {
		n, err := f.ReadAt(buf, c.off)
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			c.lines += bytes.Count(buf[:i+1], []byte{'\n'})
			c.off += int64(i + 1)
		}
		if err != nil || n < len(buf) {
			return c.lines
		}
	}
}

// inferRun is one run of the infer binary.
type inferRun struct {
	cmd    *exec.Cmd
	stderr lockedBuffer
	done   chan struct{}
}

func startInferRun(t *testing.T, args []string) *inferRun {
	t.Helper()
	return startInferPiped(t, args, nil)
}

// startInferPiped is startInferRun with stdin fed from stdin through a
// pipe (nil: none).
func startInferPiped(t *testing.T, args []string, stdin io.Reader) *inferRun {
	t.Helper()
	r := &inferRun{cmd: testbin.Command("infer", args...), done: make(chan struct{})}
	r.cmd.Stdout, r.cmd.Stderr, r.cmd.Stdin = io.Discard, &r.stderr, stdin
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() { r.cmd.Process.Kill(); <-r.done })
	return r
}

func (r *inferRun) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// wait returns the exit code, failing the test past limit.
func (r *inferRun) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-r.done:
		return r.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		r.cmd.Process.Kill()
		<-r.done
		t.Fatalf("infer did not exit within %v; stderr:\n%s", limit, r.stderr.String())
	}
	return -1
}

// chaosFigures are what a chaos run survived and what it left.
type chaosFigures struct {
	Prompts, Kills, KillsMidFlush, Resumes, FinalRuns  int
	Records, Lost, Duplicated, Partial, NotGood, Wrong int
	Retries, Ejections, Repaired                       int
	Piped, RivalsRefused                               int
	ViaLink, RivalsViaLink, RivalsViaHardLink, Quota   int
	Sim                                                map[string]int64
	Wall                                               time.Duration
}

// TestChaosKillAndResume runs infer over a prompt set on a fleet that
// crashes, restarts, answers 500, hangs, drops connections, aborts and
// answers 429 (one endpoint nothing else), while infer itself is killed
// with SIGKILL at random moments (seeded) and resumed each time. Every
// other run reads the prompts from a pipe (stdin) instead of the file,
// every third names the output through a symbolic link, and while each
// resume holds the output a second --resume on it is started, under its
// own name, the link or a hard link, and must refuse at once. At the end
// every prompt has exactly one good answer (stop or length) that belongs
// to it, and no line is partial.
func TestChaosKillAndResume(t *testing.T) {
	sc := chaosScaleFor(t)
	start := time.Now()
	sim := startChaosFleet(t, sc)
	dir := t.TempDir()
	in, lines := promptSet{n: sc.prompts}.write(t, dir, "prompts.jsonl")
	out := filepath.Join(dir, "gen.jsonl")
	link, hard := filepath.Join(dir, "latest.jsonl"), filepath.Join(dir, "hard.jsonl")
	if err := os.Symlink(out, link); err != nil {
		t.Fatal(err)
	}
	args := []string{"-e", strings.Join(sim.urls, ","), "-o", out, in, "--max-tokens", "64",
		"--request-timeout", "2s", "--flush-interval", "50ms", "--down-timeout", sc.downTimeout,
		"--backoff", "5ms", "--max-backoff", "100ms", "--probe-interval", "20ms", "--wait-ready", "30s", "--progress", "0"}
	resume := append(slices.Clone(args), "--resume")
	prompts, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	// piped: the same run reading its prompts from stdin, a pipe.
	piped := func(a []string) ([]string, io.Reader) {
		a = slices.Clone(a)
		a[slices.Index(a, in)] = "-"
		return a, bytes.NewReader(prompts)
	}

	rng, killAt := chaosKillPoints(sc)
	fig := chaosFigures{Prompts: sc.prompts}
	var stderrs []string
	lc := &lineCounter{path: out}
	for k, at := range killAt {
		a := args
		if k > 0 {
			a = resume
		}
		var stdin io.Reader
		if k%2 == 1 {
			a, stdin = piped(a)
			fig.Piped++
		}
		if k%3 == 2 {
			a = withOutput(a, link)
			fig.ViaLink++
		}
		r := startInferPiped(t, a, stdin)
		if k > 0 {
			if _, err := os.Stat(hard); err != nil {
				os.Link(out, hard)
			}
			rival := [...]string{out, link, hard}[k%3]
			rivalResume(t, r, out, withOutput(resume, rival), &fig)
			switch rival {
			case link:
				fig.RivalsViaLink++
			case hard:
				fig.RivalsViaHardLink++
			}
		}
		stderrs = append(stderrs, killAtLines(t, r, lc, k, at, sc.runLimit, rng, &fig))
	}

	stderrs = append(stderrs, resumeToEnd(t, resume, sc.runLimit, &fig)...)
	fig.Resumes = sc.kills - 1 + fig.FinalRuns
	fig.Sim = sim.stop(t)
	fig.Wall = time.Since(start)
	countChaosStderrs(stderrs, &fig)

	chaosCheck(t, out, lines, &fig)
	if errs := readRecords(t, filepath.Join(dir, "gen.errors.jsonl")); len(errs) != 0 {
		t.Errorf("the last run exited 0 but left %d error records", len(errs))
	}
	t.Logf("%+v", fig)
	if fig.Lost+fig.Duplicated+fig.Partial+fig.NotGood+fig.Wrong != 0 || fig.Records != sc.prompts {
		t.Fatalf("%d records for %d prompts: %d lost, %d duplicated, %d partial lines, %d not stop/length, %d not their prompt's",
			fig.Records, sc.prompts, fig.Lost, fig.Duplicated, fig.Partial, fig.NotGood, fig.Wrong)
	}
	for _, k := range []string{"failed", "hung", "dropped", "aborted", "limited", "crashes", "restarts", "cancelled"} {
		if fig.Sim[k] == 0 {
			t.Errorf("the fleet injected no %s fault: %v", k, fig.Sim)
		}
	}
	if fig.Quota == 0 {
		t.Errorf("the endpoint answering nothing but 429 was never taken out of service")
	}
	writeChaosReport(t, sc, fig)
}

// chaosKillPoints draws the kill points from the seed: output line counts,
// each kill landing a random few milliseconds (drawn from the rng it
// returns) after its count is reached, so some fall inside a flush, some
// inside a resume's start.
func chaosKillPoints(sc chaosScale) (*rand.Rand, []int) {
	rng := rand.New(rand.NewPCG(chaosSeed, uint64(sc.prompts)))
	killAt := make([]int, sc.kills)
	for i := range killAt {
		killAt[i] = sc.prompts/20 + rng.IntN(sc.prompts*3/4)
	}
	slices.Sort(killAt)
	return rng, killAt
}

// killAtLines kills run k with SIGKILL a random moment after out has at
// lines, counts the kill in fig and returns the run's stderr.
func killAtLines(t *testing.T, r *inferRun, lc *lineCounter, k, at int, runLimit time.Duration, rng *rand.Rand, fig *chaosFigures) string {
	t.Helper()
	deadline := time.Now().Add(runLimit)
	for lc.count() < at && !r.exited() {
		if time.Now().After(deadline) {
			t.Fatalf("kill %d: output stuck at %d lines, waiting for %d; stderr:\n%s", k, lc.count(), at, r.stderr.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
	if r.exited() {
		t.Fatalf("kill %d: infer exited (%d) before it could be killed at %d lines; stderr:\n%s",
			k, r.cmd.ProcessState.ExitCode(), at, r.stderr.String())
	}
	r.cmd.Process.Signal(syscall.SIGKILL)
	r.wait(t, 10*time.Second)
	fig.Kills++
	if data, _ := os.ReadFile(lc.path); len(data) > 0 && data[len(data)-1] != '\n' {
		fig.KillsMidFlush++
	}
	return r.stderr.String()
}

// resumeToEnd resumes until a run ends with every answer in (exit 0); a
// run that ends with error records (exit 3) is resumed again. It returns
// the runs' stderrs.
func resumeToEnd(t *testing.T, resume []string, runLimit time.Duration, fig *chaosFigures) []string {
	t.Helper()
	var stderrs []string
	for code := -1; code != cli.ExitOK; {
		if fig.FinalRuns == 5 {
			t.Fatalf("5 resumes after the last kill did not finish the job")
		}
		r := startInferRun(t, resume)
		code = r.wait(t, runLimit)
		fig.FinalRuns++
		stderrs = append(stderrs, r.stderr.String())
		if code != cli.ExitOK && code != cli.ExitRejects {
			t.Fatalf("resume exited %d:\n%s", code, r.stderr.String())
		}
	}
	return stderrs
}

// countChaosStderrs counts in fig the ejections, repairs, quota outs and
// retries the runs reported.
func countChaosStderrs(stderrs []string, fig *chaosFigures) {
	for _, s := range stderrs {
		fig.Ejections += strings.Count(s, "is out of service after")
		fig.Repaired += strings.Count(s, "removed a partial last line")
		fig.Quota += strings.Count(s, "has answered nothing but 429 Too Many Requests")
		for _, m := range regexp.MustCompile(`; ([\d,]+) retries`).FindAllStringSubmatch(s, -1) {
			n, _ := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
			fig.Retries += n
		}
	}
}

// withOutput is args with -o path.
func withOutput(args []string, path string) []string {
	a := slices.Clone(args)
	a[slices.Index(a, "-o")+1] = path
	return a
}

// rivalResume starts a second infer --resume on out while r holds it, its
// -o out itself, a symbolic or a hard link to it: it must refuse at once
// (exit 1), naming r's pid (for a hard link, which no name leads to,
// "another process under another name"), and write nothing.
func rivalResume(t *testing.T, r *inferRun, out string, resume []string, fig *chaosFigures) {
	t.Helper()
	pid := strconv.Itoa(r.cmd.Process.Pid)
	waitFor(t, 30*time.Second, "the resumed run's lock", func() bool {
		held, _ := os.ReadFile(jsonl.LockPath(out))
		return strings.TrimSpace(string(held)) == pid || r.exited()
	})
	if r.exited() {
		return
	}
	rival := startInferRun(t, resume)
	code := rival.wait(t, 20*time.Second)
	name := resume[slices.Index(resume, "-o")+1]
	want := fmt.Sprintf("-o %q is in use by process %s", jsonl.Resolve(out), pid)
	if st, err := os.Lstat(name); err == nil && st.Mode().IsRegular() && name != out {
		want = fmt.Sprintf("-o %q is in use by another process under another name", name)
	}
	if code != cli.ExitFailure || !strings.Contains(rival.stderr.String(), want) {
		t.Fatalf("a second --resume while the first runs: exit %d, want 1 saying %q:\n%s", code, want, rival.stderr.String())
	}
	fig.RivalsRefused++
}

// chaosCheck counts, in the output, the lines that are not whole records,
// the prompts without a record or with more than one, the answers that
// are not a good finish, and those that are not their prompt's (the
// prompt record plus an output whose text opens with the prompt's digest).
func chaosCheck(t *testing.T, out string, lines map[string]string, fig *chaosFigures) {
	t.Helper()
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		fig.Partial++
	}
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var g genRecord
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil || g.Output == nil {
			fig.Partial++
			continue
		}
		fig.Records++
		id := g.ID.Text
		if seen[id]++; seen[id] > 1 {
			fig.Duplicated++
		}
		if f := g.Output.FinishReason; f != "stop" && f != "length" {
			fig.NotGood++
		}
		orig, known := lines[id]
		stripped, err := record.WithoutFields(nil, sc.Bytes(), "output")
		if !known || err != nil || string(stripped) != orig || !strings.HasPrefix(g.Output.Text, digestOf(&g, true)) {
			fig.Wrong++
		}
	}
	for id := range lines {
		if seen[id] == 0 {
			fig.Lost++
		}
	}
}

// writeChaosReport leaves the figures for RELIABILITY.md.
func writeChaosReport(t *testing.T, sc chaosScale, f chaosFigures) {
	s := f.Sim
	var b strings.Builder
	fmt.Fprintf(&b, "### infer: killed and resumed on a failing fleet (%s run)\n\n", sc.name)
	fmt.Fprintf(&b, "%d prompts, %d llmsim endpoints (16 slots each, time scale %s); seed %d; %s wall.\n\n",
		f.Prompts, sc.endpoints, sc.timeScale, chaosSeed, f.Wall.Round(time.Second))
	b.WriteString("| figure | value |\n|---|---|\n")
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	row("SIGKILLs of infer survived (each followed by --resume)", f.Kills)
	row("kills that left a partial last line (repaired on resume)", fmt.Sprintf("%d (%d repairs reported)", f.KillsMidFlush, f.Repaired))
	row("runs after the last kill until exit 0", f.FinalRuns)
	row("runs that read their prompts from a pipe", f.Piped)
	row("runs that named the output through a symbolic link", f.ViaLink)
	row("second --resume runs started on the same output meanwhile (each refused at once)", f.RivalsRefused)
	row("of those, through the symbolic link / a hard link", fmt.Sprintf("%d / %d", f.RivalsViaLink, f.RivalsViaHardLink))
	row("generation requests the fleet received", s["requests"])
	row("endpoint crashes survived (and restarts)", fmt.Sprintf("%d (%d)", s["crashes"], s["restarts"]))
	row("requests lost in crashes", s["lost"])
	row("500s survived", s["failed"])
	row("hangs survived (each held a server slot until infer closed its connection)", s["hung"])
	row("dropped connections survived", s["dropped"])
	row("aborts survived (finish_reason abort, retried)", s["aborted"])
	row("429s survived (one endpoint answering nothing else)", s["limited"])
	row("times that endpoint was taken out for answering only 429 (--down-timeout)", f.Quota)
	row("requests cancelled by infer closing the connection (timeouts, kills)", s["cancelled"])
	row("endpoint ejections (out of service, probed, back)", f.Ejections)
	row("retries in the runs that finished", f.Retries)
	row("records in the output", f.Records)
	row("**records lost**", f.Lost)
	row("**records duplicated**", f.Duplicated)
	row("**partial lines**", f.Partial)
	row("answers not stop/length, or not their prompt's", f.NotGood+f.Wrong)
	b.WriteString("\n" + chaos.Reproduce("TestChaosKillAndResume", "lib/infer"))
	chaos.Report(t, "infer", b.String())
}
