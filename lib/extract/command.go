package extract

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// Description is extract's --help text.
const Description = `Pull chat prompts out of instruction datasets and write them as prompt records.

  extract data/0625/*.parquet | dedup | infer --endpoints 127.0.0.1:30000-30007 -o gen.jsonl
  extract --source ii/0625 --keep label,langdetect --lang en --min-chars 20 data/0625/*.parquet -o prompts.jsonl
  extract --turns each --id-prefix sg- --rejects rejects.jsonl sharegpt.json.zst > prompts.jsonl
  extract --turns all glaive_toolcall_en.json > conversations.jsonl

Inputs are JSONL, JSON arrays, Parquet, or CSV and TSV with a header row (.csv, .tsv, or a
first line of column names), plain, gzip or zstd (by content, not name), or stdin. A CSV row
is read as a record of its columns: instruction/input/output, prompt, question, system...
Each record's layout is detected unless --format says it: batch (custom_id + body),
sharegpt (conversations of from/value, as in Infinity-Instruct; UltraChat's data), openai
(messages of role/content, content as text or a list of text parts; a line that is a list of
messages), alpaca (instruction, input, history; Dolly's context), mt-bench (turns), oasst
(OpenAssistant trees, or messages by parent_id), plain (prompt, question, query, problem or
text), preference (chosen/rejected pairs, OpenAI's preferred_output), tried in that order.
Records that need an image, audio or video are rejected as multimodal.

A record that gives no prompt (no user turn, empty, malformed, unknown layout, ...) is
rejected: counted by reason, shown with file and line, written to --rejects, and the run
exits 3. Records left out by --lang, --min-chars or --max-chars are counted as filtered.`

// Command is the extract tool.
type Command struct {
	cli.Globals

	Files           []string `arg:"" optional:"" name:"file" help:"Datasets to read (JSONL, JSON array, Parquet, CSV/TSV; .gz/.zst by content). None or '-' reads stdin."`
	cli.OutputFlag  `set:"output_what=the prompt records"`
	Format          string `default:"auto" enum:"auto,batch,sharegpt,openai,alpaca,mt-bench,oasst,plain,preference" help:"Record layout: auto detects it per record (${enum})."`
	Turns           string `default:"first" enum:"first,all-but-last,each,all" help:"Which turns make the prompt: first (system + first user turn), all-but-last (everything up to the last user turn), each (one prompt per user turn, with its history; ids get '#<n>'), all (the whole conversation with its answers, tool calls and tool results, for regenerating it)."`
	IDPrefix        string `name:"id-prefix" default:"" help:"Put this before every id (an integer id becomes a string)."`
	IDField         string `name:"id-field" default:"" help:"Take ids from this field (default: id, question_id or custom_id, whichever is set). Records without one get a hash of their prompt."`
	Keep            string `default:"" help:"Copy these dataset fields into meta, e.g. label,langdetect,source,reward."`
	Source          string `default:"" help:"Set the records' source (provenance), e.g. infinity-instruct/0625."`
	MinChars        int    `name:"min-chars" default:"0" help:"Leave out prompts with fewer characters (all message contents counted, system included)."`
	MaxChars        int    `name:"max-chars" default:"0" help:"Leave out prompts with more characters (0: no limit)."`
	Lang            string `default:"" help:"Keep only records whose langdetect field is one of these, e.g. en,zh."`
	Limit           int64  `default:"0" help:"Stop after writing this many prompts (0: no limit)."`
	CSVDelimiter    string `name:"csv-delimiter" default:"" placeholder:"CHAR" help:"Field separator of CSV inputs, e.g. ';' or '|' (tab: '\\t'). Default: a tab for .tsv, a comma for .csv, else a tab if the header row has one, else a comma."`
	cli.WorkersFlag `set:"workers_what=convert records, the output in input order whatever their number (a pipe among the inputs: 1 unless set)"`
	MaxHeld         int `name:"max-held" default:"100000" help:"Messages of a flat OpenAssistant export held at once to rebuild a conversation tree; one past this is rejected as max_held."`
	cli.RejectsFlag
	cli.ForceFlag
	cli.ProgressFlag
}

