// Command infer generates answers to prompt records on a fleet of
// OpenAI-compatible or SGLang servers.
package main

import (
	"os"
	"runtime/debug"

	"tokenmill/lib/cli"
	"tokenmill/lib/infer"
)

func main() {
	// The live heap is mostly the set of prompt ids (about 60 bytes a
	// prompt); collecting at half again its size rather than twice keeps a
	// million-prompt run near 100 MB for a GC cost of about 2% of a core.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	cli.Main("infer", infer.Description, &infer.Command{})
}
