// Package stats reports what a set of prompt, generation and error records
// holds: counts, length distributions, finish reasons, errors, repeated ids,
// sources, and per-endpoint speed, as text tables, JSON or a plot.
//
// Memory: every length distribution (the context section's prompt tokens
// too) and each endpoint's latencies keep one 4-byte value per record that
// has it, so percentiles are exact, and the repeated-id check keeps one
// 8-byte hash per distinct (id, sample) in a flat table (9-18 bytes with
// its slack): 40-70 bytes per generation record, and a peak of 155-190 MB RSS
// for a million small ones (runs vary with the garbage collector).
package stats

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/quality"
)

// Description is the --help text.
const Description = `Report what prompt, generation and error records hold.

Reads any mix of prompt, generation (with "output") and error (with "error")
records and prints, as aligned tables with histograms: counts by kind; prompt
and answer lengths in characters, and in tokens from output.usage, with
p50/p90/p99/max; finish_reason; errors by status with the commonest messages;
(id, sample) pairs seen twice; records per source; and per endpoint the
requests, completion tokens, tok/s and latency p50/p99. Regenerated
conversations (infer --regenerate) add turns per conversation, per-turn
lengths, truncations by reason and the prefix-cache hit rate. Prompt tokens are
set against the model's context (--context-length, else inferred from requests
whose max_tokens infer lowered to fit, else unknown): per answer, per turn and
per prompt refused as prompt_too_long, with the requests lowered to fit and the
conversations ended context_full. The report goes to
stdout; bad lines are counted, shown with file:line on stderr, written to
--rejects, and make the exit code 3 after the report.

Examples:

  stats gen.jsonl
  stats --json gen.jsonl gen.errors.jsonl | jq .endpoints
  stats --plot lengths.svg gen.jsonl
  stats --wall 31h20m gen.jsonl          # adds tok/s over the whole run
  stats --context-length 32768 gen.jsonl gen.errors.jsonl  # prompts as a share of it
  stats --tokenizer models/Qwen3-8B gen.jsonl  # are the servers' ids (--token-ids) the model's own?
  stats --against served.jsonl train.jsonl   # make-up beside served traffic: shares, lengths, distances
  zstdcat prompts.jsonl.zst | stats      # prompt records alone: counts and lengths`

// Command is the stats tool.
type Command struct {
	cli.Globals
	Files []string      `arg:"" optional:"" name:"file" help:"Record files (JSONL, JSON array or Parquet; plain, gzip or zstd). None or - reads stdin."`
	JSON  bool          `name:"json" default:"false" help:"Write the report as JSON (schema tokenmill.stats/v1) instead of tables."`
	Plot  string        `placeholder:"FILE" default:"" help:"Also draw the length histograms and per-endpoint speed to FILE, an .svg or .png."`
	Wall  time.Duration `default:"0s" help:"Duration of the generation run, which records do not carry: adds each endpoint's tok/s over the run and mean requests in flight."`
	Top   int           `default:"10" help:"Error messages listed, and sources listed in the tables (--json lists every source)."`
	// ContextLength is the model's context, which records do not carry.
	ContextLength int64 `name:"context-length" placeholder:"N" default:"0" help:"The model's context length in tokens: prompt tokens are also shown as a share of it, with the prompts above 50% and 90% of it (0: unknown, inferred from requests whose max_tokens infer lowered, when there are any)."`
	cli.RejectsFlag
	cli.ForceFlag `set:"force_what=--plot and --rejects"`
	cli.WorkersFlag
	cli.ProgressFlag
	TokenFlags `embed:""`
	Checks     string `default:"" help:"Also report what filter's quality checks find, dropping nothing: default (filter's default set), all, or check names (length, think_block, reasoning_only, empty, think_residue, tool_call, loop, lang), comma-separated."`
	Clusters   string `default:"" placeholder:"FILE" help:"Summarise the clusters FILE of dedup --near instead of records: near-duplicates dropped, their similarity histogram, and the --top kept prompts with the most copies."`
	Against    string `default:"" placeholder:"FILE" help:"Also set the records' make-up beside FILE's (a sample of served traffic, another training set): shares by source, language, tools, thinking and tool calls side by side with their total variation distance, prompt and answer lengths with their Kolmogorov-Smirnov statistic, and the groups that differ most; with --plot, each dimension drawn beside the reference."`

	quality.Flags
}

