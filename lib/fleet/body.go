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
// longer needed.
func (p *Pool) readBody(body io.Reader, length int64) (b []byte, reserved int64, err error) {
	limit := p.maxAnswer
	if length > limit {
		return nil, 0, &tooLargeError{limit}
	}
	size := int64(bodyChunk)
	if length >= 0 {
		size = length + 1 // + 1: the end is seen without growing
	}
	size = min(size, limit+1)
	if !p.budget.take(size) {
		return nil, 0, errBudget
	}
	reserved = size
	b = make([]byte, 0, size)
	for {
		if len(b) == cap(b) {
			if int64(len(b)) > limit {
				return nil, reserved, &tooLargeError{limit}
			}
			grow := min(max(int64(cap(b)), bodyChunk), limit+1-int64(cap(b)))
			if !p.budget.take(grow) {
				return nil, reserved, errBudget
			}
			reserved += grow
			nb := make([]byte, len(b), int64(cap(b))+grow)
			copy(nb, b)
			b = nb
		}
		n, rerr := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if rerr == io.EOF {
			if int64(len(b)) > limit {
				return nil, reserved, &tooLargeError{limit}
			}
			return b, reserved, nil
		}
		if rerr != nil {
			return nil, reserved, rerr
		}
	}
}

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
