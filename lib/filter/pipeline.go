package filter

import (
	"context"
	"errors"
	"fmt"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/quality"
	"tokenmill/lib/record"
)

// verdict is what a worker decided about one line.
type verdict uint8

const (
	fit     verdict = iota
	unfit           // an answer failed a check
	passed          // an error record, passed through
	badLine         // not a generation record
)

// judgement is a worker's decision on one input.
type judgement struct {
	verdict   verdict
	answers   int
	finding   quality.Finding
	turn      int // index into output.turns, -1 for a single answer
	bad       *quality.ParseError
	hadReject bool // the record already carries a reject field
}

type item = jsonl.Item[judgement]

// sink writes the decided records.
type sink struct {
	out   *jsonl.Writer
	unfit *jsonl.Writer // nil: unfit records are only counted
	bad   *jsonl.Rejects
	n     *counts
	buf   []byte
	train trainLimits // --max-train-tokens, --min-loss-tokens (train.go)
}

// run reads in, checks with one worker per checker and writes through s
// in input order, whatever the number of workers, and closes in. When ctx
// ends it stops reading; the records already read are decided and
// written.
func run(ctx context.Context, in *jsonl.Reader, checkers []*quality.Checker, s *sink) error {
	recs := make([]quality.GenerationView, len(checkers))
	return jsonl.Parallel(ctx, in, len(checkers), func(w int, b *jsonl.Batch[judgement]) {
		for i := range b.Items {
			judge(checkers[w], &recs[w], &b.Items[i])
			s.train.check(&b.Items[i])
		}
	}, s.write)
}

// judge parses one line and checks its answers, stopping at the first
// that fails.
func judge(c *quality.Checker, rec *quality.GenerationView, it *item) {
	j := &it.V
	if it.Err != nil {
		j.verdict = badLine
		return
	}
	line := it.Data
	if perr := rec.Parse(line); perr != nil {
		j.verdict, j.bad = badLine, perr
		return
	}
	switch rec.Kind {
	case record.KindError:
		j.verdict = passed
		return
	case record.KindPrompt:
		j.verdict = badLine
		j.bad = &quality.ParseError{Reason: quality.ReasonNotAGeneration,
			Err: errors.New("neither output nor error: a prompt record among the answers?")}
		return
	}
	j.turn = -1
	c.SetModes(rec)
	for i := range rec.Answers {
		j.answers++
		if f, bad := c.First(&rec.Answers[i], rec.Tools()); bad {
			j.verdict, j.finding = unfit, f
			if rec.Conversation {
				j.turn = i
			}
			break
		}
	}
	j.hadReject = j.verdict == unfit && hasField(line, "reject")
}

// hasField reports whether the object line has a top-level field name.
func hasField(line []byte, name string) bool {
	v, err := record.FieldValue(line, name)
	return err == nil && v != nil
}

// rejectInfo is the reject field of an unfit record.
type rejectInfo struct {
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
	Turn   *int   `json:"turn,omitempty"`
	File   string `json:"file"`
	Line   int64  `json:"line"`
}

// write sends every record of b where its verdict says.
func (s *sink) write(b *jsonl.Batch[judgement]) error {
	s.n.bytes.Store(b.Read.Bytes)
	for i := range b.Items {
		it := &b.Items[i]
		j := &it.V
		s.n.read.Add(1)
		s.n.answers.Add(int64(j.answers))
		rec := it.RawLine
		switch j.verdict {
		case fit:
			s.n.kept.Add(1)
			if err := s.out.Write(rec.Data); err != nil {
				return fmt.Errorf("writing %s: %w", s.out.Path(), err)
			}
		case passed:
			s.n.passed.Add(1)
			if err := s.out.Write(rec.Data); err != nil {
				return fmt.Errorf("writing %s: %w", s.out.Path(), err)
			}
		case badLine:
			s.n.rejected.Add(1)
			var err error
			if j.bad != nil {
				err = s.bad.Add(rec, j.bad.Reason, j.bad.Err.Error())
			} else {
				err = s.bad.Input(it.Err)
			}
			if err != nil {
				return err
			}
		case unfit:
			s.n.dropped.Add(1)
			s.n.byReason[j.finding.Check]++
			if s.unfit == nil {
				continue
			}
			if err := s.writeUnfit(rec, j); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeUnfit writes the record as it was plus its reject field (replacing
// one it already had, from an earlier filter).
func (s *sink) writeUnfit(rec jsonl.RawLine, j *judgement) error {
	info := rejectInfo{Reason: j.finding.Check, Detail: j.finding.Detail, File: rec.File, Line: rec.Line}
	if j.turn >= 0 {
		info.Turn = &j.turn
	}
	value, err := json.Marshal(info)
	if err != nil {
		return err
	}
	line := rec.Data
	if j.hadReject {
		if line, err = record.WithoutFields(nil, line, "reject"); err != nil {
			return err
		}
	}
	if s.buf, err = record.AppendField(s.buf[:0], line, "reject", value); err != nil {
		return err
	}
	if err := s.unfit.Write(s.buf); err != nil {
		return fmt.Errorf("writing %s: %w", s.unfit.Path(), err)
	}
	return nil
}
