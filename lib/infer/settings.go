package infer

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/fleet"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/ledger"
	"tokenmill/lib/record"
)

// How each answer was made travels with it: every generation record
// carries the hash of its settings (output.settings, record.Settings: the
// run's flags, --extra-body, the arm, the keys the record's own params
// set, the model and, with --token-ids, the server's kind and version)
// and of their family (output.settings_family: what decides whether
// answers belong in one training file). Each distinct settings is
// written once, as one whole line, to the sidecar beside -o
// (gen.jsonl.settings.jsonl) when it first appears, before any record
// that names it: a kill leaves the line whole or absent, and never a
// record whose settings the sidecar lacks. The hashes are computed once
// per distinct (arm, model, server, params keys), not per record.
//
// --resume and --append compare the run's settings with those of the
// records in the file they continue, and refuse another run's (the first
// field that differs named) unless --allow-changed-settings; records
// written before infer recorded settings are not compared (said so).

// settingsKey is what makes one answer's settings differ from another's
// in a run.
type settingsKey struct {
	arm    int
	model  string
	server string // kind and version
	params string // the keys of the record's own params
}

type settingsIDs struct{ hash, family string }

// settingsBook is the run's settings: the run's own, those of each key,
// the lines the sidecar holds, and the sidecar to append new ones to.
type settingsBook struct {
	base record.Settings
	// armParams are each arm's params, canonical.
	armParams []json.RawMessage
	path      string // the sidecar; "" with stdout

	mu    sync.Mutex
	byKey map[settingsKey]settingsIDs
	known record.SettingsIndex // on file (read at resume) or written
	// onFile are the lines read from the sidecar at resume.
	onFile int
	out    *jsonl.Appender // nil until openFiles, and with stdout
}

func newSettingsBook(c *Config) *settingsBook {
	return &settingsBook{base: c.Settings, armParams: c.ArmParams, byKey: map[settingsKey]settingsIDs{}}
}

