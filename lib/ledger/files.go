package ledger

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/zeebo/xxh3"

	"tokenmill/lib/cli"
	"tokenmill/lib/conversation"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// The files that hold what a run did: the output it writes (or continues),
// the errors file it rewrites, the turn journal of unfinished
// conversations beside the output, and the locks that keep a second run
// off them. Every refusal comes before anything is written (PlanFiles);
// nothing is created, emptied or removed until Open.

// FileOptions name a run's files and what it may do to those already
// there.
type FileOptions struct {
	Inputs []string
	Stdin  io.Reader // nil: none
	// Output ("" or "-": stdout), Errors ("": beside Output) and Rejects
	// are the flags -o, --errors and --rejects.
	Output, Errors, Rejects string
	// Continues adds to Output (--resume, --append), Force replaces it,
	// Regenerate keeps a turn journal beside it.
	Continues, Force, Regenerate bool
}

// How the output is written (Files.mode).
const (
	outNew     = iota // a new file, created where no file is (O_EXCL, never through a link)
	outAppend         // the existing file, continued or empty
	outReplace        // a new file renamed over what is there (--force, or a link not followed)
)

// Files are a run's files, checked and locked by PlanFiles.
type Files struct {
	o       FileOptions
	Name    string // "stdout" or -o
	Path    string // the file written: -o, or the file a link at -o leads to (continued); "" for stdout
	ErrPath string // the errors file; "" for none
	// Journal holds the turns of unfinished conversations (Regenerate with
	// an output file); nil without.
	Journal *conversation.Journal
	// Out and Errs (nil: failures are only counted) are the output and the
	// errors file, made by Prepare and Open.
	Out, Errs        *jsonl.Appender
	mode             int
	outLock, errLock *jsonl.Lock
	errSpecial       bool // the errors file is a FIFO or device, written in place
	staleJournal     bool // Force replaces the output, and the journal beside it goes too
}

func toStdout(path string) bool { return path == "" || path == "-" }

// defaultErrorsPath derives the errors file from the output file:
// gen.jsonl -> gen.errors.jsonl.
func defaultErrorsPath(output string) string {
	if toStdout(output) {
		return ""
	}
	ext := filepath.Ext(output)
	if ext != ".jsonl" && ext != ".json" && ext != ".ndjson" {
		return output + ".errors.jsonl"
	}
	return strings.TrimSuffix(output, ext) + ".errors" + ext
}

// errorsPath is the errors file: --errors, or beside -o.
func errorsPath(output, errors string) string {
	if errors == "" {
		return defaultErrorsPath(output)
	}
	return errors
}

// PlanFiles refuses what the run would overwrite or lose, before anything
// is written: an output that is an input or another output, one that
// exists and is neither continued nor replaced, an errors file that is not
// a run's own, a journal the run would ignore. With Continues, it returns
// the refusals the errors file records. Last, it locks the files; Release
// lets them go.
func PlanFiles(o FileOptions) (*Files, Refusals, error) {
	f := &Files{o: o, Name: "stdout"}
	var planErr error
	if !toStdout(o.Output) {
		f.Name, f.Path = o.Output, o.Output
		f.mode, f.Path, planErr = planOutput(o.Output, o.Continues, o.Force)
	}
	f.ErrPath = errorsPath(f.Path, o.Errors)
	if err := checkPaths(o, f.Path, f.ErrPath); err != nil {
		return nil, nil, err
	}
	if errors.Is(planErr, errOutputExists) {
		return nil, nil, cli.Usagef("%s already exists and is not empty: add --resume to continue it (answers already in it are skipped), --force to replace it, or choose another -o", o.Output)
	}
	if planErr != nil {
		return nil, nil, planErr
	}
	if f.ErrPath != "" {
		info, err := jsonl.CheckSidecar("--errors", f.ErrPath)
		if err != nil {
			return nil, nil, err
		}
		f.errSpecial = info.Special()
	}
	known, err := ReadErrors(f.ErrPath, o.Continues)
	if err != nil {
		return nil, nil, err
	}
	if f.Path != "" {
		if err := f.planJournal(); err != nil {
			return nil, nil, err
		}
		if _, err := jsonl.CheckSidecar("-o's settings sidecar", record.SettingsPath(f.Path)); err != nil {
			return nil, nil, err
		}
	}
	return f, known, f.lock()
}

