package merge

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/record"
	"tokenmill/lib/tokenizer"
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
	Rendered  int               `json:"rendered,omitempty"`   // events rebuilt with --tokenizer
	EOSAdded  int               `json:"eos_added,omitempty"`  // server answers completed with their end-of-turn id
	// Ends are the last ids of the server answers the model ended
	// (finish stop or tool_calls), for the sink to tell the end-of-turn
	// id they share, without --tokenizer.
	Ends []int32 `json:"ends,omitempty"`
}

// tokenGen is the part of a generation record the rows are made of.
type tokenGen struct {
	ID     record.ID   `json:"id"`
	Output tokenOutput `json:"output"`
}

// tokenOutput is the part of a generation record's output the rows are
// made of.
type tokenOutput struct {
	Sample       int    `json:"sample"`
	FinishReason string `json:"finish_reason"`
	record.TokenIDs
	Messages []struct {
		Role             string          `json:"role"`
		ReasoningContent string          `json:"reasoning_content"`
		ToolCalls        json.RawMessage `json:"tool_calls"`
	} `json:"messages"`
	Turns []struct {
		Message      int    `json:"message"`
		FinishReason string `json:"finish_reason"`
		record.TokenIDs
	} `json:"turns"`
	Truncated *convTruncation `json:"truncated"`
	Arm       string          `json:"arm"`
}

// tokenForm converts generation records into token rows. With a
// tokenizer (--tokenizer), a record without the server's ids has its
// events rebuilt from the model's own template and tokenizer (as the
// server rendered the prompt; the answer as the template writes it, to
// its end-of-turn token), and an answer whose ids lack the end-of-turn
// token the model ended with gets it.
type tokenForm struct {
	keepTruncated bool
	tok           *tokenizer.Tokenizer
	kwargs        []byte // --template-kwargs
	reasoningLoss bool
	gen           tokenGen
	out           []byte
}

// Why a record gives no token rows with --tokenizer.
const (
	ReasonTemplateError     = tokenizer.ReasonTemplateError
	ReasonAnswerSpan        = "answer_span"
	ReasonAnswerNotRendered = "answer_not_rendered"
	// ReasonBadTokenIDs: a server's id no tokenizer gives (negative, or
	// past the vocabulary --tokenizer has), never put in a training row.
	ReasonBadTokenIDs = "bad_token_ids"
)

// badID is the first id of lists that is negative, or, with a tokenizer,
// not one of its vocabulary.
func (t *tokenForm) badID(lists ...[]int32) (int32, bool) {
	for _, ids := range lists {
		for _, id := range ids {
			if id < 0 {
				return id, true
			}
			if t.tok != nil {
				if _, ok := t.tok.TokenText(int(id)); !ok {
					return id, true
				}
			}
		}
	}
	return 0, false
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
	conversation := len(o.Turns) > 0
	if o.ServedBy != nil {
		meta.Served = append(meta.Served, *o.ServedBy)
	}
	turns := o.Turns
	if conversation {
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
		for _, tu := range turns {
			if tu.ServedBy != nil {
				meta.Served = append(meta.Served, *tu.ServedBy)
			}
		}
		if len(meta.Sampling) == 0 {
			meta.Sampling = turns[0].Sampling
		}
	}
	n := 1
	if conversation {
		n = len(turns)
	}
	events, rej := t.events(data, &meta, n)
	if rej != nil {
		return nil, rej
	}
	rows, why := record.TrainRows(events, conversation)
	meta.Events, meta.NotPrefix, meta.Whole = len(events), why, conversation && why == ""
	var err error
	if t.out, err = json.Append(t.out[:0], meta, 0); err != nil {
		return nil, encodeRejection(err)
	}
	for _, r := range rows {
		t.out = append(t.out, '\n')
		// The id as a string whatever the dataset's type: a file mixing
		// integer and string ids is refused by load_dataset("json").
		row := tokenRow{ID: record.StringID(g.ID.Text), Sample: o.Sample, Turn: r.Turn, InputIDs: r.InputIDs, LossMask: r.LossMask, NumPromptTokens: r.NumPromptTokens, NumAnswerTokens: r.NumAnswerTokens, Arm: o.Arm}
		if t.out, err = json.Append(t.out, row, 0); err != nil {
			return nil, encodeRejection(err)
		}
	}
	return t.out, nil
}

