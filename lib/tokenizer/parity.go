package tokenizer

import (
	"errors"
	"slices"
	"strings"

	"tokenmill/lib/record"
)

// Parity is how one generation event's ids, as its server reported them
// (infer --token-ids), compare with the model's own template and
// tokenizer: the check that a trainer loading this tokenizer and template
// sees the tokens the model was served.
type Parity struct {
	Same bool
	// Part is where the ids first differ: "prompt" or "answer".
	Part string
	// Position is the index of the first differing id in that part.
	Position int
	Cause    string
	// Server and Local are the text around the difference, decoded from
	// each side's ids (a few ids either side).
	Server, Local string
}

// Why a server's ids differ from the local rendering.
const (
	// The server rendered another text: another chat template, or other
	// template kwargs (enable_thinking, a default system prompt).
	CauseTemplate = "template"
	// The same text, other ids, and the text spells a special token
	// (<|im_end|>) that one side tokenized as text.
	CauseSpecialLiteral = "special_literal"
	// The same text, other ids: another vocabulary or tokenizer version.
	CauseTokenizer = "tokenizer"
	// The model generated ids that are not the tokenization of their own
	// text: training on its re-tokenized text would teach other ids.
	CauseRetokenized = "retokenized"
	// The template writes the answer otherwise than it was generated
	// (white space trimmed, reasoning markers, tool-call layout).
	CauseAnswerRender = "answer_render"
	// The server's answer ids lack the end-of-turn id the model ended
	// with (merge --tokenizer adds it).
	CauseNoEndOfTurn = "no_end_of_turn"
	// The template leaves part of the answer out (ErrAnswerDropped): a
	// trainer rendering it trains on less than the model wrote.
	CauseAnswerDropped = "answer_not_rendered"
)

// contextIDs is how many ids either side of a difference are decoded.
const contextIDs = 8

// Parity compares the server's ids of turn with the model's own rendering
// (Turn); the error is Turn's (a template that raised, an answer span not
// found). A turn without server ids is an error of the caller.
func (t *Tokenizer) Parity(turn record.ChatTurn, kwargs []byte) (Parity, error) {
	local, err := t.Turn(turn, kwargs)
	dropped := errors.Is(err, ErrAnswerDropped) // the prompt is still compared
	if err != nil && !dropped {
		return Parity{}, err
	}
	sp, sa := ints32(turn.Server.PromptTokenIDs), ints32(turn.Server.AnswerTokenIDs)
	if at, ok := firstDiff(sp, local.Prompt); !ok {
		p := t.difference("prompt", at, sp, local.Prompt)
		switch {
		case t.Decode(sp) != local.PromptText:
			p.Cause = CauseTemplate
		case t.spellsSpecial(turn):
			p.Cause = CauseSpecialLiteral
		default:
			p.Cause = CauseTokenizer
		}
		return p, nil
	}
	if dropped {
		p := t.difference("answer", 0, sa, nil)
		p.Cause = CauseAnswerDropped
		return p, nil
	}
	at, ok := firstDiff(sa, local.Answer)
	if ok {
		return Parity{Same: true}, nil
	}
	p := t.difference("answer", at, sa, local.Answer)
	body := sa
	if n := len(body); n > 0 && t.IsEndOfTurn(body[n-1]) {
		body = body[:n-1]
	}
	switch {
	case local.EndOfTurn && len(sa) == len(local.Answer)-1 && slices.Equal(sa, local.Answer[:len(sa)]):
		p.Cause = CauseNoEndOfTurn
	case !slices.Equal(t.Encode(string(t.DecodeBytes(body))), body):
		p.Cause = CauseRetokenized
	case t.Decode(sa) != local.AnswerText:
		p.Cause = CauseAnswerRender
	default:
		p.Cause = CauseTokenizer
	}
	return p, nil
}

// difference describes the first differing id at of a part.
func (t *Tokenizer) difference(part string, at int, server, local []int) Parity {
	window := func(ids []int) string {
		return t.Decode(ids[max(0, at-contextIDs):min(len(ids), at+contextIDs)])
	}
	return Parity{Part: part, Position: at, Server: window(server), Local: window(local)}
}

// spellsSpecial tells whether a message of turn spells out an added
// token's text.
func (t *Tokenizer) spellsSpecial(turn record.ChatTurn) bool {
	for _, m := range append(turn.Messages[:len(turn.Messages):len(turn.Messages)], turn.Answer) {
		for _, s := range []string{m.Content, m.ReasoningContent} {
			if strings.Contains(s, "<") && t.containsAddedToken(s) {
				return true
			}
		}
	}
	return false
}

// containsAddedToken tells whether text holds a special token's text,
// which the tokenizer turns into that token's id.
func (t *Tokenizer) containsAddedToken(text string) bool {
	for _, id := range t.Encode(text) {
		if t.Special(id) {
			return true
		}
	}
	return false
}

// firstDiff is the first index where a and b differ, ok when they are
// equal.
func firstDiff(a, b []int) (int, bool) {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i, false
		}
	}
	return n, len(a) == len(b)
}

func ints32(ids []int32) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}
