// Package benchsuite is the benchmark harness behind `just bench`: it
// builds the tools, makes the data, times each tokenmill command next to
// the commands users would run instead (jq, awk, sort, split, curl, the
// OpenAI Node SDK, Python), takes their peak memory, drives infer against
// simulated fleets and a real Ollama server, and writes BENCHMARKS.md, whole
// or one section at a time. The peers run as the short command lines a
// user would type; everything else is here.
package benchsuite

import (
	"tokenmill/lib/cli"
)

// Description is the --help text.
const Description = `Measure tokenmill and the tools users would run instead, for BENCHMARKS.md.

    benchsuite run                       # every section; rewrites BENCHMARKS.md (just bench)
    benchsuite run --section dedup       # one section, spliced into BENCHMARKS.md
    benchsuite run --quick               # small sizes, into .bench/BENCHMARKS.md
    benchsuite run --list                # the sections

The parts, for measuring by hand:

    benchsuite time --results r.jsonl --group dedup --name awk --bytes-of p.jsonl -- awk '!seen[$0]++' p.jsonl
    benchsuite generations --rerun rerun.jsonl -o gens.jsonl prompts.jsonl
    benchsuite fleet --results r.jsonl --policy round-robin --prompts p.jsonl
    benchsuite table --results r.jsonl --group dedup
    benchsuite pages --columns id,conversations data/corpus.parquet   # a Parquet file's pages alone

Every measurement is appended to --results as one JSON line; table and
targets read them back.`

// Command holds the subcommands.
type Command struct {
	cli.Globals
	Run         RunCmd         `cmd:"" help:"Measure every section, or those named, and write BENCHMARKS.md."`
	Time        TimeCmd        `cmd:"" help:"Run a command several times; record wall time, CPU time and peak RSS."`
	Generations GenerationsCmd `cmd:"" help:"Answer prompt records with made-up generation records, deterministically."`
	FilterGens  FilterGensCmd  `cmd:"" name:"filter-gens" help:"Write generation records for filter's benchmark from a corpus, a few percent degenerate."`
	Fleet       FleetCmd       `cmd:"" help:"Run infer against a time-scaled llmsim fleet and measure it against the fleet's ideal."`
	Gobench     GobenchCmd     `cmd:"" help:"Run a Go benchmark and record the median of one of its metrics."`
	Pages       PagesCmd       `cmd:"" help:"Read a Parquet file's pages into values and drop them: the floor under any reader's cost per row."`
	Table       TableCmd       `cmd:"" help:"Render one group of results as a Markdown table."`
	Targets     TargetsCmd     `cmd:"" help:"Check results against targets; render a Markdown table."`
}
