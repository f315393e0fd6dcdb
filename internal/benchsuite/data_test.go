package benchsuite

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/record"
)

func TestCopyLines(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("aaaa\nbb\ncccccc\ndd\npartial"), 0o644); err != nil {
		t.Fatal(err)
	}
	short := func(line []byte) bool { return len(line) < 5 }
	for _, tc := range []struct {
		n    int
		keep func([]byte) bool
		want string
	}{
		{0, nil, "aaaa\nbb\ncccccc\ndd\n"}, // a last line without its newline is no whole line
		{2, nil, "aaaa\nbb\n"},
		{0, short, "bb\ndd\n"},
		{0, func([]byte) bool { return true }, "aaaa\nbb\ncccccc\ndd\npartial"}, // keep sees the last line too
		{1, short, "bb\n"},
	} {
		dst := filepath.Join(dir, "dst")
		if err := copyLines(src, dst, tc.n, tc.keep); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(dst)
		if string(got) != tc.want {
			t.Errorf("n %d: %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestWriteBodies(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "prompts.jsonl")
	long := strings.Repeat("x", 100000)
	lines := []string{
		`{"id":"a","messages":[{"role":"user","content":"one"}],"source":"s"}`,
		`{"id":"b","messages":[{"role":"user","content":"` + long + `"}]}`, // over curl's argument limit: left out
		`{"id":"c","messages":[{"role":"system","content":"sys"},{"role":"user","content":"two"}]}`,
		`{"id":"d","messages":[{"role":"user","content":"past n"}]}`,
	}
	if err := os.WriteFile(src, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "bodies.jsonl")
	if err := writeBodies(src, dst, 3, "tiny", 32); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dst)
	want := `{"model":"tiny","messages":[{"role":"user","content":"one"}],"max_tokens":32}` + "\n" +
		`{"model":"tiny","messages":[{"role":"system","content":"sys"},{"role":"user","content":"two"}],"max_tokens":32}` + "\n"
	if string(got) != want {
		t.Fatalf("bodies:\n%s\nwant:\n%s", got, want)
	}
	if err := os.WriteFile(src, []byte("{\"messages\":[]}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeBodies(src, dst, 5, "m", 1); err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Fatalf("a malformed prompt: %v, want an error naming line 2", err)
	}
}

func TestUserTurns(t *testing.T) {
	for line, want := range map[string]int{
		`{"messages":[{"role":"system"},{"role":"user"},{"role":"assistant"},{"role":"user"}]}`: 2,
		`{"messages":[]}`: 0,
		`not json`:        0,
	} {
		if got := userTurns([]byte(line)); got != want {
			t.Errorf("%s: %d, want %d", line, got, want)
		}
	}
}

// TestFilterGens writes filter's benchmark records from a small corpus,
// read again and again until the bytes asked for: every line a
// generation record of one corpus conversation's first question, every id
// once, the same bytes for the same seed.
func TestFilterGens(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.jsonl")
	var b strings.Builder
	for i := range 5 {
		fmt.Fprintf(&b, `{"id":%d,"conversations":[{"from":"human","value":"question %d"},{"from":"gpt","value":"%s"}]}`+"\n", i, i, strings.Repeat("answer words ", 40))
	}
	b.WriteString(`{"id":"no-answer","conversations":[{"from":"human","value":"alone"}]}` + "\n")
	if err := os.WriteFile(corpus, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	gen := func(name, seed string) []byte {
		out := filepath.Join(dir, name)
		code, _, stderr := run(t, "", "filter-gens", "--bytes", "20000", "--seed", seed, "-o", out, corpus)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		data, _ := os.ReadFile(out)
		return data
	}
	first := gen("a.jsonl", "1")
	if string(gen("b.jsonl", "1")) != string(first) {
		t.Fatal("the same seed gave different records")
	}
	if string(gen("c.jsonl", "2")) == string(first) {
		t.Fatal("another seed gave the same records")
	}
	lines := strings.Split(strings.TrimSuffix(string(first), "\n"), "\n")
	last := len(first) - len(lines[len(lines)-1]) - 1
	if len(first) < 20000 || last >= 20000 {
		t.Fatalf("%d bytes, the last record starting at %d: it should stop with the record that reaches 20000", len(first), last)
	}
	ids := map[string]bool{}
	for i, line := range lines {
		var g record.Generation
		if err := record.Decode([]byte(line), &g); err != nil || g.Output == nil || len(g.Messages) != 1 {
			t.Fatalf("line %d: %v: %s", i+1, err, line)
		}
		if ids[g.ID.String()] {
			t.Fatalf("id %s twice", g.ID)
		}
		ids[g.ID.String()] = true
		var q struct{ Messages []struct{ Content string } }
		json.Unmarshal([]byte(line), &q)
		if !strings.HasPrefix(q.Messages[0].Content, "question ") {
			t.Fatalf("line %d: the prompt is not a corpus question: %s", i+1, line)
		}
	}
	// No conversation with an answer: refused, not looped on forever.
	if err := os.WriteFile(corpus, []byte(`{"id":1,"conversations":[{"from":"human","value":"q"}]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run(t, "", "filter-gens", "--bytes", "1000", "-o", filepath.Join(dir, "d.jsonl"), corpus); code != 1 || !strings.Contains(stderr, "no conversation") {
		t.Fatalf("a corpus without answers: exit %d: %s", code, stderr)
	}
}
