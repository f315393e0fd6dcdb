package tokenizer

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/segmentio/encoding/json"
)

// loadModel checks the BPE model's options and builds the raw-byte
// vocabulary, the merge table and the per-id tables.
func (b *BPE) loadModel(mf *modelFile) error {
	if mf.Type != "BPE" && mf.Type != "" {
		return errUnsupported("model", mf.Type)
	}
	switch {
	case mf.Dropout != nil && *mf.Dropout != 0:
		return errors.New("tokenizer: BPE dropout is not supported")
	case mf.ByteFallback != nil && *mf.ByteFallback:
		return errors.New("tokenizer: BPE byte_fallback is not supported")
	case mf.ContinuingSubwordPrefix != nil && *mf.ContinuingSubwordPrefix != "":
		return errors.New("tokenizer: BPE continuing_subword_prefix is not supported")
	case mf.EndOfWordSuffix != nil && *mf.EndOfWordSuffix != "":
		return errors.New("tokenizer: BPE end_of_word_suffix is not supported")
	case mf.Vocab == nil:
		return errors.New("tokenizer: BPE model without a vocab")
	}
	m := &b.model
	m.ignoreMerges = mf.IgnoreMerges != nil && *mf.IgnoreMerges
	m.fuseUnk = mf.FuseUnk != nil && *mf.FuseUnk
	m.cache = newWordCache()
	m.vocab = make(map[string]int32, len(mf.Vocab))
	b.odd = map[string]int{}
	maxID := -1
	for tok, id := range mf.Vocab {
		if id < 0 || id > 1<<30 {
			return fmt.Errorf("tokenizer: vocab entry %q has id %d", tok, id)
		}
		maxID = max(maxID, id)
		if raw, ok := byteLevelDecode(tok); ok {
			m.vocab[raw] = int32(id)
		} else {
			b.odd[tok] = id
		}
	}
	for i := range m.byteIDs {
		m.byteIDs[i] = -1
		if id, ok := mf.Vocab[string(byteChars[i])]; ok {
			m.byteIDs[i] = int32(id)
		}
	}
	m.unk = -1
	if mf.UnkToken != nil {
		id, ok := mf.Vocab[*mf.UnkToken]
		if !ok {
			return fmt.Errorf("tokenizer: unk_token %q is not in the vocab", *mf.UnkToken)
		}
		m.unk = int32(id)
	}
	if err := b.loadMerges(mf); err != nil {
		return err
	}
	b.growTables(maxID + 1)
	for tok, id := range mf.Vocab {
		text, ok := byteLevelDecode(tok)
		if !ok {
			text = tok // as the ByteLevel decoder does, the token's own UTF-8
		}
		b.decode[id], b.text[id], b.known[id] = text, text, true
	}
	return nil
}

func (b *BPE) growTables(n int) {
	for len(b.known) < n {
		b.decode = append(b.decode, "")
		b.text = append(b.text, "")
		b.known = append(b.known, false)
		b.special = append(b.special, false)
	}
}

// loadMerges reads merges as ["a", "b"] pairs or legacy "a b" strings.
func (b *BPE) loadMerges(mf *modelFile) error {
	var pairs [][2]string
	if err := json.Unmarshal(mf.Merges, &pairs); err != nil {
		var lines []string
		if err2 := json.Unmarshal(mf.Merges, &lines); err2 != nil {
			return fmt.Errorf("tokenizer: reading merges: %w", err)
		}
		pairs = make([][2]string, 0, len(lines))
		for i, l := range lines {
			if strings.HasPrefix(l, "#version") {
				continue
			}
			a, c, ok := strings.Cut(l, " ")
			if !ok || strings.Contains(c, " ") {
				return fmt.Errorf("tokenizer: merge %d %q is not two tokens", i+1, l)
			}
			pairs = append(pairs, [2]string{a, c})
		}
	}
	m := &b.model
	m.pairs = newPairTable(len(pairs))
	for rank, p := range pairs {
		a, ok1 := mf.Vocab[p[0]]
		c, ok2 := mf.Vocab[p[1]]
		merged, ok3 := mf.Vocab[p[0]+p[1]]
		if !ok1 || !ok2 || !ok3 {
			return fmt.Errorf("tokenizer: merge %q %q: token out of vocabulary", p[0], p[1])
		}
		m.pairs.put(int32(a), int32(c), uint64(rank)<<32|uint64(merged))
	}
	return nil
}

// loadAdded registers the added tokens with the ids the Rust tokenizers
// give them (AddedVocabulary::add_tokens: the vocabulary's id if the
// content is in it, else the next id from the vocabulary's size on, in
// file order; the ids written in the file are not used) and builds the
// two matchers.
func (b *BPE) loadAdded(tokens []*bpeAddedToken, vocabLen int) {
	b.added = map[string]int{}
	byID := map[int]*bpeAddedToken{}
	specialSet := map[string]bool{}
	var specials, others []*bpeAddedToken
	for _, t := range tokens {
		if t.Special && t.Content != "" && !specialSet[t.Content] {
			specialSet[t.Content] = true
			specials = append(specials, t)
		}
	}
	nextID := vocabLen
	for _, t := range tokens {
		if t.Content == "" || duplicate(byID, t) {
			continue
		}
		id, ok := b.added[t.Content]
		if !ok {
			id, ok = b.TokenID(t.Content)
		}
		if !ok {
			id = nextID
			nextID++
		}
		b.added[t.Content] = id
		t.ID = id
		byID[id] = t
		if !specialSet[t.Content] {
			others = append(others, t)
		}
		b.growTables(id + 1)
		b.known[id], b.text[id] = true, t.Content
		b.decode[id] = t.Content
		if d, ok := byteLevelDecode(t.Content); ok {
			b.decode[id] = d // the ByteLevel decoder maps added tokens too
		}
		b.special[id] = specialSet[t.Content]
	}
	var raw, normed []*bpeAddedToken
	var rawPat, normPat []string
	for _, t := range append(specials, others...) {
		t = byID[b.added[t.Content]]
		if t.Normalized != nil && !*t.Normalized || t.Normalized == nil && t.Special {
			raw, rawPat = append(raw, t), append(rawPat, t.Content)
			continue
		}
		p := t.Content
		if b.norm != nil {
			p = b.norm.normalize(p)
		}
		normed, normPat = append(normed, t), append(normPat, p)
	}
	b.rawAdded = newAddedSet(raw, rawPat)
	b.normAdded = newAddedSet(normed, normPat)
	b.rawPlain = newAddedSet(withoutSpecial(raw, rawPat))
	b.normPlain = newAddedSet(withoutSpecial(normed, normPat))
}

// withoutSpecial is tokens and their patterns less the special tokens,
// for EncodePlain.
func withoutSpecial(tokens []*bpeAddedToken, patterns []string) ([]*bpeAddedToken, []string) {
	var ts []*bpeAddedToken
	var ps []string
	for i, t := range tokens {
		if !t.Special {
			ts, ps = append(ts, t), append(ps, patterns[i])
		}
	}
	return ts, ps
}

// duplicate reports whether an equal token (every field) is registered.
func duplicate(byID map[int]*bpeAddedToken, t *bpeAddedToken) bool {
	for _, o := range byID {
		if o.Content == t.Content && o.SingleWord == t.SingleWord && o.LStrip == t.LStrip &&
			o.RStrip == t.RStrip && o.Special == t.Special && bytes.Equal(boolJSON(o.Normalized), boolJSON(t.Normalized)) {
			return true
		}
	}
	return false
}

func boolJSON(b *bool) []byte {
	if b == nil {
		return nil
	}
	return []byte(fmt.Sprint(*b))
}
