package merge

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/record"
)

// --to tokens: token-exact training rows from the ids infer --token-ids
// recorded, what drafter trainers load (vLLM speculators and SpecForge
// read input_ids and loss_mask):
//
//	{"id", "sample", "turn", "input_ids", "loss_mask", "num_prompt_tokens", "num_answer_tokens"}
//
// One row per generation event: the prompt's ids then the answer's, loss
// 1 on the answer's ids alone. A regenerated conversation whose template
// is prefix-consistent (every turn's prompt ids begin with the turn
// before's prompt ids and answer ids) is one row instead, its last prompt
// and answer, with loss on every regenerated answer's span and "turn"
// null; one that is not (a Qwen3-style template drops earlier reasoning,
// or an answer's text re-tokenized to other ids in the history) gives a
// row per turn, counted by why.

const toTokens = "tokens"

// ReasonNoTokenIDs: a record --to tokens cannot make rows of.
const ReasonNoTokenIDs = record.ReasonNoTokenIDs

// tokenRow is one training row.
type tokenRow struct {
	ID              record.ID `json:"id"`
	Sample          int       `json:"sample"`
	Turn            *int      `json:"turn"`
	InputIDs        []int32   `json:"input_ids"`
	LossMask        []int32   `json:"loss_mask"`
	NumPromptTokens int       `json:"num_prompt_tokens"`
	NumAnswerTokens int       `json:"num_answer_tokens"`
	Arm             string    `json:"arm,omitempty"` // infer --mix's arm
}

// tokenMeta is what a converted record says of itself beside its rows,
// on the first line of its converted form: what the tokens sink counts
// and checks once the record is the one written.
type tokenMeta struct {
	Served    []record.ServedBy `json:"served,omitempty"`
	Sampling  json.RawMessage   `json:"sampling,omitempty"`
	Events    int               `json:"events"`
	Whole     bool              `json:"whole,omitempty"`      // a conversation as one row
	NotPrefix string            `json:"not_prefix,omitempty"` // a conversation as rows per turn, and why
}

