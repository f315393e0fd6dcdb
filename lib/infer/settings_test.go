package infer

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/llmsim"
	"tokenmill/lib/cli"
	"tokenmill/lib/record"
)

// readSidecar reads the settings sidecar beside out, failing on a line
// that is not a whole settings line or a hash written twice.
func readSidecar(t testing.TB, out string) []record.SettingsLine {
	t.Helper()
	data, err := os.ReadFile(record.SettingsPath(out))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("%s ends in a partial line", record.SettingsPath(out))
	}
	var lines []record.SettingsLine
	seen := map[string]bool{}
	for _, raw := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		if len(raw) == 0 {
			continue
		}
		l, err := record.ParseSettingsLine(raw)
		if err != nil {
			t.Fatalf("sidecar line %s: %v", raw, err)
		}
		again, err := l.Settings.Line()
		if err != nil || again.Hash != l.Hash || again.Family != l.Family {
			t.Fatalf("sidecar line %s: its hashes are not its settings'", raw)
		}
		if seen[l.Hash] {
			t.Fatalf("the sidecar holds settings %s twice:\n%s", l.Hash, data)
		}
		seen[l.Hash] = true
		lines = append(lines, l)
	}
	return lines
}

// bySettings counts the records by their settings, failing on one that
// names none or settings the sidecar does not hold.
func bySettings(t testing.TB, recs []genRecord, lines []record.SettingsLine) map[string]int {
	t.Helper()
	described := map[string]record.SettingsLine{}
	for _, l := range lines {
		described[l.Hash] = l
	}
	n := map[string]int{}
	for _, g := range recs {
		o := g.Output
		l, ok := described[o.Settings]
		if !ok || l.Family != o.SettingsFamily {
			t.Fatalf("%s sample %d names settings %q (family %q) that the sidecar does not describe", g.ID.Text, o.Sample, o.Settings, o.SettingsFamily)
		}
		n[o.Settings]++
	}
	return n
}

// halfAndWhole writes the setup's prompts again as a file of their first
// half, for a first run the resume then continues.
func halfAndWhole(t *testing.T, s *setup) string {
	t.Helper()
	half := map[string]string{}
	for id, line := range s.lines {
		if id < idOf(len(s.lines)/2) {
			half[id] = line
		}
	}
	path := filepath.Join(s.dir, "half.jsonl")
	rewrite(t, path, half)
	return path
}

// fileState is the bytes of the run's files, to show a refusal left them
// as they were.
func fileState(s *setup) string {
	var b strings.Builder
	for _, p := range []string{s.out, record.SettingsPath(s.out), s.errs()} {
		data, err := os.ReadFile(p)
		fmt.Fprintf(&b, "%s %v %q\n", p, err, data)
	}
	return b.String()
}

