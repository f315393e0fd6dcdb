package jsonl

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/record"
)

// Common reject reasons shared by the stages.
const (
	ReasonMalformedJSON = "malformed_json"
	ReasonNotObject     = "not_an_object"
)

// reportLimit is how many rejects of one reason are described on stderr;
// the rest are only counted (and all go to the rejects file).
const reportLimit = 5

// Rejects counts rejected inputs by reason, describes the first few of each
// reason on stderr with file and line, and writes every one to the
// --rejects file when there is one. It is safe for concurrent use.
type Rejects struct {
	mu     sync.Mutex
	w      *Writer // nil: count and report only
	log    Logger  // nil: count and write only
	counts map[string]int64
	total  int64
	buf    []byte
}

// NewRejects reports to log (the tool's stderr); either may be nil.
func NewRejects(log Logger, w *Writer) *Rejects {
	return &Rejects{log: log, w: w, counts: map[string]int64{}}
}

// CreateRejects starts the --rejects file at path ("" for none; "-" is
// stdout), reporting to log. Like any output it is written atomically:
// Close puts it in place, Abort drops it. An existing file is refused
// unless force (see CheckPaths).
func CreateRejects(path string, stdout io.Writer, log Logger, force bool) (*Rejects, error) {
	var w *Writer
	if path != "" {
		var err error
		w, err = Create(path, stdout, WriterOptions{Force: force, Flag: "--rejects"})
		if err != nil {
			return nil, fmt.Errorf("rejects file: %w", err)
		}
	}
	return NewRejects(log, w), nil
}

// Add rejects rec for reason. detail explains it for a person (a
// decoder's words put in the record's, see cli.Plain). The record
// written is the input with a "reject" field, or {"raw": line, "reject"}
// when the input is not a JSON object.
func (r *Rejects) Add(rec RawLine, reason, detail string) error {
	detail = cli.Plain(detail)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total++
	r.counts[reason]++
	if r.log != nil && r.counts[reason] <= reportLimit {
		where := rec.File
		if rec.Line > 0 {
			where = fmt.Sprintf("%s:%d", rec.File, rec.Line)
		}
		msg := where + ": " + reason
		if detail != "" {
			msg += ": " + detail
		}
		if r.counts[reason] == reportLimit {
			msg += " (further " + reason + " rejects are counted, not shown)"
		}
		r.log.Logf("%s", msg)
	}
	if r.w == nil {
		return nil
	}
	info := record.Reject{Reason: reason, Detail: detail, File: rec.File, Line: rec.Line}
	value, err := json.Marshal(info)
	if err != nil {
		return err
	}
	out, err := record.AppendField(r.buf[:0], rec.Data, "reject", value)
	if err != nil || !json.Valid(rec.Data) {
		out, _ = record.AppendField(r.buf[:0], record.RawLine(rec.Data), "reject", value)
	}
	r.buf = out
	err = r.w.Write(out)
	var tooLong *LineTooLongError
	if errors.As(err, &tooLong) {
		// The input and its reject do not fit on one line: the reject
		// alone still says where to find it.
		info.Detail = fmt.Sprintf("%s (the record, %d bytes with its reject, is too long to carry)", detail, tooLong.Len)
		if value, err = json.Marshal(info); err != nil {
			return err
		}
		out, _ = record.AppendField(r.buf[:0], []byte("{}"), "reject", value)
		err = r.w.Write(out)
	}
	if cap(r.buf) > keepLongBuffer {
		r.buf = nil
	}
	return err
}

// Input records a reader's InputError as a reject of its reason.
func (r *Rejects) Input(err error) error {
	var ie *InputError
	if !errors.As(err, &ie) {
		return err
	}
	return r.Add(RawLine{Data: ie.Data, File: ie.File, Line: ie.Line}, ie.Reason, ie.Err.Error())
}

// Total is the number of rejects so far.
func (r *Rejects) Total() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// Counts returns a copy of the per-reason counts.
func (r *Rejects) Counts() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int64, len(r.counts))
	for k, v := range r.counts {
		out[k] = v
	}
	return out
}

// Summary is "rejected N (reason n, reason n)", most frequent first, or
// "rejected 0".
func (r *Rejects) Summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.total == 0 {
		return "rejected 0"
	}
	reasons := make([]string, 0, len(r.counts))
	for k := range r.counts {
		reasons = append(reasons, k)
	}
	sort.Slice(reasons, func(i, j int) bool {
		a, b := r.counts[reasons[i]], r.counts[reasons[j]]
		if a != b {
			return a > b
		}
		return reasons[i] < reasons[j]
	})
	parts := make([]string, len(reasons))
	for i, k := range reasons {
		parts[i] = fmt.Sprintf("%s %d", k, r.counts[k])
	}
	return fmt.Sprintf("rejected %d (%s)", r.total, strings.Join(parts, ", "))
}

// Abort drops the rejects file of a run that failed or was interrupted,
// leaving any earlier file as it was.
func (r *Rejects) Abort() {
	if r.w != nil {
		r.w.Abort()
	}
}

// Err is cli.ErrRejects (exit 3) when anything was rejected, else nil:
// the end of a run whose rejects file Outputs put in place.
func (r *Rejects) Err() error {
	if r.Total() > 0 {
		return cli.ErrRejects
	}
	return nil
}

// Close puts the rejects file in place and returns cli.ErrRejects (exit 3)
// when anything was rejected, or the file's write error.
func (r *Rejects) Close() error {
	var err error
	if r.w != nil {
		err = r.w.Close()
	}
	if err != nil {
		return fmt.Errorf("rejects file: %w", err)
	}
	return r.Err()
}
