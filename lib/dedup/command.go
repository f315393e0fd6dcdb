// Package dedup removes repeated records from a stream, keeping the first
// occurrence of each key in input order and writing it byte for byte. Keys
// are remembered in a scalable bloom filter (memory-bounded, with a
// reported expected number of wrongly dropped records) or, with --exact,
// also as 128-bit hashes (no wrong drops). The filter can be saved and
// loaded, so a second dataset can be deduplicated against a first.
package dedup

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// Description is dedup's --help text.
const Description = `Drop repeated prompts, keeping the first occurrence of each in input order.

  extract data/0625/*.parquet | dedup | infer --endpoints 127.0.0.1:30000-30007 -o gen.jsonl
  dedup --normalize lower --dups dups.jsonl --exact prompts.jsonl > unique.jsonl
  dedup --state seen.state a.jsonl > a.unique.jsonl && dedup --state seen.state b.jsonl > b.unique.jsonl

The key is the canonical prompt (every role and content of messages, or the
completion prompt) unless --key names a field; --normalize applies to the key
only, never to the records written, which are the input lines byte for byte.

Keys are held in a bloom filter that grows by layers past --expected, so
memory follows the number of distinct keys (about 4 MB per million at the
default --fp) and the false-positive rate stays below --fp at any size. The
summary reports the expected number of distinct records wrongly dropped;
--exact also keeps every key's 128-bit hash and drops none wrongly.

--state FILE loads the filter saved by an earlier run (if the file exists)
and saves it again at the end, so b.jsonl is deduplicated against a.jsonl.
A state made with other settings, or a damaged one, is refused. An
interrupted run (exit 130) leaves the state and any -o/--dups file as they
were; on stdout, the records decided before the interrupt were written.

Records that are not JSON, not objects, or have no key are rejected (reason,
file:line on stderr, all of them to --rejects), and the run exits 3.`

// Command is the dedup tool.
type Command struct {
	cli.Globals

	Files          []string `arg:"" optional:"" name:"file" help:"Records to read (JSONL, JSON array, Parquet; .gz/.zst by content). None or '-' reads stdin."`
	cli.OutputFlag `set:"output_what=the kept records"`
	Key            string  `default:"prompt" help:"What makes two records the same: prompt (every role and content of messages, or the completion prompt), or a field path such as id or meta.source."`
	Normalize      string  `default:"none" enum:"none,ws,lower,aggressive" help:"Normalize the key before comparing: none, ws (trim, collapse white space), lower (ws + lowercase), aggressive (lower + Unicode NFKC + punctuation removed)."`
	Expected       uint64  `default:"1000000" help:"Distinct keys the first filter layer is sized for; past it, layers are added."`
	FP             float64 `name:"fp" default:"1e-6" help:"False-positive rate the filter never exceeds: the chance that a new key is taken for one seen."`
	Exact          bool    `default:"false" help:"Also keep every key's 128-bit hash: no record is ever dropped wrongly, at about 60 bytes per distinct key with --dups or --state (its hash and the id of its first record, which dup_of and the state keep), about 40 without (the whole process at 5M keys)."`
	State          string  `default:"" placeholder:"FILE" help:"Load the filter from FILE if it exists, and save it there at the end (atomically), to deduplicate later input against this run's. Locked (FILE.lock) for the whole run."`
	Dups           string  `default:"" placeholder:"FILE" help:"Write every removed record to FILE (with --exact, with a dup_of field: the id of the record it repeats)."`
	cli.RejectsFlag
	cli.ForceFlag   `set:"force_what=-o, --dups and --rejects"`
	cli.WorkersFlag `set:"workers_what=parse and hash records"`
	cli.ProgressFlag
}

func (c *Command) settings() Settings {
	return Settings{Key: c.Key, Normalize: c.Normalize, FP: c.FP, Expected: c.Expected, Exact: c.Exact}
}