// events are the record's first n generation events (a single answer's
// one), from the ids the server reported, or rebuilt with the tokenizer.
func (t *tokenForm) events(data []byte, meta *tokenMeta, n int) ([]record.TokenTurn, *rejection) {
	o := &t.gen.Output
	var chat []record.ChatTurn
	if t.tok != nil {
		var err error
		if chat, _, err = record.ChatTurns(data); err != nil {
			return nil, reject(ReasonBadRecord, "%v", err)
		}
	}
	server := func(k int) *record.TokenIDs {
		if len(o.Turns) == 0 {
			return &o.TokenIDs
		}
		return &o.Turns[k].TokenIDs
	}
	events := make([]record.TokenTurn, n)
	for k := range events {
		ids := server(k)
		var ev record.TokenTurn
		switch {
		case len(ids.PromptTokenIDs) > 0:
			if bad, ok := t.badID(ids.PromptTokenIDs, ids.AnswerTokenIDs); ok {
				return nil, reject(ReasonBadTokenIDs, "event %d: id %d is not in the vocabulary", k, bad)
			}
			ev = record.TokenTurn{PromptTokenIDs: ids.PromptTokenIDs, AnswerTokenIDs: ids.AnswerTokenIDs}
			if t.tok != nil {
				ev = t.completeServerTurn(ev, chat[k], meta)
			} else if finish := finishOf(o, k); (finish == record.FinishStop || finish == "tool_calls") && len(ev.AnswerTokenIDs) > 0 {
				meta.Ends = append(meta.Ends, ev.AnswerTokenIDs[len(ev.AnswerTokenIDs)-1])
			}
		case t.tok == nil && len(o.Turns) == 0:
			return nil, reject(ReasonNoTokenIDs, "output has no prompt_token_ids: generate with infer --token-ids, or give merge --tokenizer")
		case t.tok == nil:
			return nil, reject(ReasonNoTokenIDs, "output.turns[%d] has no prompt_token_ids: generate with infer --token-ids, or give merge --tokenizer", k)
		default:
			var rej *rejection
			if ev, rej = t.renderTurn(chat[k], k); rej != nil {
				return nil, rej
			}
			meta.Rendered++
		}
		if len(o.Turns) > 0 {
			if m := o.Turns[k].Message; m >= 0 && m < len(o.Messages) && o.Messages[m].ReasoningContent != "" {
				ev.Reasoned = true
			}
		} else if t.tok != nil && chat[k].Answer.ReasoningContent != "" {
			ev.Reasoned = true
		}
		events[k] = ev
	}
	return events, nil
}

// finishOf is the finish reason of the record's k-th event.
func finishOf(o *tokenOutput, k int) string {
	if len(o.Turns) == 0 {
		return o.FinishReason
	}
	return o.Turns[k].FinishReason
}

// renderTurn rebuilds an event's ids with the tokenizer.
func (t *tokenForm) renderTurn(turn record.ChatTurn, k int) (record.TokenTurn, *rejection) {
	tu, err := t.tok.Turn(turn, t.kwargs)
	var te *tokenizer.TemplateError
	switch {
	case errors.As(err, &te):
		return record.TokenTurn{}, reject(ReasonTemplateError, "turn %d: %s", k, te.Message)
	case errors.Is(err, tokenizer.ErrAnswerSpan):
		return record.TokenTurn{}, reject(ReasonAnswerSpan, "turn %d: %v", k, err)
	case errors.Is(err, tokenizer.ErrAnswerDropped):
		return record.TokenTurn{}, reject(ReasonAnswerNotRendered, "turn %d: %v", k, err)
	case err != nil:
		return record.TokenTurn{}, reject(ReasonBadRecord, "turn %d: %v", k, err)
	}
	ev := record.TokenTurn{PromptTokenIDs: int32s(tu.Prompt), AnswerTokenIDs: int32s(tu.Answer)}
	if !t.reasoningLoss {
		ev.NoLoss = tu.ReasoningIDs
	}
	return ev, nil
}

