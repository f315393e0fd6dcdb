// Package dedup removes repeated records from a stream, keeping the first
// occurrence of each key in input order and writing it byte for byte. Keys
// are remembered in a scalable bloom filter (memory-bounded, with a
// reported expected number of wrongly dropped records) or, with --exact,
// also as 128-bit hashes (no wrong drops). The filter can be saved and
// loaded, so a second dataset can be deduplicated against a first. With
// --near, near-duplicates are dropped too, by MinHash signatures and a
// banded LSH index (lib/minhash), in the same pass and the same state.
package dedup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/minhash"
)

// Description is dedup's --help text.
const Description = `Drop repeated prompts, keeping the first occurrence of each in input order.

  extract data/0625/*.parquet | dedup | infer --endpoints 127.0.0.1:30000-30007 -o gen.jsonl
  dedup --normalize lower --dups dups.jsonl --exact prompts.jsonl > unique.jsonl
  dedup --state seen.state a.jsonl > a.unique.jsonl && dedup --state seen.state b.jsonl > b.unique.jsonl
  dedup --against gsm8k.jsonl,humaneval.jsonl,mt_bench.jsonl --rejects contaminated.jsonl prompts.jsonl > clean.jsonl

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

--near also drops near-duplicates, in the same pass:

  extract data/0625/*.parquet | dedup --near --clusters clusters.jsonl --dups dups.jsonl > unique.jsonl
  stats --clusters clusters.jsonl

Each prompt's text (its key's parts, normalized by --normalize) is cut into
shingles of --shingle words and given a MinHash signature of bands x rows
values. A prompt sharing all rows of a band with a kept one is compared with
it on the whole signature, and dropped when the share of equal values (the
estimated Jaccard similarity of their shingle sets) is at least --threshold;
else it is kept. A pair of similarity J shares a band with probability
1-(1-J^rows)^bands: at 14x8, 0.05 at J=0.5, 0.21 at 0.6, 0.57 at 0.7, 0.92 at
0.8, 0.9996 at 0.9. The estimate's standard error is sqrt(J(1-J)/112), 0.04
near 0.8. The first prompt of a group is kept; the decisions are made in input
order, so the output is the same for a --seed with any --workers.

Memory: about 750 bytes a kept prompt at 14x8 (the 448-byte signature, 14
band keys in a table of 12-byte slots, the id's end) plus its id; past
--memory, signatures, ids and band keys are spilled to unnamed files beside
--state (or in TMPDIR) as sorted runs, and each spilled prompt keeps about 18
bytes in memory. The answers do not change. --state also saves the kept
prompts' signatures; a state made with other --bands, --rows, --shingle or
--seed (or without --near) is refused.

--against FILE drops every prompt that shares a run of --against-ngram
words (13) with a prompt or answer of the benchmark FILE: words of the
text normalized as --normalize aggressive says, each message on its own;
a text of fewer words is compared whole. The prompts dropped go to
--rejects as contaminated, with the benchmark record and the words; they
are not bad records (the exit code stays 0).

Records that are not JSON, not objects, or have no key are rejected (reason,
file:line on stderr, all of them to --rejects), and the run exits 3.`