// Config is one stats run, taken from the flags once.
type Config struct {
	Files         []string // never empty: "-" reads stdin
	JSON          bool
	Plot          string
	Wall          time.Duration
	Top           int
	ContextLength int64
	Rejects       string
	Force         bool
	Workers       int
	Progress      time.Duration
	Tokens        TokenFlags
	Checks        []string       // filter's checks to report (nil: none)
	Quality       quality.Config // how they run
	Clusters      string         // a dedup --near clusters file to summarise instead
	Against       string         // a reference to set the records beside
}

// config checks the flags and turns them into a Config.
func (c *Command) config() (Config, error) {
	if err := c.check(); err != nil {
		return Config{}, err
	}
	if c.Clusters != "" {
		if len(c.Files) > 0 {
			return Config{}, cli.Usagef("--clusters summarises a clusters file alone: give no record files")
		}
		if c.Plot != "" || c.Checks != "" || c.Wall != 0 {
			return Config{}, cli.Usagef("--plot, --checks and --wall describe records, not a --clusters file")
		}
	}
	workers, err := c.Count()
	if err != nil {
		return Config{}, err
	}
	cfg := Config{Files: c.Files, JSON: c.JSON, Plot: c.Plot, Wall: c.Wall, Top: c.Top, ContextLength: c.ContextLength,
		Rejects: c.Rejects, Force: c.Force, Workers: workers, Progress: c.Progress, Tokens: c.TokenFlags,
		Clusters: c.Clusters, Against: c.Against}
	if len(cfg.Files) == 0 {
		cfg.Files = []string{"-"}
	}
	if c.Checks != "" && c.Clusters == "" {
		if cfg.Checks, err = quality.ParseChecks(c.Checks); err != nil {
			return Config{}, cli.Usagef("--checks: %v", err)
		}
		if len(cfg.Checks) == 0 {
			return Config{}, cli.Usagef("--checks names no check")
		}
		if cfg.Quality, err = c.Flags.Config(cfg.Checks); err != nil {
			return Config{}, cli.Usagef("%v", err)
		}
		if _, err := quality.NewChecker(cfg.Quality); err != nil {
			return Config{}, cli.Usagef("%v", err)
		}
	}
	return cfg, nil
}

// Run reads the inputs and writes the report.
func (c *Command) Run(ctx context.Context, env *cli.Env) error {
	return cli.RunConfig(ctx, env, c.config, Config.Run)
}

// Run reads the records cfg names and writes their report, or
// summarises the clusters file it names.
func (cfg Config) Run(ctx context.Context, env *cli.Env) error {
	if cfg.Clusters != "" {
		return runClusters(ctx, env, cfg)
	}
	outs, err := jsonl.CheckOutputs(env.Stdout, jsonl.InputsFrom(cfg.Files, env.Stdin),
		[]jsonl.Output{{Flag: "report", Path: "-", Kept: true}, {Flag: "--plot", Path: cfg.Plot, Later: true}, {Flag: "--rejects", Path: cfg.Rejects}}, cfg.Force)
	if err != nil {
		return err
	}
	if err := outs.Open(); err != nil {
		return err
	}
	defer outs.Abort()
	rejects := outs.Rejects(env)
	against, err := compare(ctx, env, cfg)
	if err != nil {
		return err
	}
	start := time.Now()
	report, err := read(ctx, env, cfg, rejects)
	if err != nil {
		return err
	}
	if err := write(env, cfg, report, against); err != nil {
		return err
	}
	if cfg.Plot != "" && !report.Interrupted {
		w, err := outs.Create("--plot", cfg.Plot)
		if err == nil {
			err = Plot(w.Raw(), report, against, cfg.Plot)
		}
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
	}
	env.Logf("read %s (%s) from %s in %s, %s", plural(report.Records, "record"), bytesText(report.Bytes),
		plural(len(cfg.Files), "input"), time.Since(start).Round(time.Millisecond), rejects.Summary())
	if report.Interrupted {
		// The report on stdout says "interrupted"; files are not put in
		// place short.
		return context.Cause(ctx)
	}
	if err := outs.Close(); err != nil {
		return err
	}
	return rejects.Err()
}

