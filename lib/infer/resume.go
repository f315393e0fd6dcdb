package infer

import (
	"errors"
	"fmt"
	"os"

	"github.com/zeebo/xxh3"

	"tokenmill/lib/conversation"
	"tokenmill/lib/jsonl"
)

// Resume: with -o FILE and --resume, the answers already in FILE are
// skipped and new ones appended. The output file is the only record of
// what is done: a prompt whose only record is in the errors file is tried
// again (the errors file lists the failures of the latest run alone).

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
