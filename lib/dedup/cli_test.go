package dedup

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m, "dedup", "extract", "rusage") }

type result struct {
	code           int
	stdout, stderr string
}

// runBinary runs the dedup binary; env entries are KEY=VALUE.
func runBinary(t *testing.T, stdin []byte, env []string, args ...string) result {
	t.Helper()
	r := testbin.Run(t, "", bytes.NewReader(stdin), env, "dedup", args...)
	return result{r.Code, string(r.Stdout), r.Stderr}
}

var summaryLine = regexp.MustCompile(`(?m)^dedup: read (\d+), kept (\d+), removed (\d+) \((\d+\.\d\d)%\), expected false drops (\S+)$`)

func TestBinarySummaryAndEnv(t *testing.T) {
	input, counts := corpusPrompts(3000, 6)
	path := filepath.Join(t.TempDir(), "prompts.jsonl")
	if err := os.WriteFile(path, input, 0o644); err != nil {
		t.Fatal(err)
	}
	r := runBinary(t, nil, []string{"TOKENMILL_DEDUP_NORMALIZE=aggressive"}, path)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	m := summaryLine.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no summary line in:\n%s", r.stderr)
	}
	removed, _ := strconv.ParseInt(m[3], 10, 64)
	fd, err := strconv.ParseFloat(m[5], 64)
	if m[1] != "3000" || removed != counts.Removed("aggressive") || err != nil || fd <= 0 || fd >= 0.01 {
		t.Fatalf("summary %q: want read 3000, removed %d, a small positive expected false drops", m[0], counts.Removed("aggressive"))
	}
	if got := len(lines(r.stdout)); int64(got) != 3000-removed {
		t.Fatalf("stdout holds %d records, the summary says %d kept", got, 3000-removed)
	}
}

