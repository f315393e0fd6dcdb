package infer

import (
	"io"
	"sync/atomic"
	"time"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// An interrupted run stops reading its input; the prompts it never read
// are not done either, and the summary counts them: "not done" is every
// answer of the input that has neither an answer nor an error record.

// unreadLimit bounds the count of the input left unread: a pipe whose
// writer goes on (or a terminal) is not waited for long.
const unreadLimit = 3 * time.Second

// unread counts the answers the rest of rd would have asked for: every
// sample of every prompt record not seen before whose answer is not
// already in -o. complete is false when the input did not end within
// unreadLimit.
type unread struct {
	answers  atomic.Int64
	complete bool
}

// countUnread reads what is left of rd after an interruption.
func (r *runner) countUnread(rd *jsonl.Reader) *unread {
	u := &unread{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			rec, err := rd.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				if isInputError(err) {
					continue
				}
				return
			}
			var p struct {
				ID     record.ID `json:"id"`
				Sample int       `json:"sample"`
			}
			if record.Decode(rec.Data, &p) != nil || p.ID.IsZero() || r.ledger.See(p.ID.Text) {
				continue
			}
			for k := 0; k < r.cfg.Samples; k++ {
				if !r.ledger.Done(p.ID.Text, p.Sample+k) {
					u.answers.Add(1)
				}
			}
		}
	}()
	select {
	case <-done:
		u.complete = true
	case <-time.After(unreadLimit):
	}
	return u
}
