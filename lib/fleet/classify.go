package fleet

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// The classes of failure. A failed attempt is one of:
//   - down: the connection was refused; the endpoint is taken out of
//     service and the request, never sent, goes elsewhere without using
//     up an attempt;
//   - retriable: connection errors, timeouts, 408, 429, 5xx, a malformed
//     answer, finish_reason "abort": worth trying again on another
//     endpoint after a backoff;
//   - permanent: other 4xx (400, 404, 413, 422...): the server will say the
//     same again, so the prompt goes straight to the errors file with the
//     server's message;
//   - fatal: 401 and 403, a wrong or missing API key: every request would
//     fail the same way, so the run stops.

// Failure is one failed attempt and what it means.
type Failure struct {
	Status    int // HTTP status; 0 when there was no answer
	Message   string
	Retriable bool
	Down      bool // could not connect: no attempt used
	Blame     bool // counts toward taking the endpoint out of service
	Fatal     bool
	// RetryAfter is how long the server asked to be left alone (a 429 or
	// 503 with Retry-After); 0 when it did not say.
	RetryAfter time.Duration
	// Reason names a failure the client decided itself, for the error
	// record (record.ReasonAnswerTooLarge); "" for the server's own.
	Reason string
}

func (f *Failure) Error() string {
	if f.Status != 0 {
		return fmt.Sprintf("HTTP %d: %s", f.Status, f.Message)
	}
	return f.Message
}

// dialError marks a failure to connect: nothing listens, so the endpoint
// is down and the request was never sent.
type dialError struct{ err error }

func (e *dialError) Error() string { return "connect: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// ClassifyTransport sorts an error from the HTTP client; timeout is the
// request's, for the message.
func ClassifyTransport(err error, timeout time.Duration) *Failure {
	var de *dialError
	switch {
	case errors.As(err, &de):
		return &Failure{Message: de.Error(), Retriable: true, Down: true, Blame: true}
	case errors.Is(err, fasthttp.ErrTimeout):
		return &Failure{Message: fmt.Sprintf("no answer within %v (--request-timeout)", timeout), Retriable: true, Blame: true}
	case errors.Is(err, fasthttp.ErrConnectionClosed):
		// On a new connection: one that had carried an answer and that
		// the server closed while it sat idle is not a failure, the client
		// sends the request again on a new one (do, client.go).
		return &Failure{Message: "the server closed the connection before answering", Retriable: true, Blame: true}
	}
	return &Failure{Message: "connection failed: " + err.Error(), Retriable: true, Blame: true}
}

// ClassifyStatus sorts a non-200 answer; the message is the server's own.
func ClassifyStatus(status int, body []byte) *Failure {
	f := &Failure{Status: status, Message: openai.ErrorMessage(body)}
	if f.Message == "" {
		f.Message = fasthttp.StatusMessage(status)
	}
	switch {
	case status == fasthttp.StatusUnauthorized || status == fasthttp.StatusForbidden:
		f.Fatal = true
	case status == fasthttp.StatusRequestTimeout || status == fasthttp.StatusTooManyRequests || status == fasthttp.StatusServiceUnavailable:
		f.Retriable = true // busy, not broken
	case status >= 500:
		f.Retriable, f.Blame = true, true
	}
	return f
}

// ClassifyAnswer checks a parsed 200 answer: "abort" is retried, unless
// the server said with a 4xx status why it refused the request.
func ClassifyAnswer(c *openai.Completion) *Failure {
	if c.FinishReason != record.FinishAbort {
		return nil
	}
	msg := "the server aborted the request (finish_reason abort)"
	if c.AbortMessage != "" {
		msg += ": " + c.AbortMessage
	}
	if c.AbortStatus >= 400 && c.AbortStatus < 500 && c.AbortStatus != fasthttp.StatusTooManyRequests && c.AbortStatus != fasthttp.StatusRequestTimeout {
		return &Failure{Status: c.AbortStatus, Message: msg}
	}
	return &Failure{Message: msg, Retriable: true, Blame: true}
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date
// (RFC 9110 10.2.3), as a wait from now; 0 when absent, unreadable or
// already past. A server is not trusted with the length: the caller caps
// it (--max-backoff).
func retryAfter(h []byte, now time.Time) time.Duration {
	v := strings.TrimSpace(string(h))
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, int64(1<<31))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
