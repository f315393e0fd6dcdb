package stats

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"tokenmill/lib/fleet"
	"tokenmill/lib/record"
)

// The token section, when records carry the ids of infer --token-ids: the
// training rows merge --to tokens would make (record.TrainRows), their
// lengths and loss tokens as distributions, against the trainer's
// max_length (--max-train-tokens N: how many rows it would cut) and the
// least worth training on (--min-loss-tokens M); the conversations that
// are one prefix-consistent row and those that are not, by why; and with
// --tokens, drift: on a sample of the answers, how many re-tokenize
// (through their server's own tokenizer) to other ids than they were
// generated as, the mismatch training on re-tokenized text would bring.

// TokenFlags are stats' flags for the token section.
type TokenFlags struct {
	MaxTrainTokens int64  `placeholder:"N" default:"0" help:"The trainer's max_length: the token section shows the training rows (as merge --to tokens makes them) above it, which the trainer would cut (0: none)."`
	MinLossTokens  int64  `placeholder:"M" default:"0" help:"The least tokens with loss worth training on: the token section shows the records below it (0: none)."`
	Tokens         bool   `default:"false" help:"Re-tokenize a sample of the answers that carry token ids through their server's own tokenizer (/tokenize, /v1/tokenize) and report how many give other ids than were generated (drift). Asks the servers the records name (output.endpoint), or --tokens-endpoint."`
	TokensSample   int    `default:"200" placeholder:"K" help:"Answers --tokens re-tokenizes: the first K that can be compared (no reasoning, no tool call)."`
	TokensEndpoint string `placeholder:"URL" default:"" help:"With --tokens, the server to re-tokenize with instead of each answer's own."`
	TokensAPIKey   string `placeholder:"KEY" default:"" help:"With --tokens, the API key the servers' tokenizer routes need, if any."`
	Tokenizer      string `placeholder:"DIR" default:"" help:"The served model's Hugging Face folder (tokenizer.json, tokenizer_config.json): check that the ids each server reported (infer --token-ids) are the ids the model's own chat template and tokenizer give, what a trainer loading this folder sees; the parity section counts the identical records and, for the rest, where they differ and why."`
	TemplateKwargs string `placeholder:"JSON" default:"" help:"With --tokenizer, the chat_template_kwargs the run sent (infer --extra-body's) for records whose own params and arm name none."`
}

// Tokens is the token section of the report.
type Tokens struct {
	// Records with token ids, the rows they make and their events.
	Records int64 `json:"records"`
	Rows    int64 `json:"rows"`
	Events  int64 `json:"events"`
	// Conversations as one row, as a row per turn, and why.
	WholeConversations   int64   `json:"conversations_one_row"`
	PerTurnConversations int64   `json:"conversations_per_turn"`
	NotPrefixConsistent  []Count `json:"not_prefix_consistent"`
	// RowTokens is the rows' input_ids lengths; LossTokens each record's
	// tokens with loss.
	RowTokens  Distribution `json:"row_tokens"`
	LossTokens Distribution `json:"loss_tokens"`
	// With --max-train-tokens: the rows above it, and the records they
	// belong to; with --min-loss-tokens: the records below it.
	MaxTrainTokens int64 `json:"max_train_tokens,omitempty"`
	RowsTooLong    int64 `json:"rows_too_long,omitempty"`
	RecordsTooLong int64 `json:"records_too_long,omitempty"`
	MinLossTokens  int64 `json:"min_loss_tokens,omitempty"`
	RecordsFewLoss int64 `json:"records_too_few_loss,omitempty"`
	// Drift is --tokens.
	Drift *Drift `json:"drift,omitempty"`
}

// Drift is what re-tokenizing a sample of answers found.
type Drift struct {
	Sampled   int64       `json:"sampled"`
	Same      int64       `json:"same"`
	Different int64       `json:"different"`
	Skipped   []Count     `json:"skipped"` // not compared, by why
	Examples  []DriftCase `json:"examples"`
}

// DriftCase is one answer whose text re-tokenizes to other ids.
type DriftCase struct {
	ID          string `json:"id"`
	Turn        *int   `json:"turn,omitempty"`
	Generated   int    `json:"generated_ids"`
	Retokenized int    `json:"retokenized_ids"`
	FirstDiff   int    `json:"first_difference"`
}

// driftAnswer is an answer kept for the drift check.
type driftAnswer struct {
	id                    string
	turn                  *int
	endpoint, kind, model string
	text                  string
	ids                   []int32
	stopped               bool // finish stop: the ids may end with the stop token, which the text lacks
	reasoning, calls      bool
}

// tokenAgg gathers the token section.
type tokenAgg struct {
	flags      TokenFlags
	t          Tokens
	rows, loss dist
	notPrefix  map[string]int64
	sample     []driftAnswer
	skipped    map[string]int64
	wantSample int
}

func newTokenAgg(f TokenFlags) *tokenAgg {
	return &tokenAgg{flags: f, notPrefix: map[string]int64{}, skipped: map[string]int64{}, wantSample: f.TokensSample}
}

