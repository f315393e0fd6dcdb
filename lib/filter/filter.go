// Package filter is the quality gate between generation and training: it
// checks every answer of a stream of generation records (one per record,
// or one per regenerated assistant turn) with the checks of package
// quality, writes the records whose answers all pass byte for byte, and
// the others, with the reason, to the rejects file, from which merge
// --missing sends them back for regeneration.
package filter

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/quality"
	"tokenmill/lib/tokenizer"
)

// Description is filter's --help text.
const Description = `Keep the generation records whose answers pass the quality checks.

  infer -e 127.0.0.1:30000-30007 -o gen.jsonl prompts.jsonl
  filter --rejects gen.unfit.jsonl -o gen.fit.jsonl gen.jsonl
  merge --prompts prompts.jsonl --missing gen.jsonl gen.unfit.jsonl > todo.jsonl   # unfit and unanswered
  filter --checks default,lang --loop-dup-ngram 5=0.3 gen.jsonl > fit.jsonl
  filter --tokenizer models/Qwen3-8B --rejects gen.mismatch.jsonl -o gen.fit.jsonl gen.jsonl   # ids the model's own

Every answer is checked: output.text of a single answer, or each regenerated
assistant turn of a conversation (output.turns). Records whose answers all
pass are written byte for byte; a record with an unfit answer goes to
--rejects FILE as it was, plus "reject": {reason, detail, turn, file, line}
(turn: the index into output.turns), and is counted by reason. Dropping is
not an error: the exit code stays 0.

Checks (--checks, in the order tried; the first an answer fails is its reason):
  length          finish_reason length: cut at max_tokens
  reasoning_only  reasoning, and no answer text
  empty           no answer text, or white space only (a turn that calls tools may have none)
  think_residue   thinking markers (<think>, harmony's <|channel|>, ◁think▷, ...) in the answer or reasoning
  tool_call       a regenerated call whose arguments are not a JSON object, or naming a function not in "tools"
  loop            degenerate repetition: Gopher repetition measures, and a repeated tail
  lang            the answer's language differs from the prompt's (off by default)

Error records are passed through unchanged (merge ranks them); prompt records
and lines that are not JSON objects are rejected as bad input (exit 3).`

// Command is the filter tool.
type Command struct {
	cli.Globals
	Files          []string `arg:"" optional:"" name:"file" help:"Generation records (JSONL, JSON array, Parquet; .gz/.zst by content). None or '-' reads stdin."`
	cli.OutputFlag `set:"output_what=the fit records"`
	Rejects        string `default:"" placeholder:"FILE" help:"Write the unfit records to FILE, each with a reject field, and bad input lines (appears only when complete; refused if it exists unless --force)."`
	Checks         string `default:"default" help:"Checks to run, comma-separated: length, think_block, reasoning_only, empty, think_residue, tool_call, loop, lang; default (all but lang); all."`
	MaxTrainTokens int    `default:"0" placeholder:"N" help:"Drop records with a training row (as merge --to tokens makes them) longer than N tokens, the trainer's max_length (too_long_for_training), counted on the ids of infer --token-ids. 0: no limit."`
	MinLossTokens  int    `default:"0" placeholder:"M" help:"Drop records whose training rows hold fewer than M tokens with loss, the answers' (too_few_loss_tokens). 0: no minimum."`
	Tokenizer      string `default:"" placeholder:"DIR" help:"The served model's Hugging Face folder: drop records whose server ids (infer --token-ids) differ from the ids the model's own chat template and tokenizer give (token_mismatch, with where and why); records without ids pass."`
	TemplateKwargs string `default:"" placeholder:"JSON" help:"With --tokenizer, the chat_template_kwargs the run sent, for records whose own params and arm name none."`
	cli.ForceFlag
	cli.WorkersFlag `set:"workers_what=parse and check records"`
	cli.ProgressFlag
	quality.Flags
}

// counts is the run's accounting: every record read is kept, dropped,
// passed (an error record) or rejected, exactly once.
type counts struct {
	read, kept, dropped, passed, rejected, answers atomic.Int64
	bytes                                          atomic.Int64
	byReason                                       map[string]int64 // sequencer only
}

// Config is one filter run, taken from the flags once.
type Config struct {
	Files           []string
	Output, Rejects string
	Force           bool
	Quality         quality.Config
	MaxTrainTokens  int    // 0: no limit
	MinLossTokens   int    // 0: no minimum
	Tokenizer       string // the model's folder, for the parity check ("": none)
	TemplateKwargs  string
	Workers         int
	Progress        time.Duration
}

