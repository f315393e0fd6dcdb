// Package compose chooses records to target shares per group: a training
// mix from several datasets, or the prompts to generate from, in two
// passes over the files (count, then select) with every record written
// byte for byte.
//
// Each record is placed in a group by a key (its source, a meta field,
// its language, its prompt's length, its mixture arm, whether it has
// tools or thinks), and each group takes its records in the order of a
// keyed hash of their ids: the same inputs, mix and seed take the same
// records, and adding records to one input changes no more of the
// selection than the records it adds could displace.
//
// Memory: 8 bytes per input record (its draw and its group) for the two
// passes, and 4 more per record of a group that gives only part of its
// records, while its cut is found; no record is held.
package compose

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// Description is compose's --help text.
const Description = `Choose records to target shares per group: a training mix, or the prompts to generate from.

  compose --by source --share ii-0625=0.5,code=0.3,math=0.2 --total 300000 -o mix.jsonl ii.jsonl code.jsonl math.jsonl
  compose --by lang --max zh=10% --total 100000 -o prompts.jsonl prompts-all.jsonl    # at most 10% Chinese
  compose --by meta.langdetect --share en=0.7,zh=0.3 -o mix.jsonl ii.jsonl            # as many as the shares allow
  compose --spec mix.yaml --seed 7 -o mix.jsonl ii.jsonl code.jsonl math.jsonl         # shares within groups, caps
  compose --total 50000 -o sample.jsonl prompts.jsonl                                  # a reproducible sample
  compose --by length --dry-run prompts.jsonl                                          # the make-up, nothing written

  extract --source ii-0625 data/0625/*.parquet > ii.jsonl; extract --source code code.jsonl > code-p.jsonl
  cat ii.jsonl code-p.jsonl | dedup | compose --by source --share ii-0625=0.8,code=0.2 -o mix.jsonl
  infer -e 127.0.0.1:30000-30007 -o gen.jsonl mix.jsonl
  merge --prompts mix.jsonl --missing gen.jsonl > todo.jsonl   # the rerun keeps the mix: exactly what compose chose and is missing
  merge --to messages gen.jsonl | compose --by tools --share yes=0.2,no=0.8 -o train.jsonl

--by names the key: source, a field's path (meta.langdetect, meta.label.cate_ability_en: a
list gives its first element; a leading dot makes any name a path), lang (the first user
turn's language, as filter's lang check tells it: ISO 639-1 codes, und when too short to
tell), length (the prompt's characters in --length-buckets: 0-255, 256-1023, ..., 16384+),
arm (output.arm of infer --mix), tools (yes: the record offers tools or calls one; no),
thinking (on: the answer reasons; off; a prompt as its params.chat_template_kwargs ask).
Without --by every record is in one group, "all".

--share gives named groups fractions of the whole (0.3 or 30%); the groups not named share
what is left in proportion to their records (--equal: equally); when the named shares sum to
1, the others are not in the mix. Without --share every group keeps its share of the input.
--max caps a group's share; its excess goes to the others in proportion. --spec FILE (YAML or
JSON) says the same and more, shares within a group, by another key:

  by: source
  total: 300000
  groups:
    ii-0625: {share: 0.5, by: lang, groups: {en: 0.8, zh: {max: 0.1}}}
    code: 0.3
    math: 20%

Each group takes its records lowest keyed hash of the id first (of the content id extract
would give, for a record without one; a sample above 0 counts with its id), so shares are
exact to within one record per group, the same inputs, mix and --seed take the same records,
and records added to one input displace at most as many. --total is the number of records
to write (default: as many as every group can give its share of). A group with too few
records gives all it has and the others fill its place in proportion (said on stderr), or
with --repeat its records are repeated (each repeat, after the record itself, marked
"compose": {"repeat": N}). Records are written byte for byte in input order.

Inputs are read twice (count, then select): a pipe or FIFO (stdin included) is spooled to a
temporary file in $TMPDIR as it is read, at most --spool-max bytes (0: pipes refused). A
record without a value for a key is rejected (missing_key), as is one without an id or a
prompt to derive one from; rejects are counted by reason, shown with file and line, written
to --rejects, and make the exit code 3. The summary on stderr shows per group the share,
available, target, taken and shortfall.`