// tokenRecord is what the section reads of a generation record.
type tokenRecord struct {
	record.TokenGeneration
	Output struct {
		Text         string `json:"text"`
		Reasoning    string `json:"reasoning"`
		ToolCalls    []any  `json:"tool_calls"`
		FinishReason string `json:"finish_reason"`
		Endpoint     string `json:"endpoint"`
		Model        string `json:"model"`
		Messages     []struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			ToolCalls        []any  `json:"tool_calls"`
		} `json:"messages"`
		Turns []struct {
			Message      int    `json:"message"`
			FinishReason string `json:"finish_reason"`
			Endpoint     string `json:"endpoint"`
		} `json:"turns"`
		ServedBy *record.ServedBy `json:"served_by"`
	} `json:"output"`
}

// addTokens reads the token ids of a record whose output or turns carry
// prompt_token_ids (fact.tokens, found by parse: the common record,
// without them, is never decoded again).
func (a *tokenAgg) addTokens(data []byte) {
	var r tokenRecord
	if record.Decode(data, &r.TokenGeneration) != nil || record.Decode(data, &r) != nil {
		return
	}
	events, conversation, ok := r.Events(-1)
	if !ok || len(events) == 0 {
		return
	}
	rows, why := record.TrainRows(events, conversation)
	t := &a.t
	t.Records++
	t.Events += int64(len(events))
	switch {
	case conversation && why == "":
		t.WholeConversations++
	case conversation:
		t.PerTurnConversations++
		a.notPrefix[why]++
	}
	loss, long := int64(0), false
	for _, row := range rows {
		t.Rows++
		a.rows.add(int64(len(row.InputIDs)))
		loss += int64(row.NumAnswerTokens)
		if a.flags.MaxTrainTokens > 0 && int64(len(row.InputIDs)) > a.flags.MaxTrainTokens {
			t.RowsTooLong++
			long = true
		}
	}
	a.loss.add(loss)
	if long {
		t.RecordsTooLong++
	}
	if a.flags.MinLossTokens > 0 && loss < a.flags.MinLossTokens {
		t.RecordsFewLoss++
	}
	if a.flags.Tokens {
		a.keepForDrift(&r, events, conversation)
	}
}

// keepForDrift keeps the record's answers for the drift check, until the
// sample is full: those that can be compared (the answer's text is all
// it generated: no reasoning, no tool call).
func (a *tokenAgg) keepForDrift(r *tokenRecord, events []record.TokenTurn, conversation bool) {
	o := &r.Output
	kind, model := "", o.Model
	if sb := r.TokenGeneration.Output.ServedBy; sb != nil {
		kind, model = sb.Server, sb.Model
	}
	for k, ev := range events {
		if len(a.sample) >= a.wantSample {
			return
		}
		d := driftAnswer{id: r.ID.Text, endpoint: o.Endpoint, kind: kind, model: model, ids: ev.AnswerTokenIDs}
		if conversation {
			tu := o.Turns[k]
			turn := k
			d.turn, d.stopped = &turn, tu.FinishReason == record.FinishStop
			if tu.Endpoint != "" {
				d.endpoint = tu.Endpoint
			}
			if m := tu.Message; m >= 0 && m < len(o.Messages) {
				msg := o.Messages[m]
				d.text, d.reasoning, d.calls = msg.Content, msg.ReasoningContent != "", len(msg.ToolCalls) > 0
			}
		} else {
			d.text, d.reasoning, d.calls, d.stopped = o.Text, o.Reasoning != "", len(o.ToolCalls) > 0, o.FinishReason == record.FinishStop
		}
		switch {
		case d.reasoning:
			a.skipped["reasoning (its ids hold markup the text lacks)"]++
			continue
		case d.calls:
			a.skipped["tool calls"]++
			continue
		case len(d.ids) == 0:
			a.skipped["no answer ids"]++
			continue
		}
		a.sample = append(a.sample, d)
	}
}

// report finishes the section: nil when no record had ids.
func (a *tokenAgg) report(ctx context.Context) *Tokens {
	if a.t.Records == 0 && !a.flags.Tokens {
		return nil
	}
	t := a.t
	t.RowTokens, t.LossTokens = a.rows.describe(), a.loss.describe()
	t.MaxTrainTokens, t.MinLossTokens = a.flags.MaxTrainTokens, a.flags.MinLossTokens
	t.NotPrefixConsistent = sortedCounts(a.notPrefix)
	if a.flags.Tokens {
		t.Drift = a.drift(ctx)
	}
	return &t
}

func sortedCounts(m map[string]int64) []Count {
	out := []Count{}
	for k, n := range m {
		out = append(out, Count{Name: k, Count: n})
	}
	slices.SortFunc(out, func(x, y Count) int {
		if x.Count != y.Count {
			return int(y.Count - x.Count)
		}
		return strings.Compare(x.Name, y.Name)
	})
	return out
}

