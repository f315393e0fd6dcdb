package llmsim

import (
	"bufio"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"
)

// requestLog writes one JSON line per generation request an endpoint
// received (Config.RequestLog), so a test can check what history each
// turn of a conversation was sent. Lines are written whole under a lock,
// from any number of handlers; the buffer is flushed when the fleet
// closes.
type requestLog struct {
	mu  sync.Mutex
	w   *bufio.Writer
	err error
}

func newRequestLog(w io.Writer) *requestLog {
	if w == nil {
		return nil
	}
	return &requestLog{w: bufio.NewWriterSize(w, 64<<10)}
}

func (l *requestLog) write(line []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		_, l.err = l.w.Write(line)
	}
}

// flush writes out what is buffered and reports the first write error.
func (l *requestLog) flush() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = l.w.Flush()
	}
	return l.err
}

// logEntry is what a handler learned about one request.
type logEntry struct {
	f       *flight
	outcome string // "" answered; "lost", "crash", or the fault that hit it
}

// logRequest appends the request's line: wall and simulated time,
// endpoint, route, the status answered (0 if none), prompt and cached
// tokens, the outcome when a fault or a crash took it, and the body as
// received (as JSON when it is JSON, else as a string).
func (e *Endpoint) logRequest(ctx *fasthttp.RequestCtx, le *logEntry) {
	l := e.f.log
	if l == nil {
		return
	}
	b := make([]byte, 0, 256+len(ctx.PostBody()))
	b = append(b, `{"time":"`...)
	b = time.Now().UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","sim_time":`...)
	b = strconv.AppendFloat(b, e.f.clock.Now().Seconds(), 'f', 6, 64)
	b = append(b, `,"endpoint":`...)
	b = appendString(b, e.url)
	b = append(b, `,"route":`...)
	b = appendString(b, string(ctx.Path()))
	b = append(b, `,"status":`...)
	status := ctx.Response.StatusCode()
	if le.outcome == "lost" || le.outcome == "crash" || le.outcome == "hang" {
		status = 0
	}
	b = appendInt(b, status)
	if f := le.f; f != nil {
		b = append(b, `,"prompt_tokens":`...)
		b = appendInt(b, f.prompt)
		b = append(b, `,"cached_tokens":`...)
		b = appendInt(b, f.cached)
	}
	if le.outcome != "" {
		b = append(b, `,"outcome":`...)
		b = appendString(b, le.outcome)
	}
	body := ctx.PostBody()
	if json.Valid(body) {
		b = append(b, `,"body":`...)
		b = appendCompact(b, body)
	} else {
		b = append(b, `,"body_text":`...)
		b = appendString(b, string(body))
	}
	l.write(append(b, "}\n"...))
}

// appendCompact appends valid JSON without its insignificant whitespace,
// so the body stays on its line.
func appendCompact(dst, src []byte) []byte {
	inString := false
	for i := 0; i < len(src); i++ {
		c := src[i]
		if inString {
			dst = append(dst, c)
			switch {
			case c == '\\' && i+1 < len(src):
				i++
				dst = append(dst, src[i])
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case ' ', '\t', '\n', '\r':
			continue
		}
		dst = append(dst, c)
	}
	return dst
}
