package fleet

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// A body is read within its two bounds: one past --max-answer-bytes is
// too large (announced or not, without reading past the bound), one that
// would pass what the requests in flight may hold is refused for the
// budget, and every byte reserved is given back.
func TestReadBodyBounds(t *testing.T) {
	const limit = 1 << 20
	for _, tt := range []struct {
		name    string
		body    io.Reader
		length  int64
		held    int64 // already held by other requests
		want    int   // bytes read; -1 too large, -2 the budget
		readMax int64 // most bytes the reader may be asked for (0: any)
	}{
		{"small, announced", strings.NewReader("{}"), 2, 0, 2, 0},
		{"small, chunked", iotest.OneByteReader(strings.NewReader(strings.Repeat("a", 300<<10))), -1, 0, 300 << 10, 0},
		{"at the limit", bytes.NewReader(make([]byte, limit)), -1, 0, limit, 0},
		{"announced too large", strings.NewReader(""), limit + 1, 0, -1, 0},
		{"chunked too large", io.LimitReader(zeros{}, 2*limit), -1, 0, -1, limit + bodyChunk},
		{"the budget is held", bytes.NewReader(make([]byte, 600<<10)), -1, (3 << 20) - (300 << 10), -2, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := &Pool{maxAnswer: limit}
			p.budget.max = 3 << 20
			p.budget.used.Store(tt.held)
			r := &countingReader{r: tt.body}
			b, reserved, err := p.readBody(r, tt.length)
			var tl *tooLargeError
			switch {
			case tt.want == -1 && !errors.As(err, &tl):
				t.Fatalf("got %d bytes, %v; want too large", len(b), err)
			case tt.want == -2 && !errors.Is(err, errBudget):
				t.Fatalf("got %d bytes, %v; want the budget", len(b), err)
			case tt.want >= 0 && (err != nil || len(b) != tt.want):
				t.Fatalf("got %d bytes, %v; want %d", len(b), err, tt.want)
			}
			if tt.readMax > 0 && r.n > tt.readMax {
				t.Errorf("read %d bytes, past the bound", r.n)
			}
			if tt.want >= 0 && reserved != int64(len(b)) && reserved != int64(len(b))+1 {
				t.Errorf("%d bytes reserved for a body of %d", reserved, len(b))
			}
			p.budget.give(reserved)
			if got := p.Held(); got != tt.held {
				t.Errorf("held %d after giving back, want %d", got, tt.held)
			}
		})
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
