package pipelines_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/testbin"
)

var (
	repoRoot string // the module's root
	binDir   string // the tools, built once
	// prompts holds a few hundred deduplicated prompt records of the demo
	// sample, made by extract and dedup, for the sharded, Slurm and rerun tests.
	prompts string
)

const (
	demoData = "testdata/demo/infinity-instruct-sample.parquet"
	// maxTokens keeps answers short: the tests check records, not speed.
	maxTokens = "48"
	// noLength is every default check but length: at maxTokens nearly all
	// of llmsim's answers are cut, and the tests that are not about the
	// checks want them kept, as merge does.
	noLength = "FILTER_ARGS=--checks reasoning_only,empty,think_residue,tool_call,loop"
)

func TestMain(m *testing.M) {
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pipelines test setup:", err)
		code = 1
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	tmp, err := os.MkdirTemp("", "pipelines-test-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	if repoRoot, err = filepath.Abs(".."); err != nil {
		return 0, err
	}
	// The same command demo.sh runs, so its own build into binDir finds
	// every binary up to date.
	binDir = filepath.Join(tmp, "bin")
	tools, err := testbin.Commands()
	if err != nil {
		return 0, err
	}
	if err := os.Mkdir(binDir, 0o755); err != nil {
		return 0, err
	}
	if err := testbin.Build(binDir, tools...); err != nil {
		return 0, err
	}
	extracted := filepath.Join(tmp, "extracted.jsonl")
	prompts = filepath.Join(tmp, "prompts.jsonl")
	for _, args := range [][]string{
		{"extract", "--limit", "300", "-o", extracted, filepath.Join(repoRoot, demoData)},
		{"dedup", "-o", prompts, extracted},
	} {
		if out, err := exec.Command(filepath.Join(binDir, args[0]), args[1:]...).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("%s: %v\n%s", args[0], err, out)
		}
	}
	return m.Run(), nil
}

// scriptVars are the variables the scripts read; the tests set the ones
// they mean and drop any the caller's environment holds.
var scriptVars = strings.Fields(`BIN ENDPOINTS OUT ERRORS PROMPTS RESUME EXTRACT_ARGS DEDUP_ARGS
	INFER_ARGS STATS_ARGS MERGE_ARGS PARALLEL_ARGS HOSTS JOBS SHARDS WORK TRANSFER RERUN TODO ROUNDS
	FIT UNFIT FILTER FILTER_ARGS ENDPOINTS_FILE SERVE_ARGS SERVE_HOST NODE WAIT WAIT_SERVERS PIPELINES FAKE_NODES`)

func scriptEnv(vars ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(scriptVars, k) || strings.HasPrefix(k, "TOKENMILL_") ||
			strings.HasPrefix(k, "DEMO_") || strings.HasPrefix(k, "SLURM_") {
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "BIN="+binDir), vars...)
}

// proc is a pipeline script started with bash in its own process group.
type proc struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
	code           int // once done
}

// startScript starts a script from pipelines/ in dir; if the test ends
// before the script, the script's process group is killed.
func startScript(t *testing.T, dir string, env []string, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{})}
	// Named relative to dir, as users run them: the scripts must find
	// their neighbours and files whatever their $0 looks like.
	path := filepath.Join(repoRoot, "pipelines", name)
	if rel, err := filepath.Rel(dir, path); err == nil {
		path = rel
	}
	p.cmd = exec.Command("bash", append([]string{path}, args...)...)
	p.cmd.Dir, p.cmd.Env = dir, env
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() {
		err := p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		if err != nil && p.code < 0 {
			p.code = 128 + int(p.cmd.ProcessState.Sys().(syscall.WaitStatus).Signal())
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

// wait returns the script's exit code, failing the test (after killing the
// script's process group) if it has not ended within timeout.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		t.Fatalf("%s still running after %v: killed\nstderr:\n%s", p.name, timeout, tail(p.stderr.String(), 40))
		return 0
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// script runs a script to its end within timeout.
func script(t *testing.T, timeout time.Duration, dir string, env []string, name string, args ...string) *proc {
	t.Helper()
	p := startScript(t, dir, env, name, args...)
	p.wait(t, timeout)
	return p
}

// must fails the test unless the script exited with code.
func (p *proc) must(t *testing.T, code int) {
	t.Helper()
	if p.code != code {
		t.Fatalf("%s exited %d, want %d\nstderr:\n%s", p.name, p.code, code, tail(p.stderr.String(), 60))
	}
}

// syncBuffer is a bytes.Buffer that the script's output pipe and the test
// may use at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// waitFor polls cond every 50 ms and fails the test with what it waited
// for once timeout has passed.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", timeout, what)
		}
	}
}