// Command is the dedup tool.
type Command struct {
	cli.Globals

	Files          []string `arg:"" optional:"" name:"file" help:"Records to read (JSONL, JSON array, Parquet; .gz/.zst by content). None or '-' reads stdin."`
	cli.OutputFlag `set:"output_what=the kept records"`
	Key            string   `default:"prompt" help:"What makes two records the same: prompt (every role and content of messages, or the completion prompt), or a field path such as id or meta.source."`
	Normalize      string   `default:"none" enum:"none,ws,lower,aggressive" help:"Normalize the key before comparing: none, ws (trim, collapse white space), lower (ws + lowercase), aggressive (lower + Unicode NFKC + punctuation removed)."`
	Expected       uint64   `default:"1000000" help:"Distinct keys the first filter layer is sized for; past it, layers are added."`
	FP             float64  `name:"fp" default:"1e-6" help:"False-positive rate the filter never exceeds: the chance that a new key is taken for one seen."`
	Exact          bool     `default:"false" help:"Also keep every key's 128-bit hash: no record is ever dropped wrongly, at about 60 bytes per distinct key with --dups or --state (its hash and the id of its first record, which dup_of and the state keep), about 40 without (the whole process at 5M keys)."`
	State          string   `default:"" placeholder:"FILE" help:"Load the filter from FILE if it exists, and save it there at the end (atomically), to deduplicate later input against this run's. Locked (FILE.lock) for the whole run."`
	Dups           string   `default:"" placeholder:"FILE" help:"Write every removed record to FILE (with --exact, with a dup_of field: the id of the record it repeats; a near-duplicate with dup_of, dup_reason near_duplicate and similarity)."`
	Near           bool     `default:"false" help:"Also drop near-duplicates: a prompt whose estimated Jaccard similarity (MinHash over word shingles of the key's text, normalized as --normalize says) with a kept prompt is at least --threshold. The first of each group is kept."`
	Threshold      float64  `default:"0.8" help:"With --near: the estimated Jaccard similarity, between 0 and 1, from which a prompt is a near-duplicate of a kept one."`
	Bands          int      `default:"14" help:"With --near: LSH bands. A pair of similarity J is compared with probability 1-(1-J^rows)^bands: 14x8 finds pairs at J=0.8 with probability 0.92, at 0.9 with 0.9996, at 0.5 only 0.05."`
	Rows           int      `default:"8" help:"With --near: MinHash values in a band; a signature has bands x rows values (4 bytes each)."`
	Shingle        int      `default:"5" help:"With --near: words in a shingle (a text with fewer words is one shingle)."`
	Seed           uint64   `default:"1" help:"With --near: the seed of the MinHash permutations; the same seed gives the same result in every run."`
	Memory         cli.Size `default:"1GiB" placeholder:"SIZE" help:"With --near: memory for the signatures, ids and band table of kept prompts (about 750 bytes a kept prompt at 14x8, plus its id); past it they are spilled to disk as sorted runs, beside --state or in TMPDIR, and the answers stay the same."`
	Clusters       string   `default:"" placeholder:"FILE" help:"With --near: write one line per near-duplicate to FILE: its id, the id of the kept prompt it is a near-copy of (dup_of) and their estimated similarity."`
	Against        []string `placeholder:"FILE" help:"Benchmark files (any layout extract reads: GSM8K, HumanEval, MT-Bench, ...; JSONL, JSON array, Parquet, CSV): drop every prompt that shares a run of --against-ngram words with one of their prompts or answers, to --rejects as contaminated. Repeat the flag or separate files by commas."`
	AgainstNgram   int      `name:"against-ngram" default:"13" help:"Words in the runs --against compares; a text with fewer words is compared whole."`
	AgainstFP      float64  `name:"against-fp" default:"1e-6" help:"False-positive rate of --against's bloom filter of benchmark n-grams. A hit is always confirmed on the benchmark's words, so the rate costs time, never a wrong drop."`
	cli.RejectsFlag
	cli.ForceFlag   `set:"force_what=-o, --dups, --clusters and --rejects"`
	cli.WorkersFlag `set:"workers_what=parse and hash records"`
	cli.ProgressFlag
}

// maxAgainstNgram bounds --against-ngram: longer runs would only find
// copies of whole paragraphs.
const maxAgainstNgram = 1000

// Config is one dedup run, taken from the flags once.
type Config struct {
	Files                                  []string
	Output, Dups, Clusters, Rejects, State string
	Force                                  bool
	Settings                               Settings // what a --state must share
	Mode                                   Mode     // Settings.Normalize, parsed
	Threshold                              float64  // --near's similarity
	Against                                []string // benchmark files
	AgainstNgram                           int
	AgainstFP                              float64
	Workers                                int
	Progress                               time.Duration
}

