package record

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/segmentio/encoding/json"
	"github.com/zeebo/xxh3"
)

// Settings are what made an answer: the request's settings as the run set
// them, layer by layer, and what it was sent to. infer writes each distinct
// Settings once to the sidecar beside its output (SettingsPath), as a
// SettingsLine, and puts its hash in every generation record it writes
// (output.settings, output.settings_family); merge and stats read them.
//
// The layers are kept apart, as the run was given them: the flags
// (max_tokens, temperature, top_p, stop, seed), --extra-body, the
// mixture's arm (its params), then the record's own params, each laid over
// the one before. A record's own params are in the record itself (its
// "params", which every stage carries through): Settings names only the
// keys they set (Params), so that a dataset whose records each carry
// another value (a seed a record) does not make a settings line a record.
// The seed is the run's base (--seed), never a sample's: sample k asks
// seed+offset+k, and --seed-offset, a rerun's way to sample other answers
// with the same settings, is not a setting. Server and ServerVersion are
// there where the run knows them (infer --token-ids asks each server).
type Settings struct {
	API              string          `json:"api"`
	Model            string          `json:"model,omitempty"`
	Server           string          `json:"server,omitempty"`
	ServerVersion    string          `json:"server_version,omitempty"`
	MaxTokens        *int            `json:"max_tokens,omitempty"`
	Temperature      *float64        `json:"temperature,omitempty"`
	TopP             *float64        `json:"top_p,omitempty"`
	Stop             []string        `json:"stop,omitempty"`
	Seed             *int64          `json:"seed,omitempty"`
	ExtraBody        json.RawMessage `json:"extra_body,omitempty"`
	Mix              string          `json:"mix,omitempty"` // MixHash of --mix's arms
	Arm              string          `json:"arm,omitempty"`
	ArmParams        json.RawMessage `json:"arm_params,omitempty"`
	Params           []string        `json:"params,omitempty"` // the keys the record's own params set, sorted
	TokenIDs         bool            `json:"token_ids,omitempty"`
	Regenerate       bool            `json:"regenerate,omitempty"`
	HistoryReasoning bool            `json:"history_reasoning,omitempty"`
	Samples          int             `json:"samples,omitempty"`
}

// SettingsLine is one line of the settings sidecar: the settings with
// their hash and their family's.
type SettingsLine struct {
	Hash   string `json:"settings"`
	Family string `json:"family"`
	Settings
}

// SettingsPath is the settings sidecar beside an output file:
// gen.jsonl -> gen.jsonl.settings.jsonl.
func SettingsPath(output string) string { return output + ".settings.jsonl" }

// Line is s with its hashes, ready to be written (Marshal).
func (s Settings) Line() (SettingsLine, error) {
	hash, err := hashOf(&s)
	if err != nil {
		return SettingsLine{}, err
	}
	fam := s.family()
	family, err := hashOf(&fam)
	if err != nil {
		return SettingsLine{}, err
	}
	return SettingsLine{Hash: hash, Family: family, Settings: s}, nil
}

// family is s without what may differ between answers that belong in one
// training file: the server's kind and version (a fleet being upgraded
// serves one model), the seed and the samples (a rerun samples other
// answers of the same settings), the arm (a mixture's arms are meant to
// be trained on together; the mixture itself stays), the record's own
// params (the dataset's) and whether token ids were asked.
func (s Settings) family() Settings {
	s.Server, s.ServerVersion, s.Seed, s.Samples = "", "", nil, 0
	s.Arm, s.ArmParams, s.Params, s.TokenIDs = "", nil, nil, false
	return s
}

func hashOf(s *Settings) (string, error) {
	b, err := json.Append(nil, s, json.SortMapKeys)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%016x", xxh3.Hash(b)), nil
}

// Canonical is a JSON value with every object's keys sorted and no space,
// numbers as written: two spellings of one object hash alike.
func Canonical(raw []byte) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	var v any
	if _, err := json.Parse(raw, &v, json.UseNumber); err != nil {
		return nil, err
	}
	return json.Append(nil, v, json.SortMapKeys)
}

