// Command benchsuite is the benchmark harness behind `just bench`
// (internal/benchsuite), with the commands that make its data.
package main

import (
	"tokenmill/internal/benchsuite"
	"tokenmill/lib/cli"
)

func main() { cli.Main("benchsuite", Description, &Command{}) }

// Description is the --help text.
const Description = `Measure tokenmill and the tools users would run instead, for BENCHMARKS.md.

    benchsuite run                       # every section; rewrites BENCHMARKS.md (just bench)
    benchsuite run --section dedup       # one section, into .bench/BENCHMARKS.md (a wrong name lists them)
    benchsuite run --quick               # small sizes, into .bench/BENCHMARKS.md
    benchsuite run --render              # the last run's report again, from its kept rows

The peers it compares with come from .ci/install-peers. The data it makes, by hand:

    benchsuite generations --rerun rerun.jsonl -o gens.jsonl prompts.jsonl
    benchsuite filter-gens --bytes 1000000000 -o filter-gens.jsonl corpus.jsonl
    benchsuite pages --columns id,conversations data/corpus.parquet   # a Parquet file's pages alone`

// Command holds the subcommands.
type Command struct {
	cli.Globals
	Run         benchsuite.RunCmd `cmd:"" help:"Measure every section, or those named, and write BENCHMARKS.md."`
	Generations GenerationsCmd    `cmd:"" help:"Answer prompt records with made-up generation records, deterministically."`
	FilterGens  FilterGensCmd     `cmd:"" name:"filter-gens" help:"Write generation records for filter's benchmark from a corpus, a few percent degenerate."`
	Pages       PagesCmd          `cmd:"" help:"Read a Parquet file's pages into values and drop them: the floor under any reader's cost per row."`
}
