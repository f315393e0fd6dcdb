package gguf

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

// hfFolder writes a model folder of the given files, each value marshalled
// to JSON unless it is a string.
func hfFolder(t *testing.T, files map[string]any) string {
	t.Helper()
	dir := t.TempDir()
	for name, v := range files {
		b, ok := v.(string)
		if !ok {
			raw, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			b = string(raw)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func added(id int, content string, special bool) map[string]any {
	return map[string]any{"id": id, "content": content, "special": special, "normalized": false,
		"lstrip": false, "rstrip": false, "single_word": false}
}

// tinyHF is a byte-level BPE folder with every case the converter tells
// apart: a hole in the ids, special, special-looking and plain added
// tokens, a SentencePiece space in an added token, merge pairs with a
// space, config.json padding the vocabulary, and named chat templates.
func tinyHF(t *testing.T) string {
	return hfFolder(t, map[string]any{
		"tokenizer.json": map[string]any{
			"added_tokens": []any{added(6, "<|end|>", true), added(7, "<think>", false),
				added(8, "<|fim|>", false), added(9, "\u2581x", false)},
			"post_processor": map[string]any{"type": "ByteLevel"},
			"model": map[string]any{"type": "BPE",
				"vocab":  map[string]int{"a": 0, "b": 1, "ab": 2, "\u0120": 3, "c": 5},
				"merges": [][]string{{"a", "b"}, {"a b", "c"}}},
		},
		"tokenizer_config.json": map[string]any{
			"eos_token": map[string]any{"content": "<|end|>"}, "pad_token": "<think>", "bos_token": nil,
			"add_bos_token": false,
			"chat_template": []any{map[string]any{"name": "default", "template": "D"},
				map[string]any{"name": "tool use", "template": "T"}},
		},
		"config.json": map[string]any{"vocab_size": 12, "bos_token_id": 0, "eos_token_id": 5},
	})
}

func TestReadBPEVocab(t *testing.T) {
	v, err := ReadBPEVocab(tinyHF(t), "qwen2")
	if err != nil {
		t.Fatal(err)
	}
	wantTokens := []string{"a", "b", "ab", "\u0120", "[PAD4]", "c", "<|end|>", "<think>", "<|fim|>", " x", "[PAD10]", "[PAD11]"}
	wantTypes := []int32{TokenNormal, TokenNormal, TokenNormal, TokenNormal, TokenUnused, TokenNormal,
		TokenControl, TokenUserDefined, TokenControl, TokenUserDefined, TokenUnused, TokenUnused}
	if !reflect.DeepEqual(v.Tokens, wantTokens) || !reflect.DeepEqual(v.Types, wantTypes) {
		t.Errorf("tokens %q types %v\nwant %q types %v", v.Tokens, v.Types, wantTokens, wantTypes)
	}
	if want := []string{"a b", "a\u0120b c"}; !reflect.DeepEqual(v.Merges, want) {
		t.Errorf("merges %q, want %q", v.Merges, want)
	}
	// eos and pad from tokenizer_config.json (among the added tokens);
	// bos from config.json, which does not override eos.
	if want := map[string]int{"eos": 6, "pad": 7, "bos": 0}; !reflect.DeepEqual(v.Special, want) {
		t.Errorf("special %v, want %v", v.Special, want)
	}
	if want := map[string]bool{"bos": false}; !reflect.DeepEqual(v.Add, want) {
		t.Errorf("add %v, want %v", v.Add, want)
	}
	if v.ChatTemplate != "D" || !reflect.DeepEqual(v.Templates, map[string]string{"tool_use": "T"}) {
		t.Errorf("templates %q %v", v.ChatTemplate, v.Templates)
	}

	f, err := Llama{BPE: v, Embedding: 8, Heads: 2, KVHeads: 1, FeedForward: 16, Layers: 1}.File()
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if f, err = Parse(b); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key  string
		want any
	}{
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", "qwen2"},
		{"tokenizer.ggml.tokens", wantTokens},
		{"tokenizer.ggml.token_type", wantTypes},
		{"tokenizer.ggml.merges", []string{"a b", "a\u0120b c"}},
		{"tokenizer.ggml.bos_token_id", uint32(0)},
		{"tokenizer.ggml.eos_token_id", uint32(6)},
		{"tokenizer.ggml.padding_token_id", uint32(7)},
		{"tokenizer.ggml.add_bos_token", false},
		{"tokenizer.chat_template", "D"},
		{"tokenizer.chat_template.tool_use", "T"},
		{"tokenizer.chat_templates", []string{"tool_use"}},
	} {
		got, ok := f.Get(tc.key)
		if !ok {
			t.Errorf("%s missing", tc.key)
			continue
		}
		if fmt.Sprintf("%T %q", got, got) != fmt.Sprintf("%T %q", tc.want, tc.want) {
			t.Errorf("%s = %T %q, want %T %q", tc.key, got, got, tc.want, tc.want)
		}
	}
	for _, key := range []string{"tokenizer.ggml.scores", "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.add_eos_token"} {
		if _, ok := f.Get(key); ok {
			t.Errorf("%s written; the converter writes none for this folder", key)
		}
	}
	for _, tn := range f.Tensors {
		if tn.Name != "token_embd.weight" && tn.Name != "output.weight" {
			continue
		}
		if want := []uint64{8, 12}; !reflect.DeepEqual(tn.Shape, want) {
			t.Errorf("%s shape %v, want %v", tn.Name, tn.Shape, want)
		}
		if tn.Name == "output.weight" { // the sink on every token but the normal ones
			for tok := range 12 {
				first := F32Data([]float32{0})
				if wantTypes[tok] != TokenNormal {
					first = F32Data([]float32{sink})
				}
				if got := tn.Data[tok*8*4 : tok*8*4+4]; string(got) != string(first) {
					t.Errorf("output row %d (type %d) starts % x, want % x", tok, wantTypes[tok], got, first)
				}
			}
		}
	}

	// An explicit ChatTemplate replaces the folder's.
	g, err := Llama{BPE: v, ChatTemplate: DefaultChatTemplate}.File()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, kv := range g.KV {
		if kv.Key == "tokenizer.chat_template" {
			n++
			if kv.Value != DefaultChatTemplate {
				t.Errorf("chat template %q", kv.Value)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d chat templates written", n)
	}
}

// TestReadBPEVocabPostProcessor checks what tokenizer.json's post
// processor sets: a template that opens with bos adds it; one that closes
// with a token other than the configuration's eos makes that token the
// eos and the old eos the eot.
func TestReadBPEVocabPostProcessor(t *testing.T) {
	tok := map[string]any{
		"added_tokens": []any{added(3, "<s>", true), added(4, "</s>", true), added(5, "<|eot|>", true)},
		"post_processor": map[string]any{"type": "Sequence", "processors": []any{
			map[string]any{"type": "ByteLevel"},
			map[string]any{"type": "TemplateProcessing", "single": []any{
				map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}},
				map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
				map[string]any{"SpecialToken": map[string]any{"id": "</s>", "type_id": 0}},
			}},
		}},
		"model": map[string]any{"type": "BPE", "vocab": map[string]int{"a": 0, "b": 1, "ab": 2}, "merges": []string{"a b"}},
	}
	v, err := ReadBPEVocab(hfFolder(t, map[string]any{"tokenizer.json": tok,
		"tokenizer_config.json": map[string]any{"bos_token": "<s>", "eos_token": "<|eot|>"}}), "llama3")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"bos": 3, "eos": 4, "eot": 5}; !reflect.DeepEqual(v.Special, want) {
		t.Errorf("special %v, want %v", v.Special, want)
	}
	if want := map[string]bool{"bos": true, "eos": true}; !reflect.DeepEqual(v.Add, want) {
		t.Errorf("add %v, want %v", v.Add, want)
	}
	kvs := fmt.Sprint(v.KVs())
	if !strings.Contains(kvs, "{tokenizer.ggml.eot_token_id 5}") {
		t.Errorf("no eot id in %s", kvs)
	}

	// Without tokenizer_config.json: the flags only, no ids, no template.
	v, err = ReadBPEVocab(hfFolder(t, map[string]any{"tokenizer.json": tok, "chat_template.jinja": "J"}), "llama3")
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Special) != 0 || v.ChatTemplate != "" || !reflect.DeepEqual(v.Add, map[string]bool{"bos": true, "eos": true}) {
		t.Errorf("without a configuration: special %v add %v template %q", v.Special, v.Add, v.ChatTemplate)
	}
	// chat_template.jinja where the configuration has none.
	v, err = ReadBPEVocab(hfFolder(t, map[string]any{"tokenizer.json": tok, "chat_template.jinja": "J",
		"tokenizer_config.json": map[string]any{"eos_token": "</s>"}}), "llama3")
	if err != nil {
		t.Fatal(err)
	}
	if v.ChatTemplate != "J" {
		t.Errorf("template %q, want chat_template.jinja's", v.ChatTemplate)
	}
}

