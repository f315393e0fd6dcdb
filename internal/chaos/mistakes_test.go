package chaos

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"tokenmill/internal/testbin"
)

// The record tools and the calls a newcomer makes of each: a real output
// file named, so that the test can see none is left behind by a mistake.
var recordTools = []struct {
	tool string
	args []string // before the inputs
	env  string   // a variable of the tool, for the bad-value case
}{
	{"extract", []string{"-o", "prompts.jsonl", "--rejects", "rejects.jsonl"}, "TOKENMILL_EXTRACT_LIMIT"},
	{"dedup", []string{"-o", "unique.jsonl", "--rejects", "rejects.jsonl"}, "TOKENMILL_DEDUP_EXPECTED"},
	{"shard", []string{"-n", "2", "-o", "part-{i}.jsonl", "--rejects", "rejects.jsonl"}, "TOKENMILL_SHARD_LINES_PER_SHARD"},
	{"infer", []string{"-e", "127.0.0.1:1", "--wait-ready", "1s", "-o", "gen.jsonl", "--rejects", "rejects.jsonl"}, "TOKENMILL_INFER_RETRIES"},
	{"filter", []string{"-o", "kept.jsonl", "--rejects", "rejects.jsonl"}, "TOKENMILL_FILTER_WORKERS"},
	{"merge", []string{"-o", "train.jsonl", "--rejects", "rejects.jsonl"}, "TOKENMILL_MERGE_SAMPLES"},
	{"stats", []string{"--rejects", "rejects.jsonl"}, "TOKENMILL_STATS_TOP"},
}

// A newcomer's first mistakes, through every record tool's binary: an
// input that is not there, a directory, a file they may not read, a CSV
// file (which extract reads and the others refuse), a misspelled command
// or flag, a bad value in an environment variable. Each is a usage error
// (exit 2) that names the path or the variable and says what is wrong,
// before any output file exists: the directory holds afterwards exactly
// what it held before.
func TestFirstMistakes(t *testing.T) {
	type mistake struct {
		name   string
		args   []string // after the tool's own
		env    []string
		asUser bool // run as an unprivileged user (the unreadable file)
		code   int
		stderr string
		out    int // records written to -o prompts.jsonl (extract on CSV)
	}
	for _, tl := range recordTools {
		cases := []mistake{
			{name: "missing file", args: []string{"nofile.jsonl"}, code: 2, stderr: "cannot read nofile.jsonl: no such file"},
			{name: "directory", args: []string{"data"}, code: 2, stderr: "cannot read data: it is a directory: name the files in it (e.g. data/*.jsonl)"},
			{name: "permission denied", args: []string{"secret.jsonl"}, asUser: true, code: 2, stderr: "cannot read secret.jsonl: permission denied"},
			{name: "missing among good ones", args: []string{"good.jsonl", "nofile.jsonl"}, code: 2, stderr: "cannot read nofile.jsonl: no such file"},
			{name: "CSV", args: []string{"data.csv"}, code: 2, stderr: "data.csv is not JSON Lines: CSV is read by extract (extract data.csv | ...)"},
			{name: "CSV compressed", args: []string{"data.csv.gz"}, code: 2, stderr: "data.csv.gz is not JSON Lines: CSV is read by extract"},
			{name: "misspelled flag", args: []string{"--forcee", "good.jsonl"}, code: 2, stderr: `unknown flag --forcee, did you mean "--force"?`},
			{name: "bad environment variable", args: []string{"good.jsonl"}, env: []string{tl.env + "=lots"}, code: 2,
				stderr: fmt.Sprintf(`environment variable %s="lots" (read as --`, tl.env)},
		}
		switch tl.tool {
		case "extract":
			cases[4] = mistake{name: "CSV", args: []string{"data.csv"}, code: 0, out: 2, stderr: "extract: read 2, wrote 2, rejected 0"}
			cases[5] = mistake{name: "CSV compressed", args: []string{"data.csv.gz"}, code: 0, out: 2, stderr: "extract: read 2, wrote 2, rejected 0"}
		case "infer":
			cases = append(cases,
				mistake{name: "misspelled command", args: []string{"genrate", "good.jsonl"}, code: 2, stderr: `unknown command "genrate": did you mean "generate"?`},
				mistake{name: "misspelled command among flags", args: []string{"--samples", "2", "bnch"}, code: 2, stderr: `unknown command "bnch": did you mean "bench"?`})
		}
		for _, m := range cases {
			t.Run(tl.tool+"/"+m.name, func(t *testing.T) {
				dir := mistakesDir(t)
				before := listDir(t, dir)
				cmd := testbin.Command(tl.tool, append(slices.Clone(tl.args), m.args...)...)
				if m.asUser && !asUnprivileged(t, cmd, dir, tl.tool) {
					return
				}
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), m.env...)
				r := testbin.Exec(t, cmd)
				written, _ := os.ReadFile(filepath.Join(dir, "prompts.jsonl"))
				out := strings.Count(string(written), "\n")
				if r.Code != m.code || !strings.Contains(r.Stderr, m.stderr) || (m.code == 2 && len(r.Stdout) > 0) || (m.out > 0 && out != m.out) {
					t.Errorf("%s %q: exit %d, %d lines out; want exit %d, %d lines, and stderr holding %q:\n%s",
						tl.tool, m.args, r.Code, out, m.code, m.out, m.stderr, r.Stderr)
				}
				if m.code == 2 && !strings.Contains(r.Stderr, "Run '"+tl.tool+" --help' for usage.") {
					t.Errorf("%s: the usage error does not point to --help:\n%s", tl.tool, r.Stderr)
				}
				if x := Internals.FindString(r.Stderr); x != "" {
					t.Errorf("%s: a message names the program's insides (%q):\n%s", tl.tool, x, r.Stderr)
				}
				after := listDir(t, dir)
				if m.code == 2 && !slices.Equal(before, after) {
					t.Errorf("%s left files behind: before %q, after %q", tl.tool, before, after)
				}
			})
		}
	}
}

