// Package shard splits a record stream into N parts: by a stable hash of
// the id, round-robin, or by count, writing each record byte for byte.
package shard

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// Description is shard's --help text.
const Description = `Split a record stream into N shards, each record written byte for byte.

  shard -n 8 -o 'shards/part-{i}.jsonl.zst' prompts.jsonl
  shard --select 3/8 prompts.jsonl | infer --endpoints gpu3:30000 -o gen-3.jsonl
  shard --by lines --lines-per-shard 50000 -o 'chunks/chunk-{i:04}.jsonl' prompts.jsonl

--by hash (default) puts a record in shard xxh3-64(id) mod N: the same id lands in
the same shard on every run, in any input order, on any machine. A record with no
id is placed by the content id extract would give its prompt. --select K/N streams
only shard K (counted from 0) to stdout, so each worker can read the same input
and keep its own part. Shard files are written all or nothing: every part goes to a
temporary name, and the parts are renamed into place together once all of them are
complete, so a killed or failed run leaves no new part (and a rerun needs no --force).`

// Command is the shard tool.
type Command struct {
	cli.Globals
	Inputs        []string `arg:"" optional:"" help:"Input files (JSONL, JSON arrays, Parquet; gzip/zstd recognised by content). None or - reads stdin."`
	Shards        int      `short:"n" help:"Number of shards (--by hash or round-robin)." default:"0"`
	By            string   `help:"How records are assigned: hash (xxh3 of the id mod N), round-robin (record number mod N), lines (consecutive runs of --lines-per-shard records)." enum:"hash,round-robin,lines" default:"hash"`
	LinesPerShard int64    `help:"Records per shard with --by lines." default:"100000"`
	Output        string   `short:"o" placeholder:"PATTERN" help:"Shard file name pattern: {i} is the shard number, {i:03} the number zero-padded to 3 digits. A .gz or .zst name is compressed." default:""`
	Select        string   `help:"Write only shard K of N (as K/N, K from 0) to stdout instead of writing files." default:"" placeholder:"K/N"`
	cli.RejectsFlag
	cli.ForceFlag   `set:"force_what=shard files and --rejects"`
	cli.WorkersFlag `set:"workers_what=check and key records"`
	cli.ProgressFlag
}

// config is one shard run, taken from the flags once.
type config struct {
	inputs          []string
	output, rejects string // output: the shard files' pattern
	force           bool
	by              string
	n               int // shards (0 for --by lines: open-ended)
	sel             int // --select K, or -1
	linesPerShard   int64
	pat             pattern
	workers         int
	progress        time.Duration
}

// run is the state of one shard run.
type run struct {
	cfg     config
	env     *cli.Env
	n       int // shards (0 for --by lines: open-ended)
	sel     int // --select K, or -1
	pat     pattern
	outs    *jsonl.Outputs
	writers []*jsonl.Writer
	counts  []int64
	names   []string
	read    atomic.Int64
	bytes   atomic.Int64
}

// Run splits the input.
func (c *Command) Run(ctx context.Context, env *cli.Env) error {
	return cli.RunConfig(ctx, env, c.config, config.run)
}

// run splits the inputs cfg names.
func (cfg config) run(ctx context.Context, env *cli.Env) error {
	r := &run{cfg: cfg, env: env, n: cfg.n, sel: cfg.sel, pat: cfg.pat, counts: make([]int64, cfg.n)}
	outs, err := r.checkPaths()
	if err != nil {
		return err
	}
	if err := outs.Open(); err != nil {
		return err
	}
	defer outs.Abort()
	r.outs = outs
	rejects := outs.Rejects(env)
	if err := r.split(ctx, rejects); err != nil {
		return err
	}
	if err := outs.Close(); err != nil {
		return err
	}
	r.summary(rejects)
	return rejects.Err()
}