// config checks the flags and turns them into a Config.
func (c *Command) config() (Config, error) {
	mode, err := ParseMode(c.Normalize)
	if err != nil {
		return Config{}, cli.Usagef("--normalize: %v", err)
	}
	if !(c.FP > 0 && c.FP < 0.5) {
		return Config{}, cli.Usagef("--fp must be between 0 and 0.5, not %g", c.FP)
	}
	if c.Expected == 0 {
		return Config{}, cli.Usagef("--expected must be at least 1")
	}
	if c.Dups == "-" {
		return Config{}, cli.Usagef("--dups needs a file: stdout carries the kept records")
	}
	if err := c.checkNear(); err != nil {
		return Config{}, err
	}
	if c.AgainstNgram < 1 || c.AgainstNgram > maxAgainstNgram {
		return Config{}, cli.Usagef("--against-ngram must be between 1 and %d, not %d", maxAgainstNgram, c.AgainstNgram)
	}
	if !(c.AgainstFP > 0 && c.AgainstFP < 0.5) {
		return Config{}, cli.Usagef("--against-fp must be between 0 and 0.5, not %g", c.AgainstFP)
	}
	for _, f := range c.Against {
		if f == "-" || f == "" {
			return Config{}, cli.Usagef("--against needs a file: stdin carries the records")
		}
	}
	workers, err := c.Count()
	if err != nil {
		return Config{}, err
	}
	return Config{Files: c.Files, Output: c.Output, Dups: c.Dups, Clusters: c.Clusters, Rejects: c.Rejects, State: c.State,
		Force: c.Force, Settings: c.settings(), Mode: mode, Threshold: c.Threshold, Against: c.Against,
		AgainstNgram: c.AgainstNgram, AgainstFP: c.AgainstFP, Workers: workers, Progress: c.Progress}, nil
}

func (c *Command) settings() Settings {
	s := Settings{Key: c.Key, Normalize: c.Normalize, FP: c.FP, Expected: c.Expected, Exact: c.Exact}
	if c.Near {
		s.Near = &minhash.Params{Bands: c.Bands, Rows: c.Rows, Shingle: c.Shingle, Seed: c.Seed}
		s.NearOptions = minhash.Options{Memory: int64(c.Memory)}
		if c.State != "" {
			s.NearOptions.Dir = filepath.Dir(c.State)
		}
	}
	return s
}

// checkNear checks the --near flags.
func (c *Command) checkNear() error {
	if !c.Near {
		if c.Clusters != "" {
			return cli.Usagef("--clusters needs --near")
		}
		return nil
	}
	if err := c.settings().Near.Validate(); err != nil {
		return cli.Usagef("--bands, --rows, --shingle: %v", err)
	}
	if !(c.Threshold > 0 && c.Threshold <= 1) {
		return cli.Usagef("--threshold must be above 0 and at most 1, not %g", c.Threshold)
	}
	if c.Memory < 1 {
		return cli.Usagef("--memory must be at least 1 byte")
	}
	if c.Clusters == "-" {
		return cli.Usagef("--clusters needs a file: stdout carries the kept records")
	}
	return nil
}

// Run deduplicates the inputs.
func (c *Command) Run(ctx context.Context, env *cli.Env) error {
	return cli.RunConfig(ctx, env, c.config, Config.Run)
}