// mistakesDir is a directory with a good prompt file, a directory, a
// file no one may read and a CSV file, plain and gzipped.
func mistakesDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string][]byte{
		"good.jsonl":   Prompts,
		"secret.jsonl": Prompts,
		"data.csv":     []byte(CSVPrompts),
		"data.csv.gz":  compress(t, []byte(CSVPrompts), false),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "secret.jsonl"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// asUnprivileged makes cmd run as a user the file permissions apply to:
// itself when the test is not root, else the user nobody, with a copy of
// the tool it may run and dir open to it.
func asUnprivileged(t *testing.T, cmd *exec.Cmd, dir, tool string) bool {
	t.Helper()
	if os.Geteuid() != 0 {
		return true
	}
	const nobody = 65534
	// The temporary directories above dir are the test's own (0700).
	for d := dir; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()) && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(t.TempDir(), tool)
	copyFile(t, testbin.Path(tool), bin)
	for d := filepath.Dir(bin); d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()) && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	cmd.Path = bin
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	return true
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// listDir is the names under dir, recursively, sorted.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel, _ := filepath.Rel(dir, path); rel != "." {
			names = append(names, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// allTools are every binary, for what every one of them must say alike.
var allTools = []string{"extract", "dedup", "shard", "infer", "filter", "merge", "stats", "serve", "llmsim", "corpus", "benchsuite"}

// flagRE finds a flag in --help: its name and what follows "=": a
// placeholder in capitals (the default hidden), or the default itself.
// (A wrapped line of help text that starts with a flag is indented further.)
var flagRE = regexp.MustCompile(`(?m)^ {2,8}(?:-\w, )?--(\[no-\])?([\w-]+)(=(\S+))?\s`)

// Every flag's default is in --help: shown after "=" by kong, or, where a
// placeholder stands there (--retries=N) or the flag is a switch that is
// on unless turned off (--[no-]affinity), in the help text. infer --help
// lists generate's flags, since generating is what infer does unless told
// otherwise.
func TestHelpShowsDefaults(t *testing.T) {
	pages := map[string][]string{}
	for _, tool := range allTools {
		pages[tool] = []string{"--help"}
	}
	pages["infer bench"] = []string{"bench", "--help"}
	for page, args := range pages {
		tool := strings.Fields(page)[0]
		r := testbin.Run(t, "", nil, nil, tool, args...)
		if r.Code != 0 {
			t.Errorf("%s: exit %d\n%s", page, r.Code, r.Stderr)
			continue
		}
		help := string(r.Stdout)
		locs := flagRE.FindAllStringSubmatchIndex(help, -1)
		for i, loc := range locs {
			end := len(help)
			if i+1 < len(locs) {
				end = locs[i+1][0]
			}
			name, text := help[loc[4]:loc[5]], help[loc[1]:end]
			negatable, placeholder := loc[2] >= 0, ""
			if loc[8] >= 0 {
				placeholder = help[loc[8]:loc[9]]
			}
			hidden := negatable || placeholder != "" && placeholder == strings.ToUpper(placeholder) && !strings.ContainsAny(placeholder[:1], `"0123456789`)
			if hidden && !strings.Contains(text, "Default") && !strings.Contains(text, "default") {
				t.Errorf("%s: --%s=%s says no default:\n%s", page, name, placeholder, text)
			}
		}
	}
	r := testbin.Run(t, "", nil, nil, "infer", "--help")
	for _, want := range []string{"Usage: infer generate", "--retries=N", "Default: 8", "--samples=K", "Default: 1", "infer bench --help", "Example:"} {
		if !strings.Contains(string(r.Stdout), want) {
			t.Errorf("infer --help does not show %q:\n%s", want, r.Stdout)
		}
	}
}

// --version names the module version and, for a build from a checkout,
// the commit; never a bare "dev".
func TestVersion(t *testing.T) {
	// The go command records the commit where the source is a checkout
	// with a .git directory (not a linked worktree, whose .git is a file).
	head := ""
	if top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output(); err == nil {
		if st, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err == nil && st.IsDir() {
			if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
				head = strings.TrimSpace(string(out))[:12]
			}
		}
	}
	if head == "" {
		t.Log("not a checkout the go command reads the commit of: --version is only checked not to be a bare dev")
	}
	for _, tool := range allTools {
		r := testbin.Run(t, "", nil, nil, tool, "--version")
		v := strings.TrimSpace(string(r.Stdout))
		if r.Code != 0 || !strings.HasPrefix(v, tool+" (tokenmill) ") || strings.HasSuffix(v, " dev") {
			t.Errorf("%s --version: exit %d, %q", tool, r.Code, v)
		}
		if head != "" && !strings.Contains(v, "commit "+head) {
			t.Errorf("%s --version: %q does not name the commit %s it was built from", tool, v, head)
		}
	}
}
