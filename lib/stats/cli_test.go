package stats

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"tokenmill/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m, "stats", "infer", "llmsim") }

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
			stdout: []string{"stats gen.jsonl", "stats --json gen.jsonl gen.errors.jsonl | jq .endpoints", "stats --plot lengths.svg gen.jsonl", "TOKENMILL_STATS_WALL",
				"--context-length=N", "TOKENMILL_STATS_CONTEXT_LENGTH"}},
		{name: "context length from the environment", stdin: good, env: []string{"TOKENMILL_STATS_CONTEXT_LENGTH=64"},
			stdout: []string{"context: 64 tokens (--context-length)", "of the context"}},
		{name: "negative context length", args: []string{"--context-length=-1"}, code: 2, stderr: []string{"--context-length must not be negative"}},
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
		{name: "regenerated conversations", args: []string{"--checks", "default", filepath.Join(testdata, "conversations.jsonl")},
			stdout: []string{"regenerated conversations: 19, 15 complete, 4 truncated (context_full 3, tool_unpaired 1)",
				"turns per conversation      19", "prefix cache: 1,980 of 3,600 prompt tokens cached, hit rate 55.0%, over 33 turns", "(37 answers)"}},
		{name: "absurd token counts are bad records, the totals stay right",
			stdin: strings.Repeat(`{"id":"x","prompt":"abc","output":{"text":"de","finish_reason":"stop","usage":{"prompt_tokens":1,"completion_tokens":4611686018427387904}}}`+"\n", 3) + good,
			code:  3, args: []string{"--json"}, stdout: []string{`"completion_tokens": 50,`}, stderr: []string{"bad_value 3"}},
		{name: "usage error", args: []string{"--plot", "out.jpg"}, code: 2, stderr: []string{"--plot out.jpg", "--help"}},
		{name: "missing file", args: []string{"no/such/file.jsonl"}, code: 2,
			stderr: []string{"cannot read no/such/file.jsonl: no such file", "--help"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testbin.Run(t, "", strings.NewReader(tt.stdin), tt.env, "stats", tt.args...)
			code, stdout, stderr := r.Code, string(r.Stdout), r.Stderr
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
	cmd := exec.Command("sh", "-c", fmt.Sprintf("%s --json %s | %s -c '[.endpoints[].endpoint]'", testbin.Path("stats"), filepath.Join(testdata, "mixed.jsonl"), jq))
	r := testbin.Exec(t, cmd)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	if got, want := strings.TrimSpace(string(r.Stdout)), `["(none)","http://127.0.0.1:30000","http://127.0.0.1:30001"]`; got != want {
		t.Errorf("endpoints %s, want %s", got, want)
	}
}

// TestCLIInterrupt sends SIGINT while stats waits on a quiet stdin: it
// prints the report of what it had read, marked interrupted, and exits 130.
func TestCLIInterrupt(t *testing.T) {
	p := testbin.Start(t, "stats", "--json", "--progress", "20ms")
	defer p.Stdin.Close()
	// Enough records to fill a batch, which is what gets counted.
	go func() {
		for i := range 3 * batchRecords {
			fmt.Fprintf(p.Stdin, `{"id":%d,"prompt":"p"}`+"\n", i)
		}
	}()
	p.WaitFor(t, waitBound, "read [1-9]") // a progress line past "read 0 records"
	p.Signal(t, syscall.SIGINT)
	res := p.Wait(t, waitBound)
	if res.Code != 130 {
		t.Errorf("exit %d, want 130", res.Code)
	}
	var r Report
	if err := json.Unmarshal(res.Stdout, &r); err != nil {
		t.Fatalf("report: %v\n%s", err, res.Stdout)
	}
	if !r.Interrupted || r.Records == 0 || r.Records%batchRecords != 0 {
		t.Errorf("interrupted %v with %d records; want a report of whole batches, marked interrupted", r.Interrupted, r.Records)
	}
}
