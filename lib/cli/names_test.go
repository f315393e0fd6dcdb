package cli

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPackageComments holds every package's comment to its name: exactly
// one file says "Package NAME ..." ("Command NAME ..." for a main, NAME
// its folder's), so that a renamed package cannot keep an old name in
// its documentation.
func TestPackageComments(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}|{{.Name}}|{{join .GoFiles \",\"}}", "tokenmill/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		dir, name := f[0], f[1]
		want := "Package " + name + " "
		if name == "main" {
			want = "Command " + filepath.Base(dir) + " "
		}
		var says []string
		for _, file := range strings.Split(f[2], ",") {
			parsed, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, file), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if parsed.Doc != nil {
				says = append(says, file+": "+firstLine(parsed.Doc.Text()))
			}
		}
		if len(says) != 1 || !strings.HasPrefix(says[0][strings.Index(says[0], ": ")+2:], want) {
			t.Errorf("%s: want one package comment starting %q, have %q", dir, want, says)
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// citedDoc is a document named bare (README.md, GUIDE.md, ...): one of
// the repository's own, which must then be there. Paths with a folder
// (llama.cpp's tools/server/README.md) name other projects' documents.
var citedDoc = regexp.MustCompile(`(^|[^\w/.-])([A-Z][A-Z_]+\.md)\b`)

// TestCitedDocuments fails on a document the repository's files cite and
// do not have.
func TestCitedDocuments(t *testing.T) {
	tracked, err := exec.Command("git", "-C", "../..", "ls-files").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): nothing to check", err)
	}
	for _, f := range strings.Split(strings.TrimSpace(string(tracked)), "\n") {
		switch filepath.Ext(f) {
		case ".go", ".md", ".sh", "":
		default:
			continue
		}
		b, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			continue // deleted in the working tree
		}
		for _, m := range citedDoc.FindAllSubmatch(b, -1) {
			doc := string(m[2])
			if _, err := os.Stat(filepath.Join("../..", doc)); err != nil {
				t.Errorf("%s cites %s, which the repository does not have", f, doc)
			}
		}
	}
}