// config checks the flags and turns them into a Config.
func (c *Command) config() (Config, error) {
	checks, err := quality.ParseChecks(c.Checks)
	if err != nil {
		return Config{}, cli.Usagef("--checks: %v", err)
	}
	qcfg, err := c.Flags.Config(checks)
	if err != nil {
		return Config{}, cli.Usagef("%v", err)
	}
	switch {
	case c.Rejects == "-":
		return Config{}, cli.Usagef("--rejects needs a file: stdout carries the fit records")
	case c.MaxTrainTokens < 0 || c.MinLossTokens < 0:
		return Config{}, cli.Usagef("--max-train-tokens and --min-loss-tokens must not be negative")
	case c.TemplateKwargs != "" && c.Tokenizer == "":
		return Config{}, cli.Usagef("--template-kwargs goes with --tokenizer DIR")
	}
	workers, err := c.Count()
	if err != nil {
		return Config{}, err
	}
	return Config{Files: c.Files, Output: c.Output, Rejects: c.Rejects, Force: c.Force, Quality: qcfg,
		MaxTrainTokens: c.MaxTrainTokens, MinLossTokens: c.MinLossTokens, Tokenizer: c.Tokenizer,
		TemplateKwargs: c.TemplateKwargs, Workers: workers, Progress: c.Progress}, nil
}

// Run filters the inputs.
func (c *Command) Run(ctx context.Context, env *cli.Env) error {
	return cli.RunConfig(ctx, env, c.config, Config.Run)
}

// Run filters the inputs cfg names.
func (cfg Config) Run(ctx context.Context, env *cli.Env) error {
	train := trainLimits{maxTokens: cfg.MaxTrainTokens, minLoss: cfg.MinLossTokens, kwargs: []byte(cfg.TemplateKwargs)}
	if cfg.Tokenizer != "" {
		var err error
		if train.tok, err = tokenizer.Load(cfg.Tokenizer); err != nil {
			return cli.Usagef("--tokenizer: %v", err)
		}
		if !train.tok.HasTemplate() {
			return cli.Usagef("--tokenizer %s: %v", cfg.Tokenizer, tokenizer.ErrNoTemplate)
		}
	}
	outs, err := jsonl.CheckOutputs(env.Stdout, jsonl.InputsFrom(cfg.Files, env.Stdin),
		[]jsonl.Output{{Flag: "-o", Path: cfg.Output}, {Flag: "--rejects", Path: cfg.Rejects}}, cfg.Force)
	if err != nil {
		return err
	}
	checkers := make([]*quality.Checker, cfg.Workers)
	for i := range checkers {
		if checkers[i], err = quality.NewChecker(cfg.Quality); err != nil {
			return cli.Usagef("%v", err)
		}
	}
	if err := outs.Open(); err != nil {
		return err
	}
	defer outs.Abort()
	// Unfit records and bad input lines share --rejects.
	s := &sink{n: &counts{byReason: map[string]int64{}}, train: train,
		out: outs.Writer("-o"), unfit: outs.Writer("--rejects"), bad: outs.Rejects(env)}

	in := jsonl.NewReader(ctx, env, cfg.Files, env.Stdin, jsonl.Options{})
	start := time.Now()
	progress := cli.StartProgress(ctx, env, cfg.Progress, func() []string {
		read := s.n.read.Load()
		return []string{fmt.Sprintf("read %d, kept %d, dropped %d (%.1f MB/s)", read, s.n.kept.Load(), s.n.dropped.Load(),
			float64(s.n.bytes.Load())/1e6/time.Since(start).Seconds())}
	})
	err = run(ctx, in, checkers, s)
	progress.Stop()
	if err != nil {
		return err
	}
	if cli.Interrupted(ctx) {
		return env.EndInterrupted(ctx, s.out, outs.Abort, s.summary(), s.n.read.Load(), "")
	}
	if err := outs.Close(); err != nil {
		return err
	}
	env.Logf("%s", s.summary())
	return s.bad.Err()
}

// summary is the one line printed at the end, e.g. "read 654676, kept
// 641002, dropped 13674 (length 9120, loop 2211, empty 1030)".
func (s *sink) summary() string {
	n := s.n
	line := fmt.Sprintf("read %d, kept %d, dropped %d", n.read.Load(), n.kept.Load(), n.dropped.Load())
	if len(n.byReason) > 0 {
		reasons := make([]string, 0, len(n.byReason))
		for r := range n.byReason {
			reasons = append(reasons, r)
		}
		sort.Slice(reasons, func(i, j int) bool {
			a, b := n.byReason[reasons[i]], n.byReason[reasons[j]]
			return a > b || a == b && reasons[i] < reasons[j]
		})
		parts := make([]string, len(reasons))
		for i, r := range reasons {
			parts[i] = fmt.Sprintf("%s %d", r, n.byReason[r])
		}
		line += " (" + strings.Join(parts, ", ") + ")"
	}
	if a, r := n.answers.Load(), n.kept.Load()+n.dropped.Load(); a != r {
		line += fmt.Sprintf(", %d answers checked", a)
	}
	if p := n.passed.Load(); p > 0 {
		line += fmt.Sprintf(", passed %d error records", p)
	}
	if n.rejected.Load() > 0 {
		line += ", " + s.bad.Summary()
	}
	return line
}
