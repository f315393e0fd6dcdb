package gguf

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// DefaultChatTemplate is a Jinja chat template for Llama.ChatTemplate, for
// servers that render tokenizer.chat_template (llama.cpp's): one
// "role: content" line per message, then "assistant:". It is not written
// by default because Ollama matches any template in the file against its
// own library and adds the closest one's stop words (ChatML's for this).
const DefaultChatTemplate = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}" +
	"{% if add_generation_prompt %}assistant:{% endif %}"

// Llama describes a tiny llama-architecture model with random weights:
// what a real inference server needs to load and run (metadata, an
// EnglishVocab tokenizer or a real model's BPEVocab, every tensor
// llama.cpp's llama graph reads, in F32), small enough to write in
// milliseconds and to decode fast on a CPU. With a real vocabulary the
// embedding and output matrices have a row per token (151,669 for
// Qwen3's: the file is about 45 MB at Embedding 32).
// Zero fields take the defaults in brackets. The weights are a function of
// Seed alone.
//
// Answers always run to their token limit: every token's embedding has a
// large constant first component, and the output rows of the control and
// byte tokens (of a BPEVocab: every token but the normal ones) weigh that
// component strongly negative, so </s> (and a stray byte) is never
// sampled. A test can then expect finish_reason "length"
// and exactly max_tokens completion tokens from any prompt.
type Llama struct {
	Name         string // general.name ["tiny"]
	Seed         uint64
	Layers       int    // block_count [2]
	Embedding    int    // embedding_length [64]
	FeedForward  int    // feed_forward_length [128]
	Heads        int    // attention.head_count [4]
	KVHeads      int    // attention.head_count_kv [2]
	Context      int    // context_length [4096]
	ChatTemplate string // tokenizer.chat_template [none; with BPE, BPE's]
	// BPE is the tokenizer [nil: EnglishVocab]: a Hugging Face byte-level
	// BPE vocabulary with its merges, special tokens and chat template,
	// as ReadBPEVocab reads it from a model's folder.
	BPE *BPEVocab
}

func (m Llama) withDefaults() Llama {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&m.Layers, 2)
	def(&m.Embedding, 64)
	def(&m.FeedForward, 128)
	def(&m.Heads, 4)
	def(&m.KVHeads, 2)
	def(&m.Context, 4096)
	if m.Name == "" {
		m.Name = "tiny"
	}
	return m
}

const (
	// lift is every embedding's first component; see Llama.
	lift = 4
	// sink weighs that component in the output rows of tokens never wanted.
	sink = -10
	// outScale is the spread of the other output weights: logits of a few
	// units, so sampling at temperature 1 varies without being uniform.
	outScale = 0.25
)

// File builds the model.
func (m Llama) File() (*File, error) {
	m = m.withDefaults()
	for _, v := range []int{m.Layers, m.Embedding, m.FeedForward, m.Heads, m.KVHeads, m.Context} {
		if v < 0 || v > math.MaxInt32 {
			return nil, fmt.Errorf("gguf: llama dimensions must be positive int32s: %+v", m)
		}
	}
	if m.Embedding%m.Heads != 0 || m.Heads%m.KVHeads != 0 || (m.Embedding/m.Heads)%2 != 0 {
		return nil, fmt.Errorf("gguf: llama: embedding %d, heads %d, kv heads %d: heads must divide the embedding into even head sizes and kv heads divide heads",
			m.Embedding, m.Heads, m.KVHeads)
	}
	types, tokenizer, err := m.tokenizerKVs()
	if err != nil {
		return nil, err
	}
	e, ff := m.Embedding, m.FeedForward
	headDim := e / m.Heads

	f := &File{KV: []KV{
		{"general.architecture", "llama"},
		{"general.name", m.Name},
		{AlignmentKey, uint32(DefaultAlignment)},
		{"general.file_type", uint32(0)}, // all F32
		{"llama.context_length", uint32(m.Context)},
		{"llama.embedding_length", uint32(e)},
		{"llama.block_count", uint32(m.Layers)},
		{"llama.feed_forward_length", uint32(ff)},
		{"llama.attention.head_count", uint32(m.Heads)},
		{"llama.attention.head_count_kv", uint32(m.KVHeads)},
		{"llama.rope.dimension_count", uint32(headDim)},
		{"llama.rope.freq_base", float32(10000)},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
	}}
	f.KV = append(f.KV, tokenizer...)
	if m.ChatTemplate != "" {
		f.KV = append(f.KV, KV{"tokenizer.chat_template", m.ChatTemplate})
	}
	m.addTensors(f, types)
	return f, nil
}

