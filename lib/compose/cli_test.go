package compose

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

func TestMain(m *testing.M) {
	testbin.Main(m, "compose", "extract", "dedup", "merge", "infer", "llmsim", "stats", "rusage")
}

// realDatasets are the real public datasets the tests compose, each
// extracted with a --source of its own.
var realDatasets = []struct{ source, file string }{
	{"alpaca", "alpaca_en_demo.json"},
	{"fastchat", "fastchat_dummy_conversation.json"},
	{"glaive", "glaive_toolcall_en_demo.json"},
	{"mt-bench", "mt_bench_question.jsonl"},
	{"v1-sft", "v1_sft_demo.jsonl"},
	{"ii-0625", "ii_0625_style.parquet"},
}

// realSources extracts each real dataset with its --source and dedups it
// on its own, into dir: source -> file.
func realSources(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range realDatasets {
		src, err := filepath.Abs(testbin.RealData(t, d.file))
		if err != nil {
			t.Fatal(err)
		}
		raw := filepath.Join(dir, d.source+".raw.jsonl")
		path := filepath.Join(dir, d.source+".jsonl")
		mustRun(t, dir, nil, "extract", "--keep", "label,langdetect", "--source", d.source, "-o", raw, src)
		mustRun(t, dir, nil, "dedup", "-o", path, raw)
		out[d.source] = path
	}
	return out
}

// mustRun runs a binary that must exit 0.
func mustRun(t *testing.T, dir string, stdin io.Reader, name string, args ...string) testbin.Result {
	t.Helper()
	r := testbin.Run(t, dir, stdin, nil, name, args...)
	if r.Code != 0 {
		t.Fatalf("%s %q: exit %d\n%s", name, args, r.Code, r.Stderr)
	}
	return r
}

// rec is what the tests read of a record.
type rec struct {
	ID      json.RawMessage `json:"id"`
	Source  string          `json:"source"`
	Compose *struct {
		Repeat int `json:"repeat"`
	} `json:"compose"`
	line string
}

// readRecords reads a JSONL file's records, each with its line.
func readRecords(t *testing.T, path string) []rec {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseRecords(t, data)
}

func parseRecords(t *testing.T, data []byte) []rec {
	t.Helper()
	var out []rec
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		var r rec
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %.200s", err, line)
		}
		r.line = line
		out = append(out, r)
	}
	return out
}

// bySource counts records by source.
func bySource(rs []rec) map[string]int {
	m := map[string]int{}
	for _, r := range rs {
		m[r.Source]++
	}
	return m
}

// summaryRE is compose's summary line.
var summaryRE = regexp.MustCompile(`compose: read (\d+), selected (\d+), not selected (\d+), rejected (\d+)[^;]*; wrote (\d+) records`)

// summary is the numbers of the summary line: read, selected, not
// selected, rejected, written.
func summary(t *testing.T, stderr string) [5]int {
	t.Helper()
	m := summaryRE.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no summary line in:\n%s", stderr)
	}
	var out [5]int
	for i := range out {
		out[i], _ = strconv.Atoi(m[i+1])
	}
	return out
}

// groupRow is one group's row of the summary table: share, available,
// target, taken, shortfall.
func groupRow(t *testing.T, stderr, group string) []string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^compose: ` + regexp.QuoteMeta(group) + `\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$`)
	m := re.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no row for group %q in:\n%s", group, stderr)
	}
	return m[1:]
}

func TestBinary(t *testing.T) {
	input := strings.Join(syntheticRecords(60), "\n") + "\n"
	tests := []struct {
		name   string
		args   []string
		env    []string
		stdin  string
		code   int
		stdout string // substring
		stderr string // substring
		lines  int    // records on stdout (-1: not checked)
	}{
		{name: "help shows real pipelines", args: []string{"--help"}, lines: -1,
			stdout: "compose --by source --share ii-0625=0.5,code=0.3,math=0.2 --total 300000 -o mix.jsonl ii.jsonl code.jsonl math.jsonl"},
		{name: "help names the rerun loop", args: []string{"--help"}, lines: -1, stdout: "merge --prompts mix.jsonl --missing gen.jsonl"},
		{name: "every flag has its variable", args: []string{"--help"}, lines: -1, stdout: "($TOKENMILL_COMPOSE_SPOOL_MAX)"},
		{name: "shares from stdin", args: []string{"--by", "source", "--share", "a=0.5,b=0.3,c=0.2", "--total", "20"}, stdin: input,
			stderr: "compose: read 60, selected 20, not selected 40, rejected 0; wrote 20 records (total 20, seed 0)", lines: 20},
		{name: "total from the environment", args: []string{"--by", "source"}, env: []string{"TOKENMILL_COMPOSE_TOTAL=6"}, stdin: input,
			stderr: "wrote 6 records", lines: 6},
		{name: "share without by", args: []string{"--share", "a=1"}, code: 2, stderr: "give --by", lines: -1},
		{name: "shares over one", args: []string{"--by", "source", "--share", "a=0.7,b=0.5"}, code: 2, stderr: "the shares sum to 1.2, more than 1", lines: -1},
		{name: "a bad share", args: []string{"--by", "source", "--share", "a=lots"}, code: 2, stderr: `"lots" is not a share`, lines: -1},
		{name: "spec with flags", args: []string{"--spec", "x.yaml", "--by", "source"}, code: 2, stderr: "--spec holds the mix", lines: -1},
		{name: "missing input", args: []string{"no-such.jsonl"}, code: 2, stderr: "cannot read no-such.jsonl: no such file", lines: -1},
		{name: "pipes refused with --spool-max 0", args: []string{"--spool-max", "0"}, stdin: input, code: 2,
			stderr: "stdin is a pipe, and compose reads its input twice", lines: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			r := testbin.Run(t, dir, strings.NewReader(tt.stdin), tt.env, "compose", tt.args...)
			if r.Code != tt.code {
				t.Errorf("exit %d, want %d\nstderr:\n%s", r.Code, tt.code, r.Stderr)
			}
			if !strings.Contains(string(r.Stdout), tt.stdout) {
				t.Errorf("stdout lacks %q:\n%.800s", tt.stdout, r.Stdout)
			}
			if !strings.Contains(r.Stderr, tt.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderr, r.Stderr)
			}
			if n := bytes.Count(r.Stdout, []byte("\n")); tt.lines >= 0 && n != tt.lines {
				t.Errorf("%d records on stdout, want %d", n, tt.lines)
			}
		})
	}
}

// syntheticRecords are n prompt records with sources a, b and c in turn.
func syntheticRecords(n int) []string {
	out := make([]string, n)
	for i := range out {
		src := string(rune('a' + i%3))
		out[i] = `{"id":"r` + strconv.Itoa(i) + `","messages":[{"role":"user","content":"Question number ` + strconv.Itoa(i) +
			` about the weather in Paris and how it changes over the year."}],"source":"` + src + `"}`
	}
	return out
}

// runCompose runs compose in process.
func runCompose(t testing.TB, stdin io.Reader, args ...string) testbin.Result {
	return testbin.InProcess(context.Background(), "compose", Description, &Command{}, stdin, args...)
}
