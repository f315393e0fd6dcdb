package stats

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// The settings that made the answers: infer puts the hash of each
// answer's settings in output.settings (and of their family in
// output.settings_family), and describes each once in the sidecar beside
// its output (FILE.settings.jsonl). The report breaks the generation
// records down by them, so that a file holding answers of two settings
// (8- and 300-token answers, thinking on and off) shows it; what each
// is comes from the sidecars beside the inputs.

// maxSettings bounds the settings reported; more are counted under
// "(other)".
const maxSettings = 1000

// SettingsGroup is the generation records of one settings; "(none)"
// gathers those that name none (written before infer recorded settings).
type SettingsGroup struct {
	Settings string `json:"settings"`
	Family   string `json:"family,omitempty"`
	Records  int64  `json:"records"`
	// Answers are the answers in the records: one a record, or one a
	// regenerated turn.
	Answers int64 `json:"answers"`
	// MeanAnswerTokens is completion tokens per answer, over the answers
	// whose record has a usage.
	MeanAnswerTokens float64 `json:"mean_answer_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	FinishReasons    []Count `json:"finish_reasons"`
	// MadeWith is what the settings sidecar beside an input says of
	// them; absent where none does.
	MadeWith *record.Settings `json:"made_with,omitempty"`
}

type settingsAgg struct {
	family                              string
	records, answers, tokens, tokAnswer int64
	finish                              map[string]*int64
}

// addSettings counts a generation record under its settings. Records
// without settings are counted apart; the section appears only when a
// record names some.
func (a *aggregator) addSettings(f *fact) {
	if f.kind != record.KindGeneration {
		return
	}
	g := &a.noSettings
	if f.settings != "" {
		if a.settings == nil {
			a.settings = map[string]*settingsAgg{}
		}
		g = bounded(a.settings, f.settings, maxSettings, func() *settingsAgg { return &settingsAgg{family: strings.Clone(f.family)} })
	}
	if g.finish == nil {
		g.finish = map[string]*int64{}
	}
	answers := int64(1)
	if f.conversation {
		answers = int64(len(f.turns))
	}
	g.records++
	g.answers += answers
	if f.usage {
		g.tokens += f.cTokens
		g.tokAnswer += answers
	}
	*bounded(g.finish, f.finish, maxFinish, func() *int64 { return new(int64) })++
}

// settingsReport lists the settings by records, most first, "(none)" and
// "(other)" last; nil when no record names settings.
func (a *aggregator) settingsReport() []SettingsGroup {
	if a.settings == nil {
		return nil
	}
	out := make([]SettingsGroup, 0, len(a.settings)+1)
	add := func(name string, g *settingsAgg) {
		out = append(out, SettingsGroup{Settings: name, Family: g.family, Records: g.records, Answers: g.answers,
			CompletionTokens: g.tokens, MeanAnswerTokens: ratio(float64(g.tokens), float64(g.tokAnswer)),
			FinishReasons: counts(derefCounts(g.finish))})
	}
	for name, g := range a.settings {
		if name == otherName {
			g.family = ""
		}
		add(name, g)
	}
	if a.noSettings.records > 0 {
		add(noneName, &a.noSettings)
	}
	last := func(s string) bool { return s == noneName || s == otherName }
	slices.SortFunc(out, func(x, y SettingsGroup) int {
		return cmp.Or(cmp.Compare(b2i(last(x.Settings)), b2i(last(y.Settings))), cmp.Compare(y.Records, x.Records), strings.Compare(x.Settings, y.Settings))
	})
	return out
}

// describeSettings fills in what the settings sidecars beside the inputs
// say of the report's settings.
func describeSettings(r *Report, inputs []string) error {
	if len(r.Settings) == 0 {
		return nil
	}
	var x record.SettingsIndex
	if _, err := jsonl.ReadSettingsBeside(inputs, &x); err != nil {
		return fmt.Errorf("reading a settings sidecar: %w", err)
	}
	for i := range r.Settings {
		if l := x.Get(r.Settings[i].Settings); l != nil {
			s := l.Settings
			r.Settings[i].MadeWith = &s
		}
	}
	return nil
}

// writeSettings writes the settings' table, then what each is.
func writeSettings(b *strings.Builder, groups []SettingsGroup) {
	names := []string{}
	for _, g := range groups {
		for _, c := range g.FinishReasons {
			if !slices.Contains(names, c.Name) {
				names = append(names, c.Name)
			}
		}
	}
	slices.SortFunc(names, func(x, y string) int { return cmp.Or(cmp.Compare(finishRank(x), finishRank(y)), strings.Compare(x, y)) })
	t := table{align: "llrrrr", header: []string{"settings", "family", "records", "answers", "completion tok", "mean tok"}}
	for _, n := range names {
		t.align += "r"
		t.header = append(t.header, n)
	}
	families := map[string]bool{}
	for _, g := range groups {
		fam := g.Family
		if fam == "" {
			fam = "-"
		} else {
			families[fam] = true
		}
		cells := []string{g.Settings, fam, num(g.Records), num(g.Answers), num(g.CompletionTokens), strconv.FormatFloat(g.MeanAnswerTokens, 'f', 1, 64)}
		for _, n := range names {
			var k int64
			for _, c := range g.FinishReasons {
				if c.Name == n {
					k = c.Count
				}
			}
			cells = append(cells, percent(k, g.Records))
		}
		t.add(cells...)
	}
	t.write(b)
	for _, g := range groups {
		switch {
		case g.MadeWith != nil:
			fmt.Fprintf(b, "%s: %s\n", g.Settings, g.MadeWith.Describe())
		case g.Settings == noneName:
			fmt.Fprintf(b, "%s: records written before infer recorded settings\n", noneName)
		case g.Settings != otherName:
			fmt.Fprintf(b, "%s: not described (no FILE.settings.jsonl beside the inputs names it)\n", g.Settings)
		}
	}
	note := "settings: output.settings of infer; family: output.settings_family, answers of one family belong in one training file; tok: completion tokens per answer; finish reasons: % of the records"
	if len(families) > 1 {
		note = fmt.Sprintf("warning: answers of %d settings families: merge --to refuses to put them in one training file without --allow-mixed-settings\n", len(families)) + note
	}
	b.WriteString(note + "\n\n")
}
