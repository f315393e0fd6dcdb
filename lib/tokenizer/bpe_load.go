package tokenizer

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/segmentio/encoding/json"
	"golang.org/x/text/unicode/norm"
)

// tokenizerFile is the part of tokenizer.json that encoding depends on.
type tokenizerFile struct {
	Version      string           `json:"version"`
	Truncation   json.RawMessage  `json:"truncation"`
	Padding      json.RawMessage  `json:"padding"`
	AddedTokens  []*bpeAddedToken `json:"added_tokens"`
	Normalizer   json.RawMessage  `json:"normalizer"`
	PreTokenizer json.RawMessage  `json:"pre_tokenizer"`
	Decoder      json.RawMessage  `json:"decoder"`
	Model        modelFile        `json:"model"`
}

type modelFile struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 *bool           `json:"fuse_unk"`
	ByteFallback            *bool           `json:"byte_fallback"`
	IgnoreMerges            *bool           `json:"ignore_merges"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

// component is a normalizer, pre-tokenizer or decoder node.
type component struct {
	Type             string            `json:"type"`
	Normalizers      []json.RawMessage `json:"normalizers"`
	Pretokenizers    []json.RawMessage `json:"pretokenizers"`
	Pattern          *patternFile      `json:"pattern"`
	Content          string            `json:"content"`
	Prepend          string            `json:"prepend"`
	Behavior         string            `json:"behavior"`
	Invert           bool              `json:"invert"`
	AddPrefixSpace   *bool             `json:"add_prefix_space"`
	UseRegex         *bool             `json:"use_regex"`
	IndividualDigits bool              `json:"individual_digits"`
}

type patternFile struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

func isNull(m json.RawMessage) bool {
	m = bytes.TrimSpace(m)
	return len(m) == 0 || string(m) == "null"
}

func errUnsupported(kind, name string) error {
	return fmt.Errorf("tokenizer: %s %q is not supported", kind, name)
}

// NewBPE loads a tokenizer.json. A component outside what this package
// reproduces exactly is an error naming it.
func NewBPE(tokenizerJSON []byte) (*BPE, error) {
	loadUCD()
	var f tokenizerFile
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		return nil, fmt.Errorf("tokenizer: reading tokenizer.json: %w", err)
	}
	if f.Version != "" && f.Version != "1.0" {
		return nil, fmt.Errorf("tokenizer: tokenizer.json version %q is not supported", f.Version)
	}
	if !isNull(f.Truncation) {
		return nil, errors.New("tokenizer: truncation is not supported")
	}
	if !isNull(f.Padding) {
		return nil, errors.New("tokenizer: padding is not supported")
	}
	b := &BPE{}
	var err error
	if b.norm, err = loadNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if b.pre, err = loadPreTokenizers(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if err := b.loadModel(&f.Model); err != nil {
		return nil, err
	}
	b.loadAdded(f.AddedTokens, len(f.Model.Vocab))
	return b, nil
}

func loadNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("tokenizer: reading normalizer: %w", err)
	}
	switch c.Type {
	case "NFC":
		return unicodeNormalizer{norm.NFC, norm.NFD, true}, nil
	case "NFD":
		return unicodeNormalizer{norm.NFD, norm.NFD, false}, nil
	case "NFKC":
		return unicodeNormalizer{norm.NFKC, norm.NFKD, true}, nil
	case "NFKD":
		return unicodeNormalizer{norm.NFKD, norm.NFKD, false}, nil
	case "Lowercase":
		return lowercaseNormalizer{}, nil
	case "Prepend":
		return prependNormalizer(c.Prepend), nil
	case "Replace":
		return loadReplace(&c)
	case "Sequence":
		var seq seqNormalizer
		for _, sub := range c.Normalizers {
			n, err := loadNormalizer(sub)
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		if len(seq) == 0 {
			return nil, nil
		}
		return seq, nil
	}
	return nil, errUnsupported("normalizer", c.Type)
}

func loadReplace(c *component) (normalizer, error) {
	switch {
	case c.Pattern == nil:
		return nil, errors.New("tokenizer: Replace normalizer without a pattern")
	case c.Pattern.String != nil && *c.Pattern.String != "":
		return &replaceNormalizer{literal: *c.Pattern.String, content: c.Content}, nil
	case c.Pattern.Regex != nil:
		re, err := compileRegex(*c.Pattern.Regex)
		if err != nil {
			return nil, err
		}
		return &replaceNormalizer{re: re, content: c.Content}, nil
	}
	return nil, errors.New("tokenizer: Replace normalizer with an empty pattern is not supported")
}

// loadPreTokenizers flattens the pre-tokenizer into stages and checks that
// ByteLevel is the last.
func loadPreTokenizers(raw json.RawMessage) ([]preTokenizer, error) {
	var stages []preTokenizer
	if err := appendPreTokenizer(raw, &stages); err != nil {
		return nil, err
	}
	for i, s := range stages {
		if _, ok := s.(*byteLevelPre); ok && i != len(stages)-1 {
			return nil, errors.New("tokenizer: pre_tokenizer ByteLevel before other pre-tokenizers is not supported")
		}
	}
	if len(stages) == 0 {
		return nil, errors.New("tokenizer: a pre_tokenizer without ByteLevel is not supported (not a byte-level BPE)")
	}
	if _, ok := stages[len(stages)-1].(*byteLevelPre); !ok {
		return nil, errors.New("tokenizer: a pre_tokenizer without ByteLevel is not supported (not a byte-level BPE)")
	}
	return stages, nil
}

func appendPreTokenizer(raw json.RawMessage, stages *[]preTokenizer) error {
	if isNull(raw) {
		return nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("tokenizer: reading pre_tokenizer: %w", err)
	}
	var p preTokenizer
	switch c.Type {
	case "Sequence":
		for _, sub := range c.Pretokenizers {
			if err := appendPreTokenizer(sub, stages); err != nil {
				return err
			}
		}
		return nil
	case "Split":
		sp, err := loadSplit(&c)
		if err != nil {
			return err
		}
		p = sp
	case "ByteLevel":
		bl := &byteLevelPre{addPrefixSpace: c.AddPrefixSpace == nil || *c.AddPrefixSpace}
		if c.UseRegex == nil || *c.UseRegex {
			bl.re = mustCompile(gpt2Pattern)
		}
		p = bl
	case "Digits":
		b := behaviorContiguous
		if c.IndividualDigits {
			b = behaviorIsolated
		}
		p = &splitPre{find: runeFinder(isNumber), behavior: b}
	case "WhitespaceSplit":
		p = &splitPre{find: runeFinder(isSpace), behavior: behaviorRemoved}
	case "Punctuation":
		b, ok := behaviors[c.Behavior]
		if c.Behavior == "" {
			b, ok = behaviorIsolated, true
		}
		if !ok {
			return errUnsupported("Punctuation behavior", c.Behavior)
		}
		p = &splitPre{find: runeFinder(isPunctuation), behavior: b}
	default:
		return errUnsupported("pre_tokenizer", c.Type)
	}
	*stages = append(*stages, p)
	return nil
}

func loadSplit(c *component) (*splitPre, error) {
	b, ok := behaviors[c.Behavior]
	if !ok {
		return nil, errUnsupported("Split behavior", c.Behavior)
	}
	var src string
	switch {
	case c.Pattern == nil:
		return nil, errors.New("tokenizer: Split pre-tokenizer without a pattern")
	case c.Pattern.Regex != nil:
		src = *c.Pattern.Regex
	case c.Pattern.String != nil:
		src = quoteMeta(*c.Pattern.String)
	}
	re, err := compileRegex(src)
	if err != nil {
		return nil, err
	}
	return &splitPre{find: re, behavior: b, invert: c.Invert}, nil
}

// quoteMeta escapes a literal for the regex parser.
func quoteMeta(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 0x80 && strings.ContainsRune(`\.+*?()|[]{}^$#&-~ `, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func mustCompile(src string) *regex {
	re, err := compileRegex(src)
	if err != nil {
		panic(err)
	}
	return re
}

func checkDecoder(raw json.RawMessage) error {
	if isNull(raw) {
		return errors.New("tokenizer: a tokenizer without a decoder is not supported (not a byte-level BPE)")
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("tokenizer: reading decoder: %w", err)
	}
	if c.Type != "ByteLevel" {
		return errUnsupported("decoder", c.Type)
	}
	return nil
}
