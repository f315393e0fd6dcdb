package stats

import (
	"errors"
	"fmt"
	"strings"

	"tokenmill/lib/cli"
	"tokenmill/lib/record"
	"tokenmill/lib/tokenizer"
)

// The parity check (--tokenizer DIR): every generation event whose server
// reported its ids (infer --token-ids) is rendered and tokenized again
// with the model's own chat template and tokenizer, what a trainer loading
// that folder does, and the two compared id for id. Identical rows train
// on exactly the tokens the model was served; for the rest the report
// gives where they first differ, the text around it on each side, and a
// cause (tokenizer.Parity). The work is done by the parse workers; the
// sequencer only adds up.

// Parity is the parity section of the report.
type Parity struct {
	Tokenizer    string `json:"tokenizer"`
	TemplateHash string `json:"chat_template_hash"`
	// Records and events compared, and those whose every id is the same.
	Records          int64 `json:"records"`
	RecordsIdentical int64 `json:"records_identical"`
	Events           int64 `json:"events"`
	EventsIdentical  int64 `json:"events_identical"`
	// Differing counts the events that differ by cause; NotChecked the
	// events the local template could not render, by why.
	Differing  []Count      `json:"differing"`
	NotChecked []Count      `json:"not_checked"`
	Examples   []ParityCase `json:"examples"`
}

// ParityCase is one event whose ids differ.
type ParityCase struct {
	ID       string `json:"id"`
	Turn     *int   `json:"turn,omitempty"`
	Part     string `json:"part"`
	Position int    `json:"position"`
	Cause    string `json:"cause"`
	Server   string `json:"server_text"`
	Local    string `json:"local_text"`
}

// parityExamples is how many differing events the report shows.
const parityExamples = 5

// parityFact is what a worker found of one record.
type parityFact struct {
	events, same int
	causes       []string // one per differing event
	unchecked    []string // one per event not rendered, by why
	example      *ParityCase
}

// parityChecker compares records' ids with a tokenizer; shared by the
// workers (the tokenizer is safe for concurrent use).
type parityChecker struct {
	tok    *tokenizer.Tokenizer
	kwargs []byte
}

func newParityChecker(dir, kwargs string) (*parityChecker, error) {
	if dir == "" {
		if kwargs != "" {
			return nil, cli.Usagef("--template-kwargs goes with --tokenizer DIR")
		}
		return nil, nil
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, cli.Usagef("--tokenizer: %v", err)
	}
	if !tok.HasTemplate() {
		return nil, cli.Usagef("--tokenizer %s: %v", dir, tokenizer.ErrNoTemplate)
	}
	if t := strings.TrimSpace(kwargs); kwargs != "" && !strings.HasPrefix(t, "{") {
		return nil, cli.Usagef("--template-kwargs %q: want a JSON object, e.g. {\"enable_thinking\": false}", kwargs)
	}
	return &parityChecker{tok: tok, kwargs: []byte(kwargs)}, nil
}

// check compares every event of a record that carries the server's ids.
func (p *parityChecker) check(data []byte) *parityFact {
	turns, conversation, err := record.ChatTurns(data)
	if err != nil {
		return nil
	}
	id, _ := record.FieldValue(data, "id")
	f := &parityFact{}
	for k, turn := range turns {
		if turn.Server == nil {
			continue
		}
		f.events++
		r, err := p.tok.Parity(turn, p.kwargs)
		switch {
		case err != nil:
			f.unchecked = append(f.unchecked, uncheckedReason(err))
		case r.Same:
			f.same++
		default:
			f.causes = append(f.causes, r.Cause)
			if f.example == nil {
				c := &ParityCase{ID: strings.Trim(string(id), `"`), Part: r.Part, Position: r.Position, Cause: r.Cause, Server: r.Server, Local: r.Local}
				if conversation {
					turn := k
					c.Turn = &turn
				}
				f.example = c
			}
		}
	}
	return f
}

func uncheckedReason(err error) string {
	var te *tokenizer.TemplateError
	switch {
	case errors.As(err, &te):
		return tokenizer.ReasonTemplateError
	case errors.Is(err, tokenizer.ErrAnswerSpan):
		return "answer_span"
	case errors.Is(err, tokenizer.ErrAnswerDropped):
		return "answer_not_rendered"
	}
	return "bad_record"
}

// parityAgg adds up the records' parity facts.
type parityAgg struct {
	p                 Parity
	causes, unchecked map[string]int64
}

func newParityAgg(p *parityChecker) *parityAgg {
	if p == nil {
		return nil
	}
	return &parityAgg{p: Parity{Tokenizer: p.tok.Dir, TemplateHash: p.tok.TemplateHash(), Examples: []ParityCase{}},
		causes: map[string]int64{}, unchecked: map[string]int64{}}
}

func (a *parityAgg) add(f *parityFact) {
	if a == nil || f == nil || f.events == 0 {
		return
	}
	a.p.Records++
	a.p.Events += int64(f.events)
	a.p.EventsIdentical += int64(f.same)
	if f.same == f.events {
		a.p.RecordsIdentical++
	}
	for _, c := range f.causes {
		a.causes[c]++
	}
	for _, u := range f.unchecked {
		a.unchecked[u]++
	}
	if f.example != nil && len(a.p.Examples) < parityExamples {
		a.p.Examples = append(a.p.Examples, *f.example)
	}
}

func (a *parityAgg) report() *Parity {
	if a == nil {
		return nil
	}
	p := a.p
	p.Differing, p.NotChecked = sortedCounts(a.causes), sortedCounts(a.unchecked)
	return &p
}

func writeParity(b *strings.Builder, p *Parity) {
	fmt.Fprintf(b, "parity with %s (chat template %s): %s of %s records identical, %s of %s events",
		p.Tokenizer, p.TemplateHash, num(p.RecordsIdentical), num(p.Records), num(p.EventsIdentical), num(p.Events))
	writeCountList(b, "; differing: ", p.Differing)
	writeCountList(b, "; not rendered: ", p.NotChecked)
	b.WriteByte('\n')
	for _, e := range p.Examples {
		turn := ""
		if e.Turn != nil {
			turn = fmt.Sprintf(" turn %d", *e.Turn)
		}
		fmt.Fprintf(b, "  %s%s: %s id %d differs (%s): server %q, local %q\n", e.ID, turn, e.Part, e.Position, e.Cause, e.Server, e.Local)
	}
	b.WriteByte('\n')
}