// Command is the compose tool.
type Command struct {
	cli.Globals
	Inputs         []string `arg:"" optional:"" help:"Record files (JSON Lines, JSON arrays, Parquet; gzip/zstd recognised by content). None or - reads stdin."`
	By             string   `default:"" placeholder:"KEY" help:"Group the records by KEY: source, lang, length, tools, thinking, arm or a field's path such as meta.langdetect (empty: one group, all)."`
	Share          string   `default:"" placeholder:"GROUP=SHARE,..." help:"The groups' shares of the whole, as fractions or percentages, e.g. code=0.3,math=20%; the groups not named share what is left (empty: every group keeps its share of the input)."`
	Max            string   `default:"" placeholder:"GROUP=SHARE,..." help:"Caps on groups' shares, e.g. zh=10%; a capped group's excess goes to the others in proportion."`
	Equal          bool     `default:"false" help:"The groups without a --share split what is left equally instead of in proportion to their records."`
	Spec           string   `default:"" placeholder:"FILE" help:"The mix as a YAML or JSON file: by, groups (name: share, or share, max and a nested by and groups), equal, and total, repeat, seed (the flags win when given). Replaces --by, --share, --max and --equal."`
	Total          int64    `default:"0" placeholder:"N" help:"Records to write (0: as many as every group can give its share of, without repeats)."`
	Seed           uint64   `default:"0" help:"Seed of the keyed hash that orders each group's records: another seed takes another selection."`
	Repeat         bool     `default:"false" help:"A group with fewer records than its share asks repeats them (each repeat marked \"compose\": {\"repeat\": N}) instead of the other groups filling its place."`
	LengthBuckets  string   `default:"256,1024,4096,16384" placeholder:"N,N,..." help:"Bounds, in characters of the prompt, of the groups of --by length."`
	SpoolMax       cli.Size `default:"8GiB" placeholder:"SIZE" help:"Most bytes of a pipe or FIFO input (stdin included) spooled to a temporary file in $TMPDIR for the second pass; a larger one is refused. 0: refuse pipes (name files)."`
	DryRun         bool     `default:"false" help:"Count and plan only: print the groups' available, target and taken records, write nothing."`
	cli.OutputFlag `set:"output_what=the chosen records"`
	cli.RejectsFlag
	cli.ForceFlag   `set:"force_what=-o and --rejects"`
	cli.WorkersFlag `set:"workers_what=read records and find their groups"`
	cli.ProgressFlag
}

// config is one compose run, taken from the flags once.
type config struct {
	inputs          []string
	output, rejects string
	force, dryRun   bool
	spoolMax        int64
	workers         int
	progress        time.Duration
	spec            *levelSpec // the mix
	total           int64
	seed            uint64
	repeat          bool
}

// run is the state of one compose run.
type run struct {
	cfg     config
	env     *cli.Env
	spec    *levelSpec
	root    *levelRun
	want    map[string]bool // top-level fields the keys start from
	total   int64
	seed    uint64
	repeat  bool
	inputs  []*input
	entries []entry
	leaves  []*leafState

	// counts for progress and the summary
	read, bytes, written atomic.Int64
	pass                 atomic.Int32
	planned              atomic.Int64 // the total, for the progress display
}

// entry is one input item of the first pass, in order: a record's draw
// and its leaf, or a reject (leaf < 0).
type entry struct {
	rank uint32
	leaf int32
}

// leafState is a leaf group's counts and its cut.
type leafState struct {
	node  *node
	avail int64
	// Every record of the leaf is written base times, and the k with the
	// lowest draws once more: those below thr, and the first needEq of
	// those at it.
	base, k int64
	thr     uint32
	needEq  int64
	eqTaken int64
	all     bool // k covers every record
}

// Run composes the mix.
func (c *Command) Run(ctx context.Context, env *cli.Env) error {
	return cli.RunConfig(ctx, env, c.config, config.run)
}

