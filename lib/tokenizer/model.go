package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"

	"github.com/segmentio/encoding/json"
	"github.com/zeebo/xxh3"

	"tokenmill/lib/jsonl"
)

// A model's Hugging Face folder, as huggingface-cli download leaves it.
const (
	fileTokenizer       = "tokenizer.json"
	fileTokenizerConfig = "tokenizer_config.json"
	fileChatTemplate    = "chat_template.jinja"
	fileGenerationCfg   = "generation_config.json"
)

// Bounds on what is read of a folder: the largest tokenizer.json shipped
// today is about 35 MB (Gemma's), a configuration a few hundred KB.
const (
	maxTokenizerJSON = 256 << 20
	maxConfigFile    = 16 << 20
)

// ErrNoTokenizer is a folder without tokenizer.json: a usage error.
var ErrNoTokenizer = errors.New("no " + fileTokenizer)

// Tokenizer is a model's tokenizer and chat template, loaded from its
// folder: it renders conversations as the model's template does and
// tokenizes the text as the model's tokenizer does. Safe for concurrent
// use.
type Tokenizer struct {
	*BPE
	// Dir is the folder it was loaded from.
	Dir string
	// Hash is the SHA-256 (hex) of tokenizer.json: which vocabulary.
	Hash string
	// EndOfTurn are the ids a model ends its answer with: the
	// configuration's eos_token and generation_config.json's
	// eos_token_id, in that order, without repeats.
	EndOfTurn []int
	// AddBOS is tokenizer_config.json's add_bos_token: the begin-of-text
	// token a server puts before a prompt it tokenizes with its special
	// tokens (a chat template that writes bos_token itself has it anyway).
	AddBOS bool
	BOSID  int // -1: none
	// Temperature is generation_config.json's sampling temperature, the
	// one servers sample with when a request sends none (nil: not given).
	Temperature *float64
	tmpl        *template
}

// Load reads a model's folder: tokenizer.json (required),
// tokenizer_config.json (the chat template, bos_token and eos_token),
// chat_template.jinja where the model ships one (it takes precedence, as
// in transformers) and generation_config.json's end-of-turn ids. Nothing
// is downloaded. A folder without tokenizer.json is ErrNoTokenizer; a
// component or template feature that is not supported is an error
// naming it.
func Load(dir string) (*Tokenizer, error) {
	raw, err := jsonl.ReadRegular(filepath.Join(dir, fileTokenizer), maxTokenizerJSON)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w: --tokenizer takes a model's Hugging Face folder (tokenizer.json, tokenizer_config.json)", dir, ErrNoTokenizer)
	}
	if err != nil {
		return nil, err
	}
	bpe, err := NewBPE(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, fileTokenizer), err)
	}
	sum := sha256.Sum256(raw)
	t := &Tokenizer{BPE: bpe, Dir: dir, Hash: hex.EncodeToString(sum[:]), BOSID: -1}
	cfg, err := readConfig(dir)
	if err != nil {
		return nil, err
	}
	t.AddBOS = cfg.AddBOSToken
	bos, eos := cfg.BOSToken.Content, cfg.EOSToken.Content
	if id, ok := bpe.TokenID(bos); ok && bos != "" {
		t.BOSID = id
	}
	if id, ok := bpe.TokenID(eos); ok && eos != "" {
		t.EndOfTurn = append(t.EndOfTurn, id)
	}
	gen, err := readGeneration(dir)
	if err != nil {
		return nil, err
	}
	t.Temperature = gen.temperature
	for _, id := range gen.eos {
		if id >= 0 && id < bpe.VocabSize() && !containsInt(t.EndOfTurn, id) {
			t.EndOfTurn = append(t.EndOfTurn, id)
		}
	}
	if t.tmpl, err = loadTemplate(dir, cfg, bos, eos); err != nil {
		return nil, err
	}
	return t, nil
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// HasTemplate tells whether the folder has a chat template.
func (t *Tokenizer) HasTemplate() bool { return t.tmpl != nil }

// TemplateHash is the xxh3-64 (hex) of the chat template's text, as infer
// records a server's ("" without a template).
func (t *Tokenizer) TemplateHash() string {
	if t.tmpl == nil {
		return ""
	}
	return t.tmpl.hash
}

// TemplateSource is the chat template's text.
func (t *Tokenizer) TemplateSource() string {
	if t.tmpl == nil {
		return ""
	}
	return t.tmpl.source
}

// WithTemplate is t rendering with another chat template's source (a
// server started with --chat-template, or another version of the model's
// template), the vocabulary shared.
func (t *Tokenizer) WithTemplate(source string) (*Tokenizer, error) {
	bos, eos := "", ""
	if t.tmpl != nil {
		bos, eos = t.tmpl.bos, t.tmpl.eos
	}
	tmpl := &template{source: source, hash: TemplateHashOf(source), bos: bos, eos: eos}
	var err error
	if tmpl.tmpl, err = compileTemplate("", source); err != nil {
		return nil, err
	}
	if err := tmpl.probe(); err != nil {
		return nil, err
	}
	c := *t
	c.tmpl = tmpl
	return &c, nil
}

// ErrNoTemplate is rendering with a folder that has no chat template.
var ErrNoTemplate = errors.New("the tokenizer's folder has no chat template (tokenizer_config.json chat_template, or chat_template.jinja)")

// Render renders a conversation with the model's chat template.
func (t *Tokenizer) Render(r Request) (string, error) {
	if t.tmpl == nil {
		return "", ErrNoTemplate
	}
	return t.tmpl.render(r)
}