// tokenGen is the part of a generation record the rows are made of.
type tokenGen struct {
	ID     record.ID `json:"id"`
	Output struct {
		Sample int `json:"sample"`
		record.TokenIDs
		Messages []struct {
			Role             string          `json:"role"`
			ReasoningContent string          `json:"reasoning_content"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"messages"`
		Turns []struct {
			Message int `json:"message"`
			record.TokenIDs
		} `json:"turns"`
		Truncated *convTruncation `json:"truncated"`
		Arm       string          `json:"arm"`
	} `json:"output"`
}

// tokenForm converts generation records into token rows.
type tokenForm struct {
	keepTruncated bool
	gen           tokenGen
	out           []byte
}

// convert is the record's converted form: its meta line, then its rows,
// one per line.
func (t *tokenForm) convert(data []byte) ([]byte, *rejection) {
	t.gen = tokenGen{}
	if err := record.Decode(data, &t.gen); err != nil {
		return nil, reject(ReasonBadRecord, "%v", err)
	}
	g := &t.gen
	o := &g.Output
	var meta tokenMeta
	meta.Sampling = o.Sampling
	var events []record.TokenTurn
	conversation := len(o.Turns) > 0
	if !conversation {
		if len(o.PromptTokenIDs) == 0 {
			return nil, reject(ReasonNoTokenIDs, "output has no prompt_token_ids: generate with infer --token-ids")
		}
		events = []record.TokenTurn{{PromptTokenIDs: o.PromptTokenIDs, AnswerTokenIDs: o.AnswerTokenIDs}}
		if o.ServedBy != nil {
			meta.Served = append(meta.Served, *o.ServedBy)
		}
	} else {
		turns := o.Turns
		if tr := o.Truncated; tr != nil && isToolTruncation(tr.Reason) && !t.keepTruncated {
			turns = turns[:completeTurns(len(turns), func(i int) int {
				if m := turns[i].Message; m >= 0 && m < len(o.Messages) && makesCalls(o.Messages[m].ToolCalls) {
					return 1
				}
				return 0
			})]
		}
		if len(turns) == 0 {
			return nil, reject(ReasonBadRecord, "output.turns lists no regenerated turn")
		}
		if o.ServedBy != nil {
			meta.Served = append(meta.Served, *o.ServedBy)
		}
		for k, tu := range turns {
			if len(tu.PromptTokenIDs) == 0 {
				return nil, reject(ReasonNoTokenIDs, "output.turns[%d] has no prompt_token_ids: generate with infer --token-ids", k)
			}
			if tu.ServedBy != nil {
				meta.Served = append(meta.Served, *tu.ServedBy)
			}
			m := tu.Message
			reasoned := m >= 0 && m < len(o.Messages) && o.Messages[m].ReasoningContent != ""
			events = append(events, record.TokenTurn{PromptTokenIDs: tu.PromptTokenIDs, AnswerTokenIDs: tu.AnswerTokenIDs, Reasoned: reasoned})
		}
		if len(meta.Sampling) == 0 {
			meta.Sampling = turns[0].Sampling
		}
	}
	rows, why := record.TrainRows(events, conversation)
	meta.Events, meta.NotPrefix, meta.Whole = len(events), why, conversation && why == ""
	var err error
	if t.out, err = json.Append(t.out[:0], meta, 0); err != nil {
		return nil, encodeRejection(err)
	}
	for _, r := range rows {
		t.out = append(t.out, '\n')
		row := tokenRow{ID: g.ID, Sample: o.Sample, Turn: r.Turn, InputIDs: r.InputIDs, LossMask: r.LossMask, NumPromptTokens: r.NumPromptTokens, NumAnswerTokens: r.NumAnswerTokens, Arm: o.Arm}
		if t.out, err = json.Append(t.out, row, 0); err != nil {
			return nil, encodeRejection(err)
		}
	}
	return t.out, nil
}

// tokenTally is what the tokens sink counts of the records it writes,
// for the summary and the manifest.
type tokenTally struct {
	Records          int64            `json:"records"`
	Rows             int64            `json:"rows"`
	Events           int64            `json:"events"`
	SingleAnswers    int64            `json:"single_answers"`
	WholeRows        int64            `json:"conversations_one_row"`
	PerEvent         int64            `json:"conversations_per_turn"`
	NotPrefixReasons map[string]int64 `json:"not_prefix_consistent"`
	InputTokens      int64            `json:"input_tokens"`
	LossTokens       int64            `json:"loss_tokens"`
}

// summary is the merge summary's part on token rows.
func (t *tokenTally) summary() string {
	s := fmt.Sprintf("token rows %s (%s events: %s single answers, %s conversations as one row, %s as a row per turn",
		cli.Thousands(t.Rows), cli.Thousands(t.Events), cli.Thousands(t.SingleAnswers), cli.Thousands(t.WholeRows), cli.Thousands(t.PerEvent))
	if len(t.NotPrefixReasons) > 0 {
		var reasons []string
		for r, n := range t.NotPrefixReasons {
			reasons = append(reasons, fmt.Sprintf("%s %s", r, cli.Thousands(n)))
		}
		sort.Strings(reasons)
		s += ", not prefix-consistent: " + strings.Join(reasons, ", ")
	}
	return s + fmt.Sprintf("; %s tokens, %s with loss)", cli.Thousands(t.InputTokens), cli.Thousands(t.LossTokens))
}

// splitMeta reads a converted record: its meta and its rows' lines.
func splitMeta(data []byte) (tokenMeta, [][]byte, error) {
	var meta tokenMeta
	head, rest, _ := bytes.Cut(data, []byte{'\n'})
	if err := json.Unmarshal(head, &meta); err != nil {
		return meta, nil, err
	}
	return meta, bytes.Split(rest, []byte{'\n'}), nil
}

// rowCounts reads a row's lengths and loss tokens.
func rowCounts(line []byte) (inputs, loss int64, err error) {
	var r struct {
		InputIDs        []json.RawMessage `json:"input_ids"`
		NumAnswerTokens int64             `json:"num_answer_tokens"`
	}
	err = json.Unmarshal(line, &r)
	return int64(len(r.InputIDs)), r.NumAnswerTokens, err
}

// mixKey is what rows of one file must share: the model, and the chat
// template where the servers say.
func mixKey(sb record.ServedBy) string {
	return strconv.Quote(sb.Model) + " " + sb.ChatTemplateHash
}