// run composes the mix cfg describes.
func (cfg config) run(ctx context.Context, env *cli.Env) error {
	r := &run{cfg: cfg, env: env, seed: cfg.seed, repeat: cfg.repeat, total: cfg.total, spec: cfg.spec}
	r.setup()
	outputs := []jsonl.Output{{Flag: "--rejects", Path: cfg.rejects}}
	if !cfg.dryRun {
		outputs = append(outputs, jsonl.Output{Flag: "-o", Path: cfg.output})
	}
	outs, err := jsonl.CheckOutputs(env.Stdout, jsonl.InputsFrom(cfg.inputs, env.Stdin), outputs, cfg.force)
	if err != nil {
		return err
	}
	if err := r.openInputs(); err != nil {
		return err
	}
	defer r.closeInputs()
	if err := outs.Open(); err != nil {
		return err
	}
	defer outs.Abort()
	rejects := outs.Rejects(env)
	progress := cli.StartProgress(ctx, env, cfg.progress, r.status)
	err = r.count(ctx, rejects)
	if err == nil && ctx.Err() == nil {
		r.plan()
		if !cfg.dryRun {
			err = r.write(ctx, outs.Writer("-o"))
		}
	}
	progress.Stop()
	if err == nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	if err == nil {
		err = outs.Close()
	}
	if err != nil {
		return err
	}
	r.summary(rejects)
	return rejects.Err()
}

// status is the progress line.
func (r *run) status() []string {
	switch r.pass.Load() {
	case 2:
		return []string{fmt.Sprintf("pass 2 of 2: wrote %s of %s records", cli.Thousands(r.written.Load()), cli.Thousands(r.planned.Load()))}
	}
	return []string{fmt.Sprintf("pass 1 of 2: read %s records, %.1f MB", cli.Thousands(r.read.Load()), float64(r.bytes.Load())/1e6)}
}

// config checks the flags and reads the mix from them or --spec.
func (c *Command) config() (config, error) {
	cfg := config{inputs: c.Inputs, output: c.Output, rejects: c.Rejects, force: c.Force, dryRun: c.DryRun,
		spoolMax: int64(c.SpoolMax), progress: c.Progress, total: c.Total, seed: c.Seed, repeat: c.Repeat}
	buckets, err := parseBuckets(c.LengthBuckets)
	if err != nil {
		return cfg, cli.Usagef("%v", err)
	}
	switch {
	case c.Total < 0:
		return cfg, cli.Usagef("--total must not be negative")
	case c.Spec != "" && (c.By != "" || c.Share != "" || c.Max != "" || c.Equal):
		return cfg, cli.Usagef("--spec holds the mix: drop --by, --share, --max and --equal (or put them in the file)")
	case c.Spec == "" && c.By == "" && (c.Share != "" || c.Max != ""):
		return cfg, cli.Usagef("--share and --max name groups of a key: give --by (e.g. --by source)")
	case c.Rejects == "-" && c.Stdout() && !c.DryRun:
		return cfg, cli.Usagef("--rejects - and the records both go to stdout: name a file for one of them")
	}
	if cfg.workers, err = c.Count(); err != nil {
		return cfg, err
	}
	if c.Spec != "" {
		spec, fs, err := loadSpec(c.Spec, buckets)
		if err != nil {
			return cfg, cli.Usagef("%v", err)
		}
		cfg.spec = spec
		if cfg.total == 0 {
			cfg.total = fs.total
		}
		cfg.repeat = cfg.repeat || fs.repeat
		if fs.seed != nil && cfg.seed == 0 {
			cfg.seed = *fs.seed
		}
	} else if c.By == "" {
		cfg.spec = &levelSpec{key: &key{name: "all", kind: keyAll}, equal: c.Equal}
	} else {
		if cfg.spec, err = flagSpec(c.By, c.Share, c.Max, c.Equal, buckets); err != nil {
			return cfg, cli.Usagef("%v", err)
		}
	}
	return cfg, nil
}

// setup finds the fields the mix's keys read and builds its levels.
func (r *run) setup() {
	r.want = map[string]bool{}
	for _, k := range r.spec.keys(nil) {
		if k.kind == keyPath {
			r.want[k.path[0]] = true
		}
	}
	r.root = newLevel(r.spec, nil, r)
}
