package gguf

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Token types of tokenizer.ggml.token_type beyond those of Vocab.
const (
	TokenUserDefined int32 = 4
	TokenUnused      int32 = 5
)

// BPEVocab is a Hugging Face byte-level BPE tokenizer (tokenizer.json's
// model.type "BPE": Qwen, Llama 3, DeepSeek, GPT-2) as llama.cpp's own
// converter carries it into a GGUF file for its "gpt2" tokenizer:
// convert_hf_to_gguf.py's get_vocab_base and _set_vocab_gpt2, and gguf-py's
// SpecialVocab for the merges, the special token ids, add_bos_token and the
// chat template. ReadBPEVocab builds it from a model's folder; Llama.BPE
// puts it into a model.
type BPEVocab struct {
	// Pre is tokenizer.ggml.pre, the name of the pre-tokenizer llama.cpp
	// splits text with before the merges ("qwen2" for Qwen2 and Qwen3).
	// The converter finds it by hashing the token ids of a probe text;
	// here the caller names it.
	Pre string
	// Tokens are the vocabulary in id order: the model's tokens as
	// tokenizer.json spells them (byte-level: "Ġthe"), the added tokens'
	// contents, and "[PAD<id>]" for an id that neither names (a hole, or
	// past the last token where config.json's vocab_size pads the
	// embedding).
	Tokens []string
	// Types are the tokens' types: TokenNormal for the model's own,
	// TokenControl for added tokens marked special or that look special
	// ("<|...|>"), TokenUserDefined for the other added tokens,
	// TokenUnused for the holes.
	Types []int32
	// Merges are the BPE merges in rank order, "left right"; a space
	// inside a part (tokenizer.json's newer pair form allows one) is
	// written as U+0120, as the converter does.
	Merges []string
	// Special are the special token ids the folder names, by kind: "bos",
	// "eos", "unk", "sep", "pad", "mask" (tokenizer.ggml.<kind>_token_id).
	Special map[string]int
	// Add are tokenizer_config.json's add_bos_token, add_eos_token and
	// add_sep_token where the folder says (or tokenizer.json's post
	// processor implies them), by kind: "bos", "eos", "sep".
	Add map[string]bool
	// ChatTemplate is the chat template (tokenizer.chat_template), "" for
	// none; Templates are a folder's further named templates
	// (tokenizer.chat_template.<name>), such as "tool_use".
	ChatTemplate string
	Templates    map[string]string
}

// specialKinds are SpecialVocab's special token types in its order, with
// the GGUF key each is written under ("cls" has no key: the converter
// warns and skips it).
var specialKinds = []specialKind{
	{"bos", "tokenizer.ggml.bos_token_id"},
	{"eos", "tokenizer.ggml.eos_token_id"},
	{"unk", "tokenizer.ggml.unknown_token_id"},
	{"sep", "tokenizer.ggml.seperator_token_id"}, // sic: the key llama.cpp reads
	{"pad", "tokenizer.ggml.padding_token_id"},
	{"cls", ""},
	{"mask", "tokenizer.ggml.mask_token_id"},
}

type specialKind struct{ kind, key string }

// specialKeys are the GGUF keys of every kind of special token written.
var specialKeys = append(slices.Clone(specialKinds),
	specialKind{"eot", "tokenizer.ggml.eot_token_id"}, specialKind{"eom", "tokenizer.ggml.eom_token_id"})

