// Package tokenizer renders chat templates and tokenizes text exactly as a
// model's Hugging Face tokenizer does, in pure Go, from the model's own
// files (tokenizer.json, tokenizer_config.json).
//
// BPE is a byte-level BPE tokenizer loaded from a tokenizer.json: it
// encodes and decodes as Hugging Face's Rust tokenizers crate does, id for
// id, including the pieces that are easy to get subtly wrong: added tokens
// matched before normalization (leftmost-longest, with lstrip, rstrip and
// single_word), Unicode normalizers, Split pre-tokenizers whose regular
// expressions follow Oniguruma (Perl-style leftmost-first alternation,
// look-ahead, Unicode 16 general categories), and the merge order of BPE.
// A tokenizer.json that uses a component outside that set is refused by
// NewBPE with an error naming the component, never tokenized approximately.
package tokenizer
