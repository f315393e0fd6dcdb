package stats

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/record"
)

// The records broken down by their settings: records, answers (a
// regenerated conversation's turns each), completion tokens per answer
// and finish reasons of each, most records first and those without
// settings last, each described from the sidecar beside its input where
// one is; the families told apart in the table; and no section for an
// input whose records name no settings.
func TestSettingsGroups(t *testing.T) {
	mt := func(n int) *int { return &n }
	short, _ := record.Settings{API: "chat", Model: "M", MaxTokens: mt(8), Samples: 1}.Line()
	long, _ := record.Settings{API: "chat", Model: "M", MaxTokens: mt(300), Samples: 1, Regenerate: true}.Line()
	orphan, _ := record.Settings{API: "chat", Model: "M", MaxTokens: mt(9), Samples: 1}.Line()
	set := func(l record.SettingsLine) string {
		return fmt.Sprintf(`,"settings":%q,"settings_family":%q`, l.Hash, l.Family)
	}
	single := func(id, finish string, tokens int, l string) string {
		return fmt.Sprintf(`{"id":%q,"messages":[{"role":"user","content":"q"}],"output":{"text":"a","finish_reason":%q,"usage":{"prompt_tokens":5,"completion_tokens":%d},"latency_ms":10,"attempts":1,"sample":0%s}}`, id, finish, tokens, l)
	}
	conv := func(id string, turns []int, l string) string {
		msgs := []string{`{"role":"user","content":"q"}`}
		var ts []string
		sum := 0
		for _, n := range turns {
			msgs = append(msgs, `{"role":"assistant","content":"a"}`)
			ts = append(ts, fmt.Sprintf(`{"message":%d,"finish_reason":"stop","usage":{"prompt_tokens":5,"completion_tokens":%d}}`, len(msgs)-1, n))
			msgs = append(msgs, `{"role":"user","content":"again"}`)
			sum += n
		}
		msgs = msgs[:len(msgs)-1]
		return fmt.Sprintf(`{"id":%q,"messages":[{"role":"user","content":"q"}],"output":{"messages":[%s],"turns":[%s],"finish_reason":"stop","usage":{"prompt_tokens":10,"completion_tokens":%d},"latency_ms":10,"attempts":1,"sample":0%s}}`,
			id, strings.Join(msgs, ","), strings.Join(ts, ","), sum, l)
	}
	dir := t.TempDir()
	a := filepath.Join(dir, "a.jsonl")
	lines := []string{
		single("s1", "length", 8, set(short)), single("s2", "length", 8, set(short)), single("s3", "stop", 4, set(short)),
		single("o1", "stop", 6, set(orphan)),
		single("n1", "stop", 100, ""),
		`{"id":"e1","messages":[{"role":"user","content":"q"}],"error":{"status":500,"message":"x","attempts":1,"sample":0}}`,
	}
	os.WriteFile(a, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	b := filepath.Join(dir, "b.jsonl")
	os.WriteFile(b, []byte(conv("c1", []int{10, 20}, set(long))+"\n"+conv("c2", []int{30}, set(long))+"\n"), 0o644)
	side := func(path string, ls ...record.SettingsLine) {
		var out []string
		for _, l := range ls {
			raw, _ := json.Marshal(l)
			out = append(out, string(raw))
		}
		os.WriteFile(record.SettingsPath(path), []byte(strings.Join(out, "\n")+"\n"), 0o644)
	}
	side(a, short)
	side(b, long)

	r := runJSON(t, 0, a, b)
	s, l := short.Settings, long.Settings
	want := []SettingsGroup{
		{Settings: short.Hash, Family: short.Family, Records: 3, Answers: 3, MeanAnswerTokens: 20.0 / 3, CompletionTokens: 20,
			FinishReasons: []Count{{"length", 2}, {"stop", 1}}, MadeWith: &s},
		{Settings: long.Hash, Family: long.Family, Records: 2, Answers: 3, MeanAnswerTokens: 20, CompletionTokens: 60,
			FinishReasons: []Count{{"stop", 2}}, MadeWith: &l},
		{Settings: orphan.Hash, Family: orphan.Family, Records: 1, Answers: 1, MeanAnswerTokens: 6, CompletionTokens: 6,
			FinishReasons: []Count{{"stop", 1}}},
		{Settings: "(none)", Records: 1, Answers: 1, MeanAnswerTokens: 100, CompletionTokens: 100, FinishReasons: []Count{{"stop", 1}}},
	}
	if !reflect.DeepEqual(r.Settings, want) {
		got, _ := json.MarshalIndent(r.Settings, "", "  ")
		t.Errorf("settings:\n%s\nwant %+v", got, want)
	}

	code, stdout, stderr := run(t, "", a, b)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	for _, w := range []string{
		short.Hash + ": " + short.Describe(),
		long.Hash + ": api chat, model \"M\", max_tokens 300, regenerate, samples 1",
		orphan.Hash + ": not described (no FILE.settings.jsonl beside the inputs names it)",
		"(none): records written before infer recorded settings",
		"warning: answers of 3 settings families: merge --to refuses to put them in one training file without --allow-mixed-settings",
	} {
		if !strings.Contains(stdout, w) {
			t.Errorf("the report lacks %q:\n%s", w, stdout)
		}
	}
	if !strings.Contains(stdout, "settings") || !strings.Contains(stdout, "66.7%") {
		t.Errorf("the table:\n%s", stdout)
	}

	plain := runJSON(t, 0, filepath.Join(testdata, "context.jsonl"))
	if plain.Settings != nil || plain.Kinds.Generation == 0 {
		t.Errorf("an input without settings: %+v", plain.Settings)
	}
	if _, stdout, _ := run(t, "", filepath.Join(testdata, "context.jsonl")); strings.Contains(stdout, "settings:") {
		t.Errorf("a settings section for an input without settings:\n%s", stdout)
	}
}