// checkPaths refuses, before anything is written, shard files left by an
// earlier run (unless --force) and any part or --rejects file that is one
// of the inputs or each other. The parts are opened as the run gets to
// them (Later).
func (r *run) checkPaths() (*jsonl.Outputs, error) {
	c := r.cfg
	outputs := []jsonl.Output{{Flag: "--rejects", Path: c.rejects}}
	inputs := jsonl.DatasetInputs(c.inputs, r.env.Stdin)
	if r.sel >= 0 {
		outputs = append(outputs, jsonl.Output{Flag: "--select", Path: "-"})
		return jsonl.CheckOutputs(r.env.Stdout, inputs, outputs, c.force)
	}
	if !c.force {
		old, err := r.pat.existing()
		if err != nil {
			return nil, err
		}
		if len(old) > 0 {
			return nil, cli.Usagef("%d shard files matching %s already exist (e.g. %s): remove them or pass --force", len(old), c.output, first(old))
		}
	}
	for i := 0; i < r.n; i++ {
		outputs = append(outputs, jsonl.Output{Flag: "-o", Path: r.pat.name(i), Later: true})
	}
	// With --by lines the number of parts follows from the input: an input
	// whose name the pattern could give is checked as the part it would be.
	for _, in := range c.inputs {
		if i, ok := r.pat.index(filepath.Base(in)); ok && (r.n == 0 || i >= r.n) {
			outputs = append(outputs, jsonl.Output{Flag: "-o", Path: r.pat.name(i), Later: true})
		}
	}
	return jsonl.CheckOutputs(r.env.Stdout, inputs, outputs, c.force)
}

// config checks the flags against each other.
func (c *Command) config() (config, error) {
	cfg := config{inputs: c.Inputs, output: c.Output, rejects: c.Rejects, force: c.Force, by: c.By, sel: -1,
		linesPerShard: c.LinesPerShard, progress: c.Progress}
	workers, err := c.Count()
	if err != nil {
		return cfg, err
	}
	cfg.workers = workers
	if c.Select != "" {
		k, n, err := parseSelect(c.Select)
		if err != nil {
			return cfg, err
		}
		if c.By == "lines" {
			return cfg, cli.Usagef("--select needs --by hash or round-robin")
		}
		if c.Shards != 0 && c.Shards != n {
			return cfg, cli.Usagef("-n %d and --select %s disagree on the number of shards", c.Shards, c.Select)
		}
		if c.Output != "" {
			return cfg, cli.Usagef("--select writes its shard to stdout; drop -o")
		}
		cfg.n, cfg.sel = n, k
		return cfg, nil
	}
	if c.Output == "" {
		return cfg, cli.Usagef("give -o PATTERN (e.g. -o 'shards/part-{i}.jsonl.zst') or --select K/N")
	}
	if cfg.pat, err = parsePattern(c.Output); err != nil {
		return cfg, cli.Usagef("%v", err)
	}
	switch c.By {
	case "lines":
		if c.Shards != 0 {
			return cfg, cli.Usagef("-n does not apply to --by lines (the input length decides); use --lines-per-shard")
		}
		if c.LinesPerShard <= 0 {
			return cfg, cli.Usagef("--lines-per-shard must be positive")
		}
	default:
		if c.Shards <= 0 {
			return cfg, cli.Usagef("give the number of shards with -n N")
		}
		cfg.n = c.Shards
	}
	return cfg, nil
}

func parseSelect(s string) (k, n int, err error) {
	ks, ns, ok := strings.Cut(s, "/")
	k, kerr := strconv.Atoi(ks)
	n, nerr := strconv.Atoi(ns)
	if !ok || kerr != nil || nerr != nil || n <= 0 || k < 0 || k >= n {
		return 0, 0, cli.Usagef("--select %q: want K/N with 0 <= K < N, e.g. --select 3/8", s)
	}
	return k, n, nil
}