func TestReadBPEVocabRefuses(t *testing.T) {
	bpe := map[string]any{"model": map[string]any{"type": "BPE", "vocab": map[string]int{"a": 0, "b": 1}, "merges": []string{"a b"}}}
	for name, tc := range map[string]struct {
		files map[string]any
		pre   string
		want  string
	}{
		"no pre-tokenizer": {map[string]any{"tokenizer.json": bpe}, "", "pre-tokenizer"},
		"not BPE":          {map[string]any{"tokenizer.json": map[string]any{"model": map[string]any{"type": "WordPiece"}}}, "qwen2", "WordPiece"},
		"no merges":        {map[string]any{"tokenizer.json": map[string]any{"model": map[string]any{"type": "BPE", "vocab": map[string]int{"a": 0}}}}, "qwen2", "merges"},
		"no tokenizer":     {map[string]any{"tokenizer_config.json": map[string]any{}}, "qwen2", "tokenizer.json"},
		"vocab too small":  {map[string]any{"tokenizer.json": bpe, "config.json": map[string]any{"vocab_size": 1}}, "qwen2", "outside"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ReadBPEVocab(hfFolder(t, tc.files), tc.pre)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %q", err, tc.want)
			}
		})
	}
	dup := &BPEVocab{Pre: "qwen2", Tokens: []string{"a", "a"}, Types: []int32{1, 1}, Merges: []string{"a a"}}
	if _, err := (Llama{BPE: dup}).File(); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("a vocabulary with a token twice: err %v", err)
	}
}