// MixHash identifies a mixture by its arms: names, weights and params
// (canonical), in order.
func MixHash(names []string, weights []float64, params []json.RawMessage) (string, error) {
	b := []byte{'['}
	for i, name := range names {
		p, err := Canonical(params[i])
		if err != nil {
			return "", err
		}
		if len(p) == 0 {
			p = []byte("null")
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = json.AppendEscape(append(b, '['), name, 0)
		b = append(strconv.AppendFloat(append(b, ','), weights[i], 'g', -1, 64), ',')
		b = append(append(b, p...), ']')
	}
	return fmt.Sprintf("%016x", xxh3.Hash(append(b, ']'))), nil
}

// SettingsField is one field of Settings, for saying how two differ.
type SettingsField struct {
	Name string
	text func(*Settings) string
}

func optText[T any](p *T) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

func rawText(r json.RawMessage) string {
	if len(r) == 0 {
		return "none"
	}
	return string(r)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// The fields compared, in the order they are named.
var (
	fieldAPI              = SettingsField{"api", func(s *Settings) string { return orNone(s.API) }}
	fieldModel            = SettingsField{"model", func(s *Settings) string { return strconv.Quote(s.Model) }}
	fieldMaxTokens        = SettingsField{"max_tokens", func(s *Settings) string { return optText(s.MaxTokens) }}
	fieldTemperature      = SettingsField{"temperature", func(s *Settings) string { return optText(s.Temperature) }}
	fieldTopP             = SettingsField{"top_p", func(s *Settings) string { return optText(s.TopP) }}
	fieldStop             = SettingsField{"stop", func(s *Settings) string { return stopText(s.Stop) }}
	fieldSeed             = SettingsField{"seed", func(s *Settings) string { return optText(s.Seed) }}
	fieldExtraBody        = SettingsField{"extra_body", func(s *Settings) string { return rawText(s.ExtraBody) }}
	fieldMix              = SettingsField{"mix", func(s *Settings) string { return orNone(s.Mix) }}
	fieldTokenIDs         = SettingsField{"token_ids", func(s *Settings) string { return onOff(s.TokenIDs) }}
	fieldRegenerate       = SettingsField{"regenerate", func(s *Settings) string { return onOff(s.Regenerate) }}
	fieldHistoryReasoning = SettingsField{"history_reasoning", func(s *Settings) string { return onOff(s.HistoryReasoning) }}
	fieldSamples          = SettingsField{"samples", func(s *Settings) string { return strconv.Itoa(s.Samples) }}
	fieldServer           = SettingsField{"server", func(s *Settings) string { return orNone(strings.TrimSpace(s.Server + " " + s.ServerVersion)) }}
	fieldArm              = SettingsField{"arm", func(s *Settings) string { return orNone(s.Arm) }}
	fieldParams           = SettingsField{"params", func(s *Settings) string { return orNone(strings.Join(s.Params, ",")) }}
)

func stopText(stop []string) string {
	if len(stop) == 0 {
		return "none"
	}
	b, _ := json.Marshal(stop)
	return string(b)
}

// RunFields are the settings a run sets for all its answers (the model
// aside: known once the servers are up): what --resume and --append
// compare with the file they continue.
var RunFields = []SettingsField{fieldAPI, fieldMaxTokens, fieldTemperature, fieldTopP, fieldStop, fieldSeed, fieldExtraBody,
	fieldMix, fieldTokenIDs, fieldRegenerate, fieldHistoryReasoning, fieldSamples}

// FamilyFields are the fields of a settings family (see Settings.family):
// answers that differ in one of them do not belong in one training file.
var FamilyFields = []SettingsField{fieldAPI, fieldModel, fieldMaxTokens, fieldTemperature, fieldTopP, fieldStop, fieldExtraBody,
	fieldMix, fieldRegenerate, fieldHistoryReasoning}

// AllFields are every field, as Describe lists them.
var AllFields = []SettingsField{fieldAPI, fieldModel, fieldServer, fieldMaxTokens, fieldTemperature, fieldTopP, fieldStop, fieldSeed,
	fieldExtraBody, fieldMix, fieldArm, fieldParams, fieldTokenIDs, fieldRegenerate, fieldHistoryReasoning, fieldSamples}

// Differ is the first of fields in which a and b differ, and its values
// in each; ok is false when they agree in all.
func Differ(a, b *Settings, fields []SettingsField) (name, inA, inB string, ok bool) {
	for _, f := range fields {
		if x, y := f.text(a), f.text(b); x != y {
			return f.Name, x, y, true
		}
	}
	return "", "", "", false
}

// Describe lists s's fields that are set, "name value" comma-separated.
func (s *Settings) Describe() string {
	var parts []string
	for _, f := range AllFields {
		v := f.text(s)
		if v == "none" || v == "off" || v == `""` || f.Name == "samples" && v == "0" {
			continue
		}
		if v == "on" {
			parts = append(parts, f.Name)
			continue
		}
		parts = append(parts, f.Name+" "+v)
	}
	return strings.Join(parts, ", ")
}

// SettingsIndex holds settings lines by hash, in the order first added.
type SettingsIndex struct {
	Lines  []SettingsLine
	byHash map[string]int
}

// Add keeps l unless a line of its hash is held; false when one was.
func (x *SettingsIndex) Add(l SettingsLine) bool {
	if x.byHash == nil {
		x.byHash = map[string]int{}
	}
	if _, ok := x.byHash[l.Hash]; ok {
		return false
	}
	x.byHash[l.Hash] = len(x.Lines)
	x.Lines = append(x.Lines, l)
	return true
}

// Get is the line of hash, nil when none is held.
func (x *SettingsIndex) Get(hash string) *SettingsLine {
	if x == nil {
		return nil
	}
	i, ok := x.byHash[hash]
	if !ok {
		return nil
	}
	return &x.Lines[i]
}

// ParseSettingsLine reads one line of a settings sidecar.
func ParseSettingsLine(data []byte) (SettingsLine, error) {
	var l SettingsLine
	if err := Decode(data, &l); err != nil {
		return l, err
	}
	if !isHash(l.Hash) || !isHash(l.Family) {
		return l, errors.New("not a settings line (no settings and family hashes)")
	}
	return l, nil
}

// isHash tells the 16 hex digits of a settings hash.
func isHash(s string) bool {
	return len(s) == 16 && !slices.ContainsFunc([]byte(s), func(c byte) bool {
		return (c < '0' || c > '9') && (c < 'a' || c > 'f')
	})
}
