package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/zeebo/xxh3"

	"tokenmill/lib/conversation"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// Resume: a run that continues its output file (infer --resume) skips the
// answers already in it. The output file is the only record of what is
// done: a prompt whose only record is in the errors file is tried again
// (the errors file lists the failures of the latest run alone).

// Info is what reading an existing output file found.
type Info struct {
	Answers    int64 // generation records counted as done
	Length     int64 // of those, or beside them, finish_reason "length" ones redone under RedoLength
	Unreadable int64 // lines that are not generation records (reported, ignored)
	Repaired   int64 // bytes of a partial last line removed
	// Settings counts the records by their settings' hash, and
	// NoSettings those without one (written before infer recorded them).
	Settings   map[string]int64
	NoSettings int64
	// FreeSeedOffset is one past the highest seed offset plus sample of
	// the records (output.seed_offset, 0 when absent): the lowest
	// --seed-offset whose requests ask no seed any of them was asked with.
	FreeSeedOffset int64
}

// countSettings counts a record whose settings' hash is h.
func (info *Info) countSettings(h string) {
	switch {
	case h == "":
		info.NoSettings++
	case info.Settings == nil:
		info.Settings = map[string]int64{strings.Clone(h): 1}
	default:
		if _, ok := info.Settings[h]; ok {
			info.Settings[h]++
		} else {
			info.Settings[strings.Clone(h)] = 1
		}
	}
}

// Options say how an output file is read back.
type Options struct {
	// Skip marks its answers done (--resume); without it they are only
	// counted (--append answers every prompt again).
	Skip bool
	// RedoLength leaves undone an answer whose only records finished with
	// "length" (or, for a conversation, had a turn that did), so it is
	// generated again (and both records then sit in the file for merge to
	// choose from).
	RedoLength bool
	// Counts (nil: none) counts the records of the (id, sample) keys it
	// holds, and gains the keys of answers left to redo.
	Counts map[xxh3.Uint128]int
	// Arm (nil: none) sees the arm of every answer read.
	Arm  func(id string, sample int, arm string)
	Warn func(format string, args ...any)
}

// doneRecord is the part of a generation record resume reads.
type doneRecord struct {
	ID     record.ID `json:"id"`
	Output *struct {
		Sample       int    `json:"sample"`
		SeedOffset   int64  `json:"seed_offset"`
		FinishReason string `json:"finish_reason"`
		Arm          string `json:"arm"`
		Settings     string `json:"settings"`
		Turns        []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"turns"`
	} `json:"output"`
}

// cutByLength tells whether the answer, or any turn of a regenerated
// conversation, finished with "length".
func (d *doneRecord) cutByLength() bool {
	if d.Output.FinishReason == record.FinishLength {
		return true
	}
	for _, t := range d.Output.Turns {
		if t.FinishReason == record.FinishLength {
			return true
		}
	}
	return false
}

// Scan reads the output file at path into l: see Options.
func (l *Ledger) Scan(path string, o Options) (Info, error) {
	var info Info
	r := jsonl.NewReader(context.Background(), nil, []string{path}, nil, jsonl.Options{}) // the run's own output, read before the run starts
	defer r.Close()
	type answer struct {
		id     string
		sample int
	}
	var lengthOnly []answer
	shown := 0
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		var d doneRecord
		if err == nil {
			err = record.Decode(rec.Data, &d)
			if err == nil && (d.ID.IsZero() || d.Output == nil) {
				err = errors.New("not a generation record (no id or no output)")
			}
		}
		if err != nil {
			var ie *jsonl.InputError
			if errors.As(err, &ie) && ie.Reason == jsonl.ReasonUnreadable && ie.Line == 0 {
				return info, fmt.Errorf("reading %s to resume: %w", path, err)
			}
			info.Unreadable++
			if shown < 5 {
				shown++
				o.Warn("%s:%d: ignored while resuming: %v", path, rec.Line, err)
			}
			continue
		}
		id, sample := d.ID.Text, d.Output.Sample
		if o.Arm != nil {
			o.Arm(id, sample, d.Output.Arm)
		}
		info.countSettings(d.Output.Settings)
		if next := d.Output.SeedOffset + int64(sample) + 1; next > info.FreeSeedOffset && d.Output.SeedOffset >= 0 && next > 0 {
			info.FreeSeedOffset = next
		}
		redo := o.RedoLength && d.cutByLength()
		if o.Counts != nil {
			k := conversation.Key(id, sample)
			if _, ok := o.Counts[k]; ok {
				o.Counts[k]++
			} else if redo {
				o.Counts[k] = 1
			}
		}
		switch {
		case redo:
			info.Length++
			lengthOnly = append(lengthOnly, answer{id, sample})
		case !o.Skip:
			info.Answers++
		default:
			if !l.Done(id, sample) {
				info.Answers++
			}
			l.MarkDone(id, sample)
		}
	}
	// A length answer counts as done again if a better record for the same
	// answer is also in the file (a redo that already succeeded).
	for _, a := range lengthOnly {
		if l.Done(a.id, a.sample) {
			info.Length--
		}
	}
	return info, nil
}

// Resume readies the output file at path to be continued: a partial last
// line is cut off and the file read into l (Scan). A file that does not
// exist yet has nothing done.
func (l *Ledger) Resume(path string, o Options) (Info, error) {
	cut, err := jsonl.RepairTailAt(path, func(path string) (*os.File, error) {
		return os.OpenFile(path, os.O_RDWR|jsonl.NoFollow, 0)
	})
	if errors.Is(err, os.ErrNotExist) {
		return Info{}, nil
	}
	if err != nil {
		return Info{}, err
	}
	if cut > 0 {
		o.Warn("%s: removed a partial last line (%d bytes) left by an interrupted run", path, cut)
	}
	info, err := l.Scan(path, o)
	info.Repaired = cut
	return info, err
}
