package merge

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m, "merge", "extract") }

// goldenStdout is the records part of a golden file.
func goldenStdout(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(td(name + ".golden"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	s = s[strings.Index(s, "\n")+1:]
	return s[:strings.Index(s, "## ")]
}

// TestBinary drives the built merge the way the README shows it, through
// a shell so that globs and redirections are the user's.
func TestBinary(t *testing.T) {
	data, err := filepath.Abs(testdataDir)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		script    string
		env       []string
		code      int
		stdoutHas []string // substrings of stdout
		eachLine  string   // a substring of every stdout line
		file      string   // this file in the work dir must equal want
		want      string
		stderr    string // substring
	}{
		{name: "help shows the examples", script: `merge --help`, stdoutHas: []string{
			"merge gen*.jsonl gen*.errors.jsonl -o final.jsonl", "merge --prompts prompts.jsonl --missing gen*.jsonl > todo.jsonl"}},
		{name: "merge to a file", script: `merge "$D"/gen-a.jsonl "$D"/gen-a.errors.jsonl "$D"/gen-b.jsonl "$D"/gen-b.errors.jsonl -o final.jsonl`,
			file: "final.jsonl", want: goldenStdout(t, "default"), stderr: "merge: read 31, unique out 16, replaced 11, missing 4"},
		{name: "to-do list with globs", script: `cd "$D" && merge --prompts prompts.jsonl --missing gen*.jsonl > "$W"/todo.jsonl`,
			file: "todo.jsonl", want: goldenStdout(t, "missing"), stderr: "missing 6, prompts 21"},
		{name: "format from the environment, input on stdin", script: `cat "$D"/gen-a.jsonl | merge --sort`, env: []string{"TOKENMILL_MERGE_TO=messages"},
			eachLine: `"role":"assistant"`, stderr: "merge: read 17, unique out 13, replaced 1, missing 3"},
		{name: "regenerated conversations to Parquet, read back by extract",
			script:   `cd "$D" && merge --to conversations --with-reasoning conv-[ab].jsonl conv.*.jsonl -o "$W"/train.parquet && extract --turns all "$W"/train.parquet`,
			eachLine: `"reasoning_content":"`, stderr: "extract: read 11, wrote 11, rejected 0"},
		{name: "conversations to-do list", script: `cd "$D" && merge --prompts conv-prompts.jsonl --samples 2 --missing conv-[ab].jsonl conv.*.jsonl > "$W"/todo.jsonl`,
			file: "todo.jsonl", want: goldenStdout(t, "conv-missing"), stderr: "missing 21, prompts 16"},
		{name: "Parquet needs --to", script: `merge "$D"/conv-a.jsonl -o x.parquet`, code: 2, stderr: "Parquet holds training records"},
		{name: "bad input exits 3", script: `echo '{"id": "x"' | merge`, code: 3, stderr: "-:1: malformed_json"},
		{name: "usage error exits 2", script: `merge --missing`, code: 2, stderr: "Run 'merge --help' for usage."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			work := t.TempDir()
			cmd := exec.Command("bash", "-c", "set -o pipefail; "+tt.script)
			cmd.Dir = work
			cmd.Env = append(os.Environ(), "D="+data, "W="+work, "PATH="+filepath.Dir(testbin.Path("merge"))+":"+os.Getenv("PATH"))
			cmd.Env = append(cmd.Env, tt.env...)
			r := testbin.Exec(t, cmd)
			code, stdout, stderr := r.Code, string(r.Stdout), r.Stderr
			if code != tt.code {
				t.Errorf("exit %d, want %d\n%s", code, tt.code, stderr)
			}
			if !strings.Contains(stderr, tt.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderr, stderr)
			}
			if tt.file != "" {
				got, err := os.ReadFile(filepath.Join(work, tt.file))
				if err != nil || string(got) != tt.want {
					t.Errorf("%s (%v):\n%s\nwant:\n%s", tt.file, err, got, tt.want)
				}
			}
			for _, want := range tt.stdoutHas {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q", want)
				}
			}
			for _, l := range splitLines(stdout) {
				if !strings.Contains(l, tt.eachLine) {
					t.Errorf("stdout line lacks %q: %s", tt.eachLine, l)
				}
			}
		})
	}
}