// paramKeys are the keys a record's own params set, sorted and
// comma-separated ("" for none).
func paramKeys(params []byte) string {
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

// settingsOf is the settings of j's answer, served by the endpoint named
// name (ep, when the run has it): found, or made and written to the
// sidecar (logged with stdout) when they first appear.
func (r *runner) settingsOf(ep *fleet.Endpoint, name string, j *job) (settingsIDs, error) {
	b := r.settings
	k := settingsKey{arm: j.arm, model: r.model, params: j.params}
	if ep != nil {
		k.model = r.modelOf(ep)
	}
	if r.cfg.TokenIDs && name != "" {
		if sb := r.servedBy(name); sb != nil {
			k.server = sb.Server + "\x00" + sb.Version
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if ids, ok := b.byKey[k]; ok {
		return ids, nil
	}
	s := b.base
	s.Model = k.model
	if kind, version, ok := strings.Cut(k.server, "\x00"); ok {
		s.Server, s.ServerVersion = kind, version
	}
	if j.arm > 0 {
		s.Arm, s.ArmParams = r.armName(j), b.armParams[j.arm-1]
	}
	if k.params != "" {
		s.Params = strings.Split(k.params, ",")
	}
	line, err := s.Line()
	if err != nil {
		return settingsIDs{}, fmt.Errorf("settings: %w", err)
	}
	ids := settingsIDs{line.Hash, line.Family}
	if b.known.Add(line) {
		text, err := json.Marshal(line)
		if err != nil {
			return settingsIDs{}, fmt.Errorf("settings: %w", err)
		}
		if b.out != nil {
			// On file before any record that names it.
			if err := b.out.WriteLineNow(text); err != nil {
				return settingsIDs{}, fmt.Errorf("settings sidecar: %w", err)
			}
		} else {
			r.logf("settings %s: %s", line.Hash, text)
		}
	}
	b.byKey[k] = ids
	return ids, nil
}

// readSettings reads the sidecar of the file a run continues (a partial
// last line is left for openFiles to cut).
func (r *runner) readSettings() error {
	b := r.settings
	if b.path == "" {
		return nil
	}
	_, skipped, err := jsonl.ReadSettings(b.path, &b.known)
	if err != nil {
		return fmt.Errorf("reading %s: %w", b.path, err)
	}
	if skipped > 0 {
		r.logf("%s: %d lines that are not settings lines ignored", b.path, skipped)
	}
	b.onFile = len(b.known.Lines)
	return nil
}

// fileSettings are the settings lines of the records in the file the
// run continues (in the sidecar's order), and the records whose
// settings are not known: written before infer recorded settings
// (none), or named by no line of the sidecar (unknown).
func (r *runner) fileSettings(info ledger.Info) (lines []*record.SettingsLine, none, unknown int64) {
	b := r.settings
	for i := range b.known.Lines[:b.onFile] {
		if l := &b.known.Lines[i]; info.Settings[l.Hash] > 0 {
			lines = append(lines, l)
		}
	}
	for h, n := range info.Settings {
		if l := b.known.Get(h); l == nil {
			unknown += n
		}
	}
	return lines, info.NoSettings, unknown
}

// checkSettings refuses to continue a file none of whose records were
// made with the run's settings (the model aside, checked once the
// servers are up), unless --allow-changed-settings; records whose
// settings are not known are said so, and not compared.
func (r *runner) checkSettings(info ledger.Info) error {
	lines, none, unknown := r.fileSettings(info)
	name := r.cfg.Output
	if none > 0 {
		r.logf("%s: %s records were written before infer recorded settings: their settings are not known, and not compared with this run's", name, cli.Thousands(none))
	}
	if unknown > 0 {
		r.logf("%s: %s records name settings that %s does not describe: not compared with this run's", name, cli.Thousands(unknown), r.settings.path)
	}
	// A file already made with several settings (--allow-changed-settings)
	// is continued with any of them; the refusal names what differs from
	// the latest.
	for _, l := range lines {
		if _, _, _, ok := record.Differ(&l.Settings, &r.settings.base, record.RunFields); !ok {
			return nil
		}
	}
	if len(lines) == 0 {
		return nil
	}
	field, was, now, _ := record.Differ(&lines[len(lines)-1].Settings, &r.settings.base, record.RunFields)
	return r.changed(field, was, now)
}

// checkModel refuses to continue a file made with another model than the
// one the run's servers are sent, unless --allow-changed-settings.
func (r *runner) checkModel(info ledger.Info) error {
	if !r.cfg.continues() {
		return nil
	}
	lines, _, _ := r.fileSettings(info)
	if len(lines) == 0 {
		return nil
	}
	for _, l := range lines {
		if l.Model == r.model {
			return nil
		}
	}
	return r.changed("model", fmt.Sprintf("%q", lines[len(lines)-1].Model), fmt.Sprintf("%q", r.model))
}

// changed is the refusal of a file made with field was, where the run
// asks now; with --allow-changed-settings, a warning.
func (r *runner) changed(field, was, now string) error {
	c := r.cfg
	flag := "--resume"
	if c.Append {
		flag = "--append"
	}
	if !c.AllowChangedSettings {
		return cli.Usagef("%s: %s was made with %s %s, this run asks %s: rerun with the same settings or give --allow-changed-settings",
			flag, c.Output, field, was, now)
	}
	r.logf("%s: %s was made with %s %s, this run asks %s (--allow-changed-settings): each record names its settings (output.settings, described in %s)",
		flag, c.Output, field, was, now, r.settings.path)
	return nil
}

// openSettings readies the sidecar to append to: a partial last line
// left by a crash cut off, or, for a run that does not continue -o, the
// sidecar of a file that is no more removed.
func (r *runner) openSettings() error {
	b := r.settings
	if b.path == "" {
		return nil
	}
	path := b.path
	if !r.cfg.continues() {
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
			r.logf("%s: removed a partial last line (%d bytes) left by an interrupted run", path, cut)
		}
	}
	out := jsonl.NewAppender(path, func() (*os.File, error) {
		return jsonl.OpenSidecar("-o's settings sidecar", path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	})
	out.Redact(r.env.Secrets)
	b.mu.Lock()
	b.out = out
	b.mu.Unlock()
	r.onClose(func() { out.Close() })
	return nil
}

// closeSettings makes the sidecar's lines durable.
func (r *runner) closeSettings() error {
	b := r.settings
	b.mu.Lock()
	out := b.out
	b.mu.Unlock()
	if out == nil {
		return nil
	}
	return out.Close()
}
