package merge

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
	"tokenmill/lib/tokenizer"
)

// The tokens sink writes the rows of the records merge keeps (JSON Lines
// or Parquet), refuses rows of another model or chat template than the
// first ones unless --allow-mixed, and writes the manifest beside the
// output once it is complete: what produced the rows (models, servers
// and their versions, template hashes, sampling settings), how many of
// what, and the checksums of the files they came from.

// ManifestSchema names the manifest's layout (fields only ever added).
const ManifestSchema = "tokenmill.tokens-manifest/v1"

// ManifestPath is the manifest written beside an output: FILE.manifest.json.
func ManifestPath(output string) string {
	if output == "" || output == "-" {
		return ""
	}
	return output + ".manifest.json"
}

// Manifest is what the manifest says.
type Manifest struct {
	Schema        string           `json:"schema"`
	Output        string           `json:"output"`
	Format        string           `json:"format"`
	Models        []string         `json:"models"`
	Servers       []ManifestServer `json:"servers"`
	ChatTemplates []ManifestTmpl   `json:"chat_templates"`
	Mixed         bool             `json:"mixed"`
	Sampling      []ManifestSample `json:"sampling"`
	Counts        tokenTally       `json:"counts"`
	Inputs        []ManifestInput  `json:"inputs"`
	// Tokenizer is merge --tokenizer's folder: which vocabulary and
	// template rebuilt the rows of answers without the server's ids.
	Tokenizer *ManifestTokenizer `json:"tokenizer,omitempty"`
	// Settings are the settings the records were made with (infer's
	// output.settings, settings.go), with their records.
	Settings []ManifestSettings `json:"settings"`
}

// ManifestTokenizer names a tokenizer by what it holds.
type ManifestTokenizer struct {
	Dir              string `json:"dir"`
	TokenizerSHA256  string `json:"tokenizer_json_sha256"`
	ChatTemplateHash string `json:"chat_template_hash"`
	EndOfTurn        []int  `json:"end_of_turn_ids"`
	ReasoningLoss    bool   `json:"reasoning_loss"`
	TemplateKwargs   string `json:"template_kwargs,omitempty"`
}

// ManifestServer is one kind and version of server, with the records
// it served.
type ManifestServer struct {
	Server  string `json:"server"`
	Version string `json:"version,omitempty"`
	Records int64  `json:"records"`
}

// ManifestTmpl is one chat template, by its hash.
type ManifestTmpl struct {
	Hash    string `json:"hash"`
	From    string `json:"from"`
	Records int64  `json:"records"`
}

// ManifestSample is one set of sampling settings as sent (the seed left
// out: it differs by sample), with the records generated with it.
type ManifestSample struct {
	Settings json.RawMessage `json:"settings"`
	Seeded   int64           `json:"records_with_seed"`
	Records  int64           `json:"records"`
}

// ManifestInput is one input file and its checksum.
type ManifestInput struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256,omitempty"` // empty for stdin
}

// maxSamplingSets bounds the distinct sampling settings listed.
const maxSamplingSets = 64

type tokenSink struct {
	inner      sink
	tok        *tokenizer.Tokenizer
	outs       *jsonl.Outputs
	cfg        *Config
	tally      *tokenTally
	keys       map[string]string // "": the first rows' model; a template's route: its hash there
	mixed      bool
	models     map[string]bool
	servers    map[[2]string]int64
	templates  map[[2]string]int64
	sampling   map[string]*ManifestSample
	samplingIn []string // in the order first seen
	settings   *settingsTally
}

func newTokenSink(inner sink, outs *jsonl.Outputs, cfg *Config, tally *tokenTally) *tokenSink {
	tally.NotPrefixReasons = map[string]int64{}
	return &tokenSink{inner: inner, outs: outs, cfg: cfg, tally: tally, keys: map[string]string{}, models: map[string]bool{},
		servers: map[[2]string]int64{}, templates: map[[2]string]int64{}, sampling: map[string]*ManifestSample{}}
}

func (s *tokenSink) Write(data []byte) error {
	meta, rows, err := splitMeta(data)
	if err != nil {
		return fmt.Errorf("token rows: %w", err)
	}
	if err := s.provenance(meta); err != nil {
		return err
	}
	t := s.tally
	t.Records++
	t.Events += int64(meta.Events)
	t.Rendered += int64(meta.Rendered)
	t.EOSAdded += int64(meta.EOSAdded)
	if len(meta.Ends) > 0 {
		if t.EndOfTurn == nil {
			t.EndOfTurn = &endOfTurnTally{}
		}
		t.EndOfTurn.add(meta.Ends)
	}
	switch {
	case meta.Whole:
		t.WholeRows++
	case meta.NotPrefix != "":
		t.PerEvent++
		t.NotPrefixReasons[meta.NotPrefix]++
	default:
		t.SingleAnswers++
	}
	for _, row := range rows {
		inputs, loss, err := rowCounts(row)
		if err != nil {
			return fmt.Errorf("token rows: %w", err)
		}
		t.Rows++
		t.InputTokens += inputs
		t.LossTokens += loss
		if err := s.inner.Write(row); err != nil {
			return err
		}
	}
	return nil
}