// startFleet starts llmsim with n endpoints on free loopback ports and
// returns their URLs as infer --endpoints takes them; the fleet is stopped
// when the test ends.
func startFleet(t testing.TB, n int, args ...string) string {
	t.Helper()
	urls, _ := startStoppableFleet(t, n, args...)
	return urls
}

// startStoppableFleet is startFleet that also returns a stop that ends
// llmsim (SIGTERM, so that its --request-log is flushed) and waits for it.
func startStoppableFleet(t testing.TB, n int, args ...string) (string, func()) {
	t.Helper()
	return startFleetAt(t, strings.TrimSuffix(strings.Repeat("127.0.0.1:0,", n), ","), args...)
}

// greedy are llmsim's args with --temperature 0 unless they set one: the
// tests that compare one run's answers with another's need answers that
// are a function of the prompt, as a greedy server gives; llmsim samples
// by default, as real servers do.
func greedy(args []string) []string {
	for _, a := range args {
		if a == "--temperature" || strings.HasPrefix(a, "--temperature=") {
			return args
		}
	}
	return append([]string{"--temperature", "0"}, args...)
}

// startFleetAt is startStoppableFleet listening on listen (llmsim
// --listen).
func startFleetAt(t testing.TB, listen string, args ...string) (string, func()) {
	t.Helper()
	dir := t.TempDir()
	ready, logName := filepath.Join(dir, "ready"), filepath.Join(dir, "llmsim.log")
	logFile, err := os.Create(logName)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "llmsim"), append([]string{"--listen", listen, "--ready-file", ready}, greedy(args)...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logFile.Close(); close(exited) }()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("llmsim did not stop within 10 s of SIGTERM")
		}
	}
	t.Cleanup(stop)
	waitFor(t, 20*time.Second, "llmsim to write "+ready, func() bool {
		select {
		case <-exited:
			log, _ := os.ReadFile(logName)
			t.Fatalf("llmsim exited before it was ready:\n%s", log)
		default:
		}
		st, err := os.Stat(ready)
		return err == nil && st.Size() > 0
	})
	urls, err := os.ReadFile(ready)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(urls)), ","), stop
}

