package infer

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/segmentio/encoding/json"
	"github.com/zeebo/xxh3"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// The turn journal: with --regenerate and -o FILE, every regenerated turn
// is appended to FILE.turns as one whole line, written to the file before
// the next turn is sent, so a killed conversation resumes from its last
// completed turn instead of its first. The generation record goes to -o
// once the whole conversation is done; -o stays the one record of what is
// finished, and the journal only says how far the unfinished ones got.
//
// A journal line belongs to one attempt at a (conversation, sample): it
// carries the prompt record's fingerprint (a changed input record starts
// over) and base, the number of records of that (id, sample) -o held when
// the attempt began. Once the attempt's record is written -o holds one
// more, and its lines are stale: --resume keeps the lines whose base is
// still the count (compacting the journal to them), and replays them.
//
// infer creates the journal and removes it when a run ends with nothing
// unfinished; --force empties it with -o.

// JournalPath is the turn journal beside the output file.
func JournalPath(output string) string { return output + ".turns" }

// journalLine is one regenerated turn in the journal.
type journalLine struct {
	ID     record.ID      `json:"id"`
	Sample int            `json:"sample"`
	FP     string         `json:"fp"`
	Base   int            `json:"base"`
	Turn   int            `json:"turn"`
	Model  string         `json:"model,omitempty"`
	Answer record.Message `json:"answer"`
	Meta   record.Turn    `json:"meta"`
}

// fingerprint identifies a prompt record's bytes, so a journal is
// replayed only onto the record it was written for.
func fingerprint(prompt []byte) string {
	return strconv.FormatUint(xxh3.Hash(prompt), 16)
}

// journal appends turn lines; safe for concurrent use.
type journal struct {
	path string
	mu   sync.Mutex
	f    *os.File
	err  error
	// pending are the replayable turns read at resume, by (id, sample),
	// until their conversation claims them.
	pending map[xxh3.Uint128][]journalLine
	// bases are the records -o held of each (id, sample) the journal or
	// --redo-length names: the base of a new attempt at it.
	bases map[xxh3.Uint128]int
}

func newJournal(path string) *journal {
	return &journal{path: path, pending: map[xxh3.Uint128][]journalLine{}, bases: map[xxh3.Uint128]int{}}
}

// open creates the journal or opens it to append.
func (jn *journal) open() error {
	if dir := filepath.Dir(jn.path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(jn.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("turn journal: %w", err)
	}
	jn.f = f
	return nil
}

// write appends one turn with a single write(2): a kill leaves the line
// whole or absent (resume repairs a torn tail all the same).
func (jn *journal) write(l *journalLine) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	jn.mu.Lock()
	defer jn.mu.Unlock()
	if jn.err != nil {
		return jn.err
	}
	if _, err := jn.f.Write(b); err != nil {
		jn.err = fmt.Errorf("writing %s: %w", jn.path, err)
	}
	return jn.err
}

// close syncs and closes the journal.
func (jn *journal) close() error {
	jn.mu.Lock()
	defer jn.mu.Unlock()
	if jn.f == nil {
		return jn.err
	}
	err := jn.f.Sync()
	if cerr := jn.f.Close(); err == nil {
		err = cerr
	}
	jn.f = nil
	if jn.err == nil && err != nil {
		jn.err = err
	}
	return jn.err
}

// claim returns (and forgets) the journaled turns of (id, sample) for a
// prompt record with fingerprint fp, in order from turn 0; none when the
// lines were written for another version of the record.
func (jn *journal) claim(id string, sample int, fp string) []journalLine {
	jn.mu.Lock()
	defer jn.mu.Unlock()
	k := sampleKey(id, sample)
	lines := jn.pending[k]
	delete(jn.pending, k)
	if len(lines) == 0 || lines[0].FP != fp {
		return nil
	}
	return lines
}

// base is the base of a new attempt at (id, sample).
func (jn *journal) base(id string, sample int) int {
	jn.mu.Lock()
	defer jn.mu.Unlock()
	return jn.bases[sampleKey(id, sample)]
}

// unclaimed counts the conversations whose journaled turns no input
// record claimed: the journal must stay for them.
func (jn *journal) unclaimed() int {
	jn.mu.Lock()
	defer jn.mu.Unlock()
	return len(jn.pending)
}

