package ledger

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultErrorsPath(t *testing.T) {
	for in, want := range map[string]string{
		"gen.jsonl": "gen.errors.jsonl", "out/run1.json": "out/run1.errors.json", "gen": "gen.errors.jsonl",
		"gen.txt": "gen.txt.errors.jsonl", "-": "", "": "",
	} {
		if got := defaultErrorsPath(in); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}

func TestRefuseCollisions(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.jsonl")
	os.WriteFile(a, nil, 0o644)
	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "in.jsonl") // an input that can be read: the paths are what is checked
	os.WriteFile(in, nil, 0o644)
	for _, tt := range []struct {
		out, errs, rejects string
		want               string
	}{
		{"-", "", "", ""},
		{"-", "", "r.jsonl", ""},
		{"-", "", "-", "-o and --rejects both write to stdout"},
		{"", "", "-", "-o and --rejects both write to stdout"},
		{a, "b.jsonl", "-", ""},
		{a, a, "", `--errors "` + a + `" is the same file as -o`},
		{a, link, "", `--errors "` + link + `" is the same file as -o`},
		{a, "b.jsonl", "./b.jsonl", `--rejects "./b.jsonl" is the same file as --errors "b.jsonl"`},
		{a, "-", "-", ""}, // --errors - is a file named -
		{"out/../x.jsonl", "", "x.jsonl", `--rejects "x.jsonl" is the same file as -o "out/../x.jsonl"`},
		{a, "b.jsonl", dir, "is a directory"},
		{a, a + ".turns", "", "is the same file as -o's turn journal"},
		{a, a + ".lock", "", "is the same file as -o's lock file"},
	} {
		err := checkPaths(FileOptions{Inputs: []string{in}, Output: tt.out, Errors: tt.errs, Rejects: tt.rejects}, tt.out, errorsPath(tt.out, tt.errs))
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("-o %q --errors %q --rejects %q: %v, want %q", tt.out, tt.errs, tt.rejects, err, tt.want)
		}
	}
}
