package shard

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m, "shard") }

func TestBinary(t *testing.T) {
	input := strings.Join(syntheticInput(40), "\n") + "\n"
	records, err := filepath.Abs(filepath.Join(testdataDir, "records.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		env    []string
		stdin  string
		code   int
		files  []string // must exist afterwards
		stdout string   // substring
		stderr string   // substring
	}{
		{name: "help shows the examples", args: []string{"--help"}, code: 0,
			stdout: "shard -n 8 -o 'shards/part-{i}.jsonl.zst' prompts.jsonl"},
		{name: "stdin to compressed shards", args: []string{"-n", "3", "-o", "shards/part-{i}.jsonl.zst"}, stdin: input, code: 0,
			files:  []string{"shards/part-0.jsonl.zst", "shards/part-1.jsonl.zst", "shards/part-2.jsonl.zst"},
			stderr: "shard: read 40, wrote 40 into 3 shards"},
		{name: "shard count from the environment", args: []string{"-o", "p-{i:02}.jsonl", "-"}, env: []string{"TOKENMILL_SHARD_SHARDS=2"},
			stdin: input, code: 0, files: []string{"p-00.jsonl", "p-01.jsonl"}},
		{name: "select to stdout", args: []string{"--select", "0/1"}, stdin: input, code: 0,
			stdout: `{"id": 100000, "messages"`, stderr: "selected 40 (shard 0/1"},
		{name: "bad records exit 3 with file and line", args: []string{"-n", "2", "-o", "r-{i}.jsonl", records}, code: 3,
			files: []string{"r-0.jsonl", "r-1.jsonl"}, stderr: "records.jsonl:22: malformed_json"},
		{name: "usage error exits 2", args: []string{"-n", "2"}, code: 2, stderr: "Run 'shard --help' for usage."},
		{name: "missing input exits 2", args: []string{"-n", "2", "-o", "u-{i}.jsonl", "no-such-file.jsonl"}, code: 2,
			stderr: "cannot read no-such-file.jsonl: no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			r := testbin.Run(t, dir, strings.NewReader(tt.stdin), tt.env, "shard", tt.args...)
			code, stdout, stderr := r.Code, string(r.Stdout), r.Stderr
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstderr:\n%s", code, tt.code, stderr)
			}
			if !strings.Contains(stdout, tt.stdout) {
				t.Errorf("stdout lacks %q:\n%.500s", tt.stdout, stdout)
			}
			if !strings.Contains(stderr, tt.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderr, stderr)
			}
			for _, f := range tt.files {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("missing output: %v", err)
				}
			}
		})
	}
}
