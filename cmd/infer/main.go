// Command infer generates answers to prompt records on a fleet of
// OpenAI-compatible or SGLang servers (infer generate, the default), and
// measures the fleet before a run (infer bench).
package main

import (
	"os"
	"runtime/debug"

	"tokenmill/lib/bench"
	"tokenmill/lib/cli"
	"tokenmill/lib/infer"
)

// command is infer's command line: generate (what infer does unless told
// otherwise) or bench.
type command struct {
	cli.Globals

	Generate infer.Generate `cmd:"" default:"withargs" help:"Generate answers (the default: infer [flags] [files] is infer generate [flags] [files])."`
	Bench    bench.Bench    `cmd:"" help:"Measure the fleet's throughput at rising concurrency, name the knee and forecast a run's wall time. Writes no records."`
}

func main() {
	// The live heap is mostly the set of prompt ids (about 60 bytes a
	// prompt); collecting at half again its size rather than twice keeps a
	// million-prompt run near 100 MB for a GC cost of about 2% of a core.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	cli.Main("infer", infer.Description, &command{})
}
