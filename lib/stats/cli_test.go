package stats

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// binary is the real stats command, built once for the CLI tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "stats-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "stats")
	build := exec.Command("go", "build", "-o", binary, "tokenmill/cmd/stats")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building cmd/stats:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runBinary runs the built stats with args, stdin and extra environment.
func runBinary(t *testing.T, stdin string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errOut.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errOut.String()
}

func TestCLI(t *testing.T) {
	mixed := filepath.Join(testdata, "mixed.jsonl")
	good := `{"id":"a","prompt":"abc","output":{"text":"de","finish_reason":"stop","endpoint":"http://h:1","latency_ms":1000,"usage":{"prompt_tokens":1,"completion_tokens":50}}}` + "\n" +
		`{"id":"b","prompt":"abc","error":{"status":429,"message":"slow down","endpoint":"http://h:1"}}` + "\n"
	tests := []struct {
		name     string
		stdin    string
		env      []string
		args     []string
		code     int
		stdout   []string // each must appear
		stderr   []string
		noStdout []string
	}{
		{name: "help shows real examples", args: []string{"--help"},
			stdout: []string{"stats gen.jsonl", "stats --json gen.jsonl gen.errors.jsonl | jq .endpoints", "stats --plot lengths.svg gen.jsonl", "TOKENMILL_STATS_WALL"}},
		{name: "version", args: []string{"--version"}, stdout: []string{"stats (tokenmill)"}},
		{name: "text report of stdin", stdin: good,
			stdout: []string{"2 records from 1 input", "generation", "finish_reason", "error status", "429", "http://h:1", "50.0"},
			stderr: []string{"stats: read 2 records", "rejected 0"}},
		{name: "json from the environment", stdin: good, env: []string{"TOKENMILL_STATS_JSON=true"},
			stdout: []string{`"schema": "tokenmill.stats/v1"`, `"tok_per_s_per_request": 50`}},
		{name: "wall from the environment", stdin: good, env: []string{"TOKENMILL_STATS_WALL=10s"},
			stdout: []string{"tok/s: completion tokens / --wall 10s", "in flight"}},
		{name: "bad lines: report, then exit 3", args: []string{mixed}, code: 3,
			stdout: []string{"12 records from 1 input", "rejected"},
			stderr: []string{"mixed.jsonl:13: malformed_json", "mixed.jsonl:14: wrong_type", "mixed.jsonl:15: missing_id", "rejected 3"}},
		{name: "usage error", args: []string{"--plot", "out.jpg"}, code: 2, stderr: []string{"--plot out.jpg", "--help"}},
		{name: "missing file", args: []string{"no/such/file.jsonl"}, code: 3,
			stdout: []string{"0 records from 1 input"}, stderr: []string{"unreadable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runBinary(t, tt.stdin, tt.env, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			for _, want := range tt.stdout {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
			for _, want := range tt.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
		})
	}
}

// TestCLIJSONPipeline runs the --help example through jq when it is there.
func TestCLIJSONPipeline(t *testing.T) {
	jq, err := exec.LookPath("jq")
	if err != nil {
		t.Skip("jq is not installed")
	}
	cmd := exec.Command("sh", "-c", fmt.Sprintf("%s --json %s | %s -c '[.endpoints[].endpoint]'", binary, filepath.Join(testdata, "mixed.jsonl"), jq))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), `["(none)","http://127.0.0.1:30000","http://127.0.0.1:30001"]`; got != want {
		t.Errorf("endpoints %s, want %s", got, want)
	}
}

// TestCLIInterrupt sends SIGINT while stats waits on a quiet stdin: it
// prints the report of what it had read, marked interrupted, and exits 130.
func TestCLIInterrupt(t *testing.T) {
	cmd := exec.Command(binary, "--json", "--progress", "20ms")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	defer stdin.Close()
	// Enough records to fill a batch, which is what gets counted.
	go func() {
		for i := range 3 * batchRecords {
			fmt.Fprintf(stdin, `{"id":%d,"prompt":"p"}`+"\n", i)
		}
	}()
	seen := make(chan bool, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		found := false
		for sc.Scan() {
			if !found && strings.Contains(sc.Text(), "read ") && !strings.Contains(sc.Text(), "read 0 records") {
				found = true
				seen <- true
			}
		}
		if !found {
			seen <- false
		}
	}()
	select {
	case ok := <-seen:
		if !ok {
			t.Fatal("stats ended before reporting progress")
		}
	case <-waitLimit():
		t.Fatal("no progress line within 10 s")
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-scanned: // stderr closed: the process is ending
	case <-waitLimit():
		t.Fatal("stats did not exit within 10 s of SIGINT")
	}
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Errorf("exit %v, want 130", err)
	}
	var r Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	if !r.Interrupted || r.Records == 0 || r.Records%batchRecords != 0 {
		t.Errorf("interrupted %v with %d records; want a report of whole batches, marked interrupted", r.Interrupted, r.Records)
	}
}