// readJournal calls fn with every line of the journal at path that parses
// (a line that does not is reported and skipped); a missing file has none.
func readJournal(path string, warn func(string, ...any), fn func(l *journalLine, raw []byte) error) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	r := jsonl.NewReader([]string{path}, nil, jsonl.Options{})
	defer r.Close()
	shown := 0
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return nil
		}
		var l journalLine
		var data []byte
		if err == nil {
			// A copy: the decoded strings alias it, and the turns are kept.
			data = append([]byte(nil), rec.Data...)
			if err = record.Decode(data, &l); err == nil && (l.ID.IsZero() || l.FP == "" || l.Turn < 0) {
				err = errors.New("not a turn line")
			}
		}
		if err != nil {
			var ie *jsonl.InputError
			if errors.As(err, &ie) && ie.Reason == jsonl.ReasonUnreadable && ie.Line == 0 {
				return fmt.Errorf("reading %s to resume: %w", path, err)
			}
			if shown < 5 {
				shown++
				warn("%s:%d: ignored while resuming: %v", path, rec.Line, err)
			}
			continue
		}
		if err := fn(&l, data); err != nil {
			return err
		}
	}
}

// journalKeys reads the (id, sample) keys the journal at path names,
// after cutting a partial last line off it.
func journalKeys(path string, warn func(string, ...any)) (map[xxh3.Uint128]int, error) {
	keys := map[xxh3.Uint128]int{}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return keys, nil
	}
	if err != nil {
		return nil, err
	}
	cut, err := repairTail(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("repairing %s: %w", path, err)
	}
	if cut > 0 {
		warn("%s: removed a partial last line (%d bytes) left by an interrupted run", path, cut)
	}
	err = readJournal(path, warn, func(l *journalLine, _ []byte) error {
		keys[sampleKey(l.ID.Text, l.Sample)] = 0
		return nil
	})
	return keys, err
}

// load keeps the journal's live lines (see the type's comment), given the
// records -o holds of each key, and rewrites the journal to them when it
// held others. It returns how many conversations and turns it keeps.
func (jn *journal) load(counts map[xxh3.Uint128]int, l *ledger, warn func(string, ...any)) (convs, turns int, err error) {
	for k, n := range counts {
		jn.bases[k] = n
	}
	raws := map[xxh3.Uint128][][]byte{}
	var order []xxh3.Uint128
	dropped := 0
	err = readJournal(jn.path, warn, func(line *journalLine, raw []byte) error {
		k := sampleKey(line.ID.Text, line.Sample)
		list := jn.pending[k]
		if line.Turn == 0 && len(list) > 0 {
			// A later attempt (the record changed, so the earlier turns
			// were not replayed): it replaces the earlier one.
			dropped += len(list)
			list, raws[k] = nil, nil
		}
		live := line.Base == counts[k] && !l.done(line.ID.Text, line.Sample) &&
			line.Turn == len(list) && (len(list) == 0 || list[0].FP == line.FP)
		if !live {
			dropped++
			if len(list) == 0 {
				delete(jn.pending, k)
			}
			return nil
		}
		if _, seen := raws[k]; !seen {
			order = append(order, k)
		}
		jn.pending[k] = append(list, *line)
		raws[k] = append(raws[k], raw)
		return nil
	})
	var keep [][]byte
	for _, k := range order {
		keep = append(keep, raws[k]...)
	}
	if err != nil || dropped == 0 {
		return len(jn.pending), len(keep), err
	}
	return len(jn.pending), len(keep), rewriteFile(jn.path, keep)
}

// rewriteFile replaces the file at path with lines, through the house's
// one file-safety helper: a kill leaves the old file or the new one.
func rewriteFile(path string, lines [][]byte) error {
	err := jsonl.WriteFile(path, jsonl.CreateFileOptions{Replace: true}, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		for _, line := range lines {
			bw.Write(line)
			if err := bw.WriteByte('\n'); err != nil {
				return err
			}
		}
		return bw.Flush()
	})
	if err != nil {
		return fmt.Errorf("compacting %s: %w", path, err)
	}
	return nil
}