// lock takes the files' locks, last in PlanFiles so that a run that
// refuses leaves none behind. The locks go by the file (see jsonl.Lock):
// a second run on it under any name, a link or a hard link, is refused.
func (f *Files) lock() error {
	if f.Path != "" {
		lock := jsonl.LockFile
		if f.mode == outReplace {
			lock = jsonl.LockReplaced // the link there is replaced, not followed
		}
		l, err := lock("-o", f.Path)
		if err != nil {
			return err
		}
		f.outLock = l
	}
	if f.ErrPath != "" && !f.errSpecial {
		l, err := jsonl.LockOutput("--errors", f.ErrPath)
		if err != nil {
			f.Release()
			return err
		}
		f.errLock = l
	}
	return nil
}

// Release lets the files' locks go.
func (f *Files) Release() {
	for _, l := range []*jsonl.Lock{f.errLock, f.outLock} {
		if l != nil {
			l.Release()
		}
	}
	f.outLock, f.errLock = nil, nil
}

// SettingsPath is the settings sidecar beside the output ("": none).
func (f *Files) SettingsPath() string {
	if f.Path == "" {
		return ""
	}
	return record.SettingsPath(f.Path)
}

// checkPaths refuses, before anything is opened for writing, an output
// that is an input (stdin's file included) or another output (under any
// name), or a directory: -o, --errors, the turn journal and the lock files
// are the run's own files, continued or rewritten by their own rules;
// --rejects follows the replace rule (--force), but a continuing run
// writes it again. outPath is the file -o leads to (see planOutput).
func checkPaths(o FileOptions, outPath, errPath string) error {
	out := o.Output
	if toStdout(out) {
		out = "-"
	}
	outputs := []jsonl.Output{{Flag: "-o", Path: out, Kept: true}}
	if !toStdout(o.Output) {
		outputs = append(outputs, jsonl.Output{Flag: "-o's turn journal", Path: conversation.JournalPath(outPath), Kept: true})
		outputs = append(outputs, jsonl.Output{Flag: "-o's settings sidecar", Path: record.SettingsPath(outPath), Kept: true})
		outputs = append(outputs, jsonl.LockSidecar("-o", outPath)...)
	}
	switch errPath {
	case "":
	case "-": // a file named -, not stdout
		outputs = append(outputs, jsonl.Output{Flag: "--errors", Path: "./-", Kept: true})
	default:
		outputs = append(outputs, jsonl.Output{Flag: "--errors", Path: errPath, Kept: true})
	}
	if o.Rejects != "" {
		outputs = append(outputs, jsonl.Output{Flag: "--rejects", Path: o.Rejects, Kept: o.Continues})
	}
	return jsonl.CheckPaths(jsonl.InputsFrom(o.Inputs, o.Stdin), outputs, o.Force)
}

// planOutput refuses, before anything is written, an output file that the
// run would overwrite: one that is not a regular file, or one that is not
// empty, unless resume continues it or force replaces it. A symbolic link
// at -o is followed only to continue the file it leads to (resume);
// otherwise it is replaced by the new file like any tool's output, and
// its target left alone: force never truncates a file through a link,
// nor (through a hard link) another name's content, since the new file
// is put in place by a rename. It returns how the file is written and the
// file written.
func planOutput(name string, resume, force bool) (mode int, path string, err error) {
	st, err := os.Lstat(name)
	if errors.Is(err, os.ErrNotExist) {
		return outNew, name, nil
	}
	if err != nil {
		return 0, "", err
	}
	if st.Mode()&os.ModeSymlink != 0 {
		target, terr := os.Stat(name)
		switch {
		case terr == nil && !target.Mode().IsRegular():
			return 0, "", fmt.Errorf("%s is not a regular file", name)
		case terr == nil && resume:
			return outAppend, jsonl.Resolve(name), nil
		case terr == nil && target.Size() > 0 && !force:
			return 0, "", errOutputExists
		}
		return outReplace, name, nil // a dangling link, or not resume
	}
	if !st.Mode().IsRegular() {
		return 0, "", fmt.Errorf("%s is not a regular file", name)
	}
	switch {
	case force:
		return outReplace, name, nil
	case st.Size() > 0 && !resume:
		return 0, "", errOutputExists
	}
	return outAppend, name, nil
}

var errOutputExists = errors.New("output exists")

// planJournal refuses a turn journal the run would overwrite or ignore:
// one left beside -o is continued by --resume --regenerate or emptied by
// --force; a run without --regenerate must not continue a --regenerate
// run's output.
func (f *Files) planJournal() error {
	o := f.o
	path := conversation.JournalPath(f.Path)
	st, err := jsonl.CheckSidecar("-o's turn journal", path)
	exists := st.Exists
	switch {
	case err != nil:
		return err
	case exists && !st.Mode.IsRegular():
		return fmt.Errorf("%s (the turn journal of -o) is not a regular file", path)
	case exists && !o.Regenerate && (o.Continues || st.Size > 0 && !o.Force):
		return cli.Usagef("%s holds the turns of an infer --regenerate run on %s: add --regenerate to continue it, --force to replace both, or remove both", path, o.Output)
	case exists && o.Regenerate && st.Size > 0 && !o.Continues && !o.Force:
		return cli.Usagef("%s holds the turns of unfinished conversations: add --resume to continue them, --force to start over, or choose another -o", path)
	}
	f.staleJournal = exists && o.Force
	if o.Regenerate {
		f.Journal = conversation.NewJournal(path)
	}
	return nil
}

