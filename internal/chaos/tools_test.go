package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
	"tokenmill/lib/record"
	"tokenmill/lib/shard"
)

// The record tools, driven through their binaries by the tests of this
// file: what every one of them must do alike.
var tools = []string{"extract", "dedup", "shard", "merge", "stats"}

// TestMain builds every binary: besides the record tools, the memory
// benchmark runs filter, and the litter test every tool there is.
func TestMain(m *testing.M) { testbin.Main(m, allTools...) }

// run runs a tool binary in dir with stdin (nil: none) and args.
func run(t *testing.T, dir string, stdin []byte, tool string, args ...string) testbin.Result {
	t.Helper()
	cmd := testbin.Command(tool, args...)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(stdin)
	return testbin.Exec(t, cmd)
}

// ids reads the id of every record on a tool's stdout.
func ids(t *testing.T, out []byte) []string {
	t.Helper()
	var got []string
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var v struct {
			ID record.ID `json:"id"`
		}
		if err := record.Decode(line, &v); err != nil {
			t.Fatalf("output line %q: %v", line, err)
		}
		got = append(got, v.ID.Text)
	}
	return got
}

// One rule for the id in every tool: the field named exactly "id". A
// record with only "ID" has no id (extract gives it its prompt's content
// id, shard places it by that, dedup --key id, merge and stats reject it);
// "id" is found.
func TestIDIsExactlyID(t *testing.T) {
	const answer = `"output":{"text":"t","finish_reason":"stop","sample":0}`
	upper := `{"ID":"upper","messages":[{"role":"user","content":"p1"}],` + answer + `}`
	lower := `{"id":"lower","messages":[{"role":"user","content":"p2"}],` + answer + `}`
	input := []byte(upper + "\n" + lower + "\n")
	p1 := record.Prompt{Messages: []record.Message{{Role: "user", Content: "p1"}}}
	contentID := record.ContentID(p1.AppendCanonical(nil))

	// shard: the shard of the content id, chosen among 64 so that "upper"
	// would land elsewhere.
	k := shard.HashShard(contentID, 64)
	if k == shard.HashShard("upper", 64) {
		t.Fatal("pick another shard count: the content id and \"upper\" share a shard")
	}
	shardOf := func(id string) string { return fmt.Sprintf("%d/64", shard.HashShard(id, 64)) }

	cases := []struct {
		tool     string
		args     []string
		code     int
		ids      []string // records on stdout, by id
		stderr   string
		reportOK string // stats: a substring of the JSON report
	}{
		{tool: "extract", code: 0, ids: []string{contentID, "lower"}},
		{tool: "dedup", args: []string{"--key", "id"}, code: 3, ids: []string{"lower"}, stderr: "-:1: no_key"},
		{tool: "shard", args: []string{"--select", shardOf(contentID)}, code: 0, ids: []string{""}},
		{tool: "shard", args: []string{"--select", shardOf("lower")}, code: 0, ids: []string{"lower"}},
		{tool: "merge", code: 3, ids: []string{"lower"}, stderr: "-:1: no_id"},
		{tool: "stats", args: []string{"--json"}, code: 3, stderr: "-:1: missing_id", reportOK: `"name": "missing_id"`},
	}
	for _, c := range cases {
		t.Run(c.tool+" "+strings.Join(c.args, " "), func(t *testing.T) {
			r := run(t, t.TempDir(), input, c.tool, c.args...)
			if r.Code != c.code || !strings.Contains(r.Stderr, c.stderr) {
				t.Fatalf("exit %d, want %d with %q on stderr:\n%s", r.Code, c.code, c.stderr, r.Stderr)
			}
			if c.tool == "stats" {
				if !bytes.Contains(r.Stdout, []byte(c.reportOK)) || !bytes.Contains(r.Stdout, []byte(`"rejected": 1,`)) || !bytes.Contains(r.Stdout, []byte(`"records": 1,`)) {
					t.Fatalf("report does not count one record and one missing id:\n%s", r.Stdout)
				}
				return
			}
			if got := ids(t, r.Stdout); strings.Join(got, ",") != strings.Join(c.ids, ",") {
				t.Fatalf("ids out %q, want %q", got, c.ids)
			}
		})
	}
}

// writeFile writes data to dir/name and returns the path.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// One rule for ids in every tool: an id is its text, so 7 and "7" are one
// id: dedup --key id keeps one, shard puts both in one part, merge keeps
// the better of the two, stats counts the second as a repeat.
func TestOneIDRule(t *testing.T) {
	dir := t.TempDir()
	lines := `{"id":7,"messages":[{"role":"user","content":"q"}],"output":{"text":"cut","finish_reason":"length","sample":0}}
{"id":"7","messages":[{"role":"user","content":"q"}],"output":{"text":"whole","finish_reason":"stop","sample":0}}
`
	in := filepath.Join(dir, "in.jsonl")
	os.WriteFile(in, []byte(lines), 0o644)
	if r := run(t, dir, nil, "dedup", "--key", "id", in); r.Code != 0 || len(ids(t, r.Stdout)) != 1 {
		t.Errorf("dedup --key id: exit %d, kept %d of 7 and \"7\"\n%s", r.Code, len(ids(t, r.Stdout)), r.Stderr)
	}
	if r := run(t, dir, nil, "shard", "-n", "4", "-o", "part-{i}.jsonl", in); r.Code != 0 {
		t.Errorf("shard: exit %d\n%s", r.Code, r.Stderr)
	}
	parts := 0
	for _, name := range shardFiles(t, dir) {
		if b, _ := os.ReadFile(filepath.Join(dir, name)); len(b) > 0 {
			parts++
		}
	}
	if parts != 1 {
		t.Errorf("shard put 7 and \"7\" in %d parts", parts)
	}
	r := run(t, dir, nil, "merge", in)
	if r.Code != 0 || len(ids(t, r.Stdout)) != 1 || !strings.Contains(string(r.Stdout), `"whole"`) {
		t.Errorf("merge: exit %d, %s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	r = run(t, dir, nil, "stats", "--json", in)
	var report struct {
		Duplicates struct {
			Records int `json:"records"`
		} `json:"duplicates"`
	}
	if err := json.Unmarshal(r.Stdout, &report); err != nil || report.Duplicates.Records != 1 {
		t.Errorf("stats: %v, %d repeats of 7 and \"7\", want 1\n%s", err, report.Duplicates.Records, r.Stdout)
	}
}
