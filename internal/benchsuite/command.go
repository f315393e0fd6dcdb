// Package benchmark is the measuring half of `just bench`
// (pipelines/bench.sh): it times commands and takes their peak memory,
// makes generation records to merge and summarise, drives infer against a
// simulated fleet while watching it, and renders the tables of
// BENCHMARKS.md from what was measured.
package benchsuite

import (
	"tokenmill/lib/cli"
)

// Description is the --help text.
const Description = `Measure tokenmill and the tools users would run instead, for BENCHMARKS.md.

    benchmark time --results r.jsonl --group dedup --name awk --bytes-of p.jsonl -- awk '!seen[$0]++' p.jsonl
    benchmark generations --rerun rerun.jsonl -o gens.jsonl prompts.jsonl
    benchmark fleet --results r.jsonl --policy round-robin --prompts p.jsonl
    benchmark table --results r.jsonl --group dedup

Every measurement is appended to --results as one JSON line; table and
targets read them back. pipelines/bench.sh runs the whole set.`

// Command holds the subcommands.
type Command struct {
	cli.Globals
	Time        TimeCmd        `cmd:"" help:"Run a command several times; record wall time, CPU time and peak RSS."`
	Generations GenerationsCmd `cmd:"" help:"Answer prompt records with made-up generation records, deterministically."`
	Fleet       FleetCmd       `cmd:"" help:"Run infer against a time-scaled llmsim fleet and measure it against the fleet's ideal."`
	Gobench     GobenchCmd     `cmd:"" help:"Run a Go benchmark and record the median of one of its metrics."`
	Table       TableCmd       `cmd:"" help:"Render one group of results as a Markdown table."`
	Targets     TargetsCmd     `cmd:"" help:"Check results against targets; render a Markdown table."`
}
