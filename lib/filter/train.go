package filter

import (
	"fmt"

	"tokenmill/lib/quality"
	"tokenmill/lib/record"
	"tokenmill/lib/tokenizer"
)

// The training window (--max-train-tokens, --min-loss-tokens): a record is
// dropped when one of the rows merge --to tokens would make of it is longer
// than the trainer's max_length (it would be cut), or when its rows hold
// fewer tokens with loss than the least worth training on, counted on the
// token ids infer --token-ids recorded (record.TrainRows: a row per
// generation event, or one per prefix-consistent conversation). Every
// regenerated turn listed counts, a tool-truncated conversation's dangling
// calls too (merge cuts them).

//
// With --tokenizer, a record whose server ids (infer --token-ids) are not
// the ids the model's own chat template and tokenizer give is dropped as
// token_mismatch, the first difference and its cause in the detail
// (tokenizer.Parity): a trainer loading that folder would train on other
// tokens than the model was served. Records without server ids pass.

// Reasons of the training window.
const (
	ReasonTooLong       = "too_long_for_training"
	ReasonFewLoss       = "too_few_loss_tokens"
	ReasonNoTokenIDs    = record.ReasonNoTokenIDs
	ReasonTokenMismatch = "token_mismatch"
)

// trainLimits are the window's bounds; zero: no bound.
type trainLimits struct {
	maxTokens, minLoss int
	tok                *tokenizer.Tokenizer // --tokenizer: the parity check
	kwargs             []byte
}

func (l trainLimits) window() bool { return l.maxTokens > 0 || l.minLoss > 0 }

func (l trainLimits) on() bool { return l.window() || l.tok != nil }

// check drops a record that passed the quality checks but falls outside
// the window.
func (l trainLimits) check(it *item) {
	j := &it.V
	if !l.on() || j.verdict != fit {
		return
	}
	if l.tok != nil {
		l.parity(it)
		if j.verdict != fit || !l.window() {
			return
		}
	}
	var g record.TokenGeneration
	if err := record.Decode(it.Data, &g); err != nil {
		j.verdict, j.bad = badLine, &quality.ParseError{Reason: quality.ReasonBadOutput, Err: err}
		return
	}
	events, conversation, ok := g.Events(-1)
	if !ok {
		j.verdict, j.finding = unfit, quality.Finding{Check: ReasonNoTokenIDs, Detail: "no prompt_token_ids: the training window is counted on the ids of infer --token-ids"}
		return
	}
	rows, _ := record.TrainRows(events, conversation)
	loss := 0
	for i, r := range rows {
		loss += r.NumAnswerTokens
		if l.maxTokens > 0 && len(r.InputIDs) > l.maxTokens {
			j.verdict, j.finding = unfit, quality.Finding{Check: ReasonTooLong, Detail: fmt.Sprintf("a row of %d tokens, more than --max-train-tokens %d", len(r.InputIDs), l.maxTokens)}
			if conversation && r.Turn != nil {
				j.turn = i
			}
			return
		}
	}
	if loss < l.minLoss {
		j.verdict, j.finding = unfit, quality.Finding{Check: ReasonFewLoss, Detail: fmt.Sprintf("%d tokens with loss, fewer than --min-loss-tokens %d", loss, l.minLoss)}
	}
}

// parity drops a record whose server ids differ from the local rendering.
func (l trainLimits) parity(it *item) {
	j := &it.V
	turns, conversation, err := record.ChatTurns(it.Data)
	if err != nil {
		j.verdict, j.bad = badLine, &quality.ParseError{Reason: quality.ReasonBadOutput, Err: err}
		return
	}
	for k, turn := range turns {
		if turn.Server == nil {
			continue
		}
		p, err := l.tok.Parity(turn, l.kwargs)
		detail := ""
		switch {
		case err != nil:
			detail = fmt.Sprintf("not rendered with --tokenizer: %v", err)
		case !p.Same:
			detail = fmt.Sprintf("%s id %d differs (%s): server %q, local %q", p.Part, p.Position, p.Cause, p.Server, p.Local)
		default:
			continue
		}
		j.verdict, j.finding = unfit, quality.Finding{Check: ReasonTokenMismatch, Detail: detail}
		if conversation {
			j.turn = k
		}
		return
	}
}
