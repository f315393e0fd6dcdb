package gguf

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
)

func tinyBytes(t *testing.T, m Llama) []byte {
	t.Helper()
	f, err := m.File()
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLlamaMetadata checks the keys llama.cpp and Ollama read, with the
// exact GGUF types they insist on (Ollama panics on a uint64 block_count).
func TestLlamaMetadata(t *testing.T) {
	f, err := Parse(tinyBytes(t, Llama{Seed: 1}))
	if err != nil {
		t.Fatal(err)
	}
	voc := EnglishVocab()
	for _, tc := range []struct {
		key  string
		want any
	}{
		{"general.architecture", "llama"},
		{"general.name", "tiny"},
		{AlignmentKey, uint32(32)},
		{"general.file_type", uint32(0)},
		{"llama.context_length", uint32(4096)},
		{"llama.embedding_length", uint32(64)},
		{"llama.block_count", uint32(2)},
		{"llama.feed_forward_length", uint32(128)},
		{"llama.attention.head_count", uint32(4)},
		{"llama.attention.head_count_kv", uint32(2)},
		{"llama.rope.dimension_count", uint32(16)},
		{"llama.rope.freq_base", float32(10000)},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.bos_token_id", uint32(1)},
		{"tokenizer.ggml.eos_token_id", uint32(2)},
		{"tokenizer.ggml.unknown_token_id", uint32(0)},
		{"tokenizer.ggml.add_bos_token", true},
		{"tokenizer.ggml.add_eos_token", false},
		{"tokenizer.ggml.tokens", voc.Tokens},
		{"tokenizer.ggml.scores", voc.Scores},
		{"tokenizer.ggml.token_type", voc.Types},
	} {
		got, ok := f.Get(tc.key)
		if !ok {
			t.Errorf("%s missing", tc.key)
			continue
		}
		if fmt.Sprintf("%T %v", got, got) != fmt.Sprintf("%T %v", tc.want, tc.want) {
			t.Errorf("%s = %T %v, want %T %v", tc.key, got, got, tc.want, tc.want)
		}
	}
	if _, ok := f.Get("tokenizer.chat_template"); ok {
		t.Error("a chat template is written by default")
	}
	g, err := Llama{ChatTemplate: DefaultChatTemplate}.File()
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := g.Get("tokenizer.chat_template"); v != DefaultChatTemplate {
		t.Errorf("chat template %q", v)
	}
}

// TestLlamaTensors checks every tensor llama.cpp's llama loader creates,
// with the shapes it asks for (ggml order: input features first).
func TestLlamaTensors(t *testing.T) {
	m := Llama{Layers: 3, Embedding: 32, FeedForward: 48, Heads: 4, KVHeads: 1}
	f, err := m.File()
	if err != nil {
		t.Fatal(err)
	}
	nv := uint64(len(EnglishVocab().Tokens))
	want := []string{"token_embd.weight [32 " + fmt.Sprint(nv) + "]"}
	for i := range 3 {
		for _, s := range []string{"attn_norm.weight [32]", "attn_q.weight [32 32]", "attn_k.weight [32 8]", "attn_v.weight [32 8]",
			"attn_output.weight [32 32]", "ffn_norm.weight [32]", "ffn_gate.weight [32 48]", "ffn_up.weight [32 48]", "ffn_down.weight [48 32]"} {
			want = append(want, fmt.Sprintf("blk.%d.%s", i, s))
		}
	}
	want = append(want, "output_norm.weight [32]", fmt.Sprintf("output.weight [32 %d]", nv))
	var got []string
	for _, tn := range f.Tensors {
		if tn.Type != F32 {
			t.Errorf("%s is %s", tn.Name, tn.Type)
		}
		got = append(got, fmt.Sprintf("%s %v", tn.Name, tn.Shape))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("tensors\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestLlamaNeverEnds checks the weights that keep </s> and byte tokens from
// being sampled: a constant first embedding component, which the output
// rows of those tokens weigh far below every other token's.
func TestLlamaNeverEnds(t *testing.T) {
	f, err := Llama{Seed: 3}.File()
	if err != nil {
		t.Fatal(err)
	}
	voc := EnglishVocab()
	e := 64
	col := func(name string) []float32 {
		for _, tn := range f.Tensors {
			if tn.Name == name {
				v := make([]float32, len(tn.Data)/4)
				for i := range v {
					v[i] = math.Float32frombits(le.Uint32(tn.Data[4*i:]))
				}
				return v
			}
		}
		t.Fatalf("no tensor %s", name)
		return nil
	}
	embd, out := col("token_embd.weight"), col("output.weight")
	for tok := range voc.Tokens {
		if embd[tok*e] != lift {
			t.Fatalf("token %d: embedding[0] = %v", tok, embd[tok*e])
		}
		want := float32(0)
		if voc.Types[tok] != TokenNormal {
			want = sink
		}
		if out[tok*e] != want {
			t.Fatalf("token %d %q: output[0] = %v, want %v", tok, voc.Tokens[tok], out[tok*e], want)
		}
		for _, w := range out[tok*e+1 : (tok+1)*e] {
			if math.Abs(float64(w)) > outScale*math.Sqrt(3) {
				t.Fatalf("token %d: output weight %v beyond the uniform range", tok, w)
			}
		}
	}
}

func TestLlamaSeed(t *testing.T) {
	a, b := tinyBytes(t, Llama{Seed: 5}), tinyBytes(t, Llama{Seed: 5})
	if !bytes.Equal(a, b) {
		t.Fatal("the same seed wrote different files")
	}
	c := tinyBytes(t, Llama{Seed: 6})
	if len(c) != len(a) || bytes.Equal(a, c) {
		t.Fatalf("seeds 5 and 6: %d and %d bytes, equal %v", len(a), len(c), bytes.Equal(a, c))
	}
	fa, _ := Parse(a)
	fc, _ := Parse(c)
	for i := range fa.Tensors {
		same := bytes.Equal(fa.Tensors[i].Data, fc.Tensors[i].Data)
		if isNorm := strings.HasSuffix(fa.Tensors[i].Name, "norm.weight"); same != isNorm {
			t.Errorf("%s: same data under another seed: %v", fa.Tensors[i].Name, same)
		}
	}
}

func TestLlamaRefuses(t *testing.T) {
	for _, m := range []Llama{
		{Embedding: 60, Heads: 8},     // 60/8 is not whole
		{Heads: 4, KVHeads: 3},        // 3 does not divide 4
		{Embedding: 12, Heads: 4},     // head size 3 is odd (RoPE rotates pairs)
		{Layers: -1},                  // negative
		{Context: math.MaxInt32 + 1},  // beyond a uint32
		{Heads: 2, KVHeads: 4},        // more kv heads than heads
		{Embedding: 64, Heads: 128},   // head size 0
		{FeedForward: -5, Layers: 10}, // negative
	} {
		if _, err := m.File(); err == nil {
			t.Errorf("%+v: accepted", m)
		}
	}
}

// TestVocab checks the tokenizer's layout and that each word piece can be
// reached by SentencePiece's merges: every shorter prefix is a piece too.
func TestVocab(t *testing.T) {
	v := EnglishVocab()
	if len(v.Tokens) != len(v.Scores) || len(v.Tokens) != len(v.Types) {
		t.Fatalf("lengths %d %d %d", len(v.Tokens), len(v.Scores), len(v.Types))
	}
	if v.Tokens[UnknownID] != "<unk>" || v.Tokens[BOSID] != "<s>" || v.Tokens[EOSID] != "</s>" ||
		v.Types[UnknownID] != TokenUnknown || v.Types[BOSID] != TokenControl || v.Types[EOSID] != TokenControl {
		t.Fatalf("special tokens %q %v", v.Tokens[:3], v.Types[:3])
	}
	for b := range 256 {
		if tok := v.Tokens[3+b]; tok != fmt.Sprintf("<0x%02X>", b) || v.Types[3+b] != TokenByte {
			t.Fatalf("byte %d is %q type %d", b, tok, v.Types[3+b])
		}
	}
	if v.Tokens[3+'\n'] != "<0x0A>" {
		t.Fatal("the newline byte is not at 13")
	}
	index := map[string]int{}
	for i, tok := range v.Tokens {
		if _, dup := index[tok]; dup {
			t.Fatalf("%q twice", tok)
		}
		index[tok] = i
	}
	pieces := len(v.Tokens) - 259
	if pieces < 300 {
		t.Fatalf("%d pieces, want a few hundred", pieces)
	}
	for i := 259; i < len(v.Tokens); i++ {
		if v.Types[i] != TokenNormal || (i > 259 && v.Scores[i] >= v.Scores[i-1]) {
			t.Fatalf("piece %d %q: type %d score %v after %v", i, v.Tokens[i], v.Types[i], v.Scores[i], v.Scores[i-1])
		}
	}
	for _, w := range words {
		for n := 1; n <= len(w); n++ {
			if _, ok := index[space+w[:n]]; !ok {
				t.Fatalf("word %q: prefix %q is not a piece", w, w[:n])
			}
		}
	}
	for _, c := range chars {
		if _, ok := index[string(c)]; !ok {
			t.Fatalf("character %q is not a piece", c)
		}
	}
}
