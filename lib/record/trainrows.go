package record

import "slices"

// Training rows of token ids (merge --to tokens writes them, filter and
// stats measure them): one row per generation event, its prompt's ids
// then its answer's, loss 1 on the answer's alone; or, for a regenerated
// conversation whose template is prefix-consistent (every turn's prompt
// ids begin with the turn before's prompt ids and answer ids), one row:
// its last prompt and answer, loss on every turn's answer span.

// TrainRow is one training row; Turn is the event's index in the
// conversation's turns (0 for a single answer), nil for a whole
// conversation's row.
type TrainRow struct {
	Turn            *int
	InputIDs        []int32
	LossMask        []int32
	NumPromptTokens int
	NumAnswerTokens int
}

// TokenTurn is one generation event's ids; Reasoned tells an answer that
// came with reasoning, for the reason a conversation breaks. NoLoss is
// how many of the answer's first ids are left out of the loss (its
// reasoning, with merge --no-reasoning-loss).
type TokenTurn struct {
	PromptTokenIDs []int32
	AnswerTokenIDs []int32
	Reasoned       bool
	NoLoss         int
}

// Why a conversation is not prefix-consistent.
const (
	// a turn's prompt does not begin with the turn before's prompt
	NotPrefixHistory = "history re-rendered"
	// it does, then holds the turn before's answer less its first ids:
	// the template left the answer's reasoning (or its empty think
	// block) out of the history, as Qwen3's does before the last query
	NotPrefixReasoning = "reasoning left out of the history"
	// it does, but the answer's ids do not follow, whole or less their
	// head: its text re-tokenized to other ids
	NotPrefixRetokenized = "answer re-tokenized"
)

// PrefixBreak is why the turns' ids are not one sequence ("": they are).
func PrefixBreak(turns []TokenTurn) string {
	for k := 1; k < len(turns); k++ {
		prev, this := turns[k-1], turns[k].PromptTokenIDs
		n := len(prev.PromptTokenIDs)
		switch {
		case len(this) < n || !slices.Equal(this[:n], prev.PromptTokenIDs):
			return NotPrefixHistory
		case !hasPrefix(this[n:], prev.AnswerTokenIDs):
			if headLeftOut(this[n:], prev.AnswerTokenIDs) {
				return NotPrefixReasoning
			}
			return NotPrefixRetokenized
		}
	}
	return ""
}

func hasPrefix(s, prefix []int32) bool {
	return len(s) >= len(prefix) && slices.Equal(s[:len(prefix)], prefix)
}

// headLeftOut tells whether next begins with answer less some of its
// first ids: what a history that drops the answer's reasoning holds. The
// rest need only agree for its first few ids (or all, if fewer), so that
// an answer whose text also re-tokenizes further on is still told apart
// by what broke first.
func headLeftOut(next, answer []int32) bool {
	if len(next) == 0 {
		return false
	}
	for k := 1; k < len(answer); k++ {
		if answer[k] != next[0] {
			continue
		}
		m := 0
		for k+m < len(answer) && m < len(next) && answer[k+m] == next[m] {
			m++
		}
		if m >= min(headAgree, len(answer)-k) {
			return true
		}
	}
	return false
}

// headAgree is how many ids of the rest must agree.
const headAgree = 4

// TrainRows are the rows of a single answer (conversation false, one
// turn) or of a regenerated conversation's turns, and why a conversation
// gives a row per turn ("" when it gives one row, or is a single answer).
func TrainRows(turns []TokenTurn, conversation bool) ([]TrainRow, string) {
	if !conversation {
		zero := 0
		return []TrainRow{eventRow(&zero, turns[0])}, ""
	}
	if why := PrefixBreak(turns); why != "" {
		rows := make([]TrainRow, len(turns))
		for k := range turns {
			rows[k] = eventRow(&k, turns[k])
		}
		return rows, why
	}
	r := eventRow(nil, turns[len(turns)-1])
	for _, tu := range turns[:len(turns)-1] {
		start := len(tu.PromptTokenIDs)
		for i := start + min(tu.NoLoss, len(tu.AnswerTokenIDs)); i < start+len(tu.AnswerTokenIDs); i++ {
			r.LossMask[i] = 1
		}
	}
	r.NumAnswerTokens = 0
	for _, m := range r.LossMask {
		r.NumAnswerTokens += int(m)
	}
	r.NumPromptTokens = len(r.InputIDs) - r.NumAnswerTokens
	return []TrainRow{r}, ""
}

func eventRow(turn *int, t TokenTurn) TrainRow {
	ids := make([]int32, 0, len(t.PromptTokenIDs)+len(t.AnswerTokenIDs))
	ids = append(append(ids, t.PromptTokenIDs...), t.AnswerTokenIDs...)
	mask := make([]int32, len(ids))
	loss := 0
	for i := len(t.PromptTokenIDs) + min(t.NoLoss, len(t.AnswerTokenIDs)); i < len(mask); i++ {
		mask[i] = 1
		loss++
	}
	return TrainRow{Turn: turn, InputIDs: ids, LossMask: mask, NumPromptTokens: len(ids) - loss, NumAnswerTokens: loss}
}

// TokenGeneration is the part of a generation record its token rows are
// made of.
type TokenGeneration struct {
	ID     ID `json:"id"`
	Output struct {
		Sample int `json:"sample"`
		TokenIDs
		Messages []struct {
			Role             string `json:"role"`
			ReasoningContent string `json:"reasoning_content"`
		} `json:"messages"`
		Turns []struct {
			Message int `json:"message"`
			TokenIDs
		} `json:"turns"`
		Truncated *Truncation `json:"truncated"`
	} `json:"output"`
}

// Events are the record's generation events (its answer, or the turns
// up to n of a conversation, n < 0: all) for TrainRows; ok false when an
// event has no prompt ids (a record made without infer --token-ids).
func (g *TokenGeneration) Events(n int) (turns []TokenTurn, conversation, ok bool) {
	o := &g.Output
	if len(o.Turns) == 0 {
		return []TokenTurn{{PromptTokenIDs: o.PromptTokenIDs, AnswerTokenIDs: o.AnswerTokenIDs}}, false, len(o.PromptTokenIDs) > 0
	}
	ts := o.Turns
	if n >= 0 && n < len(ts) {
		ts = ts[:n]
	}
	turns = make([]TokenTurn, len(ts))
	for k, tu := range ts {
		if len(tu.PromptTokenIDs) == 0 {
			return nil, true, false
		}
		reasoned := tu.Message >= 0 && tu.Message < len(o.Messages) && o.Messages[tu.Message].ReasoningContent != ""
		turns[k] = TokenTurn{PromptTokenIDs: tu.PromptTokenIDs, AnswerTokenIDs: tu.AnswerTokenIDs, Reasoned: reasoned}
	}
	return turns, true, true
}
