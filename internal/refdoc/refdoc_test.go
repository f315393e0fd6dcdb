package refdoc

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

// cmdDir is where the tools are, from this package's folder.
const cmdDir = "../../cmd"

// regenerate is the command that writes the pages again.
const regenerate = "go test ./internal/refdoc -update"

// width is the terminal width the pages are printed at: kong's help wraps
// at the terminal's width up to 100 columns, so at 100 a page is the help
// a user reads on any terminal at least as wide.
const width = "100"

func TestMain(m *testing.M) {
	tools, err := listTools()
	if err != nil {
		fmt.Fprintln(os.Stderr, "refdoc:", err)
		os.Exit(1)
	}
	testbin.Main(m, tools...)
}

// listTools is every folder of cmd/ that holds a main.go.
func listTools() ([]string, error) {
	entries, err := os.ReadDir(cmdDir)
	if err != nil {
		return nil, err
	}
	var tools []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(cmdDir, e.Name(), "main.go")); e.IsDir() && err == nil {
			tools = append(tools, e.Name())
		}
	}
	if len(tools) == 0 {
		return nil, fmt.Errorf("no tools in %s", cmdDir)
	}
	return tools, nil
}

// TestReferencePages compares every tool's cmd/<tool>/README.md with the
// page its --help makes now; with -update it writes the page.
func TestReferencePages(t *testing.T) {
	tools, err := listTools()
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools {
		t.Run(tool, func(t *testing.T) {
			subs, err := commands(filepath.Join(cmdDir, tool, "main.go"))
			if err != nil {
				t.Fatal(err)
			}
			helps := [][]string{{tool, "--help"}}
			for _, s := range subs {
				helps = append(helps, []string{tool, s, "--help"})
			}
			var texts []string
			for _, args := range helps {
				texts = append(texts, help(t, args))
			}
			page := render(helps, texts)
			path := filepath.Join(cmdDir, tool, "README.md")
			if !testbin.Update() {
				if have, err := os.ReadFile(path); err != nil || !bytes.Equal(have, page) {
					t.Errorf("cmd/%s/README.md is not %s's --help of now: run `%s` (just refdoc) and commit the page", tool, tool, regenerate)
				}
			}
			testbin.CheckGolden(t, path, page)
		})
	}
}

// help is what the built tool prints for args, at the pages' width and
// with no TOKENMILL_ variable set, so that the page is the same on every
// machine.
func help(t *testing.T, args []string) string {
	t.Helper()
	cmd := testbin.Command(args[0], args[1:]...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TOKENMILL_") && !strings.HasPrefix(kv, "COLUMNS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "COLUMNS="+width)
	r := testbin.Exec(t, cmd)
	if r.Code != 0 || len(r.Stdout) == 0 || r.Stderr != "" {
		t.Fatalf("%s: exit %d, %d bytes of help, stderr:\n%s", strings.Join(args, " "), r.Code, len(r.Stdout), r.Stderr)
	}
	return string(r.Stdout)
}

// render is a tool's page: a header saying how it is made, then each
// help under the command line that prints it.
func render(helps [][]string, texts []string) []byte {
	var b bytes.Buffer
	tool := helps[0][0]
	fmt.Fprintf(&b, "<!-- Generated from the tool's --help by `%s`: edit the help in the code, not this page. -->\n\n", regenerate)
	fmt.Fprintf(&b, "# %s\n\nThe reference of `%s`: what `--help` prints", tool, tool)
	if len(helps) > 1 {
		b.WriteString(", and each command's")
	}
	b.WriteString(", at a width of " + width + " columns.\n")
	for i, args := range helps {
		if i > 0 {
			fmt.Fprintf(&b, "\n## %s\n", strings.Join(args[:len(args)-1], " "))
		}
		fmt.Fprintf(&b, "\n```text\n$ %s\n%s```\n", strings.Join(args, " "), strings.TrimRight(texts[i], "\n")+"\n")
	}
	return b.Bytes()
}

// commands are the commands of a tool's kong grammar, read from its
// main.go (fields tagged cmd:""), in their order, less the default one:
// `tool --help` prints the default command's help already.
func commands(mainGo string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), mainGo, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		field, ok := n.(*ast.Field)
		if !ok || field.Tag == nil || len(field.Names) != 1 {
			return true
		}
		raw, err := strconv.Unquote(field.Tag.Value)
		if err != nil {
			return true
		}
		tag := reflect.StructTag(raw)
		if _, ok := tag.Lookup("cmd"); !ok || tag.Get("default") != "" || tag.Get("hidden") != "" {
			return true
		}
		name := tag.Get("name")
		if name == "" {
			name = kebab(field.Names[0].Name)
		}
		names = append(names, name)
		return true
	})
	return names, nil
}

// kebab is kong's name of a field: BenchRun is bench-run.
func kebab(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// TestCommands reads the commands of the tools that have them, as a page
// lists them.
func TestCommands(t *testing.T) {
	for tool, want := range map[string][]string{"infer": {"bench"}, "serve": {"status", "stop"}, "filter": nil} {
		got, err := commands(filepath.Join(cmdDir, tool, "main.go"))
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: commands %q (%v), want %q", tool, got, err, want)
		}
	}
	if got := kebab("BenchRun"); got != "bench-run" {
		t.Errorf("kebab(BenchRun) = %q", got)
	}
}