// split reads every record and sends it to its shard.
func (r *run) split(ctx context.Context, rejects *jsonl.Rejects) error {
	stdout := r.outs.Writer("--select")
	if r.sel < 0 {
		if err := r.openAll(); err != nil {
			return err
		}
	}
	progress := cli.StartProgress(ctx, r.env, r.cfg.progress, func() []string {
		return []string{fmt.Sprintf("read %d records, %.1f MB", r.read.Load(), float64(r.bytes.Load())/1e6)}
	})
	defer progress.Stop()

	in := jsonl.NewReader(ctx, r.env, r.cfg.inputs, r.env.Stdin, jsonl.Options{})
	// Workers check and key whole batches of records; the batches come
	// back in input order, so the parts and the rejects do not depend on
	// timing.
	var accepted int64
	err := jsonl.Parallel(ctx, in, r.cfg.workers, func(_ int, b *jsonl.Batch[placed]) {
		for i := range b.Items {
			if it := &b.Items[i]; it.Err == nil {
				it.V = r.place(it.Data)
			}
		}
	}, func(b *jsonl.Batch[placed]) error {
		for i := range b.Items {
			it := &b.Items[i]
			if it.Err != nil {
				if err := rejects.Input(it.Err); err != nil {
					return err
				}
				continue
			}
			r.read.Add(1)
			if it.V.rej != nil {
				if err := rejects.Add(it.RawLine, it.V.rej.reason, it.V.rej.detail); err != nil {
					return err
				}
				continue
			}
			k := it.V.shard
			switch r.cfg.by {
			case "round-robin":
				k = int(accepted % int64(r.n))
			case "lines":
				k = int(accepted / r.cfg.linesPerShard)
			}
			accepted++
			if r.sel >= 0 {
				r.counts[k]++
				if k == r.sel {
					if err := stdout.Write(it.Data); err != nil {
						return err
					}
				}
				continue
			}
			if err := r.write(k, it.Data); err != nil {
				return err
			}
		}
		r.bytes.Store(b.Read.Bytes)
		return nil
	})
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		// A partial split must not look complete: the shard files are
		// dropped, while --select has streamed what it had.
		if stdout != nil {
			stdout.Close()
		}
		return context.Cause(ctx)
	}
	return nil
}

// placed is a worker's verdict on one record: its shard (--by hash), or
// why it has none.
type placed struct {
	shard int
	rej   *rejection
}

// place checks a record and, with --by hash, picks its shard; the other
// ways to split follow from the count of records accepted before it.
func (r *run) place(data []byte) placed {
	if r.cfg.by == "hash" {
		key, rej := shardKey(data)
		if rej != nil {
			return placed{rej: rej}
		}
		return placed{shard: HashShard(key, r.n)}
	}
	return placed{rej: checkObject(data)}
}

func (r *run) create(i int) (*jsonl.Writer, error) {
	return r.outs.Create("-o", r.pat.name(i))
}

// openAll creates every shard up front, so that empty shards exist too.
func (r *run) openAll() error {
	for i := 0; i < r.n; i++ {
		w, err := r.create(i)
		if err != nil {
			return err
		}
		r.writers = append(r.writers, w)
		r.names = append(r.names, w.Path())
	}
	return nil
}

// write appends data to shard k; with --by lines, shards are created as
// the count reaches them and finished (synced and closed, not yet renamed)
// as soon as they are full.
func (r *run) write(k int, data []byte) error {
	if r.n == 0 {
		for len(r.writers) <= k {
			if n := len(r.writers); n > 0 {
				if err := r.writers[n-1].Finish(); err != nil {
					return err
				}
			}
			w, err := r.create(len(r.writers))
			if err != nil {
				return err
			}
			r.writers = append(r.writers, w)
			r.names = append(r.names, w.Path())
			r.counts = append(r.counts, 0)
		}
	}
	r.counts[k]++
	return r.writers[k].Write(data)
}

// summary prints each shard's count, then one line for the run, and warns
// about shard files beyond this run's count left by an earlier one.
func (r *run) summary(rejects *jsonl.Rejects) {
	var written, lo, hi int64
	for i, n := range r.counts {
		if r.sel < 0 {
			r.env.Logf("%s %d", r.names[i], n)
		}
		written += n
		if i == 0 || n < lo {
			lo = n
		}
		if n > hi {
			hi = n
		}
	}
	tail := ""
	if rejects.Total() > 0 {
		tail = ", " + rejects.Summary()
	}
	if r.sel >= 0 {
		r.env.Logf("read %d, selected %d (shard %d/%d; shards hold %d to %d)%s", r.read.Load(), r.counts[r.sel], r.sel, r.n, lo, hi, tail)
		return
	}
	r.env.Logf("read %d, wrote %d into %d shards (min %d, max %d)%s", r.read.Load(), written, len(r.counts), lo, hi, tail)
	if old, err := r.pat.existing(); err == nil {
		var stale []int
		for i := range old {
			if i >= len(r.counts) {
				stale = append(stale, i)
			}
		}
		if len(stale) > 0 {
			sort.Ints(stale)
			r.env.Logf("warning: %d shard files from an earlier run with more shards are still there (e.g. %s)", len(stale), old[stale[0]])
		}
	}
}

func first(m map[int]string) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return m[keys[0]]
}