// TestReadBPEVocabQwen3 reads the real Qwen3 folder and checks it against
// what llama.cpp's converter writes for Qwen3 (its GGUFs on the Hub): no
// holes, the 26 added tokens typed by their special flag or their look,
// eos <|im_end|>, pad <|endoftext|>, no bos, add_bos_token false.
func TestReadBPEVocabQwen3(t *testing.T) {
	dir := testbin.Tokenizers(t, "qwen3")
	v, err := ReadBPEVocab(dir, "qwen2")
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Tokens) != 151669 || len(v.Merges) != 151387 {
		t.Fatalf("%d tokens and %d merges, want 151669 and 151387", len(v.Tokens), len(v.Merges))
	}
	for id, want := range map[int]string{0: "!", 220: "\u0120", 151643: "<|endoftext|>", 151644: "<|im_start|>",
		151657: "<tool_call>", 151659: "<|fim_prefix|>", 151667: "<think>", 151668: "</think>"} {
		if v.Tokens[id] != want {
			t.Errorf("token %d %q, want %q", id, v.Tokens[id], want)
		}
	}
	count := map[int32]int{}
	for id, typ := range v.Types {
		count[typ]++
		want := TokenNormal
		switch {
		case id >= 151643 && id <= 151656, id >= 151659 && id <= 151664: // special, or <|fim_...|> looking so
			want = TokenControl
		case id >= 151657:
			want = TokenUserDefined // <tool_call> </tool_call> <tool_response> </tool_response> <think> </think>
		}
		if typ != want {
			t.Errorf("token %d %q: type %d, want %d", id, v.Tokens[id], typ, want)
		}
	}
	if count[TokenControl] != 20 || count[TokenUserDefined] != 6 {
		t.Errorf("types %v, want 20 control and 6 user-defined", count)
	}
	if v.Merges[0] != "\u0120 \u0120" {
		t.Errorf("first merge %q", v.Merges[0])
	}
	if want := map[string]int{"eos": 151645, "pad": 151643}; !reflect.DeepEqual(v.Special, want) {
		t.Errorf("special %v, want %v", v.Special, want)
	}
	if want := map[string]bool{"bos": false}; !reflect.DeepEqual(v.Add, want) {
		t.Errorf("add %v, want %v", v.Add, want)
	}
	var cfg struct {
		ChatTemplate string `json:"chat_template"`
	}
	if err := readJSON(filepath.Join(dir, "tokenizer_config.json"), &cfg); err != nil {
		t.Fatal(err)
	}
	if v.ChatTemplate == "" || v.ChatTemplate != cfg.ChatTemplate {
		t.Errorf("chat template of %d bytes, want tokenizer_config.json's %d", len(v.ChatTemplate), len(cfg.ChatTemplate))
	}
}
