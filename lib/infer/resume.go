package infer

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

// Resume: with -o FILE and --resume, the answers already in FILE are
// skipped and new ones appended. The output file is the only record of
// what is done: a prompt whose only record is in the errors file is tried
// again (the errors file lists the failures of the latest run alone).

// resumeInfo is what reading an existing output file found.
type resumeInfo struct {
	Answers    int64 // generation records counted as done
	Length     int64 // of those, or beside them, finish_reason "length" ones redone under --redo-length
	Unreadable int64 // lines that are not generation records (reported, ignored)
	Repaired   int64 // bytes of a partial last line removed
	// Settings counts the records by their settings' hash, and
	// NoSettings those without one (written before infer recorded them).
	Settings   map[string]int64
	NoSettings int64
}

// countSettings counts a record whose settings' hash is h.
func (info *resumeInfo) countSettings(h string) {
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

// journalKeys reads the (id, sample) keys the journal at path names,
// after cutting a partial last line off it.
func journalKeys(path string, warn func(string, ...any)) (map[xxh3.Uint128]int, error) {
	keys := map[xxh3.Uint128]int{}
	cut, err := jsonl.RepairTailAt(path, func(path string) (*os.File, error) {
		return jsonl.OpenSidecar("-o's turn journal", path, os.O_RDWR, 0)
	})
	if errors.Is(err, os.ErrNotExist) {
		return keys, nil
	}
	if err != nil {
		return nil, err
	}
	if cut > 0 {
		warn("%s: removed a partial last line (%d bytes) left by an interrupted run", path, cut)
	}
	err = conversation.ReadJournal(path, warn, func(l *conversation.JournalLine, _ []byte) error {
		keys[conversation.Key(l.ID.Text, l.Sample)] = 0
		return nil
	})
	return keys, err
}

// doneRecord is the part of a generation record resume reads.
type doneRecord struct {
	ID     record.ID `json:"id"`
	Output *struct {
		Sample       int    `json:"sample"`
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

// scanDone marks every answer in the output file at path as done in l
// (unless skip is false, for --append: then it only counts them).
// Under redoLength an answer whose only records finished with "length"
// (or, for a conversation, had a turn that did) is left undone, so it is
// generated again (and both records then sit in the file for merge to
// choose from). counts (nil: none) counts the records of the (id, sample)
// keys it holds, and gains the keys of answers left to redo.
func scanDone(path string, skip, redoLength bool, l *ledger, counts map[xxh3.Uint128]int, warn func(string, ...any)) (resumeInfo, error) {
	var info resumeInfo
	r := jsonl.NewReader(context.Background(), nil, []string{path}, nil, jsonl.Options{}) // the run's own output, read before the run starts
	defer r.Close()
	var lengthOnly []struct {
		id     string
		sample int
	}
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
				warn("%s:%d: ignored while resuming: %v", path, rec.Line, err)
			}
			continue
		}
		if l.arms != nil {
			l.arms.see(d.ID.Text, d.Output.Sample, d.Output.Arm)
		}
		info.countSettings(d.Output.Settings)
		if counts != nil {
			k := conversation.Key(d.ID.Text, d.Output.Sample)
			if _, ok := counts[k]; ok {
				counts[k]++
			} else if redoLength && d.cutByLength() {
				counts[k] = 1
			}
		}
		if redoLength && d.cutByLength() {
			info.Length++
			lengthOnly = append(lengthOnly, struct {
				id     string
				sample int
			}{d.ID.Text, d.Output.Sample})
			continue
		}
		if !skip {
			info.Answers++
			continue
		}
		if !l.done(d.ID.Text, d.Output.Sample) {
			info.Answers++
		}
		l.markDone(d.ID.Text, d.Output.Sample)
	}
	// A length answer counts as done again if a better record for the same
	// answer is also in the file (a redo that already succeeded).
	for _, a := range lengthOnly {
		if l.done(a.id, a.sample) {
			info.Length--
		}
	}
	return info, nil
}

// How -o is written (outputPlan.mode).
const (
	outNew     = iota // a new file, created where no file is (O_EXCL, never through a link)
	outAppend         // the existing file, continued (--resume) or empty
	outReplace        // a new file renamed over what is there (--force, or a link not followed)
)

// outputPlan is the file -o names and how the run writes it.
type outputPlan struct {
	path string // the file written: -o, or the file a link at -o leads to (--resume)
	mode int
}

// planOutput refuses, before anything is written, an output file that the
// run would overwrite: one that is not a regular file, or one that is not
// empty, unless resume continues it or force replaces it. A symbolic link
// at -o is followed only to continue the file it leads to (--resume);
// otherwise it is replaced by the new file like any tool's output, and
// its target left alone: --force never truncates a file through a link,
// nor (through a hard link) another name's content, since the new file
// is put in place by a rename.
func planOutput(name string, resume, force bool) (outputPlan, error) {
	st, err := os.Lstat(name)
	if errors.Is(err, os.ErrNotExist) {
		return outputPlan{name, outNew}, nil
	}
	if err != nil {
		return outputPlan{}, err
	}
	if st.Mode()&os.ModeSymlink != 0 {
		target, terr := os.Stat(name)
		switch {
		case terr == nil && !target.Mode().IsRegular():
			return outputPlan{}, fmt.Errorf("%s is not a regular file", name)
		case terr == nil && resume:
			return outputPlan{jsonl.Resolve(name), outAppend}, nil
		case terr == nil && target.Size() > 0 && !force:
			return outputPlan{}, errOutputExists
		}
		return outputPlan{name, outReplace}, nil // a dangling link, or not --resume
	}
	if !st.Mode().IsRegular() {
		return outputPlan{}, fmt.Errorf("%s is not a regular file", name)
	}
	switch {
	case force:
		return outputPlan{name, outReplace}, nil
	case st.Size() > 0 && !resume:
		return outputPlan{}, errOutputExists
	}
	return outputPlan{name, outAppend}, nil
}

var errOutputExists = errors.New("output exists")

// resumeOutput readies the output file at path to be continued: a
// partial last line is cut off and the answers in the file are marked
// done in l (with skip; --append only counts them). A file that does not
// exist yet has nothing done.
func resumeOutput(path string, skip, redoLength bool, l *ledger, counts map[xxh3.Uint128]int, warn func(string, ...any)) (resumeInfo, error) {
	cut, err := jsonl.RepairTailAt(path, func(path string) (*os.File, error) {
		return os.OpenFile(path, os.O_RDWR|jsonl.NoFollow, 0)
	})
	if errors.Is(err, os.ErrNotExist) {
		return resumeInfo{}, nil
	}
	if err != nil {
		return resumeInfo{}, err
	}
	if cut > 0 {
		warn("%s: removed a partial last line (%d bytes) left by an interrupted run", path, cut)
	}
	info, err := scanDone(path, skip, redoLength, l, counts, warn)
	info.Repaired = cut
	return info, err
}
