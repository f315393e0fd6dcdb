package doctest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/testbin"
)

func TestMain(m *testing.M) {
	names, err := testbin.Commands()
	if err != nil {
		fmt.Fprintln(os.Stderr, "doctest:", err)
		os.Exit(1)
	}
	testbin.Main(m, names...)
}

const root = "../.."

// TestReadme runs README.md's shell blocks as printed, and holds it to
// its size: a newcomer reads it in ten minutes.
func TestReadme(t *testing.T) {
	t.Parallel()
	doc := read(t, "README.md")
	if n := strings.Count(doc, "\n"); n > 300 {
		t.Errorf("README.md has %d lines, more than 300: walkthroughs go to GUIDE.md, flags to --help", n)
	}
	runDoc(t, "README.md", doc, nil)
}

// TestGuide runs GUIDE.md's shell blocks as printed, with the real
// datasets as data/ and a real model's tokenizer as models/Qwen3-8B.
func TestGuide(t *testing.T) {
	t.Parallel()
	data, err := filepath.Abs(filepath.Dir(testbin.RealData(t, "alpaca_en_demo.json")))
	if err != nil {
		t.Fatal(err)
	}
	links := map[string]string{"data": data, "models/Qwen3-8B": testbin.Tokenizers(t, "qwen3")}
	runDoc(t, "GUIDE.md", read(t, "GUIDE.md"), links)
}

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runDoc runs every sh block of doc in order in one bash, in a directory
// of its own that links the repository's testdata/ and pipelines/ (and
// links), with the built tools on PATH and the fleet's ports moved to
// free ones; then checks each output block against what its block printed.
func runDoc(t *testing.T, name, doc string, links map[string]string) {
	blocks, err := Parse(doc)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var ports []int
	for _, b := range blocks {
		ports = append(ports, Ports(b.Text+"\n"+b.Shown)...)
	}
	base := freeBase(t, ports)
	dir := t.TempDir()
	repo, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]string{"testdata": filepath.Join(repo, "testdata"), "pipelines": filepath.Join(repo, "pipelines")}
	for k, v := range links {
		all[k] = v
	}
	for link, target := range all {
		p := filepath.Join(dir, link)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	state := filepath.Join(dir, ".doctest")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}

	script := []string{"set -euo pipefail"}
	var ran []int // indexes of the blocks run
	for i, b := range blocks {
		switch b.Kind {
		case GPU:
			continue
		case Build:
			checkBuild(t, name, b)
			continue
		case Suite:
			checkSuite(t, name, b)
			continue
		case Long:
			if !testbin.IsLong() {
				t.Logf("%s:%d: long tier only (%s=1): %s", name, b.Line, testbin.LongEnv, b.Text)
				continue
			}
		}
		ran = append(ran, i)
		out := filepath.Join(state, "out."+strconv.Itoa(i))
		script = append(script,
			fmt.Sprintf("echo %d > %q", i, filepath.Join(state, "at")),
			"{", Remap(b.Text, base), fmt.Sprintf("} > %q 2>&1", out))
	}
	if len(ran) == 0 {
		t.Fatalf("%s has no sh block to run", name)
	}

	cmd := exec.Command("bash", "-c", strings.Join(script, "\n"))
	cmd.Dir = dir
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TOKENMILL_") && !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "GOFLAGS=") {
			env = append(env, kv)
		}
	}
	bin := filepath.Join(dir, "bin") // where the demo builds; the pipelines' BIN
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(env,
		"PATH="+filepath.Dir(testbin.Path("infer"))+string(os.PathListSeparator)+os.Getenv("PATH"),
		"BIN="+bin, "DEMO_PORT_BASE="+strconv.Itoa(base), "DEMO_DIR="+filepath.Join(dir, "demo"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	bound := testbin.Timeout
	if testbin.IsLong() {
		bound += 5 * time.Minute // the demo builds and runs the whole job
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Whatever happens, nothing the document started (llmsim, serve)
	// outlives it.
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(bound):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		err = fmt.Errorf("did not finish within %v", bound)
	}
	if err != nil {
		at, _ := os.ReadFile(filepath.Join(state, "at"))
		i, _ := strconv.Atoi(strings.TrimSpace(string(at)))
		out, _ := os.ReadFile(filepath.Join(state, "out."+strconv.Itoa(i)))
		t.Fatalf("%s:%d: the block failed (%v):\n%s\nit printed:\n%s", name, blocks[i].Line, err, blocks[i].Text, out)
	}
	for _, i := range ran {
		b := blocks[i]
		if b.Shown == "" {
			continue
		}
		out, err := os.ReadFile(filepath.Join(state, "out."+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		if missing := Missing(Remap(b.Shown, base), string(out)); len(missing) > 0 {
			t.Errorf("%s:%d: the block's output shows lines it did not print:\n%s\nit printed:\n%s", name, b.Line, strings.Join(missing, "\n"), out)
		}
	}
}

// bases are the bases given to the documents run so far, which run at
// once: each gets ports of its own.
var bases struct {
	sync.Mutex
	given map[int]bool
}

// freeBase is a base for a document's ports under which every port it
// names is free now, below Linux's ephemeral ports (32768 on), and not
// another document's.
func freeBase(t *testing.T, ports []int) int {
	t.Helper()
	bases.Lock()
	defer bases.Unlock()
	if bases.given == nil {
		bases.given = map[int]bool{}
	}
	start := 10000 + os.Getpid()%200*100
	for try := 0; try < 200; try++ {
		base := 10000 + (start-10000+try*1000)%20000
		if bases.given[base] {
			continue
		}
		free := true
		for _, p := range ports {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p-BasePort+base))
			if err != nil {
				free = false
				break
			}
			l.Close()
		}
		if free {
			bases.given[base] = true
			return base
		}
	}
	t.Fatalf("no base port under which %v are all free", ports)
	return 0
}

// checkBuild holds the build block to the build the test makes of the
// tools (testbin's: go build -buildvcs=auto) and to a PATH that takes them.
func checkBuild(t *testing.T, name string, b Block) {
	t.Helper()
	const want = "go build -buildvcs=auto -o bin/ ./cmd/... && export PATH=$PWD/bin:$PATH"
	if strings.TrimSpace(b.Text) != want {
		t.Errorf("%s:%d: the build block says %q; the tests build the tools as %q", name, b.Line, b.Text, want)
	}
}

// checkSuite holds the test-suite block to the command CI runs.
func checkSuite(t *testing.T, name string, b Block) {
	t.Helper()
	ci := read(t, ".ci/run")
	cmd := strings.TrimSpace(b.Text)
	for _, line := range strings.Split(ci, "\n") {
		if strings.TrimSpace(line) == cmd || strings.HasSuffix(strings.TrimSpace(line), "=1 "+cmd) {
			return
		}
	}
	t.Errorf("%s:%d: the test command %q is not one .ci/run runs", name, b.Line, cmd)
}