// --resume and --append under other settings than those the file was made
// with are refused before anything is written, naming the setting; the
// seed offset is no setting.
func TestResumeRefusesChangedSettings(t *testing.T) {
	t.Parallel()
	fleet := startFleet(t, llmsim.Config{Instant: true}, 1)
	other := startFleet(t, llmsim.Config{Instant: true, ModelName: "other"}, 1)
	base := []string{"--max-tokens", "8", "--temperature", "0.5", "--top-p", "0.9", "--seed", "1", "--stop", "zz",
		"--extra-body", `{"chat_template_kwargs":{"enable_thinking":false}}`, "--samples", "2"}
	mixA := "arms:\n  - name: a\n    params: {temperature: 0.6}\n  - name: b\n    params: {temperature: 0.7}\n"
	mixB := "arms:\n  - name: a\n    params: {temperature: 0.6}\n  - name: b\n    params: {temperature: 0.8}\n"
	with := func(args []string, flag, value string) []string {
		out := append([]string{}, args...)
		for i := range out {
			if out[i] == flag {
				out[i+1] = value
				return out
			}
		}
		return append(out, flag, value)
	}
	cases := []struct {
		name        string
		first, then []string
		fleet       string // the second run's, default the first's
		want        string // "" for accepted
	}{
		{name: "max_tokens", then: with(base, "--max-tokens", "16"), want: "was made with max_tokens 8, this run asks 16"},
		{name: "temperature", then: with(base, "--temperature", "0.7"), want: "was made with temperature 0.5, this run asks 0.7"},
		{name: "top_p", then: with(base, "--top-p", "0.8"), want: "was made with top_p 0.9, this run asks 0.8"},
		{name: "stop", then: with(base, "--stop", "yy"), want: `was made with stop ["zz"], this run asks ["yy"]`},
		{name: "a stop added", then: append(with(base, "--stop", "zz"), "--stop", "yy"), want: `was made with stop ["zz"], this run asks ["zz","yy"]`},
		{name: "seed", then: with(base, "--seed", "2"), want: "was made with seed 1, this run asks 2"},
		{name: "extra body", then: with(base, "--extra-body", `{"chat_template_kwargs":{"enable_thinking":true}}`),
			want: `was made with extra_body {"chat_template_kwargs":{"enable_thinking":false}}, this run asks {"chat_template_kwargs":{"enable_thinking":true}}`},
		{name: "samples", then: with(base, "--samples", "3"), want: "was made with samples 2, this run asks 3"},
		{name: "token ids", then: append(with(base, "--seed", "1"), "--token-ids"), want: "was made with token_ids off, this run asks on"},
		{name: "api", then: with(base, "--api", "completions"), want: "was made with api chat, this run asks completions"},
		{name: "model", fleet: endpointsFlag(other.URLs()), then: base, want: `was made with model "Qwen3.6-27B", this run asks "other"`},
		{name: "mix", first: with(base, "--mix", "MIX_A"), then: with(base, "--mix", "MIX_B"), want: "was made with mix "},
		{name: "append", then: append(with(base, "--max-tokens", "16"), "--append"), want: "--append: "},
		{name: "extra body spelled otherwise", then: with(base, "--extra-body", `{ "chat_template_kwargs" : { "enable_thinking" : false } }`)},
		{name: "seed offset", then: append(with(base, "--seed", "1"), "--seed-offset", "7")},
		{name: "same", then: base},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t, llmsim.Config{}, 0, promptSet{n: 20})
			s.fleet = fleet
			half := halfAndWhole(t, s)
			fix := func(args []string) []string {
				out := append([]string{}, args...)
				for i, a := range out {
					if a == "MIX_A" || a == "MIX_B" {
						text := map[string]string{"MIX_A": mixA, "MIX_B": mixB}[a]
						out[i] = filepath.Join(s.dir, a+".yaml")
						os.WriteFile(out[i], []byte(text), 0o644)
					}
				}
				return out
			}
			first := base
			if c.first != nil {
				first = c.first
			}
			firstArgs := append([]string{"-o", s.out, half, "-e", endpointsFlag(fleet.URLs())}, fastFlags...)
			runWant(t, cli.ExitOK, append(firstArgs, fix(first)...)...)
			before := fileState(s)
			then := fix(c.then)
			if !containsArg(then, "--append") {
				then = append(then, "--resume")
			}
			e := c.fleet
			if e == "" {
				e = endpointsFlag(fleet.URLs())
			}
			args := append(append([]string{"-o", s.out, s.in, "-e", e}, fastFlags...), then...)
			if c.want == "" {
				runWant(t, cli.ExitOK, args...)
				if lines := readSidecar(t, s.out); len(lines) != 1 {
					t.Fatalf("%d settings in the sidecar, want the one run's: %+v", len(lines), lines)
				}
				recs := readRecords(t, s.out)
				checkExactlyOnce(t, s.lines, 2, recs, nil)
				return
			}
			res := runWant(t, cli.ExitUsage, args...)
			flag := "--resume: "
			if containsArg(then, "--append") {
				flag = "--append: "
			}
			if !strings.Contains(res.stderr, flag+s.out+" ") || !strings.Contains(res.stderr, c.want) ||
				!strings.Contains(res.stderr, ": rerun with the same settings or give --allow-changed-settings") {
				t.Errorf("the refusal does not say %q:\n%s", c.want, res.stderr)
			}
			if after := fileState(s); after != before {
				t.Errorf("the refused run changed the files:\nbefore %s\nafter %s", before, after)
			}
		})
	}
}

func containsArg(args []string, a string) bool {
	for _, x := range args {
		if x == a {
			return true
		}
	}
	return false
}