// tokenizerKVs is the model's token types and its tokenizer's keys: the
// BPE vocabulary given, else the built-in English one.
func (m Llama) tokenizerKVs() (types []int32, tokenizer []KV, err error) {
	if m.BPE != nil {
		if err := m.BPE.check(); err != nil {
			return nil, nil, err
		}
		types = m.BPE.Types
		tokenizer = m.BPE.KVs()
		if m.ChatTemplate != "" {
			tokenizer = slices.DeleteFunc(tokenizer, func(kv KV) bool { return kv.Key == "tokenizer.chat_template" })
		}
	} else {
		voc := EnglishVocab()
		types = voc.Types
		tokenizer = []KV{
			{"tokenizer.ggml.model", "llama"},
			{"tokenizer.ggml.tokens", voc.Tokens},
			{"tokenizer.ggml.scores", voc.Scores},
			{"tokenizer.ggml.token_type", voc.Types},
			{"tokenizer.ggml.bos_token_id", uint32(BOSID)},
			{"tokenizer.ggml.eos_token_id", uint32(EOSID)},
			{"tokenizer.ggml.unknown_token_id", uint32(UnknownID)},
			{"tokenizer.ggml.add_bos_token", true},
			{"tokenizer.ggml.add_eos_token", false},
		}
	}
	return types, tokenizer, nil
}

// addTensors adds the model's weights to f, drawn from m.Seed, for a
// vocabulary of the token types given.
func (m Llama) addTensors(f *File, types []int32) {
	nv, e, ff := len(types), m.Embedding, m.FeedForward
	kv := e / m.Heads * m.KVHeads
	rng := rand.New(rand.NewPCG(m.Seed, 0x746f6b656e6d696c)) // "tokenmil"
	// uniform draws n weights with mean 0 and standard deviation sd, from
	// the generator's raw bits, which math/rand/v2 keeps stable.
	uniform := func(n int, sd float64) []float32 {
		w := make([]float32, n)
		for i := range w {
			u := float64(int64(rng.Uint64()>>11)-(1<<52)) / (1 << 52) // [-1, 1)
			w[i] = float32(u * sd * math.Sqrt(3))
		}
		return w
	}
	ones := func(n int) []float32 {
		w := make([]float32, n)
		for i := range w {
			w[i] = 1
		}
		return w
	}
	add := func(name string, w []float32, shape ...uint64) {
		f.Tensors = append(f.Tensors, Tensor{Name: name, Type: F32, Shape: shape, Data: F32Data(w)})
	}
	// matrix is a projection from in to out features (ggml shape [in, out]),
	// scaled so that activations stay of order one through the layers.
	matrix := func(name string, in, out int) {
		add(name, uniform(in*out, 0.5/math.Sqrt(float64(in))), uint64(in), uint64(out))
	}

	embd := uniform(nv*e, 1)
	for t := range nv {
		embd[t*e] = lift
	}
	add("token_embd.weight", embd, uint64(e), uint64(nv))
	for i := range m.Layers {
		blk := fmt.Sprintf("blk.%d.", i)
		add(blk+"attn_norm.weight", ones(e), uint64(e))
		matrix(blk+"attn_q.weight", e, e)
		matrix(blk+"attn_k.weight", e, kv)
		matrix(blk+"attn_v.weight", e, kv)
		matrix(blk+"attn_output.weight", e, e)
		add(blk+"ffn_norm.weight", ones(e), uint64(e))
		matrix(blk+"ffn_gate.weight", e, ff)
		matrix(blk+"ffn_up.weight", e, ff)
		matrix(blk+"ffn_down.weight", ff, e)
	}
	add("output_norm.weight", ones(e), uint64(e))
	out := uniform(nv*e, outScale)
	for t := range nv {
		out[t*e] = 0
		if types[t] != TokenNormal {
			out[t*e] = sink
		}
	}
	add("output.weight", out, uint64(e), uint64(nv))
}