// provenance counts what produced a record's rows, refusing another
// model than the first rows', or another chat template than the one the
// same route reported for them (hashes read from different routes, a
// template's name and its text, cannot be compared), unless
// --allow-mixed.
func (s *tokenSink) provenance(meta tokenMeta) error {
	seen := map[string]bool{}
	for _, sb := range meta.Served {
		if err := s.checkMix(sb); err != nil {
			return err
		}
		key := mixKey(sb) + " " + sb.Server + " " + sb.Version
		if seen[key] {
			continue
		}
		seen[key] = true
		s.models[sb.Model] = true
		s.servers[[2]string{sb.Server, sb.Version}]++
		if sb.ChatTemplateHash != "" {
			s.templates[[2]string{sb.ChatTemplateHash, sb.ChatTemplateFrom}]++
		}
	}
	if len(meta.Sampling) > 0 {
		settings, seeded := withoutSeed(meta.Sampling)
		set, ok := s.sampling[settings]
		if !ok && len(s.sampling) < maxSamplingSets {
			set = &ManifestSample{Settings: json.RawMessage(settings)}
			s.sampling[settings] = set
			s.samplingIn = append(s.samplingIn, settings)
		}
		if set != nil {
			set.Records++
			if seeded {
				set.Seeded++
			}
		}
	}
	return nil
}

// checkMix refuses sb's rows beside rows of another model or template.
func (s *tokenSink) checkMix(sb record.ServedBy) error {
	other := ""
	if first, ok := s.keys[""]; ok && first != sb.Model {
		other = fmt.Sprintf("model %q", first)
	}
	if sb.ChatTemplateHash != "" {
		if h, ok := s.keys[sb.ChatTemplateFrom]; ok && h != sb.ChatTemplateHash && other == "" {
			other = fmt.Sprintf("chat template %s (%s)", h, sb.ChatTemplateFrom)
		}
	}
	if other != "" {
		if !s.cfg.AllowMixed {
			return cli.Usagef("--to tokens: rows of %s would join rows of %s in one file: merge them apart, or give --allow-mixed", describe(sb), other)
		}
		s.mixed = true
	}
	if _, ok := s.keys[""]; !ok {
		s.keys[""] = sb.Model
	}
	if _, ok := s.keys[sb.ChatTemplateFrom]; !ok && sb.ChatTemplateHash != "" {
		s.keys[sb.ChatTemplateFrom] = sb.ChatTemplateHash
	}
	return nil
}

func describe(sb record.ServedBy) string {
	d := fmt.Sprintf("model %q", sb.Model)
	if sb.ChatTemplateHash != "" {
		d += fmt.Sprintf(" (chat template %s, %s)", sb.ChatTemplateHash, sb.ChatTemplateFrom)
	}
	return d
}

// withoutSeed is a sampling object's compact text without its seed, and
// whether it had one.
func withoutSeed(raw json.RawMessage) (string, bool) {
	seeded := false
	for _, k := range []string{"seed", "sampling_seed"} {
		if v, _ := record.FieldValue(raw, k); v != nil {
			seeded = true
		}
	}
	out, err := record.WithoutFields(nil, raw, "seed", "sampling_seed")
	if err != nil {
		return string(raw), seeded
	}
	return string(out), seeded
}

func (s *tokenSink) Finish() error {
	if err := s.inner.Finish(); err != nil {
		return err
	}
	return s.writeManifest()
}

// writeManifest writes the manifest beside the output (or at --manifest),
// atomically; none for stdout without --manifest.
func (s *tokenSink) writeManifest() error {
	path := s.cfg.manifestPath()
	if path == "" {
		return nil
	}
	if s.tally.EndOfTurn != nil {
		s.tally.EndOfTurn.settle()
	}
	m := Manifest{Schema: ManifestSchema, Output: s.cfg.Output, Format: "jsonl", Mixed: s.mixed, Counts: *s.tally,
		Models: []string{}, Servers: []ManifestServer{}, ChatTemplates: []ManifestTmpl{}, Sampling: []ManifestSample{}}
	if isParquet(s.cfg.Output) {
		m.Format = "parquet"
	}
	if tok := s.tok; tok != nil {
		m.Tokenizer = &ManifestTokenizer{Dir: tok.Dir, TokenizerSHA256: tok.Hash, ChatTemplateHash: tok.TemplateHash(), EndOfTurn: tok.EndOfTurn,
			ReasoningLoss: s.cfg.ReasoningLoss, TemplateKwargs: s.cfg.TemplateKwargs}
	}
	for model := range s.models {
		m.Models = append(m.Models, model)
	}
	sort.Strings(m.Models)
	for k, n := range s.servers {
		m.Servers = append(m.Servers, ManifestServer{Server: k[0], Version: k[1], Records: n})
	}
	sort.Slice(m.Servers, func(i, j int) bool {
		return m.Servers[i].Server+" "+m.Servers[i].Version < m.Servers[j].Server+" "+m.Servers[j].Version
	})
	for k, n := range s.templates {
		m.ChatTemplates = append(m.ChatTemplates, ManifestTmpl{Hash: k[0], From: k[1], Records: n})
	}
	sort.Slice(m.ChatTemplates, func(i, j int) bool {
		return m.ChatTemplates[i].Hash+m.ChatTemplates[i].From < m.ChatTemplates[j].Hash+m.ChatTemplates[j].From
	})
	for _, k := range s.samplingIn {
		m.Sampling = append(m.Sampling, *s.sampling[k])
	}
	m.Settings = []ManifestSettings{}
	if s.settings != nil {
		m.Settings = s.settings.manifest()
	}
	inputs, err := checksums(append(s.cfg.Inputs[:len(s.cfg.Inputs):len(s.cfg.Inputs)], s.cfg.Prompts))
	if err != nil {
		return err
	}
	m.Inputs = inputs
	body, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	w, err := s.outs.Create("--manifest", path)
	if err != nil {
		return err
	}
	_, err = w.WriteRaw(append(body, '\n'))
	return err
}