// --allow-changed-settings continues the file under other settings: the
// new records name theirs, both are in the sidecar once, and a later run
// under either continues without the flag; a third is refused, named
// against the latest.
func TestAllowChangedSettings(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 20})
	half := halfAndWhole(t, s)
	first := append([]string{"-o", s.out, half, "-e", endpointsFlag(s.fleet.URLs())}, fastFlags...)
	runWant(t, cli.ExitOK, append(first, "--max-tokens", "8")...)
	res := runWant(t, cli.ExitOK, s.args("--max-tokens", "16", "--resume", "--allow-changed-settings")...)
	if !strings.Contains(res.stderr, "--resume: "+s.out+" was made with max_tokens 8, this run asks 16 (--allow-changed-settings)") {
		t.Errorf("no warning:\n%s", res.stderr)
	}
	lines := readSidecar(t, s.out)
	if len(lines) != 2 || *lines[0].MaxTokens != 8 || *lines[1].MaxTokens != 16 || lines[0].Family == lines[1].Family {
		t.Fatalf("sidecar %+v, want the two settings in order, of two families", lines)
	}
	recs := readRecords(t, s.out)
	checkExactlyOnce(t, s.lines, 1, recs, readRecords(t, s.errs()))
	n := bySettings(t, recs, lines)
	if n[lines[0].Hash] != 10 || n[lines[1].Hash] != 10 {
		t.Fatalf("records by settings %v, want 10 of each", n)
	}
	max := map[string]int{lines[0].Hash: 8, lines[1].Hash: 16}
	for _, g := range recs {
		if c := g.Output.Usage.CompletionTokens; c > max[g.Output.Settings] || c < 1 {
			t.Errorf("%s: %d tokens under settings of max_tokens %d", g.ID.Text, c, max[g.Output.Settings])
		}
	}

	// Either settings the file holds continues it; another is refused.
	runWant(t, cli.ExitOK, s.args("--max-tokens", "8", "--append")...)
	res = runWant(t, cli.ExitUsage, s.args("--max-tokens", "32", "--append")...)
	if !strings.Contains(res.stderr, "was made with max_tokens 16, this run asks 32") {
		t.Errorf("the refusal does not name the latest settings:\n%s", res.stderr)
	}
	lines = readSidecar(t, s.out)
	recs = readRecords(t, s.out)
	n = bySettings(t, recs, lines)
	if len(lines) != 2 || len(recs) != 40 || n[lines[0].Hash] != 30 || n[lines[1].Hash] != 10 {
		t.Fatalf("%d settings, %d records %v after --append under the first settings: want 2, 40 (30 and 10)", len(lines), len(recs), n)
	}

	// --force starts over: the sidecar describes the new file alone.
	runWant(t, cli.ExitOK, s.args("--max-tokens", "4", "--force")...)
	lines = readSidecar(t, s.out)
	if len(lines) != 1 || *lines[0].MaxTokens != 4 || bySettings(t, readRecords(t, s.out), lines)[lines[0].Hash] != 20 {
		t.Fatalf("after --force: sidecar %+v", lines)
	}
}

// Records written before infer recorded settings are not compared (said
// so); neither are records whose sidecar is gone.
func TestSettingsUnknown(t *testing.T) {
	t.Parallel()
	strip := regexp.MustCompile(`,"settings":"[0-9a-f]{16}","settings_family":"[0-9a-f]{16}"`)
	for _, c := range []struct {
		name, want string
		old        bool
	}{
		{"before settings", "10 records were written before infer recorded settings: their settings are not known, and not compared with this run's", true},
		{"sidecar gone", "10 records name settings that " + "SIDECAR" + " does not describe: not compared with this run's", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 20})
			half := halfAndWhole(t, s)
			runWant(t, cli.ExitOK, append(append([]string{"-o", s.out, half, "-e", endpointsFlag(s.fleet.URLs())}, fastFlags...), "--max-tokens", "8")...)
			if c.old {
				data, _ := os.ReadFile(s.out)
				if strip.FindAll(data, -1) == nil {
					t.Fatal("no settings to strip")
				}
				os.WriteFile(s.out, strip.ReplaceAll(data, nil), 0o644)
			}
			os.Remove(record.SettingsPath(s.out))
			res := runWant(t, cli.ExitOK, s.args("--max-tokens", "16", "--resume")...)
			if want := strings.ReplaceAll(c.want, "SIDECAR", record.SettingsPath(s.out)); !strings.Contains(res.stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, res.stderr)
			}
			lines := readSidecar(t, s.out)
			recs := readRecords(t, s.out)
			checkExactlyOnce(t, s.lines, 1, recs, nil)
			if len(lines) != 1 || *lines[0].MaxTokens != 16 || bySettings(t, recs[10:], lines)[lines[0].Hash] != 10 {
				t.Fatalf("sidecar %+v: want the resume's settings alone", lines)
			}
		})
	}
}

