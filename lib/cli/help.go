package cli

import (
	"fmt"
	"os"
	"regexp"
	"runtime/debug"
	"strings"

	"github.com/alecthomas/kong"
)

// What --help, --version and the first mistakes say.

// helpValue is the help text of a flag: kong's (with its environment
// variables), and the default where kong's listing of the flag hides it
// behind a placeholder (--retries=N) or it is a switch that is on unless
// turned off.
func helpValue(v *kong.Value) string {
	if d, ok := hiddenDefault(v); ok {
		c := *v
		c.Help = strings.TrimSuffix(strings.TrimSpace(v.Help), ".") + ". Default: " + d + "."
		v = &c
	}
	return kong.DefaultHelpValueFormatter(v)
}

// hiddenDefault is the default of v when --help would not show it.
func hiddenDefault(v *kong.Value) (string, bool) {
	f := v.Flag
	if f == nil || v.Required || saysDefault(v.OrigHelp) {
		return "", false
	}
	if f.IsBool() || f.IsCounter() {
		return v.Default, v.Default == "true"
	}
	_, custom := v.Mapper.(kong.PlaceHolderProvider)
	switch {
	case v.HasDefault && f.PlaceHolder == "" && !custom:
		return "", false // kong shows it: --api="chat"
	case v.Default == "":
		return "none", true
	}
	return v.Default, true
}

// saysDefault: the help text names its default itself.
func saysDefault(help string) bool {
	return strings.Contains(help, "${default}") || strings.Contains(help, "Default:") || strings.Contains(help, "(default")
}

// defaultCommandHelp turns `tool --help` of a tool whose default command
// takes the arguments (infer: generate) into `tool generate --help`, so that
// the flags a user will type are the ones listed. args naming a command
// are left alone.
func defaultCommandHelp(app *kong.Node, args []string) []string {
	def := app.DefaultCmd
	if def == nil {
		return args
	}
	help := false
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "--help" {
			help = true
		}
		for _, c := range app.Children {
			if a == c.Name || contains(c.Aliases, a) {
				return args
			}
		}
	}
	if !help {
		return args
	}
	return append([]string{def.Name}, args...)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// misspelledCommand finds a first argument that is no command, no file
// and a letter or two from a command's name ("genrate"), where a default
// command would otherwise take it for an input file, or kong would call it
// an unexpected argument; it returns the usage error that says so.
func misspelledCommand(app *kong.Node, args []string) error {
	if len(app.Children) == 0 {
		return nil
	}
	word := firstPositional(app, args)
	if word == "" || word == "-" || strings.ContainsAny(word, "/.") {
		return nil
	}
	var names []string
	for _, c := range app.Children {
		if c.Hidden {
			continue
		}
		if word == c.Name || contains(c.Aliases, word) {
			return nil
		}
		names = append(names, c.Name)
	}
	if _, err := os.Stat(word); err == nil {
		return nil
	}
	best, dist := "", 3
	for _, n := range names {
		if d := editDistance(word, n); d < dist {
			best, dist = n, d
		}
	}
	if best == "" {
		return nil
	}
	return Usagef("unknown command %q: did you mean %q? (commands: %s)", word, best, strings.Join(names, ", "))
}

// firstPositional is the first argument that is not a flag or a flag's
// value, as the flags of app and its default command take them.
func firstPositional(app *kong.Node, args []string) string {
	takes := map[string]bool{} // -x and --name: whether the flag takes a value
	nodes := []*kong.Node{app}
	if app.DefaultCmd != nil {
		nodes = append(nodes, app.DefaultCmd)
	}
	for _, n := range nodes {
		for _, f := range n.Flags {
			value := !f.IsBool() && !f.IsCounter()
			takes["--"+f.Name] = value
			for _, a := range f.Aliases {
				takes["--"+a] = value
			}
			if f.Short != 0 {
				takes["-"+string(f.Short)] = value
			}
		}
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if i+1 < len(args) {
				return args[i+1]
			}
			return ""
		case strings.HasPrefix(a, "--"):
			if !strings.Contains(a, "=") && takes[a] {
				i++
			}
		case strings.HasPrefix(a, "-") && len(a) > 1:
			if len(a) == 2 && takes[a] {
				i++
			}
		default:
			return a
		}
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// envRE matches kong's report of a bad value from the environment.
var envRE = regexp.MustCompile(`^(--[\w-]+): (.*) \(from envar (\w+)=(".*")\)$`)

// parseError is kong's parse error in the user's terms: a bad value that
// came from a TOKENMILL_* variable names the variable first (the user set
// it, perhaps long ago, and did not type the flag), and a type is named
// as what the value should be.
func parseError(err error) string {
	msg := err.Error()
	if m := envRE.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("environment variable %s=%s (read as %s): %s", m[3], m[4], m[1], m[2])
	}
	msg = strings.NewReplacer(
		"expected a valid 64 bit int", "expected an integer",
		"expected a valid 64 bit uint", "expected a whole number",
		"expected a float", "expected a number",
		` (string)`, "",
	).Replace(msg)
	return Plain(msg)
}

// version is the tool's version: Version when set at link time, else the
// module's version and the commit it was built from, as the Go toolchain
// records them in the binary.
func version() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(no build information)"
	}
	return describeBuild(bi)
}

// describeBuild is "v1.2.3", or for a build from a checkout
// "v0.0.0-20251201103000-1ee473d1a2b3+dirty (commit 1ee473d1a2b3, 2025-12-01T10:30:00Z, uncommitted changes)".
func describeBuild(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	rev := settings["vcs.revision"]
	if rev == "" {
		if v == "(devel)" {
			return v + ", commit unknown (built without version control information)"
		}
		return v
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	parts := []string{"commit " + rev}
	if t := settings["vcs.time"]; t != "" {
		parts = append(parts, t)
	}
	if settings["vcs.modified"] == "true" {
		parts = append(parts, "uncommitted changes")
	}
	return v + " (" + strings.Join(parts, ", ") + ")"
}
