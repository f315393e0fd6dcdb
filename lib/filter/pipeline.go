package filter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/quality"
	"tokenmill/lib/record"
)

// The reader copies lines into batches; workers parse and check whole
// batches at once; the caller's goroutine takes the batches back in the
// order they were read and writes each record where its verdict sends it,
// so the output is in input order whatever the number of workers.
const (
	batchBytes   = 512 << 10
	batchRecords = 2048
	keepBuffer   = 8 << 20 // larger batch buffers (a huge line) are not reused
)

// verdict is what a worker decided about one line.
type verdict uint8

const (
	fit     verdict = iota
	unfit           // an answer failed a check
	passed          // an error record, passed through
	badLine         // not a generation record
)

type item struct {
	start, end int
	file       string
	line       int64
	verdict    verdict
	answers    int
	finding    quality.Finding
	turn       int   // index into output.turns, -1 for a single answer
	err        error // the reader's *jsonl.InputError
	bad        *quality.ParseError
	hadReject  bool // the record already carries a reject field
}

type batch struct {
	data  []byte
	items []item
	done  chan struct{}
}

// sink writes the decided records.
type sink struct {
	out   *jsonl.Writer
	unfit *jsonl.Writer // nil: unfit records are only counted
	bad   *jsonl.Rejects
	n     *counts
	buf   []byte
}

// run reads in, checks with one goroutine per checker and writes through
// s in input order, and closes in. When ctx ends it stops reading; the
// records already in batches are decided and written.
func run(ctx context.Context, in *jsonl.Reader, checkers []*quality.Checker, s *sink) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	slots := 2*len(checkers) + 2
	free := make(chan *batch, slots)
	for range slots {
		free <- &batch{}
	}
	work := make(chan *batch, slots)
	order := make(chan *batch, slots)
	var wg sync.WaitGroup
	for _, c := range checkers {
		wg.Go(func() {
			var rec quality.Record
			for b := range work {
				for i := range b.items {
					judge(c, &rec, b.data, &b.items[i])
				}
				close(b.done)
			}
		})
	}
	readDone := make(chan error, 1)
	go func() {
		err := fill(ctx, in, free, work, order)
		close(work)
		close(order)
		readDone <- errors.Join(err, in.Close())
	}()
	var writeErr error
	take := func(b *batch) {
		<-b.done
		if writeErr == nil {
			if writeErr = s.write(b); writeErr != nil {
				cancel()
			}
		}
		s.n.bytes.Store(in.Stats.Bytes)
		if cap(b.data) > keepBuffer {
			b.data = nil
		}
		free <- b
	}
	for {
		select {
		case b, ok := <-order:
			if !ok {
				wg.Wait()
				return errors.Join(writeErr, <-readDone)
			}
			take(b)
		case <-ctx.Done():
			// Write what was read, and leave the reader, which may be
			// waiting on a quiet stdin; the process is about to end.
			for {
				select {
				case b, ok := <-order:
					if !ok {
						return writeErr
					}
					take(b)
				default:
					return writeErr
				}
			}
		}
	}
}

// fill reads batches until EOF or cancellation.
func fill(ctx context.Context, in *jsonl.Reader, free <-chan *batch, work, order chan<- *batch) error {
	var b *batch
	send := func() {
		if b != nil && len(b.items) > 0 {
			work <- b
			order <- b
		}
		b = nil
	}
	defer send()
	for n := 0; ; n++ {
		if n&255 == 0 && ctx.Err() != nil {
			return nil
		}
		rec, err := in.Next()
		if err == io.EOF {
			return nil
		}
		var ie *jsonl.InputError
		if err != nil && !errors.As(err, &ie) {
			return err
		}
		if b == nil {
			select {
			case b = <-free:
			case <-ctx.Done():
				return nil
			}
			b.data, b.items, b.done = b.data[:0], b.items[:0], make(chan struct{})
		}
		it := item{start: len(b.data), file: rec.File, line: rec.Line, err: err}
		if ie != nil {
			it.file, it.line = ie.File, ie.Line
		}
		b.data = append(b.data, rec.Data...)
		it.end = len(b.data)
		b.items = append(b.items, it)
		if len(b.data) >= batchBytes || len(b.items) >= batchRecords {
			send()
		}
	}
}

// judge parses one line and checks its answers, stopping at the first
// that fails.
func judge(c *quality.Checker, rec *quality.Record, data []byte, it *item) {
	if it.err != nil {
		it.verdict = badLine
		return
	}
	line := data[it.start:it.end]
	if perr := rec.Parse(line); perr != nil {
		it.verdict, it.bad = badLine, perr
		return
	}
	switch rec.Kind {
	case record.KindError:
		it.verdict = passed
		return
	case record.KindPrompt:
		it.verdict = badLine
		it.bad = &quality.ParseError{Reason: quality.ReasonNotAGeneration,
			Err: errors.New("neither output nor error: a prompt record among the answers?")}
		return
	}
	it.turn = -1
	for i := range rec.Answers {
		it.answers++
		if f, bad := c.First(&rec.Answers[i], rec.Tools()); bad {
			it.verdict, it.finding = unfit, f
			if rec.Conversation {
				it.turn = i
			}
			break
		}
	}
	it.hadReject = it.verdict == unfit && hasField(line, "reject")
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
func (s *sink) write(b *batch) error {
	for i := range b.items {
		it := &b.items[i]
		s.n.read.Add(1)
		s.n.answers.Add(int64(it.answers))
		rec := jsonl.Record{Data: b.data[it.start:it.end], File: it.file, Line: it.line}
		switch it.verdict {
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
			if it.bad != nil {
				err = s.bad.Add(rec, it.bad.Reason, it.bad.Err.Error())
			} else {
				err = s.bad.Input(it.err)
			}
			if err != nil {
				return err
			}
		case unfit:
			s.n.dropped.Add(1)
			s.n.byReason[it.finding.Check]++
			if s.unfit == nil {
				continue
			}
			if err := s.writeUnfit(rec, it); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeUnfit writes the record as it was plus its reject field (replacing
// one it already had, from an earlier filter).
func (s *sink) writeUnfit(rec jsonl.Record, it *item) error {
	info := rejectInfo{Reason: it.finding.Check, Detail: it.finding.Detail, File: rec.File, Line: rec.Line}
	if it.turn >= 0 {
		info.Turn = &it.turn
	}
	value, err := json.Marshal(info)
	if err != nil {
		return err
	}
	line := rec.Data
	if it.hadReject {
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
