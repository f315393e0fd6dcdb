package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzEncodeDecode checks, on both real tokenizers, that every id is in
// range, that decoding gives back the normalized input, and that the fast
// paths (the word cache, the quadratic merge loop for short words) agree
// with the general path (no cache, the heap merge for every word).
func FuzzEncodeDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2)) // deterministic seeds
	for _, name := range bpeTokenizers {
		cases := readBPEGolden(f, name)
		for range 100 {
			s := cases[rng.IntN(len(cases))].Rendered
			a := rng.IntN(len(s) + 1)
			f.Add(s[a:min(len(s), a+rng.IntN(400))])
		}
	}
	for _, s := range []string{"", "<|im_end|>", "<|im_end|", "<<|im_end|>>", "<think></think>", "<｜User｜>hi<｜Assistant｜>",
		"it's 'S 'ſ 'LL", "  \u00a0\u3000\u2028\u0085\ufeff\u200b", "e\u0301\u0323 \u1100\u1161\u11a8", "123456789 ١٢٣ ²³",
		"中文測試 ひらがな カタカナ", "👍🏽 ❤️ 🇺🇸", strings.Repeat(" ", 200) + "x", "a\xffb\xe4\xb8"} {
		f.Add(s)
	}
	toks := []*BPE{loadTestBPE(f, "qwen3"), loadTestBPE(f, "deepseek_v3")}
	f.Fuzz(func(t *testing.T, s string) {
		for _, b := range toks {
			ids := b.Encode(s)
			for _, id := range ids {
				if id < 0 || id >= b.VocabSize() {
					t.Fatalf("Encode(%q): id %d out of range", s, id)
				}
			}
			if want := bpeGeneralEncode(b, s); !slices.Equal(ids, want) {
				t.Fatalf("Encode(%q) = %v, general path %v", s, ids, want)
			}
			if !utf8.ValidString(s) {
				continue
			}
			if got, want := b.Decode(ids), bpeNormalized(b, s); got != want {
				t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
			}
		}
	})
}

// bpeNormalized is s as the tokenizer sees it: added tokens kept, the rest
// normalized (NFC for Qwen3).
func bpeNormalized(b *BPE, s string) string {
	var sb strings.Builder
	for _, sg := range b.rawAdded.split(s, nil) {
		piece := s[sg.start:sg.end]
		if sg.id < 0 && b.norm != nil {
			piece = b.norm.normalize(piece)
		}
		sb.WriteString(piece)
	}
	return sb.String()
}

// bpeGeneralEncode is Encode without the fast paths.
func bpeGeneralEncode(b *BPE, text string) []int {
	text = validUTF8(text)
	st := new(encodeState)
	var out []int
	for _, sg := range b.rawAdded.split(text, nil) {
		if sg.id >= 0 {
			out = append(out, sg.id)
			continue
		}
		piece := text[sg.start:sg.end]
		if b.norm != nil {
			piece = b.norm.normalize(piece)
		}
		for _, s2 := range b.normAdded.split(piece, nil) {
			if s2.id >= 0 {
				out = append(out, s2.id)
				continue
			}
			for _, w := range b.preTokenize(piece[s2.start:s2.end], nil, st) {
				syms := b.model.symbols(w, nil)
				if len(syms) > 1 {
					syms = b.model.mergeLong(syms, st)
				}
				for _, id := range syms {
					out = append(out, int(id))
				}
			}
		}
	}
	return out
}
