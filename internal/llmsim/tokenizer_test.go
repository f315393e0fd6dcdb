package llmsim

import (
	"slices"
	"strings"
	"testing"
)

// The word tokenizer gives an answer's text back the ids it was generated
// as, but where a drift word wrote a full stop: one token generated, two
// re-tokenized.
func TestWordTokenizerDrift(t *testing.T) {
	cases := []struct {
		pieces []string // the generated tokens' texts
		same   bool
	}{
		{[]string{"0123456789abcdef", " the", " world.", " and", " more"}, true},
		{[]string{"0123456789abcdef", " however.", " it"}, false},
		{[]string{"0123456789abcdef", " however", " it."}, true},
		{[]string{"0123456789abcdef", " <think>", " step", " </think>"}, true},
	}
	for _, c := range cases {
		var gen []int
		for _, p := range c.pieces {
			gen = append(gen, pieceID(p))
		}
		got := wordIDs(nil, strings.Join(c.pieces, ""))
		if slices.Equal(got, gen) != c.same {
			t.Errorf("%q: re-tokenized %v, generated %v; the same: want %v", c.pieces, got, gen, c.same)
		}
	}
}

// The template's text, tokenized with its special tokens, is the chat
// prompt's ids; qwen3 drops the reasoning of the turns before the last
// user turn, chatml keeps it.
func TestChatTemplates(t *testing.T) {
	msgs := []Message{{"user", "Hi there."}, {"assistant", "0123456789abcdef hello."}, {"user", "More?"}}
	history := []turnExtra{{}, {reasoning: "fedcba9876543210 think."}, {}}
	for _, name := range []string{"", templateChatML, templateQwen3} {
		tok := tokenizer{template: name}
		if !slices.Equal(tok.special(tok.render(msgs)), tok.chat(msgs, nil, true)) {
			t.Errorf("%s: the rendered template tokenizes to %v, the chat prompt is %v", name, tok.special(tok.render(msgs)), tok.chat(msgs, nil, true))
		}
		if name == "" && len(tok.chat(msgs, nil, true)) != PromptTokens(&Prompt{Messages: msgs}) {
			t.Errorf("without a template the chat ids are not what PromptTokens counts")
		}
	}
	with, without := tokenizer{template: templateChatML}.chat(msgs, history, true), tokenizer{template: templateChatML}.chat(msgs, nil, true)
	if len(with) != len(without)+2 {
		t.Errorf("chatml: %d ids with the reasoning, %d without", len(with), len(without))
	}
	if q := (tokenizer{template: templateQwen3}).chat(msgs, history, true); !slices.Equal(q, without) {
		t.Errorf("qwen3 kept the reasoning of a turn before the last user turn")
	}
	last := append(slices.Clone(msgs[:2]), Message{"assistant", "x"})
	h := []turnExtra{{}, {reasoning: "r"}, {}}
	if q := (tokenizer{template: templateQwen3}).chat(last, h, false); slices.Equal(q, tokenizer{template: templateQwen3}.chat(last, nil, false)) {
		t.Errorf("qwen3 dropped the reasoning of a turn after the last user turn")
	}
}
