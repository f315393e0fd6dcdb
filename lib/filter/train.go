package filter

import (
	"fmt"

	"tokenmill/lib/quality"
	"tokenmill/lib/record"
)

// The training window (--max-train-tokens, --min-loss-tokens): a record is
// dropped when one of the rows merge --to tokens would make of it is longer
// than the trainer's max_length (it would be cut), or when its rows hold
// fewer tokens with loss than the least worth training on, counted on the
// token ids infer --token-ids recorded (record.TrainRows: a row per
// generation event, or one per prefix-consistent conversation). Every
// regenerated turn listed counts, a tool-truncated conversation's dangling
// calls too (merge cuts them).

// Reasons of the training window.
const (
	ReasonTooLong    = "too_long_for_training"
	ReasonFewLoss    = "too_few_loss_tokens"
	ReasonNoTokenIDs = record.ReasonNoTokenIDs
)

// trainLimits are the window's bounds; zero: no bound.
type trainLimits struct {
	maxTokens, minLoss int
}

func (l trainLimits) on() bool { return l.maxTokens > 0 || l.minLoss > 0 }

// check drops a record that passed the quality checks but falls outside
// the window.
func (l trainLimits) check(it *item) {
	j := &it.V
	if !l.on() || j.verdict != fit {
		return
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