// hfTokenizer is what ReadBPEVocab reads of tokenizer.json.
type hfTokenizer struct {
	AddedTokens []struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		Special    bool   `json:"special"`
		Normalized bool   `json:"normalized"`
	} `json:"added_tokens"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         struct {
		Type   string          `json:"type"`
		Vocab  map[string]int  `json:"vocab"`
		Merges json.RawMessage `json:"merges"`
	} `json:"model"`
}

// postProcessor is a tokenizer.json post_processor, or one of a
// Sequence's processors.
type postProcessor struct {
	Type       string            `json:"type"`
	Processors []json.RawMessage `json:"processors"`
	Single     []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
	} `json:"single"`
}

// ReadBPEVocab reads a model's Hugging Face folder (tokenizer.json,
// tokenizer_config.json, config.json and chat_template.jinja where
// present) into the vocabulary llama.cpp's converter would write, with
// pre as its pre-tokenizer name. A tokenizer.json whose model is not BPE
// is refused.
//
// Where the converter asks the transformers library, this reads the files
// themselves: tokenizer.vocab is the model's vocabulary plus the added
// tokens; an added token that is not normalized is taken as its content
// (the converter's encode-then-decode round trip gives the content back
// for the byte-level tokenizers); of tokenizer.json's post processor the
// single sequence of a TemplateProcessing and RobertaProcessing are read
// (see readPostProcessor), not the pair sequence's separators.
func ReadBPEVocab(dir, pre string) (*BPEVocab, error) {
	if pre == "" {
		return nil, errors.New("gguf: a BPE vocabulary needs its pre-tokenizer's name (tokenizer.ggml.pre), such as \"qwen2\"")
	}
	var tj hfTokenizer
	if err := readJSON(filepath.Join(dir, "tokenizer.json"), &tj); err != nil {
		return nil, err
	}
	if tj.Model.Type != "BPE" {
		return nil, fmt.Errorf("gguf: %s: model type %q, want a byte-level \"BPE\"", filepath.Join(dir, "tokenizer.json"), tj.Model.Type)
	}
	var cfg map[string]json.RawMessage // tokenizer_config.json, optional
	if err := readJSON(filepath.Join(dir, "tokenizer_config.json"), &cfg); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var model map[string]json.RawMessage // config.json, optional
	if err := readJSON(filepath.Join(dir, "config.json"), &model); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}

	v := &BPEVocab{Pre: pre, Special: map[string]int{}, Add: map[string]bool{}}

	size, err := v.readTokens(dir, &tj, model)
	if err != nil {
		return nil, err
	}
	merges, err := readMerges(tj.Model.Merges)
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: merges: %w", filepath.Join(dir, "tokenizer.json"), err)
	}
	v.Merges = merges

	if err := v.readSpecials(dir, &tj, cfg, model, size); err != nil {
		return nil, err
	}
	if len(cfg) == 0 {
		return v, nil // the converter reads no chat template without a tokenizer_config.json
	}
	if err := v.readTemplates(dir, cfg["chat_template"]); err != nil {
		return nil, err
	}
	return v, nil
}

// readTokens fills v's tokens and their types: tokenizer.vocab is the
// model's tokens and the added tokens (an added token's content names its
// id); the vocabulary's size, returned, is config.json's vocab_size where
// given, else its number of entries.
func (v *BPEVocab) readTokens(dir string, tj *hfTokenizer, model map[string]json.RawMessage) (int, error) {
	byID := map[int]string{}
	names := map[string]bool{}
	for tok, id := range tj.Model.Vocab {
		byID[id] = tok
		names[tok] = true
	}
	added := map[string]bool{} // get_added_vocab, by content
	special := map[int]bool{}  // added_tokens_decoder[id].special
	for _, a := range tj.AddedTokens {
		byID[a.ID] = a.Content
		names[a.Content] = true
		added[a.Content] = true
		special[a.ID] = a.Special
	}
	size := len(names)
	if n, ok := intField(model, "vocab_size"); ok {
		size = n
	} else if n, ok := intField(object(model["text_config"]), "vocab_size"); ok {
		size = n
	}
	for id := range byID {
		if id < 0 || id >= size {
			return 0, fmt.Errorf("gguf: %s: token id %d outside the vocabulary size %d", dir, id, size)
		}
	}
	v.Tokens = make([]string, size)
	v.Types = make([]int32, size)
	for i := range size {
		tok, ok := byID[i]
		switch {
		case !ok:
			v.Tokens[i], v.Types[i] = fmt.Sprintf("[PAD%d]", i), TokenUnused
		case added[tok] && (special[i] || looksSpecial(tok)):
			v.Tokens[i], v.Types[i] = tok, TokenControl
		case added[tok]:
			// User-defined tokens are matched in the text as they are:
			// SentencePiece's word boundary becomes a space.
			v.Tokens[i], v.Types[i] = strings.ReplaceAll(tok, "\u2581", " "), TokenUserDefined
		default:
			v.Tokens[i], v.Types[i] = tok, TokenNormal
		}
	}
	return size, nil
}

// readSpecials fills v's special tokens and whether each is added:
// tokenizer_config.json's <kind>_token entries (cls standing in for a
// missing bos, sep for a missing eos), adjusted by the post processor,
// each looked up among the added tokens (the first with that content);
// then config.json's <kind>_token_id for a kind still unset.
func (v *BPEVocab) readSpecials(dir string, tj *hfTokenizer, cfg, model map[string]json.RawMessage, size int) error {
	entry := map[string]json.RawMessage{}
	for _, k := range specialKinds {
		entry[k.kind] = cfg[k.kind+"_token"]
	}
	if !truthy(entry["bos"]) && truthy(entry["cls"]) && len(cfg) > 0 {
		entry["bos"] = entry["cls"]
	}
	if !truthy(entry["eos"]) && truthy(entry["sep"]) && len(cfg) > 0 {
		entry["eos"] = entry["sep"]
	}
	kinds, err := v.readPostProcessor(tj.PostProcessor, entry, slices.Clone(specialKinds), len(cfg) > 0)
	if err != nil {
		return fmt.Errorf("gguf: %s: post_processor: %w", filepath.Join(dir, "tokenizer.json"), err)
	}
	if len(cfg) > 0 {
		for _, k := range kinds {
			if b, ok := boolField(cfg, "add_"+k.kind+"_token"); ok {
				v.Add[k.kind] = b
			}
			c, ok := tokenContent(entry[k.kind])
			if !ok {
				continue
			}
			for _, a := range tj.AddedTokens {
				if a.Content == c {
					v.Special[k.kind] = a.ID
					break
				}
			}
		}
	}
	text := object(model["text_config"])
	for _, k := range kinds {
		if _, set := v.Special[k.kind]; set {
			continue
		}
		id, ok := intField(model, k.kind+"_token_id")
		if !ok {
			id, ok = intField(text, k.kind+"_token_id")
		}
		if ok && id >= 0 {
			v.Special[k.kind] = id
		}
	}
	for kind, id := range v.Special {
		if id < 0 || id >= size {
			return fmt.Errorf("gguf: %s: %s token id %d outside the vocabulary size %d", dir, kind, id, size)
		}
	}
	return nil
}

// looksSpecial is the converter's does_token_look_special: added tokens
// some models leave unmarked that ought to be control tokens.
func looksSpecial(tok string) bool {
	switch tok {
	case "<pad>", "<mask>", "<2mass>", "[@BOS@]":
		return true
	}
	return strings.HasPrefix(tok, "<|") && strings.HasSuffix(tok, "|>") ||
		strings.HasPrefix(tok, "<｜") && strings.HasSuffix(tok, "｜>") ||
		strings.HasPrefix(tok, "<unused") && strings.HasSuffix(tok, ">")
}

// readMerges reads tokenizer.json's merges: "a b" strings, or [a, b]
// pairs whose parts may hold spaces (written as U+0120).
func readMerges(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("none: llama.cpp refuses a BPE model without merges")
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		if len(strs) == 0 {
			return nil, errors.New("none: llama.cpp refuses a BPE model without merges")
		}
		return strs, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("neither strings nor pairs of strings: %w", err)
	}
	out := make([]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("merge %d has %d parts", i, len(p))
		}
		out[i] = strings.ReplaceAll(p[0], " ", "\u0120") + " " + strings.ReplaceAll(p[1], " ", "\u0120")
	}
	return out, nil
}

// readPostProcessor reads tokenizer.json's post processor as SpecialVocab
// does: RobertaProcessing adds bos, eos and sep; a TemplateProcessing's
// single sequence adds bos when it opens with the bos (or cls) token and
// eos when it closes with the eos token. A closing token other than
// tokenizer_config.json's eos becomes the eos, the old one the eot (or the
// eom, where an eot is already taken). Without a tokenizer_config.json
// (hasConfig false) the sequence's tokens are taken as bos and eos.
// tokenizer_config.json's add_*_token, read after, wins. The pair
// sequence's separators (add_sep, for BERT-like models) are not read. It
// returns kinds with the kinds added.
func (v *BPEVocab) readPostProcessor(raw json.RawMessage, entry map[string]json.RawMessage, kinds []specialKind, hasConfig bool) ([]specialKind, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return kinds, nil
	}
	var top postProcessor
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, err
	}
	procs := []postProcessor{top}
	if top.Processors != nil {
		procs = procs[:0]
		for _, r := range top.Processors {
			var p postProcessor
			if err := json.Unmarshal(r, &p); err != nil {
				return nil, err
			}
			procs = append(procs, p)
		}
	}
	has := func(kind string) bool {
		return slices.ContainsFunc(kinds, func(k specialKind) bool { return k.kind == kind })
	}
	for _, p := range procs {
		switch p.Type {
		case "RobertaProcessing":
			v.Add["bos"], v.Add["eos"], v.Add["sep"] = true, true, true
		case "TemplateProcessing":
			if len(p.Single) < 2 {
				continue
			}
			if first := p.Single[0].SpecialToken; first != nil && first.ID != "" {
				if !hasConfig {
					entry["bos"] = jsonString(first.ID)
				}
				v.Add["bos"] = isString(entry["bos"], first.ID) || isString(entry["cls"], first.ID)
			}
			if last := p.Single[len(p.Single)-1].SpecialToken; last != nil && last.ID != "" {
				if !hasConfig {
					entry["eos"] = jsonString(last.ID)
				} else if !isString(entry["eos"], last.ID) {
					switch {
					case !has("eot"):
						kinds = append(kinds, specialKind{"eot", "tokenizer.ggml.eot_token_id"})
						entry["eot"] = entry["eos"]
					case !has("eom"):
						kinds = append(kinds, specialKind{"eom", "tokenizer.ggml.eom_token_id"})
						entry["eom"] = entry["eos"]
					}
					entry["eos"] = jsonString(last.ID)
				}
				v.Add["eos"] = isString(entry["eos"], last.ID)
			}
		}
	}
	return kinds, nil
}

// readTemplates reads the chat template: tokenizer_config.json's
// chat_template (a string, or a list of {name, template} whose "default"
// is the template and the others named ones), else chat_template.jinja,
// else chat_template.json's chat_template, in the converter's order.
func (v *BPEVocab) readTemplates(dir string, fromConfig json.RawMessage) error {
	raw := fromConfig
	if len(raw) == 0 || string(raw) == "null" {
		raw = nil
		if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
			v.ChatTemplate = string(b)
			return nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		var cj map[string]json.RawMessage
		if err := readJSON(filepath.Join(dir, "chat_template.json"), &cj); err == nil {
			raw = cj["chat_template"]
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, &v.ChatTemplate); err == nil {
		return nil
	}
	var named []struct {
		Name     string  `json:"name"`
		Template *string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return fmt.Errorf("gguf: %s: chat_template is neither a string nor a list of named templates", dir)
	}
	for _, n := range named {
		name := strings.Map(func(r rune) rune {
			if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				return r
			}
			return '_'
		}, n.Name)
		switch {
		case name == "" || n.Template == nil:
		case name == "default":
			v.ChatTemplate = *n.Template
		default:
			if v.Templates == nil {
				v.Templates = map[string]string{}
			}
			v.Templates[name] = *n.Template
		}
	}
	return nil
}

// KVs are the tokenizer's metadata as the converter writes it: model
// "gpt2", the pre-tokenizer, tokens, token types, merges, the special
// token ids, add_bos/add_eos/add_sep, and the chat templates.
func (v *BPEVocab) KVs() []KV {
	kvs := []KV{
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", v.Pre},
		{"tokenizer.ggml.tokens", v.Tokens},
		{"tokenizer.ggml.token_type", v.Types},
		{"tokenizer.ggml.merges", v.Merges},
	}
	for _, k := range specialKeys {
		if id, ok := v.Special[k.kind]; ok && k.key != "" {
			kvs = append(kvs, KV{k.key, uint32(id)})
		}
	}
	for _, kind := range []string{"bos", "eos", "sep"} {
		if b, ok := v.Add[kind]; ok {
			kvs = append(kvs, KV{"tokenizer.ggml.add_" + kind + "_token", b})
		}
	}
	if len(v.Templates) > 0 {
		names := make([]string, 0, len(v.Templates))
		for name := range v.Templates {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			kvs = append(kvs, KV{"tokenizer.chat_template." + name, v.Templates[name]})
		}
		kvs = append(kvs, KV{"tokenizer.chat_templates", names})
	}
	if v.ChatTemplate != "" {
		kvs = append(kvs, KV{"tokenizer.chat_template", v.ChatTemplate})
	}
	return kvs
}

// check tells whether the vocabulary can be written.
func (v *BPEVocab) check() error {
	if len(v.Tokens) == 0 || len(v.Tokens) != len(v.Types) {
		return fmt.Errorf("gguf: BPE vocabulary of %d tokens and %d types", len(v.Tokens), len(v.Types))
	}
	if v.Pre == "" || len(v.Merges) == 0 {
		return errors.New("gguf: BPE vocabulary without its pre-tokenizer name or merges")
	}
	seen := make(map[string]struct{}, len(v.Tokens))
	for i, tok := range v.Tokens {
		if _, dup := seen[tok]; dup {
			return fmt.Errorf("gguf: BPE vocabulary: token %d %q is there twice (llama.cpp indexes tokens by text)", i, tok)
		}
		seen[tok] = struct{}{}
	}
	return nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("gguf: %s: %w", path, err)
	}
	return nil
}

func object(raw json.RawMessage) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	return m
}

// intField is m[key] where it is a JSON integer (a list, as some
// configurations give eos_token_id, is not).
func intField(m map[string]json.RawMessage, key string) (int, bool) {
	var n int
	if raw, ok := m[key]; !ok || json.Unmarshal(raw, &n) != nil {
		return 0, false
	}
	return n, true
}

func boolField(m map[string]json.RawMessage, key string) (bool, bool) {
	var b bool
	if raw, ok := m[key]; !ok || json.Unmarshal(raw, &b) != nil {
		return false, false
	}
	return b, true
}

// tokenContent is a tokenizer_config.json token: a string, or an object
// with its content.
func tokenContent(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, s != ""
	}
	var o struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(raw, &o) == nil && o.Content != nil {
		return *o.Content, true
	}
	return "", false
}

// truthy is Python's truth of a JSON value: not null, "", 0, false, [] or {}.
func truthy(raw json.RawMessage) bool {
	switch strings.TrimSpace(string(raw)) {
	case "", "null", `""`, "0", "false", "[]", "{}":
		return false
	}
	return true
}

func isString(raw json.RawMessage, s string) bool {
	var got string
	return json.Unmarshal(raw, &got) == nil && got == s
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
