package ledger

import (
	"errors"
	"io"
	"sync/atomic"
	"time"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// An interrupted run stops reading its input; the prompts it never read
// are not done either, and its summary counts them: "not done" is every
// answer of the input that has neither an answer nor an error record.

// Unread is the count of the answers the rest of an input would have
// asked for: every sample of every prompt record not seen before whose
// answer is not done. Complete is false when the input did not end in
// time.
type Unread struct {
	answers  atomic.Int64
	Complete bool
}

// Answers is the count so far (it may go on past an incomplete count).
func (u *Unread) Answers() int64 { return u.answers.Load() }

// CountUnread reads what is left of rd, whose records ask for samples
// answers each, for at most limit: a pipe whose writer goes on (or a
// terminal) is not waited for long. l is not to be used by anyone else
// meanwhile.
func (l *Ledger) CountUnread(rd *jsonl.Reader, samples int, limit time.Duration) *Unread {
	u := &Unread{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			rec, err := rd.Next()
			var ie *jsonl.InputError
			switch {
			case err == io.EOF:
				return
			case errors.As(err, &ie):
				continue
			case err != nil:
				return
			}
			var p struct {
				ID     record.ID `json:"id"`
				Sample int       `json:"sample"`
			}
			if record.Decode(rec.Data, &p) != nil || p.ID.IsZero() || l.See(p.ID.Text) {
				continue
			}
			for k := 0; k < samples; k++ {
				if !l.Done(p.ID.Text, p.Sample+k) {
					u.answers.Add(1)
				}
			}
		}
	}()
	select {
	case <-done:
		u.Complete = true
	case <-time.After(limit):
	}
	return u
}