// Run deduplicates the inputs.
func (c *Command) Run(ctx context.Context, env *cli.Env) error {
	mode, err := ParseMode(c.Normalize)
	if err != nil {
		return cli.Usagef("--normalize: %v", err)
	}
	if !(c.FP > 0 && c.FP < 0.5) {
		return cli.Usagef("--fp must be between 0 and 0.5, not %g", c.FP)
	}
	if c.Expected == 0 {
		return cli.Usagef("--expected must be at least 1")
	}
	if c.Dups == "-" {
		return cli.Usagef("--dups needs a file: stdout carries the kept records")
	}
	workers, err := c.Count()
	if err != nil {
		return err
	}
	outputs := []jsonl.Output{{Flag: "-o", Path: c.Output}, {Flag: "--dups", Path: c.Dups},
		{Flag: "--rejects", Path: c.Rejects}, {Flag: "--state", Path: c.State, Kept: true}}
	outputs = append(outputs, jsonl.LockSidecar("--state", c.State)...)
	if err := jsonl.CheckPaths(jsonl.InputsFrom(c.Files, env.Stdin), outputs, c.Force); err != nil {
		return err
	}
	keyers := make([]*Keyer, workers)
	for i := range keyers {
		if keyers[i], err = NewKeyer(c.Key, mode); err != nil {
			return cli.Usagef("%v", err)
		}
	}
	lock, err := jsonl.LockOutput("--state", c.State)
	if err != nil {
		return err
	}
	defer lock.Release()
	set, totals, err := LoadState(ctx, c.State, c.settings(), env.Logf)
	if err != nil {
		return err
	}
	if set == nil {
		set = NewSet(c.Expected, c.FP, c.Exact)
		if c.Dups == "" && c.State == "" {
			set.DropIDs()
		}
	}
	if c.Exact && os.Getenv("GOGC") == "" {
		// The exact set holds no pointers, so a collection costs little
		// however large it is, while the default pacing lets garbage
		// (the map's outgrown tables) take as much memory again.
		defer debug.SetGCPercent(debug.SetGCPercent(10))
	}

	s := &sink{set: set, n: &counts{}}
	if s.out, err = jsonl.Create(c.Output, env.Stdout, jsonl.WriterOptions{Force: c.Force}); err != nil {
		return err
	}
	if c.Dups != "" {
		if s.dups, err = jsonl.Create(c.Dups, env.Stdout, jsonl.WriterOptions{Force: c.Force, Flag: "--dups"}); err != nil {
			s.out.Abort()
			return fmt.Errorf("--dups: %w", err)
		}
	}
	if s.rejects, err = jsonl.CreateRejects(c.Rejects, env.Stdout, env, c.Force); err != nil {
		s.abort()
		return err
	}

	in := jsonl.NewReader(ctx, env, c.Files, env.Stdin, jsonl.Options{})
	start := time.Now()
	progress := cli.StartProgress(ctx, env, c.Progress, func() []string {
		read := s.n.read.Load()
		return []string{fmt.Sprintf("read %d, kept %d, removed %d (%.0f records/s)",
			read, s.n.kept.Load(), s.n.removed.Load(), float64(read)/time.Since(start).Seconds())}
	})
	err = run(ctx, in, keyers, s)
	progress.Stop()
	if err != nil {
		s.abort()
		return err
	}
	if cli.Interrupted(ctx) {
		// The output and dups files are not put in place, and the state
		// is not saved: it must never hold keys whose records did not
		// reach the output.
		return env.EndInterrupted(ctx, s.out, s.abort, c.summary(s, set.ExpectedFalseDrops), s.n.read.Load(), "state not saved")
	}

	// Outputs first, state last: a state must never hold keys whose
	// records did not reach the output.
	if err := s.out.Close(); err != nil {
		s.abort()
		return fmt.Errorf("writing %s: %w", s.out.Path(), err)
	}
	if s.dups != nil {
		if err := s.dups.Close(); err != nil {
			s.rejects.Abort()
			return fmt.Errorf("writing %s: %w", s.dups.Path(), err)
		}
	}
	runFalseDrops := set.ExpectedFalseDrops // a loaded Set starts at 0: totals hold the past
	env.Logf("%s", c.summary(s, runFalseDrops))
	rerr := s.rejects.Close()
	if c.State != "" {
		totals.Runs++
		totals.Read += s.n.read.Load()
		totals.Kept += s.n.kept.Load()
		totals.Removed += s.n.removed.Load()
		totals.Rejected += s.n.rejected.Load()
		totals.ExpectedFalseDrops += runFalseDrops
		if err := SaveState(c.State, set, c.settings(), totals); err != nil {
			return fmt.Errorf("saving state %s: %w", c.State, err)
		}
		env.Logf("state %s: %d keys in %d layers (%.1f MB of filter), %d runs", c.State,
			set.Filter.Keys(), len(set.Filter.layers), float64(set.Filter.Bytes())/1e6, totals.Runs)
	}
	return rerr
}

func (s *sink) abort() {
	s.out.Abort()
	if s.dups != nil {
		s.dups.Abort()
	}
	if s.rejects != nil {
		s.rejects.Abort()
	}
}

// summary is the one line printed at the end, e.g.
// "read 658671, kept 654676, removed 3995 (0.61%), expected false drops 0.0007".
func (c *Command) summary(s *sink, falseDrops float64) string {
	read, removed := s.n.read.Load(), s.n.removed.Load()
	pct := 0.0
	if read > 0 {
		pct = 100 * float64(removed) / float64(read)
	}
	line := fmt.Sprintf("read %d, kept %d, removed %d (%.2f%%)", read, s.n.kept.Load(), removed, pct)
	if s.set.Exact() {
		line += fmt.Sprintf(", false drops 0 (exact; %d filter false positives overruled)", s.set.Overruled)
	} else {
		line += fmt.Sprintf(", expected false drops %.2g", falseDrops)
	}
	if s.n.rejected.Load() > 0 {
		line += ", " + s.rejects.Summary()
	}
	return line
}