// An answer's settings are the run's with its arm and the keys of its
// record's own params: one sidecar line for each distinct (arm, params
// keys), however many records and values; one family for them all.
func TestSettingsPerAnswer(t *testing.T) {
	t.Parallel()
	params := func(i int) string {
		switch i % 3 {
		case 1:
			return fmt.Sprintf(`,"params":{"temperature":0.%d}`, i%9+1)
		case 2:
			return fmt.Sprintf(`,"params":{"temperature":0.2,"seed":%d}`, i)
		}
		return ""
	}
	s := newSetup(t, llmsim.Config{Instant: true}, 2, promptSet{n: 60, extra: params})
	path, _ := writeMix(t, s.dir, "arms:\n  - name: cold\n    params: {temperature: 0.2, top_p: 0.9}\n  - name: warm\n    params: {temperature: 0.7}\n")
	runWant(t, cli.ExitOK, s.args("--max-tokens", "8", "--mix", path, "--samples", "2")...)
	lines := readSidecar(t, s.out)
	recs := readRecords(t, s.out)
	checkExactlyOnce(t, s.lines, 2, recs, nil)
	n := bySettings(t, recs, lines)
	want := map[string]bool{}
	for _, g := range recs {
		var p struct {
			Params map[string]any `json:"params"`
		}
		if err := json.Unmarshal([]byte(g.raw), &p); err != nil {
			t.Fatal(err)
		}
		keys := ""
		switch len(p.Params) {
		case 1:
			keys = "temperature"
		case 2:
			keys = "seed,temperature"
		}
		var l *record.SettingsLine
		for i := range lines {
			if lines[i].Hash == g.Output.Settings {
				l = &lines[i]
			}
		}
		if l.Arm != g.Output.Arm || strings.Join(l.Params, ",") != keys || *l.MaxTokens != 8 || l.Samples != 2 || l.Mix == "" {
			t.Errorf("%s: settings %+v for arm %q, params keys %q", g.ID.Text, l.Settings, g.Output.Arm, keys)
		}
		want[g.Output.Arm+"/"+keys] = true
	}
	if len(lines) != len(want) || len(n) != len(want) {
		t.Errorf("%d settings lines for %d distinct (arm, params keys)", len(lines), len(want))
	}
	for _, l := range lines {
		if l.Family != lines[0].Family {
			t.Errorf("arms and record params split the family: %+v", lines)
		}
	}
}

// With stdout there is no sidecar: each settings is said once on stderr.
func TestSettingsStdout(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 10, extra: func(i int) string {
		if i%2 == 0 {
			return `,"params":{"seed":3}`
		}
		return ""
	}})
	res := runInfer(t, time.Minute, "", append([]string{s.in, "-e", endpointsFlag(s.fleet.URLs()), "--max-tokens", "4"}, fastFlags...)...)
	if res.code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	said := regexp.MustCompile(`infer: settings ([0-9a-f]{16}): (\{.*\})`).FindAllStringSubmatch(res.stderr, -1)
	if len(said) != 2 {
		t.Fatalf("%d settings said, want 2:\n%s", len(said), res.stderr)
	}
	var lines []record.SettingsLine
	for _, m := range said {
		l, err := record.ParseSettingsLine([]byte(m[2]))
		if err != nil || l.Hash != m[1] {
			t.Fatalf("%s: %v", m[0], err)
		}
		lines = append(lines, l)
	}
	recs := parseRecords(t, "stdout", []byte(res.stdout))
	if n := bySettings(t, recs, lines); len(n) != 2 || n[lines[0].Hash]+n[lines[1].Hash] != 10 {
		t.Errorf("records by settings %v", n)
	}
}

// kill -9 at any moment leaves the sidecar whole lines, each settings
// once, and every record's settings in it (the line goes before the
// first record naming it); a torn last line is cut off by --resume, and
// no settings is written twice.
func TestSettingsSidecarSurvivesKill(t *testing.T) {
	t.Parallel()
	urls := startSimBinary(t, 3, "--time-scale", "40", "--max-running", "8")
	dir := t.TempDir()
	in, lines := promptSet{n: 600, extra: func(i int) string {
		if i%5 == 0 {
			return fmt.Sprintf(`,"params":{"seed":%d}`, i)
		}
		return ""
	}}.write(t, dir, "prompts.jsonl")
	out := filepath.Join(dir, "gen.jsonl")
	mixPath, _ := writeMix(t, dir, "arms:\n  - name: cold\n    params: {temperature: 0.2}\n  - name: warm\n    params: {temperature: 0.7}\n  - name: hot\n    params: {temperature: 1.0}\n")
	args := append([]string{"-e", strings.Join(urls, ","), "--max-tokens", "48", "--mix", mixPath, "--flush-interval", "100ms", "-o", out, in}, fastFlags...)
	killRounds(t, args, 3, 600, func(round int, p *proc, whole []byte) {
		if len(whole) > 0 {
			bySettings(t, parseRecords(t, out, whole), readSidecar(t, out))
		}
		switch round {
		case 0:
			// A torn write of a settings line the sidecar holds, at its end.
			side := readSidecar(t, out)
			f, err := os.OpenFile(record.SettingsPath(out), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(`{"settings":"` + side[0].Hash + `","family":"`)
			f.Close()
		case 1:
			if !strings.Contains(p.stderr.String(), record.SettingsPath(out)+": removed a partial last line") {
				t.Errorf("the torn settings line was not said cut:\n%s", p.stderr.String())
			}
		}
	})
	recs := readRecords(t, out)
	checkExactlyOnce(t, lines, 1, recs, readRecords(t, filepath.Join(dir, "gen.errors.jsonl")))
	side := readSidecar(t, out)
	n := bySettings(t, recs, side)
	// Three arms, with and without params: six settings, each used.
	if len(side) != 6 || len(n) != 6 {
		t.Errorf("%d settings lines, %d used by records: %v", len(side), len(n), n)
	}
}