// Run deduplicates the inputs cfg names.
func (cfg Config) Run(ctx context.Context, env *cli.Env) error {
	outputs := []jsonl.Output{{Flag: "-o", Path: cfg.Output}, {Flag: "--dups", Path: cfg.Dups}, {Flag: "--clusters", Path: cfg.Clusters},
		{Flag: "--rejects", Path: cfg.Rejects}, {Flag: "--state", Path: cfg.State, Kept: true}}
	outputs = append(outputs, jsonl.LockSidecar("--state", cfg.State)...)
	inputs := jsonl.InputsFrom(cfg.Files, env.Stdin)
	for _, f := range cfg.Against {
		inputs = append(inputs, jsonl.Named{Flag: "--against", Path: f, CSV: true})
	}
	outs, err := jsonl.CheckOutputs(env.Stdout, inputs, outputs, cfg.Force)
	if err != nil {
		return err
	}
	if err := CheckStateFile(cfg.State); err != nil {
		return err
	}
	bench, err := loadAgainst(ctx, env, cfg)
	if err != nil {
		return err
	}
	ws, err := newWorkers(cfg)
	if err != nil {
		return err
	}
	lock, err := jsonl.LockOutput("--state", cfg.State)
	if err != nil {
		return err
	}
	defer lock.Release()
	set, totals, err := loadSet(ctx, env, cfg)
	if err != nil {
		return err
	}
	if set.Near != nil {
		defer set.Near.Close()
	}
	if cfg.Settings.Exact && os.Getenv("GOGC") == "" {
		// The exact set holds no pointers, so a collection costs little
		// however large it is, while the default pacing lets garbage
		// (the map's outgrown tables) take as much memory again.
		defer debug.SetGCPercent(debug.SetGCPercent(10))
	}
	if err := outs.Open(); err != nil {
		return err
	}
	defer outs.Abort()
	s := &sink{set: set, n: &counts{}, near: set.Near, threshold: cfg.Threshold, logf: env.Logf,
		out: outs.Writer("-o"), dups: outs.Writer("--dups"), clusters: outs.Writer("--clusters"),
		rejectsOut: outs.Writer("--rejects"), rejects: outs.Rejects(env)} // bad records and contaminated prompts share --rejects
	if bench != nil {
		for range cfg.Workers {
			s.checkers = append(s.checkers, newAgainstChecker(bench))
		}
	}
	in := jsonl.NewReader(ctx, env, cfg.Files, env.Stdin, jsonl.Options{})
	progress := cli.StartProgress(ctx, env, cfg.Progress, s.progress(time.Now()))
	err = run(ctx, in, ws, s)
	progress.Stop()
	if err != nil {
		return err
	}
	if cli.Interrupted(ctx) {
		// The outputs are not put in place, and the state is not saved:
		// it must never hold keys whose records did not reach the output.
		return env.EndInterrupted(ctx, s.out, outs.Abort, s.summary(set.ExpectedFalseDrops), s.n.read.Load(), "state not saved")
	}
	// Outputs first, state last: a state must never hold keys whose
	// records did not reach the output.
	if err := outs.Close(); err != nil {
		return err
	}
	runFalseDrops := set.ExpectedFalseDrops // a loaded Set starts at 0: totals hold the past
	env.Logf("%s", s.summary(runFalseDrops))
	if cfg.State != "" {
		if err := saveState(env, cfg, s, totals, runFalseDrops); err != nil {
			return err
		}
	}
	return s.rejects.Err()
}

// loadAgainst reads the --against benchmarks whole before anything is
// written: a benchmark that cannot be read is a refusal, not a run that
// lets its questions through. Without --against, nil.
func loadAgainst(ctx context.Context, env *cli.Env, cfg Config) (*Benchmarks, error) {
	if len(cfg.Against) == 0 {
		return nil, nil
	}
	bench, err := LoadBenchmarks(ctx, cfg.Against, cfg.AgainstNgram, cfg.AgainstFP)
	if err != nil {
		return nil, err
	}
	env.Logf("against: %d files, %d records, %d texts (%d of fewer than %d words, compared whole), %d distinct shingles, bloom filter %.1f KB at a false-positive rate of %.2g (every hit confirmed on the benchmark's words)",
		len(cfg.Against), bench.Records, len(bench.texts), bench.Short, cfg.AgainstNgram, bench.Grams(), float64(bench.FilterBytes())/1e3, bench.FalsePositiveRate())
	return bench, nil
}

// newWorkers gives each worker its Keyer and, with --near, its Hasher.
func newWorkers(cfg Config) ([]worker, error) {
	ws := make([]worker, cfg.Workers)
	for i := range ws {
		var err error
		if ws[i].keyer, err = NewKeyer(cfg.Settings.Key, cfg.Mode); err != nil {
			return nil, cli.Usagef("%v", err)
		}
		if cfg.Settings.Near != nil {
			ws[i].hasher = minhash.NewHasher(*cfg.Settings.Near)
		}
	}
	return ws, nil
}