// read reads the records into a report, every bad line to rejects.
func read(ctx context.Context, env *cli.Env, cfg Config, rejects *jsonl.Rejects) (*Report, error) {
	var prog progress
	display := cli.StartProgress(ctx, env, cfg.Progress, func() []string {
		return []string{fmt.Sprintf("read %s records (%s)", num(prog.records.Load()), bytesText(prog.bytes.Load()))}
	})
	defer display.Stop()
	parity, err := newParityChecker(cfg.Tokens.Tokenizer, cfg.Tokens.TemplateKwargs)
	if err != nil {
		return nil, err
	}
	pa := newParityAgg(parity)
	reader := jsonl.NewReader(ctx, env, cfg.Files, env.Stdin, jsonl.Options{})
	agg := newAggregator()
	tk := newTokenAgg(cfg.Tokens)
	if cfg.Checks != nil {
		agg.checks = newCheckAgg(cfg.Checks)
	}
	err = consume(ctx, reader, cfg.Workers, checkerOf(cfg, parity), func(it *item) error {
		switch {
		case it.Err != nil:
			return rejects.Input(it.Err)
		case it.V.err != nil:
			return rejects.Add(it.RawLine, it.V.err.reason, it.V.err.err.Error())
		}
		agg.add(&it.V.fact, it.File, it.Line)
		if it.V.fact.tokens {
			tk.addTokens(it.RawLine.Data)
		}
		pa.add(it.V.fact.parity)
		return nil
	}, &prog)
	display.Stop()
	if err != nil {
		return nil, err
	}
	report := agg.report(cfg.Top, cfg.Wall.Seconds(), cfg.ContextLength)
	if err := describeSettings(report, cfg.Files); err != nil {
		return nil, err
	}
	report.Inputs = cfg.Files
	report.Bytes = prog.bytes.Load()
	report.Rejected = rejects.Total()
	report.RejectReasons = counts(rejects.Counts())
	report.Interrupted = cli.Interrupted(ctx)
	if !report.Interrupted {
		report.Tokens = tk.report(ctx)
		report.Parity = pa.report()
	}
	return report, nil
}

// checkerOf returns the workers' checker factory.
func checkerOf(cfg Config, parity *parityChecker) func() *checker {
	if cfg.Checks == nil {
		return func() *checker { return &checker{parity: parity} }
	}
	return func() *checker {
		qc, _ := quality.NewChecker(cfg.Quality) // config made one already
		return &checker{c: qc, parity: parity}
	}
}

func (c *Command) check() error {
	if c.Rejects == "-" {
		return cli.Usagef("--rejects -: stdout carries the report; name a file")
	}
	if c.Plot != "" {
		if ext := strings.ToLower(filepath.Ext(c.Plot)); ext != ".svg" && ext != ".png" {
			return cli.Usagef("--plot %s: the name must end in .svg or .png", c.Plot)
		}
	}
	switch {
	case c.Wall < 0:
		return cli.Usagef("--wall must not be negative")
	case c.Top < 0:
		return cli.Usagef("--top must not be negative")
	case c.ContextLength < 0:
		return cli.Usagef("--context-length must not be negative")
	case c.MaxTrainTokens < 0 || c.MinLossTokens < 0:
		return cli.Usagef("--max-train-tokens and --min-loss-tokens must not be negative")
	case c.Tokens && c.TokensSample < 1:
		return cli.Usagef("--tokens-sample must be at least 1")
	}
	return nil
}

// write prints the report to stdout as text or JSON.
func write(env *cli.Env, cfg Config, r *Report, against *Against) error {
	if against != nil {
		return writeCompared(env, cfg, r, against)
	}
	if !cfg.JSON {
		return r.WriteText(env.Stdout, cfg.Top)
	}
	out, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = env.Stdout.Write(append(out, '\n'))
	return err
}