// record holds what the tests compare of prompt, generation and error records.
type record struct {
	ID     json.RawMessage `json:"id"`
	Output *struct {
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
		Endpoint     string `json:"endpoint"`
	} `json:"output"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
	raw string // the line as read
}

func (r record) key() string { return string(r.ID) }

// readRecords reads a JSONL file; a missing file is no records.
func readRecords(t *testing.T, path string) []record {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []record
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for line := 1; sc.Scan(); line++ {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || len(r.ID) == 0 {
			t.Fatalf("%s:%d: not a record with an id (%v): %.200s", path, line, err, sc.Text())
		}
		r.raw = sc.Text()
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return recs
}

func keys(recs []record) []string {
	ks := make([]string, len(recs))
	for i, r := range recs {
		ks[i] = r.key()
	}
	return ks
}

// assertEachOnce fails unless got holds every id of want exactly once and
// nothing else.
func assertEachOnce(t *testing.T, what string, got, want []string) {
	t.Helper()
	count := map[string]int{}
	for _, id := range got {
		count[id]++
	}
	var missing, twice, extra []string
	for _, id := range want {
		switch count[id] {
		case 0:
			missing = append(missing, id)
		case 1:
		default:
			twice = append(twice, id)
		}
		delete(count, id)
	}
	for id := range count {
		extra = append(extra, id)
	}
	if len(missing)+len(twice)+len(extra) > 0 || len(got) != len(want) {
		t.Fatalf("%s: %d records for %d ids: missing %d %.10q, repeated %d %.10q, not asked for %d %.10q",
			what, len(got), len(want), len(missing), missing, len(twice), twice, len(extra), extra)
	}
}

// answers maps each id to its answer's text, requiring one good answer per record.
func answers(t *testing.T, path string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, r := range readRecords(t, path) {
		if r.Output == nil || (r.Output.FinishReason != "stop" && r.Output.FinishReason != "length") {
			t.Fatalf("%s: id %s has no good answer: %+v", path, r.ID, r.Output)
		}
		m[r.key()] = r.Output.Text
	}
	return m
}

// reference answers the prompts on one machine with infer alone: what every
// multi-machine run must reproduce, llmsim's answers being a function of the
// prompt.
func reference(t *testing.T, endpoints string) map[string]string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "reference.jsonl")
	cmd := exec.Command(filepath.Join(binDir, "infer"), "--endpoints", endpoints, "--max-tokens", maxTokens, "-o", out, prompts)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("infer: %v\n%s", err, b)
	}
	ref := answers(t, out)
	assertEachOnce(t, "reference run", mapKeys(ref), keys(readRecords(t, prompts)))
	return ref
}

func mapKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// assertSameAnswers fails unless path holds one good answer per prompt with
// the reference's text.
func assertSameAnswers(t *testing.T, path string, ref map[string]string) {
	t.Helper()
	recs := readRecords(t, path)
	assertEachOnce(t, path, keys(recs), mapKeys(ref))
	for id, text := range answers(t, path) {
		if text != ref[id] {
			t.Fatalf("%s: id %s answered %.80q, the single-machine run %.80q", path, id, text, ref[id])
		}
	}
}

var (
	portsMu  sync.Mutex
	portsOut = map[int]bool{} // ports handed out by freePorts
)

// freePorts finds n consecutive free loopback ports, below Linux's default
// ephemeral range (32768-60999) so that no outgoing connection takes one
// before its server listens, and apart from any range handed out before.
func freePorts(t *testing.T, n int) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		base := 20000 + rand.IntN(12000-n)
		taken := false
		for p := base; p < base+n; p++ {
			taken = taken || portsOut[p]
		}
		if !taken && portsFree(base, n) == -1 {
			for p := base; p < base+n; p++ {
				portsOut[p] = true
			}
			return base
		}
	}
	t.Fatalf("found no %d consecutive free ports in 20000-32000", n)
	return 0
}

// portsFree returns the first of ports base..base+n-1 that cannot be
// listened on, or -1 when all can.
func portsFree(base, n int) int {
	for p := base; p < base+n; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return p
		}
		l.Close()
	}
	return -1
}

// processesMentioning lists the live processes whose command line contains
// s (a test's own temporary directory), from /proc.
func processesMentioning(s string) []string {
	var found []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(s)) {
			found = append(found, d.Name()+": "+string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	return found
}

// assertFinishTable fails unless the stats report in out counts each
// finish_reason of the answers in gen as gen holds them.
func assertFinishTable(t *testing.T, out, gen string) {
	t.Helper()
	count := map[string]int{}
	for _, r := range readRecords(t, gen) {
		if r.Output != nil {
			count[r.Output.FinishReason]++
		}
	}
	for reason, n := range count {
		row := regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(reason) + `\s+` + thousands(n) + `\s`)
		if !row.MatchString(out) {
			t.Errorf("the stats do not count %d answers finished %q:\n%s", n, reason, tail(out, 40))
		}
	}
}

// thousands formats n as the stats tables do: 1,189.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
