// Package settings keeps the settings each answer of a run was made with
// (record.Settings): their hashes, worked out once per distinct kind of
// answer, and the sidecar beside the output that describes each of them
// once, before any record names it.
package settings

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// How each answer was made travels with it: every generation record
// carries the hash of its settings (output.settings: the run's flags,
// --extra-body, the arm, the keys the record's own params set, the model
// and, with token ids, the server's kind and version) and of their family
// (output.settings_family: what decides whether answers belong in one
// training file). Each distinct settings is written once, as one whole
// line, to the sidecar beside the output (gen.jsonl.settings.jsonl) when
// it first appears, before any record that names it: a kill leaves the
// line whole or absent, and never a record whose settings the sidecar
// lacks. The hashes are computed once per distinct Key, not per record.

// Key is what makes one answer's settings differ from another's in a
// run.
type Key struct {
	Arm             int // 1 + the index of the answer's arm (0: none)
	Model           string
	Server, Version string // the server's kind and version ("": not asked)
	Params          string // the keys the record's own params set (ParamKeys)
}

// IDs are the hashes an answer's record carries: its settings' and their
// family's.
type IDs struct{ Hash, Family string }

// Arm is one arm of a mixture as the settings name it: its params
// canonical (record.Canonical).
type Arm struct {
	Name   string
	Params json.RawMessage
}

// Book is a run's settings: the run's own, those of each key, the lines
// the sidecar holds, and the sidecar to append new ones to.
type Book struct {
	base record.Settings
	arms []Arm
	path string // the sidecar; "": none (new settings are logged)
	logf func(format string, args ...any)

	mu     sync.Mutex
	byKey  map[Key]IDs
	known  record.SettingsIndex // on file (read at resume) or written
	onFile int                  // the lines read from the sidecar at resume
	out    *jsonl.Appender      // nil until Open, and without a sidecar
}

// New is the book of a run whose answers share base, with the arms of
// its mixture, whose sidecar is path ("": none).
func New(base record.Settings, arms []Arm, path string, logf func(format string, args ...any)) *Book {
	return &Book{base: base, arms: arms, path: path, logf: logf, byKey: map[Key]IDs{}}
}

// Path is the sidecar ("": none).
func (b *Book) Path() string { return b.path }

// ParamKeys are the keys a record's own params set, sorted and
// comma-separated ("" for none).
func ParamKeys(params []byte) string {
	if len(params) == 0 {
		return ""
	}
	var keys []string
	record.EachField(params, func(key string, _ []byte) error {
		keys = append(keys, key)
		return nil
	})
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

// IDs are the hashes of the settings of an answer of key k: found, or
// made and written to the sidecar (logged without one) when they first
// appear.
func (b *Book) IDs(k Key) (IDs, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ids, ok := b.byKey[k]; ok {
		return ids, nil
	}
	s := b.base
	s.Model, s.Server, s.ServerVersion = k.Model, k.Server, k.Version
	if k.Arm > 0 {
		s.Arm, s.ArmParams = b.arms[k.Arm-1].Name, b.arms[k.Arm-1].Params
	}
	if k.Params != "" {
		s.Params = strings.Split(k.Params, ",")
	}
	line, err := s.Line()
	if err != nil {
		return IDs{}, fmt.Errorf("settings: %w", err)
	}
	ids := IDs{line.Hash, line.Family}
	if b.known.Add(line) {
		text, err := json.Marshal(line)
		if err != nil {
			return IDs{}, fmt.Errorf("settings: %w", err)
		}
		if b.out != nil {
			// On file before any record that names it.
			if err := b.out.WriteLineNow(text); err != nil {
				return IDs{}, fmt.Errorf("settings sidecar: %w", err)
			}
		} else {
			b.logf("settings %s: %s", line.Hash, text)
		}
	}
	b.byKey[k] = ids
	return ids, nil
}

// Read reads the sidecar of the file a run continues (a partial last line
// is left for Open to cut).
func (b *Book) Read() error {
	if b.path == "" {
		return nil
	}
	_, skipped, err := jsonl.ReadSettings(b.path, &b.known)
	if err != nil {
		return fmt.Errorf("reading %s: %w", b.path, err)
	}
	if skipped > 0 {
		b.logf("%s: %d lines that are not settings lines ignored", b.path, skipped)
	}
	b.onFile = len(b.known.Lines)
	return nil
}

// OnFile are the settings lines of the records of the file the run
// continues, counted by their settings' hash (in the sidecar's order),
// and the records named by no line of the sidecar (unknown).
func (b *Book) OnFile(counts map[string]int64) (lines []*record.SettingsLine, unknown int64) {
	for i := range b.known.Lines[:b.onFile] {
		if l := &b.known.Lines[i]; counts[l.Hash] > 0 {
			lines = append(lines, l)
		}
	}
	for h, n := range counts {
		if l := b.known.Get(h); l == nil {
			unknown += n
		}
	}
	return lines, unknown
}

// Differs tells whether the run's settings (the model aside) differ from
// those of every one of lines; field, was and now say how they differ from
// the latest. A file already made with several settings is continued with
// any of them.
func (b *Book) Differs(lines []*record.SettingsLine) (field, was, now string, differ bool) {
	if len(lines) == 0 {
		return "", "", "", false
	}
	for _, l := range lines {
		if _, _, _, ok := record.Differ(&l.Settings, &b.base, record.RunFields); !ok {
			return "", "", "", false
		}
	}
	return record.Differ(&lines[len(lines)-1].Settings, &b.base, record.RunFields)
}

// Open readies the sidecar to append to: a partial last line left by a
// crash cut off where the run continues its output, or else the sidecar
// of an output that is no more removed. secrets are redacted from it.
func (b *Book) Open(continues bool, secrets *cli.Secrets) error {
	if b.path == "" {
		return nil
	}
	path := b.path
	if !continues {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing the previous settings sidecar: %w", err)
		}
	} else {
		cut, err := jsonl.RepairTailAt(path, func(path string) (*os.File, error) {
			return jsonl.OpenSidecar("-o's settings sidecar", path, os.O_RDWR, 0)
		})
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if cut > 0 {
			b.logf("%s: removed a partial last line (%d bytes) left by an interrupted run", path, cut)
		}
	}
	out := jsonl.NewAppender(path, func() (*os.File, error) {
		return jsonl.OpenSidecar("-o's settings sidecar", path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	})
	out.Redact(secrets)
	b.mu.Lock()
	b.out = out
	b.mu.Unlock()
	return nil
}

// Close makes the sidecar's lines durable; it may be called again.
func (b *Book) Close() error {
	b.mu.Lock()
	out := b.out
	b.mu.Unlock()
	if out == nil {
		return nil
	}
	return out.Close()
}