// drift re-tokenizes the sample with each answer's server.
func (a *tokenAgg) drift(ctx context.Context) *Drift {
	d := &Drift{Examples: []DriftCase{}}
	pools := map[string]*fleet.Pool{}
	kinds := map[string]string{}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	for _, s := range a.sample {
		url := s.endpoint
		if a.flags.TokensEndpoint != "" {
			url = a.flags.TokensEndpoint
		}
		p, err := pools[url], error(nil)
		if p == nil {
			var ts []fleet.Target
			if ts, err = fleet.ParseEndpoints(url); err == nil && len(ts) == 1 {
				p = fleet.NewPool(ctx, ts, fleet.Config{APIKey: a.flags.TokensAPIKey, ControlTimeout: 30 * time.Second})
				pools[url] = p
			} else if err == nil {
				err = fmt.Errorf("%q is not one endpoint", url)
			}
		}
		if err != nil {
			a.skipped["no server to ask ("+err.Error()+")"]++
			continue
		}
		ep := p.Endpoints()[0]
		kind := s.kind
		if a.flags.TokensEndpoint != "" || kind == "" {
			if kinds[url] == "" {
				// A server that could not be asked is taken as what its
				// routes showed so far: a gateway, asked as one.
				sb, _ := p.Provenance(ep, s.model)
				kinds[url] = sb.Server
			}
			kind = kinds[url]
		}
		ids, err := p.Retokenize(ctx, ep, kind, s.model, s.text)
		if err != nil {
			a.skipped["the tokenizer did not answer"]++
			continue
		}
		d.Sampled++
		gen := s.ids
		if s.stopped && len(gen) == len(ids)+1 && slices.Equal(gen[:len(ids)], ids) {
			gen = gen[:len(ids)] // the stop token the server counted, which the text lacks
		}
		if slices.Equal(gen, ids) {
			d.Same++
			continue
		}
		d.Different++
		if len(d.Examples) < 5 {
			first := 0
			for first < len(gen) && first < len(ids) && gen[first] == ids[first] {
				first++
			}
			d.Examples = append(d.Examples, DriftCase{ID: s.id, Turn: s.turn, Generated: len(s.ids), Retokenized: len(ids), FirstDiff: first})
		}
	}
	d.Skipped = sortedCounts(a.skipped)
	return d
}

// writeTokens is the text report's token section.
func writeTokens(b *strings.Builder, t *Tokens) {
	fmt.Fprintf(b, "token ids: %s records, %s training rows (as merge --to tokens makes them) of %s generation events\n",
		num(t.Records), num(t.Rows), num(t.Events))
	if t.WholeConversations+t.PerTurnConversations > 0 {
		fmt.Fprintf(b, "conversations: %s prefix-consistent (one row each), %s not (a row per turn)", num(t.WholeConversations), num(t.PerTurnConversations))
		writeCountList(b, ": ", t.NotPrefixConsistent)
		b.WriteByte('\n')
	}
	lengths := table{align: "lrrrrrr", header: []string{"tokens", "count", "mean", "p50", "p90", "p99", "max"}}
	lengths.add(lengthRow(namedDist{"row input_ids", &t.RowTokens})...)
	lengths.add(lengthRow(namedDist{"record loss tokens", &t.LossTokens})...)
	lengths.write(b)
	if t.RowTokens.Count > 0 {
		writeHistogram(b, "row input_ids", &t.RowTokens)
	}
	if t.MaxTrainTokens > 0 {
		fmt.Fprintf(b, "rows longer than --max-train-tokens %s: %s of %s (%s), in %s records (filter drops them as too_long_for_training)\n",
			num(t.MaxTrainTokens), num(t.RowsTooLong), num(t.Rows), percent(t.RowsTooLong, t.Rows), num(t.RecordsTooLong))
	}
	if t.MinLossTokens > 0 {
		fmt.Fprintf(b, "records with fewer than --min-loss-tokens %s tokens with loss: %s of %s (%s; too_few_loss_tokens)\n",
			num(t.MinLossTokens), num(t.RecordsFewLoss), num(t.Records), percent(t.RecordsFewLoss, t.Records))
	}
	if d := t.Drift; d != nil {
		fmt.Fprintf(b, "drift: of %s answers re-tokenized by their server, %s give the ids generated, %s other ids (%s)",
			num(d.Sampled), num(d.Same), num(d.Different), percent(d.Different, d.Sampled))
		writeCountList(b, "; not compared: ", d.Skipped)
		b.WriteByte('\n')
		for _, e := range d.Examples {
			turn := ""
			if e.Turn != nil {
				turn = fmt.Sprintf(" turn %d", *e.Turn)
			}
			fmt.Fprintf(b, "  %s%s: %d ids generated, %d re-tokenized, first difference at %d\n", e.ID, turn, e.Generated, e.Retokenized, e.FirstDiff)
		}
	}
	b.WriteByte('\n')
}

// writeCountList writes "<first>name n, name n, ..." (nothing when empty).
func writeCountList(b *strings.Builder, first string, counts []Count) {
	for i, c := range counts {
		sep := ", "
		if i == 0 {
			sep = first
		}
		fmt.Fprintf(b, "%s%s %s", sep, c.Name, num(c.Count))
	}
}
