package cli

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// fakeOutput records what an ending did to it.
type fakeOutput struct {
	path            string
	closed, aborted bool
	log             *[]string
}

func (o *fakeOutput) Path() string { return o.path }
func (o *fakeOutput) Close() error {
	o.closed = true
	*o.log = append(*o.log, "close")
	return nil
}
func (o *fakeOutput) Abort() { o.aborted = true }

// TestEndInterrupted: stdout is flushed before every file is dropped, a
// named output is only dropped; the summary and what was left are said;
// the error is the signal's.
func TestEndInterrupted(t *testing.T) {
	tests := []struct {
		name, path, notDone string
		closed              bool
		stderr              string
	}{
		{"stdout", "-", "", true,
			"tool: read 5, kept 4\ntool: interrupted after 5 records: output incomplete (stdout holds the records decided before the interrupt)\n"},
		{"a named file", "out.jsonl", "", false,
			"tool: read 5, kept 4\ntool: interrupted after 5 records: output incomplete (no file written)\n"},
		{"something else not done", "out.jsonl", "state not saved", false,
			"tool: read 5, kept 4\ntool: interrupted after 5 records: output incomplete (no file written); state not saved\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr strings.Builder
			env := &Env{Name: "tool", Stderr: &stderr}
			ctx, cancel := context.WithCancelCause(context.Background())
			cancel(ErrInterrupted)
			var order []string
			out := &fakeOutput{path: tt.path, log: &order}
			err := env.EndInterrupted(ctx, out, func() { order = append(order, "abort"); out.Abort() }, "read 5, kept 4", 5, tt.notDone)
			if !errors.Is(err, ErrInterrupted) {
				t.Errorf("returned %v, want the interrupt", err)
			}
			if out.closed != tt.closed || !out.aborted {
				t.Errorf("closed %v, aborted %v; want closed %v and aborted", out.closed, out.aborted, tt.closed)
			}
			if want := []string{"close", "abort"}; tt.closed && strings.Join(order, ",") != strings.Join(want, ",") {
				t.Errorf("order %v, want stdout flushed before the files are dropped", order)
			}
			if stderr.String() != tt.stderr {
				t.Errorf("stderr:\n%s\nwant:\n%s", stderr.String(), tt.stderr)
			}
		})
	}
}