// EncodeSpecial is Encode with the special tokens a server adds to a text
// it tokenizes (add_special_tokens true): the begin-of-text token where
// the configuration asks for it.
func (t *Tokenizer) EncodeSpecial(text string) []int {
	var ids []int
	if t.AddBOS && t.BOSID >= 0 {
		ids = append(ids, t.BOSID)
	}
	return t.AppendEncode(ids, text)
}

// IsEndOfTurn tells whether id ends a model's answer.
func (t *Tokenizer) IsEndOfTurn(id int) bool { return containsInt(t.EndOfTurn, id) }

// TemplateHashOf is the hash TemplateHash gives a template's text.
func TemplateHashOf(source string) string { return strconv.FormatUint(xxh3.HashString(source), 16) }

// config is what tokenizer_config.json says that rendering needs.
type config struct {
	AddBOSToken  bool            `json:"add_bos_token"`
	BOSToken     addedToken      `json:"bos_token"`
	EOSToken     addedToken      `json:"eos_token"`
	ChatTemplate json.RawMessage `json:"chat_template"`
}

// addedToken is a special token as the configuration names it: its text,
// or an object with its text under "content".
type addedToken struct{ Content string }

func (a *addedToken) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &a.Content)
	}
	var o struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	a.Content = o.Content
	return nil
}

func readConfig(dir string) (config, error) {
	var cfg config
	path := filepath.Join(dir, fileTokenizerConfig)
	raw, err := jsonl.ReadRegular(path, maxConfigFile)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return cfg, err
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return cfg, fmt.Errorf("%s: %v", path, err)
	}
	return cfg, nil
}

func readGeneration(dir string) (generation, error) {
	path := filepath.Join(dir, fileGenerationCfg)
	raw, err := jsonl.ReadRegular(path, maxConfigFile)
	if errors.Is(err, fs.ErrNotExist) {
		return generation{}, nil
	}
	if err != nil {
		return generation{}, err
	}
	var gen struct {
		EOS         json.RawMessage `json:"eos_token_id"`
		Temperature *float64        `json:"temperature"`
	}
	if err := json.Unmarshal(raw, &gen); err != nil {
		return generation{}, fmt.Errorf("%s: %v", path, err)
	}
	out := generation{temperature: gen.Temperature}
	var one int
	if json.Unmarshal(gen.EOS, &one) == nil {
		out.eos = []int{one}
		return out, nil
	}
	if len(gen.EOS) > 0 && json.Unmarshal(gen.EOS, &out.eos) != nil {
		return generation{}, fmt.Errorf("%s: eos_token_id is neither an id nor a list of ids", path)
	}
	return out, nil
}

// generation is what generation_config.json says: the end-of-turn ids and
// the sampling temperature.
type generation struct {
	eos         []int
	temperature *float64
}

// loadTemplate finds the chat template: chat_template.jinja, else the
// configuration's chat_template (a text, or a list of named templates of
// which "default" is used, and "tool_use" for requests with tools).
func loadTemplate(dir string, cfg config, bos, eos string) (*template, error) {
	t := &template{bos: bos, eos: eos}
	path := filepath.Join(dir, fileChatTemplate)
	raw, err := jsonl.ReadRegular(path, maxConfigFile)
	var toolUse string
	switch {
	case err == nil:
		t.source = string(raw)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	case len(cfg.ChatTemplate) == 0 || string(cfg.ChatTemplate) == "null":
		return nil, nil
	case cfg.ChatTemplate[0] == '"':
		if err := json.Unmarshal(cfg.ChatTemplate, &t.source); err != nil {
			return nil, fmt.Errorf("%s: chat_template: %v", filepath.Join(dir, fileTokenizerConfig), err)
		}
	default:
		var named []struct {
			Name     string `json:"name"`
			Template string `json:"template"`
		}
		if err := json.Unmarshal(cfg.ChatTemplate, &named); err != nil {
			return nil, fmt.Errorf("%s: chat_template is neither a text nor a list of named templates: %v", filepath.Join(dir, fileTokenizerConfig), err)
		}
		for _, n := range named {
			switch n.Name {
			case "default":
				t.source = n.Template
			case "tool_use":
				toolUse = n.Template
			}
		}
		if t.source == "" {
			return nil, fmt.Errorf("%s: chat_template lists no template named \"default\"", filepath.Join(dir, fileTokenizerConfig))
		}
	}
	t.hash = TemplateHashOf(t.source)
	if t.tmpl, err = compileTemplate("", t.source); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if toolUse != "" {
		if t.toolUse, err = compileTemplate("tool_use", toolUse); err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
	}
	if err := t.probe(); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return t, nil
}

// probeRequests are conversations of every shape the tools send: a
// template that fails on all of them for want of a feature (an unknown
// filter, test or method) is refused at start, naming it, instead of
// failing every record of a run.
var probeRequests = []Request{
	{Messages: []byte(`[{"role":"user","content":"Hello"}]`), AddGenerationPrompt: true},
	{Messages: []byte(`[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"},{"role":"user","content":"Bye"}]`), AddGenerationPrompt: true},
	{Messages: []byte(`[{"role":"user","content":"Weather?"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},{"role":"tool","tool_call_id":"c1","content":"sunny"}]`),
		Tools:               []byte(`[{"type":"function","function":{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`),
		AddGenerationPrompt: true},
}

func (t *template) probe() error {
	var first error
	for _, r := range probeRequests {
		_, err := t.render(r)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return fmt.Errorf("the chat template renders none of the probe conversations (user only; system, user, assistant; tools): %v", first)
}