func (c *Command) options() Options {
	return Options{
		Format: c.Format, Turns: c.Turns, IDPrefix: c.IDPrefix, IDField: c.IDField,
		Keep: splitList(c.Keep), Source: c.Source, MinChars: c.MinChars, MaxChars: c.MaxChars,
		Lang: splitList(c.Lang), MaxHeld: c.MaxHeld,
	}
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(list string) []string {
	var out []string
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// counts is the run's accounting. Every candidate (a record, or a user turn
// with --turns each, or a prompter message of an OpenAssistant tree; an
// unreadable input counts as one) ends up exactly once as written,
// rejected, filtered, or (a held message) as ending no prompt.
type counts struct {
	read       atomic.Int64 // records, and inputs the reader could not read
	candidates atomic.Int64
	wrote      atomic.Int64
	noPrompt   int64
	questions  int64 // records written marked question lists
	filtered   map[string]int64
}

// Config is one extract run, taken from the flags once.
type Config struct {
	Files           []string
	Output, Rejects string
	Force           bool
	Options         Options
	Limit           int64 // prompts to write before stopping (0: no limit)
	CSVDelimiter    rune  // 0: each input's own
	Workers         int
	Progress        time.Duration
}

// config checks the flags and turns them into a Config.
func (c *Command) config(stdin io.Reader) (Config, error) {
	if c.MinChars < 0 || c.MaxChars < 0 || c.Limit < 0 {
		return Config{}, cli.Usagef("--min-chars, --max-chars and --limit cannot be negative")
	}
	if c.MaxHeld < 1 {
		return Config{}, cli.Usagef("--max-held must be at least 1")
	}
	workers, err := c.WorkersFlag.Count()
	if err != nil {
		return Config{}, err
	}
	if c.Workers == 0 && !regularInputs(c.Files, stdin) {
		// Batches wait to fill: records that trickle in through a pipe
		// are converted as they come unless --workers asks otherwise.
		workers = 1
	}
	delim, err := csvDelimiter(c.CSVDelimiter)
	if err != nil {
		return Config{}, err
	}
	return Config{Files: c.Files, Output: c.Output, Rejects: c.Rejects, Force: c.Force, Options: c.options(),
		Limit: c.Limit, CSVDelimiter: delim, Workers: workers, Progress: c.Progress}, nil
}

// Run extracts the prompts of every input.
func (c *Command) Run(ctx context.Context, env *cli.Env) error {
	config := func() (Config, error) { return c.config(env.Stdin) }
	return cli.RunConfig(ctx, env, config, Config.Run)
}

// Run extracts the prompts of every input cfg names.
func (cfg Config) Run(ctx context.Context, env *cli.Env) error {
	x, err := NewExtractor(cfg.Options)
	if err != nil {
		return cli.Usagef("%v", err)
	}
	outs, err := jsonl.CheckOutputs(env.Stdout, jsonl.CSVInputs(cfg.Files, env.Stdin),
		[]jsonl.Output{{Flag: "-o", Path: cfg.Output}, {Flag: "--rejects", Path: cfg.Rejects}}, cfg.Force)
	if err != nil {
		return err
	}
	if err := outs.Open(); err != nil {
		return err
	}
	defer outs.Abort()
	out, rejects := outs.Writer("-o"), outs.Rejects(env)
	in := jsonl.NewReader(ctx, env, cfg.Files, env.Stdin, jsonl.Options{CSV: &jsonl.CSVOptions{Delimiter: cfg.CSVDelimiter}, Columns: x.Reads})
	n := &counts{filtered: map[string]int64{}}
	start := time.Now()
	progress := cli.StartProgress(ctx, env, cfg.Progress, func() []string {
		secs := time.Since(start).Seconds()
		return []string{fmt.Sprintf("read %d, wrote %d (%.0f records/s)", n.read.Load(), n.wrote.Load(), float64(n.read.Load())/secs)}
	})
	if cfg.Workers > 1 {
		err = cfg.extractParallel(ctx, in, cfg.Workers, cfg.Options, out, rejects, n) // closes in
	} else {
		err = cfg.extract(ctx, in, x, out, rejects, n)
		in.Close() // inputs are only read: nothing to lose on close
	}
	progress.Stop()
	if err != nil {
		return err
	}
	perTurn := cfg.Options.Turns == TurnsEach
	if cli.Interrupted(ctx) {
		return env.EndInterrupted(ctx, out, outs.Abort, n.summary(rejects, perTurn), n.read.Load(), "")
	}
	werr := outs.Close()
	env.Logf("%s", n.summary(rejects, perTurn))
	if werr != nil {
		return werr
	}
	return rejects.Err()
}

// extract is the record loop.
func (cfg *Config) extract(ctx context.Context, in *jsonl.Reader, x *Extractor, out *jsonl.Writer, rejects *jsonl.Rejects, n *counts) error {
	done := ctx.Done()
	for {
		select {
		case <-done:
			return nil
		default:
		}
		rec, err := in.Next()
		if err == io.EOF {
			return cfg.take(x.Flush(), jsonl.RawLine{}, out, rejects, n)
		}
		n.read.Add(1)
		if err != nil {
			var ie *jsonl.InputError
			if !errors.As(err, &ie) {
				return err
			}
			n.candidates.Add(1)
			if err := rejects.Input(err); err != nil {
				return err
			}
			continue
		}
		if err := cfg.take(x.ConvertRecord(rec), rec, out, rejects, n); err != nil {
			return err
		}
		if cfg.Limit > 0 && n.wrote.Load() >= cfg.Limit {
			return nil
		}
	}
}

// take writes, rejects or counts the candidates of rec, stopping at
// --limit.
func (cfg *Config) take(cands []Candidate, rec jsonl.RawLine, out *jsonl.Writer, rejects *jsonl.Rejects, n *counts) error {
	for _, cand := range cands {
		n.candidates.Add(1)
		switch {
		case cand.Out != nil:
			if err := out.Write(cand.Out); err != nil {
				var tooLong *jsonl.LineTooLongError
				if !errors.As(err, &tooLong) {
					return fmt.Errorf("writing %s: %w", out.Path(), err)
				}
				if err := rejects.Add(rec, jsonl.ReasonLineTooLong, tooLong.Error()); err != nil {
					return err
				}
				continue
			}
			if cand.QuestionList {
				n.questions++
			}
			if n.wrote.Add(1) == cfg.Limit {
				return nil
			}
		case cand.Filtered:
			n.filtered[cand.Reason]++
		case cand.NoPrompt:
			n.noPrompt++
		default:
			from := rec
			if cand.From != nil {
				from = *cand.From
			}
			if err := rejects.Add(from, cand.Reason, cand.Detail); err != nil {
				return err
			}
		}
	}
	return nil
}

// summary is the one line printed at the end, e.g.
// "read 660000, wrote 658671, rejected 1329 (no_user_turn 1200, empty 129)".
// With --turns each, or whenever the records gave other than one candidate each,
// "(T turns)" after read counts the candidates. With --turns all, the
// records written as question lists are counted at the end.
func (n *counts) summary(rejects *jsonl.Rejects, perTurn bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "read %d", n.read.Load())
	if perTurn || n.candidates.Load() != n.read.Load() {
		fmt.Fprintf(&b, " (%d turns)", n.candidates.Load())
	}
	fmt.Fprintf(&b, ", wrote %d, %s", n.wrote.Load(), rejects.Summary())
	var total int64
	reasons := make([]string, 0, len(n.filtered))
	for r, k := range n.filtered {
		total += k
		reasons = append(reasons, r)
	}
	if total > 0 {
		sort.Slice(reasons, func(i, j int) bool {
			a, b := n.filtered[reasons[i]], n.filtered[reasons[j]]
			return a > b || (a == b && reasons[i] < reasons[j])
		})
		parts := make([]string, len(reasons))
		for i, r := range reasons {
			parts[i] = fmt.Sprintf("%s %d", r, n.filtered[r])
		}
		fmt.Fprintf(&b, ", filtered %d (%s)", total, strings.Join(parts, ", "))
	}
	if n.noPrompt > 0 {
		fmt.Fprintf(&b, ", %d messages end no prompt", n.noPrompt)
	}
	if n.questions > 0 {
		lists := "question lists"
		if n.questions == 1 {
			lists = "question list"
		}
		fmt.Fprintf(&b, ", %d %s (infer --regenerate answers each question in turn)", n.questions, lists)
	}
	return b.String()
}

// regularInputs reports whether every input is a regular file (stdin
// included, when it is read), which is read as fast as it is converted.
func regularInputs(files []string, stdin io.Reader) bool {
	if len(files) == 0 {
		files = []string{"-"}
	}
	for _, f := range files {
		var st os.FileInfo
		var err error
		if f == "-" {
			sf, ok := stdin.(*os.File)
			if !ok {
				return false
			}
			st, err = sf.Stat()
		} else {
			st, err = os.Stat(f)
		}
		if err != nil || !st.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// csvDelimiter reads --csv-delimiter: one character ('\t' or "tab" for a
// tab), neither a quote nor a line end; "" leaves it to the input.
func csvDelimiter(flag string) (rune, error) {
	switch flag {
	case "":
		return 0, nil
	case `\t`, "tab", "TAB":
		return '\t', nil
	}
	r := []rune(flag)
	if len(r) != 1 || r[0] == '"' || r[0] == '\r' || r[0] == '\n' || r[0] == utf8.RuneError {
		return 0, cli.Usagef("--csv-delimiter %q: give one character, e.g. ';', '|' or '\\t' (not a quote or a line end)", flag)
	}
	return r[0], nil
}