// completeServerTurn adds to the server's answer ids the end-of-turn id
// an answer the model ended is missing (a server that leaves it out), and
// finds the reasoning's ids where they are left out of the loss.
func (t *tokenForm) completeServerTurn(ev record.TokenTurn, turn record.ChatTurn, meta *tokenMeta) record.TokenTurn {
	a := ev.AnswerTokenIDs
	if turn.Finish != "length" && turn.Finish != "abort" && (len(a) == 0 || !t.tok.IsEndOfTurn(int(a[len(a)-1]))) && len(t.tok.EndOfTurn) > 0 {
		ev.AnswerTokenIDs = append(a[:len(a):len(a)], int32(t.tok.EndOfTurn[0]))
		meta.EOSAdded++
	}
	if !t.reasoningLoss {
		ids := ints(ev.AnswerTokenIDs)
		ev.NoLoss = t.tok.ReasoningIDs(ids, string(t.tok.DecodeBytes(ids)), turn.Answer)
	}
	return ev
}

func int32s(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

func ints(ids []int32) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
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
	Rendered         int64            `json:"events_rendered_with_tokenizer,omitempty"`
	EOSAdded         int64            `json:"end_of_turn_added,omitempty"`
	// EndOfTurn is, without --tokenizer, what the server answers the
	// model ended end with: the id most of them share, and how many lack it.
	EndOfTurn *endOfTurnTally `json:"end_of_turn,omitempty"`
}

// endOfTurnTally tells, without a tokenizer, whether the servers' answer
// ids hold the end-of-turn id: the answers the model ended (stop,
// tool_calls) end with one id when they do (vLLM's token_ids), and with
// their last words' ids, all different, when the server leaves it out.
type endOfTurnTally struct {
	ID      *int32 `json:"id"` // the id nearly all share, nil when none does
	Ended   int64  `json:"answers_ended"`
	With    int64  `json:"answers_with_it"`
	Without int64  `json:"answers_without_it"`
	lasts   map[int32]int64
}

// endOfTurnShare is the share of ended answers one last id must have to
// be taken for the end-of-turn id; endOfTurnAnswers the fewest ended
// answers the summary judges from.
const (
	endOfTurnShare   = 0.9
	endOfTurnAnswers = 20
)

func (e *endOfTurnTally) add(ends []int32) {
	if e.lasts == nil {
		e.lasts = map[int32]int64{}
	}
	for _, id := range ends {
		e.lasts[id]++
		e.Ended++
	}
}

// settle finds the shared id once every answer is in.
func (e *endOfTurnTally) settle() {
	e.ID, e.With, e.Without = nil, 0, e.Ended
	for id, n := range e.lasts {
		if float64(n) >= endOfTurnShare*float64(e.Ended) {
			id := id
			e.ID, e.With, e.Without = &id, n, e.Ended-n
		}
	}
}

func (e *endOfTurnTally) summary() string {
	e.settle()
	if e.ID == nil {
		return fmt.Sprintf(", the %s answers the model ended share no last id: the server's ids lack the end-of-turn id (give --tokenizer DIR to add it)", cli.Thousands(e.Ended))
	}
	if e.Without == 0 {
		return fmt.Sprintf(", every answer the model ended ends with id %d", *e.ID)
	}
	return fmt.Sprintf(", %s of %s answers the model ended lack the end-of-turn id %d (give --tokenizer DIR to add it)", cli.Thousands(e.Without), cli.Thousands(e.Ended), *e.ID)
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
	if t.Rendered > 0 {
		s += fmt.Sprintf(", %s events rendered with the tokenizer", cli.Thousands(t.Rendered))
	}
	if t.EOSAdded > 0 {
		s += fmt.Sprintf(", %s answers given their end-of-turn id", cli.Thousands(t.EOSAdded))
	}
	if t.EndOfTurn != nil && t.EndOfTurn.Ended >= endOfTurnAnswers {
		s += t.EndOfTurn.summary()
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