// Prepare makes the output's appender, which stdout (when the output is
// stdout) or Open opens; secrets are redacted from what it writes.
func (f *Files) Prepare(stdout io.Writer, secrets *cli.Secrets) {
	if f.Path == "" {
		f.Out = jsonl.NewStreamAppender("stdout", stdout)
		f.Out.Redact(secrets)
		return
	}
	path := f.Path
	f.Out = jsonl.NewAppender(f.o.Output, func() (*os.File, error) {
		var file *os.File
		var err error
		switch f.mode {
		case outAppend:
			file, err = jsonl.OpenSidecar("-o", path, os.O_WRONLY|os.O_APPEND, 0)
		case outReplace:
			file, err = jsonl.ReplaceWithNew(path)
		default:
			file, err = jsonl.CreateNew("-o", path)
		}
		if err == nil {
			if err = f.outLock.Hold("-o", path, file); err != nil {
				file.Close()
			}
		}
		return file, err
	})
	f.Out.Redact(secrets)
}

// Open creates the files, now that the run goes ahead: the output (or
// opens it to append), the journal (the one a replaced output leaves
// removed), and, lazily (at the latest at Close, empty if nothing
// failed), the errors file, after the previous run's is removed: it lists
// this run's failures alone, and the previous run's are tried again.
func (f *Files) Open(secrets *cli.Secrets) error {
	if err := f.Out.Open(); err != nil {
		return err
	}
	if f.staleJournal {
		if err := os.Remove(conversation.JournalPath(f.Path)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing the previous turn journal: %w", err)
		}
	}
	if f.Journal != nil {
		if err := f.Journal.Open(); err != nil {
			return err
		}
	}
	if f.ErrPath == "" {
		return nil
	}
	path := f.ErrPath
	if f.errSpecial {
		// A FIFO or device is written in place, never removed.
		f.Errs = jsonl.NewAppender(path, func() (*os.File, error) { return jsonl.OpenSidecar("--errors", path, os.O_WRONLY, 0) })
	} else {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing the previous errors file: %w", err)
		}
		f.Errs = jsonl.NewAppender(path, func() (*os.File, error) {
			file, err := jsonl.CreateNew("--errors", path)
			if err == nil {
				if err = f.errLock.Hold("--errors", path, file); err != nil {
					file.Close()
				}
			}
			return file, err
		})
	}
	f.Errs.Redact(secrets)
	return nil
}

// Close closes the output and the errors file, returning the first
// error. The errors file is left even when nothing failed (empty), so
// that it can be named wherever the run's files are. A FIFO or device is
// there already, and a FIFO's open would wait for a reader: with nothing
// written it is only told the stream ended.
func (f *Files) Close() error {
	var first error
	if f.Out != nil {
		first = f.Out.Close()
	}
	if f.Errs != nil {
		var err error
		if f.errSpecial && f.Errs.Empty() {
			jsonl.EndEmpty("--errors", f.ErrPath)
		} else {
			err = f.Errs.Open()
		}
		if cerr := f.Errs.Close(); err == nil {
			err = cerr
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// Abort closes whatever is open, on the way out of a run that ended
// before Close; it is safe after Close.
func (f *Files) Abort() {
	for _, a := range []*jsonl.Appender{f.Out, f.Errs} {
		if a != nil {
			a.Close()
		}
	}
	if f.Journal != nil && f.Journal.IsOpen() {
		f.Journal.Close()
	}
}

// CloseJournal closes the turn journal, and removes it when finished: the
// run has nothing unfinished (every conversation it read was answered,
// none failed or was left for later), and no journaled turns wait for a
// record this input did not hold.
func (f *Files) CloseJournal(finished bool) error {
	jn := f.Journal
	if jn == nil || !jn.IsOpen() {
		return nil
	}
	if err := jn.Close(); err != nil {
		return err
	}
	if !finished || jn.Unclaimed() > 0 {
		return nil
	}
	if err := os.Remove(jn.Path()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the turn journal: %w", err)
	}
	return nil
}

// JournalKeys reads the (id, sample) keys the turn journal at path names,
// after cutting a partial last line off it.
func JournalKeys(path string, warn func(string, ...any)) (map[xxh3.Uint128]int, error) {
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
