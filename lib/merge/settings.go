package merge

import (
	"fmt"
	"strings"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// Settings: each answer infer writes names the settings that made it
// (output.settings) and their family (output.settings_family, see
// record.Settings: the settings less the seed, the samples, the arm, the
// record's own params, the server's version and token ids). A training
// file (any --to but generation) holds answers of one family only: the
// first answer written of another family is a usage error naming both
// and what differs (from the settings sidecars beside the inputs, infer's
// FILE.settings.jsonl), unless --allow-mixed-settings. The tokens manifest
// lists the settings of the records written, with their counts. Records
// written before infer recorded settings are counted apart, not refused.

// settingsGroup is one settings hash among the answers read.
type settingsGroup struct {
	hash, family string
	written      int64
}

// settingsTally keeps the settings of the answers: each kept answer's
// (entry.group) as an index into groups, 0 being none.
type settingsTally struct {
	groups []settingsGroup
	index  map[string]uint32
	// described are the sidecars' lines, and beside are the inputs a
	// sidecar was found beside.
	described record.SettingsIndex
	beside    []string
	// check: a training form, whose file must hold one family (unless
	// allow); first is the group of the first answer written with a
	// family (0: none yet); mixed, that another was written (allowed).
	check, allow bool
	first        uint32
	mixed        map[string]bool
	form         string
}

// newSettings checks --allow-mixed-settings and reads the settings
// sidecars beside the inputs; training: the output is a training file.
func (c *Config) newSettings(training bool) (*settingsTally, error) {
	if c.AllowMixedSettings && !training {
		return nil, cli.Usagef("--allow-mixed-settings goes with --to messages, conversations, sharegpt or tokens, or --for: generation records and the to-do list may hold answers of any settings")
	}
	t := &settingsTally{groups: []settingsGroup{{}}, index: map[string]uint32{}, check: training, allow: c.AllowMixedSettings, form: c.To}
	if c.For != "" {
		t.form = "--for " + c.For
	} else {
		t.form = "--to " + c.To
	}
	beside, err := jsonl.ReadSettingsBeside(c.Inputs, &t.described)
	if err != nil {
		return nil, fmt.Errorf("reading a settings sidecar: %w", err)
	}
	t.beside = beside
	return t, nil
}

// group is the index of an answer's settings, given the raw values of
// output.settings and output.settings_family; 0 for none.
func (t *settingsTally) group(settings, family []byte) uint32 {
	if len(settings) == 0 && len(family) == 0 {
		return 0
	}
	if g, ok := t.index[string(settings)]; ok {
		return g
	}
	hash, fam := jsonString(settings), jsonString(family)
	if hash == "" && fam == "" {
		return 0
	}
	g := uint32(len(t.groups))
	t.groups = append(t.groups, settingsGroup{hash: hash, family: fam})
	t.index[string(settings)] = g
	return g
}

// jsonString is a raw JSON string's text ("" for anything else).
func jsonString(raw []byte) string {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// written counts an answer of group g written, refusing (a usage error)
// one of another family than the first when the file is a training file,
// unless --allow-mixed-settings.
func (t *settingsTally) written(g uint32) error {
	grp := &t.groups[g]
	grp.written++
	if grp.family == "" {
		return nil
	}
	if t.first == 0 {
		t.first = g
		return nil
	}
	first := &t.groups[t.first]
	if first.family == grp.family || !t.check {
		return nil
	}
	if !t.allow {
		return cli.Usagef("%s: answers of settings %s would join answers of settings %s in one training file (%s): merge them apart, or give --allow-mixed-settings",
			t.form, grp.hash, first.hash, t.differ(first, grp))
	}
	if t.mixed == nil {
		t.mixed = map[string]bool{first.family: true}
	}
	t.mixed[grp.family] = true
	return nil
}

// differ says how the settings of a and b differ, as far as the
// sidecars describe them.
func (t *settingsTally) differ(a, b *settingsGroup) string {
	la, lb := t.described.Get(a.hash), t.described.Get(b.hash)
	if la == nil || lb == nil {
		where := "no settings sidecar was found beside the inputs"
		if len(t.beside) > 0 {
			where = "the settings sidecars beside " + strings.Join(t.beside, ", ") + " do not describe both"
		}
		return fmt.Sprintf("settings families %s and %s; %s (infer writes FILE.settings.jsonl beside its -o FILE)", b.family, a.family, where)
	}
	field, inA, inB, ok := record.Differ(&la.Settings, &lb.Settings, record.FamilyFields)
	if !ok {
		return fmt.Sprintf("settings families %s and %s", b.family, a.family)
	}
	return fmt.Sprintf("%s %s and %s", field, inB, inA)
}

// summary is the merge summary's part on settings: said only when a
// training file holds answers of several families, or answers whose
// settings are not known beside others.
func (t *settingsTally) summary() string {
	if !t.check {
		return ""
	}
	var parts []string
	if len(t.mixed) > 1 {
		parts = append(parts, fmt.Sprintf("answers of %d settings families (--allow-mixed-settings)", len(t.mixed)))
	}
	if none := t.groups[0].written; none > 0 && t.first != 0 {
		parts = append(parts, fmt.Sprintf("answers without settings (written before infer recorded them, not checked) %d", none))
	}
	return strings.Join(parts, ", ")
}

// ManifestSettings is one settings of the records written, with their
// count; Settings and Family are "" for records that name none, MadeWith
// what the settings sidecars say of them (absent where none does).
type ManifestSettings struct {
	Settings string           `json:"settings"`
	Family   string           `json:"family"`
	Records  int64            `json:"records"`
	MadeWith *record.Settings `json:"made_with,omitempty"`
}

// manifest lists the settings of the records written, in the order they
// were first read, those without settings last.
func (t *settingsTally) manifest() []ManifestSettings {
	out := []ManifestSettings{}
	for _, g := range t.groups[1:] {
		if g.written == 0 {
			continue
		}
		ms := ManifestSettings{Settings: g.hash, Family: g.family, Records: g.written}
		if l := t.described.Get(g.hash); l != nil {
			s := l.Settings
			ms.MadeWith = &s
		}
		out = append(out, ms)
	}
	if n := t.groups[0].written; n > 0 {
		out = append(out, ManifestSettings{Records: n})
	}
	return out
}

// sidecarPath is the settings sidecar merge writes beside generation
// records written to a file ("" for none): the settings of the answers
// in it, so that what merge writes is described as what infer wrote.
func (c *Config) sidecarPath() string {
	if c.To != toGeneration || c.Missing || c.stdout() {
		return ""
	}
	return record.SettingsPath(c.Output)
}

// sidecarFlag names the settings sidecar in messages.
const sidecarFlag = "-o's settings sidecar"

// settingsOutputs are the files merge writes for settings, for the path
// checks made before anything is opened: the sidecar beside -o, which
// is -o's own (replaced with it, and it may be an input's, read first).
func (c *Config) settingsOutputs() []jsonl.Output {
	if p := c.sidecarPath(); p != "" {
		return []jsonl.Output{{Flag: sidecarFlag, Path: p, Kept: true, MayBeInput: true}}
	}
	return nil
}

// writeSidecar writes, atomically, the settings sidecar beside generation
// records written to a file: the lines the inputs' sidecars hold of the
// settings of the answers written. None when no answer written names
// settings that a sidecar describes.
func (t *settingsTally) writeSidecar(c *Config, outs *jsonl.Outputs) error {
	path := c.sidecarPath()
	if path == "" {
		return nil
	}
	var body []byte
	for _, g := range t.groups[1:] {
		l := t.described.Get(g.hash)
		if g.written == 0 || l == nil {
			continue
		}
		line, err := json.Marshal(l)
		if err != nil {
			return err
		}
		body = append(append(body, line...), '\n')
	}
	if len(body) == 0 {
		return nil
	}
	w, err := outs.Create(sidecarFlag, path) // Kept: replaced with -o
	if err != nil {
		return err
	}
	_, err = w.WriteRaw(body)
	return err
}