func TestBinaryHelpAndUsage(t *testing.T) {
	r := runBinary(t, nil, nil, "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "extract data/0625/*.parquet | dedup |") || !strings.Contains(r.stdout, "TOKENMILL_DEDUP_NORMALIZE") {
		t.Fatalf("--help: exit %d, no example or env var:\n%s", r.code, r.stdout)
	}
	r = runBinary(t, nil, nil, "--normalize", "bogus")
	if r.code != 2 || !strings.Contains(r.stderr, "--normalize") {
		t.Fatalf("bad --normalize: exit %d: %s", r.code, r.stderr)
	}
	r = runBinary(t, nil, nil, "-o", "/proc/nonexistent/out.jsonl")
	if r.code != 1 {
		t.Fatalf("unwritable output: exit %d, want 1: %s", r.code, r.stderr)
	}
}

func TestBinaryRejectsStillWriteOutput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	input := []byte(`{"id":"a","messages":[{"role":"user","content":"x"}]}` + "\n{broken\n" + `{"id":"b","messages":[{"role":"user","content":"x"}]}` + "\n")
	r := runBinary(t, input, nil, "-o", out)
	if r.code != 3 || !strings.Contains(r.stderr, "-:2: malformed_json") || !strings.Contains(r.stderr, "rejected 1 (malformed_json 1)") {
		t.Fatalf("exit %d, want 3 with the reject reported:\n%s", r.code, r.stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil || string(data) != string(input[:bytes.IndexByte(input, '\n')+1]) {
		t.Fatalf("output %q (%v): want the first record only", data, err)
	}
}

func TestBinaryStateRefusals(t *testing.T) {
	dir := t.TempDir()
	state, out := filepath.Join(dir, "seen.state"), filepath.Join(dir, "out.jsonl")
	input, _ := corpusPrompts(500, 3)
	if r := runBinary(t, input, nil, "--normalize", "ws", "--state", state, "-o", os.DevNull); r.code != 0 {
		t.Fatalf("making the state: exit %d: %s", r.code, r.stderr)
	}
	r := runBinary(t, input, nil, "--normalize", "lower", "--state", state, "-o", out)
	if r.code != 2 || !strings.Contains(r.stderr, "--normalize ws") || !strings.Contains(r.stderr, state) {
		t.Fatalf("other settings: exit %d, want 2 (a usage error) naming the setting and the file:\n%s", r.code, r.stderr)
	}
	good, _ := os.ReadFile(state)
	if err := os.WriteFile(state, good[:len(good)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	r = runBinary(t, input, nil, "--normalize", "ws", "--state", state, "-o", out)
	if r.code != 1 || !strings.Contains(r.stderr, "corrupt or truncated state file") {
		t.Fatalf("truncated state: exit %d, want 1 saying so:\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("a refused run created its output file (%v)", err)
	}
	// A state of the prompt key before it covered tools (see
	// TestStateRefusesAnOlderPromptKey) is refused before anything is
	// written, and left as it was.
	old, err := os.ReadFile(filepath.Join("testdata", "v1-prompt.state"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(state, old, 0o644); err != nil {
		t.Fatal(err)
	}
	r = runBinary(t, input, nil, "--expected", "100", "--state", state, "-o", out)
	if r.code != 1 || !strings.Contains(r.stderr, "older dedup whose prompt key (version 1) left out the tools") {
		t.Fatalf("old key version: exit %d, want 1 saying why:\n%s", r.code, r.stderr)
	}
	if after, _ := os.ReadFile(state); !bytes.Equal(after, old) {
		t.Error("the refused state file was changed")
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("a refused run created its output file (%v)", err)
	}
}

// SIGINT: exit 130; no -o, --dups, --clusters or state file is written or
// changed, and no spill file of --near is left; on stdout, what was decided
// before the signal is a prefix of the full output.
func TestBinaryInterrupt(t *testing.T) {
	input, _ := corpusPrompts(12000, 8) // several MB: more than the pipe and read buffers
	full, _ := bruteForce(t, input, reference["none"])
	for _, tc := range []struct{ toFile, near bool }{{true, false}, {false, false}, {true, true}} {
		toFile := tc.toFile
		dir := t.TempDir()
		state, out, dups := filepath.Join(dir, "seen.state"), filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "dups.jsonl")
		var near []string
		if tc.near {
			near = []string{"--near", "--clusters", filepath.Join(dir, "clusters.jsonl"), "--memory", "64KiB"}
		}
		if r := runBinary(t, []byte(`{"messages":[{"role":"user","content":"seed"}]}`+"\n"), nil, append(near[:min(len(near), 1)], "--state", state)...); r.code != 0 {
			t.Fatalf("making the state: %s", r.stderr)
		}
		before, _ := os.ReadFile(state)
		args := append([]string{"--state", state, "--dups", dups}, near...)
		if toFile {
			args = append(args, "-o", out)
		}
		p := testbin.Start(t, "dedup", args...)
		// The write returns once dedup has read all but what the pipe
		// holds: it is running, and it waits for more input.
		if _, err := p.Stdin.Write(input); err != nil {
			t.Fatal(err)
		}
		p.Signal(t, syscall.SIGINT)
		// End the input only once dedup has the signal: it says so after
		// cancelling the run, so the end of input cannot overtake it.
		p.WaitFor(t, 20*time.Second, "interrupted: finishing up")
		p.Stdin.Close()
		r := p.Wait(t, 20*time.Second)
		if r.Code != 130 || !strings.Contains(r.Stderr, "interrupted") {
			t.Fatalf("toFile=%v: exit %d, want 130 and a message:\n%s", toFile, r.Code, r.Stderr)
		}
		if after, _ := os.ReadFile(state); !bytes.Equal(before, after) {
			t.Errorf("toFile=%v: the state changed after an interrupt", toFile)
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Errorf("toFile=%v: files after the interrupt: %v, want only the state", toFile, names)
		}
		got := lines(string(r.Stdout))
		if toFile && len(got) != 0 {
			t.Errorf("-o given, but %d records went to stdout", len(got))
		}
		if !toFile && (len(got) > len(full) || strings.Join(got, "\n") != strings.Join(full[:len(got)], "\n")) {
			t.Errorf("stdout after the interrupt (%d records) is not a prefix of the full output", len(got))
		}
	}
}
