package benchsuite

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		var c struct{ Messages []message }
		json.Unmarshal([]byte(line), &c)
		if got := userTurns(c.Messages); got != want {
			t.Errorf("%s: %d, want %d", line, got, want)
		}
	}
}
