package tokenizer

import (
	"sync"
	"unicode/utf8"
)

// BPE is a loaded tokenizer.json: vocabulary, merges, added tokens,
// normalizer, pre-tokenizer, decoder. It is safe for concurrent use; its
// word cache is shared, lock-free and bounded.
type BPE struct {
	model     bpeModel
	norm      normalizer     // nil: none
	pre       []preTokenizer // the stages, ByteLevel last
	rawAdded  *addedSet      // added tokens matched before normalization
	normAdded *addedSet      // added tokens matched in normalized text
	// rawPlain and normPlain are the same less the special tokens, whose
	// texts EncodePlain tokenizes as text.
	rawPlain, normPlain *addedSet

	decode  []string       // per id: the bytes Decode uses (ByteLevel decoder rule)
	text    []string       // per id: TokenText
	known   []bool         // per id: some token has it
	special []bool         // per id: an added token marked special
	added   map[string]int // added token content -> id
	odd     map[string]int // vocabulary entries outside the byte alphabet
}

// encodeState is the scratch space of one Encode call.
type encodeState struct {
	segs, segs2 []segment
	spans       []span
	words       []string
	syms        []int32
	ranks       []uint64
}

var statePool = sync.Pool{New: func() any { return new(encodeState) }}

func putState(st *encodeState) {
	if cap(st.words) > 1<<16 || cap(st.spans) > 1<<16 || cap(st.syms) > 1<<16 {
		return // do not keep the buffers of a huge input alive
	}
	statePool.Put(st)
}

// Encode tokenizes text as Hugging Face tokenizers' encode(text,
// add_special_tokens=False) does: added tokens (special or not) are
// matched first, the rest is normalized, pre-tokenized and merged. Invalid
// UTF-8 is first replaced as String::from_utf8_lossy would.
func (b *BPE) Encode(text string) []int {
	return b.AppendEncode(make([]int, 0, len(text)/3+1), text)
}

// AppendEncode is Encode appending to dst.
func (b *BPE) AppendEncode(dst []int, text string) []int {
	return b.appendEncode(dst, text, b.rawAdded, b.normAdded)
}

// EncodePlain is Encode with the special tokens' texts tokenized as text
// (Hugging Face's split_special_tokens=True, llama.cpp's /tokenize with
// parse_special false): a user who typed <|im_end|> gets its pieces, not
// the control token. Added tokens that are not special still match.
func (b *BPE) EncodePlain(text string) []int {
	return b.appendEncode(make([]int, 0, len(text)/3+1), text, b.rawPlain, b.normPlain)
}

func (b *BPE) appendEncode(dst []int, text string, rawAdded, normAdded *addedSet) []int {
	text = validUTF8(text)
	st := statePool.Get().(*encodeState)
	defer putState(st)
	st.segs = rawAdded.split(text, st.segs[:0])
	for _, sg := range st.segs {
		if sg.id >= 0 {
			dst = append(dst, sg.id)
			continue
		}
		piece := text[sg.start:sg.end]
		if piece == "" {
			continue
		}
		if b.norm != nil {
			piece = b.norm.normalize(piece)
		}
		st.segs2 = normAdded.split(piece, st.segs2[:0])
		for _, s2 := range st.segs2 {
			if s2.id >= 0 {
				dst = append(dst, s2.id)
			} else if s2.end > s2.start {
				dst = b.encodeText(dst, piece[s2.start:s2.end], st)
			}
		}
	}
	return dst
}

// encodeText pre-tokenizes normalized text and merges each word.
func (b *BPE) encodeText(dst []int, s string, st *encodeState) []int {
	st.words = b.preTokenize(s, st.words[:0], st)
	for _, w := range st.words {
		dst = b.model.appendWord(dst, w, st)
	}
	return dst
}

// Decode is Hugging Face's decode(ids, skip_special_tokens=False) with the
// ByteLevel decoder: the tokens' bytes, with invalid UTF-8 replaced by
// U+FFFD as String::from_utf8_lossy does. Unknown ids are skipped.
func (b *BPE) Decode(ids []int) string {
	buf := make([]byte, 0, len(ids)*4)
	for _, id := range ids {
		if id >= 0 && id < len(b.decode) {
			buf = append(buf, b.decode[id]...)
		}
	}
	if utf8.Valid(buf) {
		return string(buf)
	}
	return string(appendLossy(make([]byte, 0, len(buf)+8), buf))
}

// DecodeBytes is the raw bytes the ids stand for (an added token as its
// content). Unknown ids are skipped.
func (b *BPE) DecodeBytes(ids []int) []byte {
	buf := make([]byte, 0, len(ids)*4)
	for _, id := range ids {
		if id >= 0 && id < len(b.text) {
			buf = append(buf, b.text[id]...)
		}
	}
	return buf
}

// TokenID is the id of an added token (by its content) or of a vocabulary
// entry (by its byte-level spelling, as in tokenizer.json).
func (b *BPE) TokenID(content string) (int, bool) {
	if id, ok := b.added[content]; ok {
		return id, true
	}
	if raw, ok := byteLevelDecode(content); ok {
		if id, ok := b.model.vocab[raw]; ok {
			return int(id), true
		}
	}
	id, ok := b.odd[content]
	return id, ok
}

// TokenText is the inverse of TokenID in decoded form: an added token's
// content, or a vocabulary entry's bytes as a string.
func (b *BPE) TokenText(id int) (string, bool) {
	if id < 0 || id >= len(b.known) || !b.known[id] {
		return "", false
	}
	return b.text[id], true
}

// Special reports whether id is an added token marked "special": true.
func (b *BPE) Special(id int) bool {
	return id >= 0 && id < len(b.special) && b.special[id]
}

// VocabSize is the number of ids: the highest id of the vocabulary and
// the added tokens, plus one.
func (b *BPE) VocabSize() int { return len(b.known) }
