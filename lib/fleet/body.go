package fleet

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/record"
)

// An answer's body is read as it arrives, never trusted for its size: a
// server (or what stands in front of it) may send a body without end, or
// hundreds of requests' worth at once. Two bounds hold: one request's
// body past Config.MaxAnswerBytes is cut off (an error of the prompt's,
// answer_too_large: the server would say as much again), and the bodies
// of all requests in flight together stay within Config.AnswerMemory: the
// request whose next piece would pass it is abandoned, its connection
// closed, and tried again later (it counts toward --retries), so that the
// others finish.

// Defaults of the bounds.
const (
	DefaultMaxAnswerBytes = 256 << 20
	DefaultAnswerMemory   = 1 << 30
)

// bodyChunk is the least a body buffer grows by.
const bodyChunk = 64 << 10

// answerBudget counts the bytes of answer bodies held by requests in
// flight.
type answerBudget struct {
	used atomic.Int64
	max  int64
}

// take reserves n bytes; false, and nothing reserved, past the budget.
func (b *answerBudget) take(n int64) bool {
	if b.used.Add(n) > b.max {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *answerBudget) give(n int64) { b.used.Add(-n) }

// Held is the bytes of answer bodies the requests in flight hold now.
func (p *Pool) Held() int64 { return p.budget.used.Load() }

// errBudget and errTooLarge are the body reader's refusals.
var errBudget = errors.New("answer memory budget")

type tooLargeError struct{ limit int64 }

func (e *tooLargeError) Error() string { return "answer too large" }

// readBody reads body (whose length the server announced as length, -1
// when it did not) within max bytes and the pool's budget. The bytes
// reserved are returned to be given back (release) once the body is no
// longer needed. A body of unknown length is read into pieces that grow
// to maxPiece, kept as they are (no buffer is copied as it grows, so
// none is left for the garbage collector while others are read) and
// joined once whole.
func (p *Pool) readBody(body io.Reader, length int64) (b []byte, reserved int64, err error) {
	limit := p.maxAnswer
	if length > limit {
		return nil, 0, &tooLargeError{limit}
	}
	var pieces [][]byte
	var total int64
	next := int64(bodyChunk)
	if length >= 0 {
		next = length + 1 // + 1: the end is seen without another piece
	}
	for {
		if len(pieces) == 0 || len(pieces[len(pieces)-1]) == cap(pieces[len(pieces)-1]) {
			if total > limit {
				return nil, reserved, &tooLargeError{limit}
			}
			size := min(next, limit+1-total)
			if !p.budget.take(size) {
				return nil, reserved, errBudget
			}
			reserved += size
			pieces = append(pieces, make([]byte, 0, size))
			next = min(max(total+size, bodyChunk), maxPiece)
		}
		cur := &pieces[len(pieces)-1]
		n, rerr := body.Read((*cur)[len(*cur):cap(*cur)])
		*cur = (*cur)[:len(*cur)+n]
		total += int64(n)
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, reserved, rerr
		}
	}
	if total > limit {
		return nil, reserved, &tooLargeError{limit}
	}
	if len(pieces) == 1 {
		return pieces[0], reserved, nil
	}
	// Joined, the body holds total bytes in place of the pieces' reserved
	// (never fewer): the join cannot pass the budget the pieces kept.
	b = make([]byte, 0, total)
	for _, piece := range pieces {
		b = append(b, piece...)
	}
	p.budget.give(reserved - total)
	return b, total, nil
}

// maxPiece is the largest piece of a body of unknown length.
const maxPiece = 4 << 20

// bodyFailure is what a failed body read means for the request.
func (p *Pool) bodyFailure(err error, timeout time.Duration) *Failure {
	var tl *tooLargeError
	switch {
	case errors.As(err, &tl):
		return &Failure{Status: 200, Reason: record.ReasonAnswerTooLarge,
			Message: fmt.Sprintf("the answer's body passed %s (--max-answer-bytes) as it arrived: cut off", cli.Size(tl.limit))}
	case errors.Is(err, errBudget):
		return &Failure{Retriable: true, Message: fmt.Sprintf("the answers in flight would hold more than %s (--answer-memory): this one was abandoned, to be sent again", cli.Size(p.budget.max))}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &Failure{Message: fmt.Sprintf("no whole answer within %v (--request-timeout)", timeout), Retriable: true, Blame: true}
	}
	return &Failure{Message: "the answer was cut off: " + err.Error(), Retriable: true, Blame: true}
}