// loadSet loads the --state's set and totals, or starts a new set.
func loadSet(ctx context.Context, env *cli.Env, cfg Config) (*Set, Totals, error) {
	set, totals, err := LoadState(ctx, cfg.State, cfg.Settings, env.Logf)
	if se := (*SettingsError)(nil); errors.As(err, &se) {
		return nil, totals, &cli.UsageError{Err: err}
	}
	if err != nil || set != nil {
		return set, totals, err
	}
	set = NewSet(cfg.Settings.Expected, cfg.Settings.FP, cfg.Settings.Exact)
	if cfg.Settings.Near != nil {
		set.Near = minhash.NewIndex(*cfg.Settings.Near, cfg.Settings.NearOptions)
	}
	if cfg.Dups == "" && cfg.State == "" {
		set.DropIDs()
	}
	return set, totals, nil
}

// saveState adds the run's counts to the state's totals and saves it.
func saveState(env *cli.Env, cfg Config, s *sink, totals Totals, runFalseDrops float64) error {
	totals.Runs++
	totals.Read += s.n.read.Load()
	totals.Kept += s.n.kept.Load()
	totals.Removed += s.n.removed.Load()
	totals.Near += s.n.near.Load()
	totals.Rejected += s.n.rejected.Load()
	totals.ExpectedFalseDrops += runFalseDrops
	if err := SaveState(cfg.State, s.set, cfg.Settings, totals); err != nil {
		return fmt.Errorf("saving state %s: %w", cfg.State, err)
	}
	env.Logf("state %s: %d keys in %d layers (%.1f MB of filter), %d runs", cfg.State,
		s.set.Filter.Keys(), len(s.set.Filter.layers), float64(s.set.Filter.Bytes())/1e6, totals.Runs)
	if s.set.Near != nil {
		env.Logf("state %s: %d near-dup signatures", cfg.State, s.set.Near.Len())
	}
	return nil
}

// progress is the live progress line of a run started at start.
func (s *sink) progress(start time.Time) func() []string {
	return func() []string {
		read := s.n.read.Load()
		line := fmt.Sprintf("read %d, kept %d, removed %d", read, s.n.kept.Load(), s.n.removed.Load())
		if s.near != nil {
			line += fmt.Sprintf(", near-duplicates %d", s.n.near.Load())
		}
		if s.checkers != nil {
			line += fmt.Sprintf(", contaminated %d", s.n.contaminated.Load())
		}
		return []string{fmt.Sprintf("%s (%.0f records/s)", line, float64(read)/time.Since(start).Seconds())}
	}
}

// summary is the one line printed at the end, e.g.
// "read 658671, kept 654676, removed 3995 (0.61%), expected false drops 0.0007".
func (s *sink) summary(falseDrops float64) string {
	read, removed := s.n.read.Load(), s.n.removed.Load()
	line := fmt.Sprintf("read %d, kept %d, removed %d (%.2f%%)", read, s.n.kept.Load(), removed, pct(removed, read))
	if s.set.Exact() {
		line += fmt.Sprintf(", false drops 0 (exact; %d filter false positives overruled)", s.set.Overruled)
	} else {
		line += fmt.Sprintf(", expected false drops %.2g", falseDrops)
	}
	if s.near != nil {
		near := s.n.near.Load()
		line += fmt.Sprintf(", near-duplicates %d (%.2f%%, similarity >= %g)", near, pct(near, read), s.threshold)
		if spilled := s.near.Spilled(); spilled > 0 {
			line += fmt.Sprintf(", %d kept signatures spilled to disk in %d runs", spilled, s.near.Runs())
		}
	}
	if s.checkers != nil {
		line += fmt.Sprintf(", contaminated %d (bloom filter hits refuted by the exact check %d)", s.n.contaminated.Load(), overruled(s.checkers))
	}
	if s.n.rejected.Load() > 0 {
		line += ", " + s.rejects.Summary()
	}
	return line
}

// pct is n as a percentage of of.
func pct(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}
