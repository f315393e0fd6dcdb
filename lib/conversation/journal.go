package conversation

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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
// unfinished; --force empties it with -o. Its lines are keyed by Key.

// JournalPath is the turn journal beside the output file.
func JournalPath(output string) string { return output + ".turns" }

// JournalLine is one regenerated turn in the journal.
type JournalLine struct {
	ID     record.ID      `json:"id"`
	Sample int            `json:"sample"`
	FP     string         `json:"fp"`
	Base   int            `json:"base"`
	Turn   int            `json:"turn"`
	Model  string         `json:"model,omitempty"`
	Answer record.Message `json:"answer"`
	Meta   record.Turn    `json:"meta"`
}

// Fingerprint identifies a prompt record's bytes, so a journal is
// replayed only onto the record it was written for.
func Fingerprint(prompt []byte) string {
	return strconv.FormatUint(xxh3.Hash(prompt), 16)
}

// Key is the key of a (conversation, sample) in the journal, and in the
// counts Load takes.
func Key(id string, sample int) xxh3.Uint128 {
	buf := make([]byte, 0, len(id)+9)
	buf = append(buf, id...)
	buf = append(buf, 0, byte(sample>>24), byte(sample>>16), byte(sample>>8), byte(sample))
	return xxh3.Hash128(buf)
}

// Journal appends turn lines; safe for concurrent use.
type Journal struct {
	path string
	out  *jsonl.Appender // nil until Open
	mu   sync.Mutex      // guards pending and bases
	// pending are the replayable turns read at resume, by (id, sample),
	// until their conversation claims them.
	pending map[xxh3.Uint128][]JournalLine
	// bases are the records -o held of each (id, sample) the journal or
	// --redo-length names: the base of a new attempt at it.
	bases map[xxh3.Uint128]int
}

// NewJournal is the journal at path, not opened yet.
func NewJournal(path string) *Journal {
	return &Journal{path: path, pending: map[xxh3.Uint128][]JournalLine{}, bases: map[xxh3.Uint128]int{}}
}

// Path is where the journal is.
func (jn *Journal) Path() string { return jn.path }

// Open creates the journal or opens it to append, never through a
// symbolic link planted at its name.
func (jn *Journal) Open() error {
	path := jn.path
	jn.out = jsonl.NewAppender(path, func() (*os.File, error) {
		return jsonl.OpenSidecar("-o's turn journal", path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	})
	if err := jn.out.Open(); err != nil {
		return fmt.Errorf("turn journal: %w", err)
	}
	return nil
}

// Write appends one turn, on file before it returns: a kill leaves the
// line whole or absent (resume repairs a torn tail all the same).
func (jn *Journal) Write(l *JournalLine) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return jn.out.WriteLineNow(b)
}

// IsOpen says whether the journal is open: opened, and not closed yet.
func (jn *Journal) IsOpen() bool { return jn.out != nil && jn.out.IsOpen() }

// Close syncs and closes the journal.
func (jn *Journal) Close() error {
	if jn.out == nil {
		return nil
	}
	return jn.out.Close()
}

// Claim returns (and forgets) the journaled turns of (id, sample) for a
// prompt record with fingerprint fp, in order from turn 0; none when the
// lines were written for another version of the record.
func (jn *Journal) Claim(id string, sample int, fp string) []JournalLine {
	jn.mu.Lock()
	defer jn.mu.Unlock()
	k := Key(id, sample)
	lines := jn.pending[k]
	delete(jn.pending, k)
	if len(lines) == 0 || lines[0].FP != fp {
		return nil
	}
	return lines
}

// Base is the base of a new attempt at (id, sample).
func (jn *Journal) Base(id string, sample int) int {
	jn.mu.Lock()
	defer jn.mu.Unlock()
	return jn.bases[Key(id, sample)]
}

// Unclaimed counts the conversations whose journaled turns no input
// record claimed: the journal must stay for them.
func (jn *Journal) Unclaimed() int {
	jn.mu.Lock()
	defer jn.mu.Unlock()
	return len(jn.pending)
}

// ReadJournal calls fn with every line of the journal at path that parses
// (a line that does not is reported and skipped); a missing file has none.
func ReadJournal(path string, warn func(string, ...any), fn func(l *JournalLine, raw []byte) error) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	r := jsonl.NewReader(context.Background(), nil, []string{path}, nil, jsonl.Options{}) // the run's own journal, read before the run starts
	defer r.Close()
	shown := 0
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return nil
		}
		var l JournalLine
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

// Load keeps the journal's live lines (by the rules above), given
// the records -o holds of each key and whether an (id, sample) is done,
// and rewrites the journal to them when it held others. It returns how
// many conversations and turns it keeps.
func (jn *Journal) Load(counts map[xxh3.Uint128]int, done func(id string, sample int) bool, warn func(string, ...any)) (convs, turns int, err error) {
	for k, n := range counts {
		jn.bases[k] = n
	}
	raws := map[xxh3.Uint128][][]byte{}
	var order []xxh3.Uint128
	dropped := 0
	err = ReadJournal(jn.path, warn, func(line *JournalLine, raw []byte) error {
		k := Key(line.ID.Text, line.Sample)
		list := jn.pending[k]
		if line.Turn == 0 && len(list) > 0 {
			// A later attempt (the record changed, so the earlier turns
			// were not replayed): it replaces the earlier one.
			dropped += len(list)
			list, raws[k] = nil, nil
		}
		live := line.Base == counts[k] && !done(line.ID.Text, line.Sample) &&
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