// checksums are the input files' sizes and SHA-256, stdin named "-".
func checksums(names []string) ([]ManifestInput, error) {
	out := []ManifestInput{}
	if len(names) == 1 && names[0] == "" {
		names = []string{"-"}
	}
	for _, name := range names {
		if name == "" {
			continue
		}
		if name == "-" {
			out = append(out, ManifestInput{Path: "-"})
			continue
		}
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("manifest: reading %s: %w", name, err)
		}
		out = append(out, ManifestInput{Path: name, Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))})
	}
	return out, nil
}

// manifestPath is where the manifest goes: --manifest, else beside -o.
func (c *Config) manifestPath() string {
	if c.Manifest != "" {
		return c.Manifest
	}
	return ManifestPath(c.Output)
}

// tokenUsage checks the flags of --to tokens.
func (c *Command) tokenUsage() error {
	switch {
	case c.To != toTokens && (c.AllowMixed || c.Manifest != ""):
		return cli.Usagef("--allow-mixed and --manifest go with --to tokens")
	case c.To == toTokens && c.WithReasoning:
		return cli.Usagef("--with-reasoning does not apply to --to tokens: the ids are what the model generated, its reasoning included")
	case c.To == toTokens && strings.HasSuffix(c.Manifest, ".parquet"):
		return cli.Usagef("--manifest %s: the manifest is JSON", c.Manifest)
	case c.To != toTokens && c.Tokenizer != "":
		return cli.Usagef("--tokenizer goes with --to tokens (the other forms are text)")
	case c.Tokenizer == "" && (c.TemplateKwargs != "" || !c.ReasoningLoss):
		return cli.Usagef("--template-kwargs and --no-reasoning-loss need --tokenizer DIR")
	case c.TemplateKwargs != "" && !isJSONObject(c.TemplateKwargs):
		return cli.Usagef("--template-kwargs %q: want a JSON object, e.g. {\"enable_thinking\": false}", c.TemplateKwargs)
	}
	return nil
}

func isJSONObject(s string) bool {
	t := strings.TrimSpace(s)
	return strings.HasPrefix(t, "{") && json.Valid([]byte(t))
}

// tokenOutputs are the files --to tokens writes beside -o, for the path
// checks made before anything is opened.
func (c *Config) tokenOutputs() []jsonl.Output {
	if c.To != toTokens || c.manifestPath() == "" {
		return nil
	}
	return []jsonl.Output{{Flag: "--manifest", Path: c.manifestPath(), Later: true}}
}

// pqTokenRow is a token row in Parquet: list<int32> ids and mask.
type pqTokenRow struct {
	ID              string  `parquet:"id"`
	Sample          int64   `parquet:"sample"`
	Turn            *int32  `parquet:"turn,optional"`
	InputIDs        []int32 `parquet:"input_ids,list"`
	LossMask        []int32 `parquet:"loss_mask,list"`
	NumPromptTokens int64   `parquet:"num_prompt_tokens"`
	NumAnswerTokens int64   `parquet:"num_answer_tokens"`
	Arm             *string `parquet:"arm,optional"`
}

func fillTokenRow(r *pqTokenRow, line []byte) error {
	var v tokenRow
	if err := record.Decode(line, &v); err != nil {
		return err
	}
	r.ID, r.Sample, r.Turn = v.ID.Text, int64(v.Sample), nil
	if v.Turn != nil {
		turn := int32(*v.Turn)
		r.Turn = &turn
	}
	r.InputIDs, r.LossMask = v.InputIDs, v.LossMask
	r.NumPromptTokens, r.NumAnswerTokens = int64(v.NumPromptTokens), int64(v.NumAnswerTokens)
	r.Arm = optional(v.Arm)
	return nil
}
