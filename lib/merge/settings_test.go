package merge

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

func intp(n int) *int         { return &n }
func i64p(n int64) *int64     { return &n }
func f64p(f float64) *float64 { return &f }

// settingsOf is the sidecar line of s.
func settingsOf(t testing.TB, s record.Settings) record.SettingsLine {
	t.Helper()
	l, err := s.Line()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// genOf is a generation record of id answered under l (none: nil), as
// infer writes it.
func genOf(id, finish string, l *record.SettingsLine) string {
	set := ""
	if l != nil {
		set = fmt.Sprintf(`,"settings":%q,"settings_family":%q`, l.Hash, l.Family)
	}
	return fmt.Sprintf(`{"id":%q,"messages":[{"role":"user","content":"q %s"}],"output":{"text":"a %s","finish_reason":%q,"usage":{"prompt_tokens":3,"completion_tokens":2},"latency_ms":1,"attempts":1,"sample":0%s}}`,
		id, id, id, finish, set)
}

// genFile writes records and, unless lines is nil, their sidecar.
func genFile(t testing.TB, path string, recs []string, lines ...record.SettingsLine) string {
	t.Helper()
	writeLines(t, path, recs)
	if lines != nil {
		var side []string
		for _, l := range lines {
			b, _ := json.Marshal(l)
			side = append(side, string(b))
		}
		writeLines(t, record.SettingsPath(path), side)
	}
	return path
}

// A training file holds answers of one settings family: two families are
// refused (exit 2, nothing written) naming both settings and what
// differs, unless --allow-mixed-settings; another seed is the same
// family; answers replaced by better ones do not count; records without
// settings are not refused; generation records may hold any. The same
// with every record spilled.
func TestMergeSettings(t *testing.T) {
	short := settingsOf(t, record.Settings{API: "chat", Model: "M", MaxTokens: intp(8), Seed: i64p(1), Samples: 1})
	long := settingsOf(t, record.Settings{API: "chat", Model: "M", MaxTokens: intp(300), Seed: i64p(1), Samples: 1})
	reseeded := settingsOf(t, record.Settings{API: "chat", Model: "M", MaxTokens: intp(8), Seed: i64p(2), Samples: 4})
	thinking := settingsOf(t, record.Settings{API: "chat", Model: "M", MaxTokens: intp(8), Seed: i64p(1), Samples: 1,
		ExtraBody: json.RawMessage(`{"chat_template_kwargs":{"enable_thinking":true}}`)})
	recs := func(prefix, finish string, n int, l *record.SettingsLine) []string {
		var out []string
		for i := range n {
			out = append(out, genOf(fmt.Sprintf("%s%d", prefix, i), finish, l))
		}
		return out
	}
	type file struct {
		recs    []string
		lines   []record.SettingsLine // the sidecar's; nil: none
		sidecar bool
	}
	cases := []struct {
		name    string
		files   []file
		args    []string
		code    int
		stderr  []string
		written int
	}{
		{name: "one settings", files: []file{{recs("a", "stop", 6, &short), []record.SettingsLine{short}, true}},
			args: []string{"--to", "messages"}, written: 6},
		{name: "another seed and samples: one family", files: []file{
			{recs("a", "stop", 6, &short), []record.SettingsLine{short}, true}, {recs("b", "stop", 4, &reseeded), []record.SettingsLine{reseeded}, true}},
			args: []string{"--to", "messages"}, written: 10},
		{name: "two families refused", files: []file{
			{recs("a", "stop", 6, &short), []record.SettingsLine{short}, true}, {recs("b", "stop", 4, &long), []record.SettingsLine{long}, true}},
			args: []string{"--to", "messages"}, code: 2,
			stderr: []string{fmt.Sprintf("merge: --to messages: answers of settings %s would join answers of settings %s in one training file (max_tokens 300 and 8): merge them apart, or give --allow-mixed-settings", long.Hash, short.Hash)}},
		{name: "thinking on and off refused", files: []file{
			{recs("a", "stop", 6, &short), []record.SettingsLine{short}, true}, {recs("b", "stop", 4, &thinking), []record.SettingsLine{thinking}, true}},
			args: []string{"--to", "sharegpt"}, code: 2,
			stderr: []string{`(extra_body {"chat_template_kwargs":{"enable_thinking":true}} and none)`}},
		{name: "two families allowed", files: []file{
			{recs("a", "stop", 6, &short), []record.SettingsLine{short}, true}, {recs("b", "stop", 4, &long), []record.SettingsLine{long}, true}},
			args: []string{"--to", "conversations", "--allow-mixed-settings"}, written: 10,
			stderr: []string{"unique out 10, replaced 0, missing 0, answers of 2 settings families (--allow-mixed-settings)"}},
		{name: "the other family replaced", files: []file{
			{recs("a", "length", 6, &short), []record.SettingsLine{short}, true}, {recs("a", "stop", 6, &long), []record.SettingsLine{long}, true}},
			args: []string{"--to", "messages"}, written: 6, stderr: []string{"unique out 6, replaced 6, missing 0"}},
		{name: "no sidecar: refused by the families", files: []file{
			{recs("a", "stop", 6, &short), nil, false}, {recs("b", "stop", 4, &long), nil, false}},
			args: []string{"--to", "messages"}, code: 2,
			stderr: []string{fmt.Sprintf("(settings families %s and %s; no settings sidecar was found beside the inputs (infer writes FILE.settings.jsonl beside its -o FILE))", long.Family, short.Family)}},
		{name: "records without settings beside others", files: []file{
			{recs("a", "stop", 6, nil), nil, false}, {recs("b", "stop", 4, &long), []record.SettingsLine{long}, true}},
			args: []string{"--to", "messages"}, written: 10,
			stderr: []string{"answers without settings (written before infer recorded them, not checked) 6"}},
		{name: "generation records hold any", files: []file{
			{recs("a", "stop", 6, &short), []record.SettingsLine{short}, true}, {recs("b", "stop", 4, &long), []record.SettingsLine{long, thinking}, true}},
			written: 10},
		{name: "allowed only for training files", files: []file{{recs("a", "stop", 1, &short), nil, false}},
			args: []string{"--allow-mixed-settings"}, code: 2, stderr: []string{"--allow-mixed-settings goes with --to messages"}},
	}
	for _, c := range cases {
		for _, memory := range []string{"512MiB", "1KiB"} {
			t.Run(c.name+"/"+memory, func(t *testing.T) {
				dir := t.TempDir()
				var inputs []string
				for i, f := range c.files {
					var lines []record.SettingsLine
					if f.sidecar {
						lines = f.lines
					}
					inputs = append(inputs, genFile(t, filepath.Join(dir, fmt.Sprintf("gen%d.jsonl", i)), f.recs, lines...))
				}
				out := filepath.Join(dir, "out.jsonl")
				args := append(append([]string{"--memory", memory, "-o", out}, c.args...), inputs...)
				code, _, stderr := runMerge(t, context.Background(), nil, args...)
				if code != c.code {
					t.Fatalf("exit %d, want %d\n%s", code, c.code, stderr)
				}
				for _, want := range c.stderr {
					if !strings.Contains(stderr, want) {
						t.Errorf("stderr lacks %q:\n%s", want, stderr)
					}
				}
				data, err := os.ReadFile(out)
				if c.code != 0 {
					if err == nil {
						t.Errorf("a refused merge wrote %s", out)
					}
					return
				}
				if memory == "1KiB" && !spilledClause.MatchString(stderr) {
					t.Errorf("--memory 1KiB did not spill:\n%s", stderr)
				}
				if n := len(splitLines(string(data))); n != c.written {
					t.Errorf("%d records written, want %d", n, c.written)
				}
			})
		}
	}
}

// Generation records written to a file get a settings sidecar beside
// them: the lines of the inputs' sidecars of the settings written, so
// that merge's output is described as infer's; none when no answer names
// settings a sidecar describes.
func TestMergeSettingsSidecar(t *testing.T) {
	short := settingsOf(t, record.Settings{API: "chat", Model: "M", MaxTokens: intp(8), Samples: 1})
	long := settingsOf(t, record.Settings{API: "chat", Model: "M", MaxTokens: intp(300), Samples: 1})
	unused := settingsOf(t, record.Settings{API: "chat", Model: "M", MaxTokens: intp(9), Samples: 1})
	dir := t.TempDir()
	a := genFile(t, filepath.Join(dir, "a.jsonl"), []string{genOf("x", "length", &short), genOf("y", "stop", &short)}, short, unused)
	b := genFile(t, filepath.Join(dir, "b.jsonl"), []string{genOf("x", "stop", &long)}, long)
	out := filepath.Join(dir, "final.jsonl")
	if code, _, stderr := runMerge(t, context.Background(), nil, "-o", out, a, b); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	var got record.SettingsIndex
	if _, skipped, err := jsonl.ReadSettings(record.SettingsPath(out), &got); err != nil || skipped != 0 {
		t.Fatalf("%v, %d skipped", err, skipped)
	}
	if len(got.Lines) != 2 || got.Lines[0].Hash != short.Hash || got.Lines[1].Hash != long.Hash || !reflect.DeepEqual(got.Lines[1].Settings, long.Settings) {
		t.Fatalf("sidecar beside the merge: %+v", got.Lines)
	}
	// Merged again, to a training file: the sidecar describes the families.
	code, _, stderr := runMerge(t, context.Background(), nil, "--to", "messages", "-o", filepath.Join(dir, "train.jsonl"), out)
	if code != 2 || !strings.Contains(stderr, "(max_tokens 8 and 300)") && !strings.Contains(stderr, "(max_tokens 300 and 8)") {
		t.Fatalf("exit %d, want 2 naming max_tokens:\n%s", code, stderr)
	}
	// Records without settings: no sidecar.
	plain := genFile(t, filepath.Join(dir, "plain.jsonl"), []string{genOf("z", "stop", nil)})
	out2 := filepath.Join(dir, "plain-out.jsonl")
	if code, _, stderr := runMerge(t, context.Background(), nil, "-o", out2, plain); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(record.SettingsPath(out2)); !os.IsNotExist(err) {
		t.Errorf("a sidecar beside records without settings: %v", err)
	}
}

// The tokens manifest lists the settings of the rows' records, with
// their counts and what the sidecars say of them.
func TestTokenManifestSettings(t *testing.T) {
	short := settingsOf(t, record.Settings{API: "chat", Model: "M", MaxTokens: intp(8), Temperature: f64p(0.7), Seed: i64p(1), Samples: 1, TokenIDs: true})
	reseeded := settingsOf(t, record.Settings{API: "chat", Model: "M", MaxTokens: intp(8), Temperature: f64p(0.7), Seed: i64p(9), Samples: 1, TokenIDs: true})
	with := func(l record.SettingsLine) string {
		return fmt.Sprintf(`,"settings":%q,"settings_family":%q`, l.Hash, l.Family)
	}
	dir := t.TempDir()
	a := genFile(t, filepath.Join(dir, "a.jsonl"), []string{
		tokSingle("s1", "[1,2]", "[3]", with(short)), tokSingle("s2", "[1,2]", "[4]", with(short)), tokSingle("s3", "[1]", "[5]", "")}, short)
	b := genFile(t, filepath.Join(dir, "b.jsonl"), []string{tokSingle("s4", "[1,2]", "[6]", with(reseeded))}) // no sidecar
	out := filepath.Join(dir, "rows.jsonl")
	if code, _, stderr := runMerge(t, context.Background(), nil, "--to", "tokens", "-o", out, a, b); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	raw, err := os.ReadFile(ManifestPath(out))
	if err != nil {
		t.Fatal(err)
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	s := short.Settings
	want := []ManifestSettings{
		{Settings: short.Hash, Family: short.Family, Records: 2, MadeWith: &s},
		{Settings: reseeded.Hash, Family: reseeded.Family, Records: 1},
		{Records: 1},
	}
	if !reflect.DeepEqual(m.Settings, want) || m.Counts.Records != 4 {
		t.Errorf("manifest settings %s, want %+v", raw, want)
	}
}
