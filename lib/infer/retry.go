package infer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// The retry policy. A failed attempt is one of:
//   - down: the connection was refused; the endpoint is taken out of
//     service and the request, never sent, goes elsewhere without using
//     up an attempt;
//   - retriable: connection errors, timeouts, 408, 429, 5xx, a malformed
//     answer, finish_reason "abort": tried again on another endpoint after
//     an exponential backoff with jitter, up to --retries times;
//   - permanent: other 4xx (400, 404, 413, 422...): the server will say the
//     same again, so the prompt goes straight to the errors file with the
//     server's message;
//   - fatal: 401 and 403, a wrong or missing API key: every request would
//     fail the same way, so the run stops.

type failure struct {
	status    int // HTTP status; 0 when there was no answer
	message   string
	retriable bool
	down      bool // could not connect: no attempt used
	blame     bool // counts toward taking the endpoint out of service
	fatal     bool
}

func (f *failure) Error() string {
	if f.status != 0 {
		return fmt.Sprintf("HTTP %d: %s", f.status, f.message)
	}
	return f.message
}

// classifyTransport sorts an error from the HTTP client.
func classifyTransport(err error, timeout time.Duration) *failure {
	var de *dialError
	switch {
	case errors.As(err, &de):
		return &failure{message: de.Error(), retriable: true, down: true, blame: true}
	case errors.Is(err, fasthttp.ErrTimeout):
		return &failure{message: fmt.Sprintf("no answer within %v (--request-timeout)", timeout), retriable: true, blame: true}
	case errors.Is(err, fasthttp.ErrConnectionClosed):
		return &failure{message: "the server closed the connection before answering", retriable: true, blame: true}
	}
	return &failure{message: "connection failed: " + err.Error(), retriable: true, blame: true}
}

// classifyStatus sorts a non-200 answer; the message is the server's own.
func classifyStatus(status int, body []byte) *failure {
	f := &failure{status: status, message: openai.ErrorMessage(body)}
	if f.message == "" {
		f.message = fasthttp.StatusMessage(status)
	}
	switch {
	case status == fasthttp.StatusUnauthorized || status == fasthttp.StatusForbidden:
		f.fatal = true
	case status == fasthttp.StatusRequestTimeout || status == fasthttp.StatusTooManyRequests || status == fasthttp.StatusServiceUnavailable:
		f.retriable = true // busy, not broken
	case status >= 500:
		f.retriable, f.blame = true, true
	}
	return f
}

// classifyAnswer checks a parsed 200 answer: "abort" is retried, unless
// the server said with a 4xx status why it refused the request.
func classifyAnswer(c *openai.Completion) *failure {
	if c.FinishReason != record.FinishAbort {
		return nil
	}
	msg := "the server aborted the request (finish_reason abort)"
	if c.AbortMessage != "" {
		msg += ": " + c.AbortMessage
	}
	if c.AbortStatus >= 400 && c.AbortStatus < 500 && c.AbortStatus != fasthttp.StatusTooManyRequests && c.AbortStatus != fasthttp.StatusRequestTimeout {
		return &failure{status: c.AbortStatus, message: msg}
	}
	return &failure{message: msg, retriable: true, blame: true}
}

// backoff is exponential with jitter: attempt n waits between half and
// all of base*2^(n-1), capped at max, so retries of requests that failed
// together do not arrive together.
type backoff struct {
	base, max time.Duration
	mu        sync.Mutex
	rnd       *rand.Rand
}

func newBackoff(base, max time.Duration, seed uint64) *backoff {
	return &backoff{base: base, max: max, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (b *backoff) delay(attempt int) time.Duration {
	if b.base <= 0 {
		return 0
	}
	d := b.base
	for i := 1; i < attempt && d < b.max; i++ {
		d *= 2
	}
	d = min(d, b.max)
	b.mu.Lock()
	j := time.Duration(b.rnd.Int64N(int64(d/2) + 1))
	b.mu.Unlock()
	return d/2 + j
}
